"""Run inside the Keras 3 reference venv (never imported by nnvm): builds models and Keras's predictions.

    python keras_tool.py OUTDIR NAME...

writes, for each NAME (a keras.applications net or a per-layer case of ``CASES``), NAME.keras and
NAME.h5 (``model.save`` in both formats), a seeded input NAME-input.npy (NHWC, as Keras takes it) and
Keras's output for it, NAME-output.npy. Weights are random with a seed fixed per name (BatchNorm
statistics included: zero means and unit variances would hide a wrong formula), so the files are the
same on every machine and in any order.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402

APPS = {  # name -> (constructor, input size): small inputs keep the reference and our runs fast
    "MobileNetV2": ("MobileNetV2", 64), "ResNet50": ("ResNet50", 64), "DenseNet121": ("DenseNet121", 64),
    "EfficientNetB0": ("EfficientNetB0", 64), "InceptionV3": ("InceptionV3", 75),
    "Xception": ("Xception", 71), "VGG16": ("VGG16", 64), "NASNetMobile": ("NASNetMobile", 64),
    "ConvNeXtTiny": ("ConvNeXtTiny", 64),
}


def _seq(*ls, shape=(9, 9, 4)):
    inp = keras.Input(shape)
    x = inp
    for layer in ls:
        x = layer(x)
    return keras.Model(inp, x)


def _branches():
    inp = keras.Input((8, 8, 4))
    a = layers.Conv2D(6, 3, padding="same")(inp)
    b = layers.Conv2D(6, 1)(inp)
    c = layers.Concatenate(axis=-1)([a, b])
    d = layers.Concatenate(axis=1)([a, b])
    s = layers.Subtract()([a, b])
    m = layers.Maximum()([a, b])
    n = layers.Minimum()([a, b])
    av = layers.Average()([a, b, s])
    out = layers.Concatenate()([layers.Flatten()(c), layers.Flatten()(d),
                                layers.Flatten()(layers.Concatenate()([s, m, n, av]))])
    return keras.Model(inp, out)


def _nested():
    inner = keras.Sequential([keras.Input((10, 10, 3)), layers.Conv2D(4, 3), layers.BatchNormalization(),
                              layers.ReLU()], name="inner")
    inp = keras.Input((10, 10, 3))
    x = layers.Conv2D(3, 3, padding="same")(inp)
    x = inner(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(5, activation="tanh")(x)
    return keras.Model(inp, x)


def _ops():
    inp = keras.Input((6, 6, 4))
    x = layers.Conv2D(4, 1)(inp)
    y = keras.ops.add(x, inp)
    y = keras.ops.multiply(y, 0.5)
    return keras.Model(inp, layers.Flatten()(y))


CASES = {  # name -> a function building the model; seeded random weights are set afterwards
    "conv_same_even": lambda: _seq(layers.Conv2D(5, 4, strides=2, padding="same", activation="relu")),
    "conv_same_odd_stride3": lambda: _seq(layers.Conv2D(3, 2, strides=3, padding="same")),
    "conv_dilated_groups": lambda: _seq(layers.Conv2D(8, 3, dilation_rate=2, groups=2, padding="same",
                                                      use_bias=False)),
    "depthwise_mult": lambda: _seq(layers.DepthwiseConv2D(3, strides=2, depth_multiplier=2, padding="same")),
    "separable": lambda: _seq(layers.SeparableConv2D(6, 3, depth_multiplier=2, padding="valid",
                                                     activation="swish")),
    "pool_same_even": lambda: _seq(layers.MaxPooling2D(2, strides=2, padding="same"),
                                   layers.AveragePooling2D(4, strides=3, padding="same")),
    "avgpool_same": lambda: _seq(layers.AveragePooling2D(3, strides=1, padding="same")),
    "pool_valid_global": lambda: _seq(layers.MaxPooling2D(3, strides=2), layers.GlobalMaxPooling2D()),
    "global_keepdims": lambda: _seq(layers.GlobalAveragePooling2D(keepdims=True), layers.Conv2D(3, 1)),
    "batchnorm_flags": lambda: _seq(layers.BatchNormalization(scale=False),
                                    layers.BatchNormalization(center=False, epsilon=0.01)),
    "pad_crop": lambda: _seq(layers.ZeroPadding2D(((1, 2), (0, 3))), layers.Cropping2D(((2, 0), (1, 1))),
                             layers.Conv2D(2, 3)),
    "hard_sigmoid": lambda: _seq(layers.Conv2D(4, 1), layers.Activation("hard_sigmoid")),
    "activations": lambda: _seq(layers.ReLU(max_value=6.0), layers.Conv2D(4, 1), layers.LeakyReLU(0.3),
                                layers.Conv2D(4, 1), layers.ELU(), layers.Activation("gelu"),
                                layers.Activation("sigmoid"), layers.Softmax()),
    "dense_4d_reshape": lambda: _seq(layers.Dense(6, activation="relu"), layers.Reshape((9, 54)),
                                     layers.Dense(3), layers.Permute((2, 1)), layers.Flatten(),
                                     layers.Dropout(0.5), layers.Dense(4)),
    "norms": lambda: _seq(layers.Rescaling(1 / 127.5, offset=-1), layers.Normalization(
        mean=[0.1, 0.2, 0.3, 0.4], variance=[1.0, 2.0, 0.5, 0.25]), layers.LayerNormalization(epsilon=1e-3)),
    "branches": _branches,
    "nested": _nested,
    "ops_nodes": _ops,
}


def _randomize(model, rng: np.random.RandomState) -> None:
    for v in model.weights:
        shape, name = tuple(v.shape), v.name
        if "moving_variance" in name or name == "variance":
            value = rng.uniform(0.5, 1.5, shape)
        elif "moving_mean" in name or name == "mean":
            value = rng.normal(0, 0.1, shape)
        elif name == "gamma":
            value = rng.uniform(0.5, 1.5, shape)
        elif name in ("beta", "bias"):
            value = rng.normal(0, 0.1, shape)
        elif name == "count":
            continue
        elif "depthwise" in name:
            value = rng.normal(0, np.sqrt(2.0 / max(1, int(np.prod(shape[:2])))), shape)
        else:
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            value = rng.normal(0, np.sqrt(2.0 / max(1, fan_in)), shape)
        v.assign(value.astype(v.dtype))


def build(outdir: str, name: str) -> None:
    started = time.perf_counter()
    seed = sum(map(ord, name))
    keras.utils.set_random_seed(seed)
    rng = np.random.RandomState(seed)
    if name in APPS:
        ctor, size = APPS[name]
        model = getattr(keras.applications, ctor)(weights=None, input_shape=(size, size, 3), classes=10,
                                                  classifier_activation=None)
    else:
        model = CASES[name]()
    _randomize(model, rng)
    shape = (1,) + tuple(model.inputs[0].shape[1:])
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    if name in APPS:
        x = (x + 1) * 127.5  # the applications nets take 0..255 pixels
    out = np.asarray(model.predict(x, verbose=0))
    prefix = os.path.join(outdir, name)
    model.save(prefix + ".keras")
    model.save(prefix + ".h5")
    np.save(prefix + "-input.npy", x)
    np.save(prefix + "-output.npy", out)
    print(f"{name}: {time.perf_counter() - started:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    for n in sys.argv[2:]:
        build(sys.argv[1], n)
