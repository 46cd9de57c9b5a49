"""Three small ONNX models of shapes other than the CNNs of the conformance suite (seeded weights):
attention and layer norm, depthwise convolutions, a recurrent layer. The GPU backends (CUDA, Metal) run
them against onnxruntime; they live here, with the other ONNX test models, so that no backend's tests
need another backend installed."""

from __future__ import annotations

import numpy as np


def _model(nodes, inits, inputs, outputs, opset: int = 17):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, "nnvm_shape_test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v, dtype=np.float32) if v.dtype.kind == "f" else v, k)
                     for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def transformer_encoder(seed: int = 0, seq: int = 16, d: int = 64, heads: int = 4, ff: int = 128):
    """One post-norm encoder layer: multi-head self-attention, residual, LayerNorm, GELU MLP, residual,
    LayerNorm; input ``x`` [1, seq, d]."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    dh = d // heads
    w = {f"w{n}": rng.normal(0, d ** -0.5, (d, d)) for n in "qkvo"}
    w.update(w1=rng.normal(0, d ** -0.5, (d, ff)), b1=rng.normal(0, 0.1, ff),
             w2=rng.normal(0, ff ** -0.5, (ff, d)), b2=rng.normal(0, 0.1, d),
             g1=rng.uniform(0.5, 1.5, d), be1=rng.normal(0, 0.1, d),
             g2=rng.uniform(0.5, 1.5, d), be2=rng.normal(0, 0.1, d),
             heads_shape=np.array([1, seq, heads, dh], dtype=np.int64),
             flat_shape=np.array([1, seq, d], dtype=np.int64), scale=np.array(dh ** -0.5))
    n = helper.make_node
    nodes = []
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}0"]), n("Reshape", [f"{p}0", "heads_shape"], [f"{p}1"]),
                  n("Transpose", [f"{p}1"], [p], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [n("MatMul", ["q", "k"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
              n("Softmax", ["s1"], ["att"], axis=-1), n("MatMul", ["att", "v"], ["o0"]),
              n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "flat_shape"], ["o2"]),
              n("MatMul", ["o2", "wo"], ["o3"]), n("Add", ["x", "o3"], ["r1"]),
              n("LayerNormalization", ["r1", "g1", "be1"], ["h1"], axis=-1, epsilon=1e-5),
              n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
              n("Relu", ["f1"], ["f2"]),
              n("MatMul", ["f2", "w2"], ["f3"]), n("Add", ["f3", "b2"], ["f4"]),
              n("Add", ["h1", "f4"], ["r2"]),
              n("LayerNormalization", ["r2", "g2", "be2"], ["y"], axis=-1, epsilon=1e-5)]
    return _model(nodes, w, [("x", [1, seq, d])], [("y", [1, seq, d])])


def depthwise_net(seed: int = 0, c: int = 16, size: int = 32, classes: int = 10):
    """Conv 3x3 -> (depthwise 3x3 stride 2 -> ReLU6 -> pointwise 1x1 -> ReLU) x 2 -> depthwise 5x5 ->
    global average pool -> dense; input ``x`` [1, 8, size, size]."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    n = helper.make_node
    w = {"stem": rng.normal(0, (2 / 72) ** 0.5, (c, 8, 3, 3)), "lo": np.array(0.0), "hi": np.array(6.0)}
    nodes = [n("Conv", ["x", "stem"], ["a0"], kernel_shape=[3, 3], pads=[1] * 4)]
    x, ch = "a0", c
    for i in range(2):
        w[f"dw{i}"] = rng.normal(0, (2 / 9) ** 0.5, (ch, 1, 3, 3))
        w[f"dwb{i}"] = rng.normal(0, 0.1, ch)
        w[f"pw{i}"] = rng.normal(0, (2 / ch) ** 0.5, (2 * ch, ch, 1, 1))
        nodes += [n("Conv", [x, f"dw{i}", f"dwb{i}"], [f"d{i}"], kernel_shape=[3, 3], pads=[1] * 4,
                    strides=[2, 2], group=ch),
                  n("Clip", [f"d{i}", "lo", "hi"], [f"c{i}"]),
                  n("Conv", [f"c{i}", f"pw{i}"], [f"p{i}"], kernel_shape=[1, 1]),
                  n("Relu", [f"p{i}"], [f"r{i}"])]
        x, ch = f"r{i}", 2 * ch
    w["dw5"] = rng.normal(0, (2 / 25) ** 0.5, (ch, 1, 5, 5))
    w["fc"] = rng.normal(0, ch ** -0.5, (ch, classes))
    w["fcb"] = rng.normal(0, 0.1, classes)
    nodes += [n("Conv", [x, "dw5"], ["d5"], kernel_shape=[5, 5], pads=[2] * 4, group=ch),
              n("GlobalAveragePool", ["d5"], ["g"]), n("Flatten", ["g"], ["f"], axis=1),
              n("Gemm", ["f", "fc", "fcb"], ["y"])]
    return _model(nodes, w, [("x", [1, 8, size, size])], [("y", [1, classes])])


def gru_net(seed: int = 0, seq: int = 8, features: int = 16, hidden: int = 32, classes: int = 5):
    """A GRU over ``x`` [seq, 1, features] (ONNX layout), its last hidden state through a dense layer."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    n = helper.make_node
    s = hidden ** -0.5
    w = {"W": rng.uniform(-s, s, (1, 3 * hidden, features)), "R": rng.uniform(-s, s, (1, 3 * hidden, hidden)),
         "B": rng.uniform(-s, s, (1, 6 * hidden)), "fc": rng.normal(0, s, (hidden, classes)),
         "fcb": rng.normal(0, 0.1, classes), "shape": np.array([1, hidden], dtype=np.int64)}
    nodes = [n("GRU", ["x", "W", "R", "B"], ["Y", "Yh"], hidden_size=hidden, linear_before_reset=1),
             n("Reshape", ["Yh", "shape"], ["h"]), n("Gemm", ["h", "fc", "fcb"], ["y"])]
    return _model(nodes, w, [("x", [seq, 1, features])], [("y", [1, classes])])


SHAPE_MODELS = {"transformer_encoder": transformer_encoder, "depthwise_net": depthwise_net, "gru": gru_net}
