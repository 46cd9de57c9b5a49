"""Run inside the Keras 3 reference venv: more per-layer cases, built like ``keras_tool``'s (same seeds,
weights and files) but kept in their own script, so that adding one does not rebuild every other model.

    python keras_cases.py OUTDIR NAME...
"""

from __future__ import annotations

import os
import sys

import keras_tool  # beside this script: sets KERAS_BACKEND before keras is imported
from keras_tool import _seq, keras, layers, np


def _channels_first_norms():
    """ConvNeXt's pattern: LayerNormalization and Dense between convolutions, then a residual add."""
    inp = keras.Input((6, 6, 4))
    x = layers.Conv2D(4, 3, padding="same")(inp)
    y = layers.LayerNormalization(epsilon=1e-6)(x)
    y = layers.Dense(8, activation="gelu")(y)
    y = layers.Dense(4)(y)
    return keras.Model(inp, layers.Add()([x, y]))


def _dot():
    inp = keras.Input((4, 3))
    a = layers.Dense(5)(inp)
    b = layers.Dense(5)(inp)
    m = layers.Dot(axes=(2, 2))([a, b])  # (4, 4)
    n = layers.Dot(axes=(1, 1), normalize=True)([a, b])  # (5, 5)
    v = layers.Dot(axes=1)([layers.Flatten()(a), layers.Flatten()(b)])
    return keras.Model(inp, layers.Concatenate()([layers.Flatten()(m), layers.Flatten()(n), v]))


def _recurrent():
    inp = keras.Input((5, 3))
    a = layers.SimpleRNN(4, return_sequences=True)(inp)
    b = layers.LSTM(4, go_backwards=True, return_sequences=True)(a)
    c = layers.GRU(3)(b)
    d = layers.GRU(3, reset_after=False, go_backwards=True)(inp)
    e = layers.LSTM(2)(inp)
    return keras.Model(inp, layers.Concatenate()([c, d, e, layers.Flatten()(b)]))


def _embedding():
    ids = keras.Input((6,), dtype="int32")
    x = layers.Embedding(10, 4)(ids)  # (6, 4)
    return keras.Model(ids, layers.Dense(3)(x))


def _attention():
    """Self-attention, then cross-attention of it on another sequence (length 6, width 4) with its own keys
    and a width that differs from the query's."""
    inp = keras.Input((4, 6))
    a = layers.MultiHeadAttention(num_heads=2, key_dim=3)(inp, inp)  # (4, 6)
    kv = layers.Permute((2, 1))(inp)  # (6, 4)
    key = layers.Dense(4)(kv)
    b = layers.MultiHeadAttention(num_heads=3, key_dim=2, use_bias=False)(a, kv, key)
    c = layers.MultiHeadAttention(num_heads=1, key_dim=4, output_shape=3)(b, kv)  # (4, 3)
    return keras.Model(inp, layers.Concatenate()([a, b, layers.Dense(6)(c)]))


def _bidirectional():
    inp = keras.Input((5, 3))
    a = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(inp)  # (5, 8)
    b = layers.Bidirectional(layers.GRU(3), merge_mode="sum")(a)
    c = layers.Bidirectional(layers.SimpleRNN(2, return_sequences=True), merge_mode="ave",
                             backward_layer=layers.SimpleRNN(2, return_sequences=True, go_backwards=True,
                                                             activation="relu"))(inp)
    return keras.Model(inp, layers.Concatenate()([layers.Flatten()(a), b, layers.Flatten()(c)]))


def build_ids(outdir: str, name: str, vocab: int) -> None:
    """``keras_tool.build`` for a model taking token ids: its seeded input is integers in [0, vocab)."""
    seed = sum(map(ord, name))
    keras.utils.set_random_seed(seed)
    rng = np.random.RandomState(seed)
    model = EXTRA[name]()
    keras_tool._randomize(model, rng)
    x = rng.randint(0, vocab, (1,) + tuple(model.inputs[0].shape[1:])).astype(np.int32)
    out = np.asarray(model.predict(x, verbose=0))
    prefix = os.path.join(outdir, name)
    model.save(prefix + ".keras")
    model.save(prefix + ".h5")
    np.save(prefix + "-input.npy", x)
    np.save(prefix + "-output.npy", out)


IDS = {"embedding": 10}  # cases taking token ids -> their vocabulary size

EXTRA = {
    "embedding": _embedding,
    "bidirectional": _bidirectional,
    "attention": _attention,
    "conv3d": lambda: _seq(layers.Conv3D(4, (2, 3, 3), strides=(2, 1, 2), padding="same", activation="relu"),
                           layers.Conv3D(3, (2, 3, 2), dilation_rate=(2, 1, 1)),
                           layers.Conv3D(2, 2, padding="same", use_bias=False), shape=(8, 6, 6, 2)),
    "channels_first_norms": _channels_first_norms,
    "upsampling_prelu": lambda: _seq(layers.UpSampling2D((2, 3)), layers.Conv2D(3, 1),
                                     layers.PReLU(shared_axes=[1, 2])),
    "conv1d": lambda: _seq(layers.Conv1D(4, 3, padding="same", strides=2),
                           layers.Conv1D(3, 2, dilation_rate=2, padding="causal"),
                           layers.Conv1D(2, 3, activation="relu"), shape=(12, 3)),
    "group_norm": lambda: _seq(layers.Conv2D(6, 1), layers.GroupNormalization(groups=3, epsilon=1e-3)),
    "dot": _dot,
    "recurrent": _recurrent,
    "conv_transpose": lambda: _seq(layers.Conv2DTranspose(3, 3, strides=2, padding="same"),
                                   layers.Conv2DTranspose(2, 4, strides=2, padding="valid"),
                                   layers.Conv2DTranspose(2, 3, strides=(1, 2), padding="same",
                                                          output_padding=(0, 1)),
                                   layers.Conv2DTranspose(2, 2, strides=3, padding="same", activation="relu"),
                                   shape=(4, 5, 3)),
    "repeat_permute": lambda: _seq(layers.Flatten(), layers.Dense(5), layers.RepeatVector(3),
                                   layers.Permute((2, 1)), shape=(2, 2, 3)),
}

if __name__ == "__main__":
    keras_tool.CASES.update(EXTRA)
    for n in sys.argv[2:]:
        if n in IDS:
            build_ids(sys.argv[1], n, IDS[n])
        else:
            keras_tool.build(sys.argv[1], n)
