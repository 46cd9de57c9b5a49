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


def shape_model_reference(name: str, folder) -> tuple:
    """``(path, x, onnxruntime's output)``: ``SHAPE_MODELS[name]`` (seed 0) saved in ``folder``, run by
    onnxruntime on a seeded input of its declared shape: what each GPU plugin's model tests compare to."""
    import os

    import onnx
    import onnxruntime as ort

    path = os.path.join(str(folder), f"{name}.onnx")
    onnx.save(SHAPE_MODELS[name](seed=0), path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(inp.shape).astype("float32")
    return path, x, sess.run(None, {inp.name: x})[0]


def dynamic_encoder(seed: int = 0, vocab: int = 100, positions: int = 512, d: int = 64, heads: int = 4,
                    ff: int = 128):
    """A BERT-style embedding and encoder layer as exporters write it, with symbolic ``batch`` and
    ``seq`` (``dim_param``s): inputs ``input_ids`` and ``attention_mask`` (int64 [batch, seq]), output
    ``y`` [batch, seq, d]. Word embeddings (Gather) plus position embeddings sliced to the sequence
    length taken from ``Shape``; every Reshape target built by ``Shape -> Gather -> Unsqueeze -> Concat``;
    the mask as ``Where`` over ``Equal``; GELU by ``Erf``; a first LayerNormalization and a last one
    written out (ReduceMean, Sub, Pow, Sqrt, Div), and a ``Tanh`` on the way out."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dh = d // heads
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    i64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    w = {f"w{p}": f32(rng.normal(0, d ** -0.5, (d, d))) for p in "qkvo"}
    w.update({f"b{p}": f32(rng.normal(0, 0.1, d)) for p in "qkvo"})
    w.update(word=f32(rng.normal(0, 1, (vocab, d))), pos=f32(rng.normal(0, 0.5, (positions, d))),
             w1=f32(rng.normal(0, d ** -0.5, (d, ff))), b1=f32(rng.normal(0, 0.1, ff)),
             w2=f32(rng.normal(0, ff ** -0.5, (ff, d))), b2=f32(rng.normal(0, 0.1, d)),
             g0=f32(rng.uniform(0.5, 1.5, d)), be0=f32(rng.normal(0, 0.1, d)),
             g2=f32(rng.uniform(0.5, 1.5, d)), be2=f32(rng.normal(0, 0.1, d)),
             i0=i64(0), i1=i64(1), zero1=i64([0]), axis0=i64([0]), axes0=i64([0]), axes12=i64([1, 2]),
             tail_heads=i64([heads, dh]),
             tail_d=i64([d]), scale=f32(dh ** -0.5), half=f32(0.5), one=f32(1.0), sqrt2=f32(2 ** 0.5),
             two=f32(2.0), eps=f32(1e-5), neg=f32(-1e4), zero_i=i64(0))
    n = helper.make_node
    nodes = [
        n("Shape", ["input_ids"], ["ids_shape"]),
        n("Gather", ["ids_shape", "i0"], ["batch"], axis=0),
        n("Gather", ["ids_shape", "i1"], ["seq"], axis=0),
        n("Unsqueeze", ["batch", "axes0"], ["batch1"]), n("Unsqueeze", ["seq", "axes0"], ["seq1"]),
        n("Gather", ["word", "input_ids"], ["we"], axis=0),
        n("Slice", ["pos", "zero1", "seq1", "axis0"], ["pe"]),
        n("Add", ["we", "pe"], ["e0"]),
        n("LayerNormalization", ["e0", "g0", "be0"], ["x"], axis=-1, epsilon=1e-12),
        n("Concat", ["batch1", "seq1", "tail_heads"], ["heads_shape"], axis=0),
        n("Concat", ["batch1", "seq1", "tail_d"], ["flat_shape"], axis=0),
    ]
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}0"]), n("Add", [f"{p}0", f"b{p}"], [f"{p}b"]),
                  n("Reshape", [f"{p}b", "heads_shape"], [f"{p}1"]),
                  n("Transpose", [f"{p}1"], [p], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        n("MatMul", ["q", "k"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Unsqueeze", ["attention_mask", "axes12"], ["m0"]), n("Equal", ["m0", "zero_i"], ["m1"]),
        n("Where", ["m1", "neg", "s1"], ["s2"]),
        n("Softmax", ["s2"], ["att"], axis=-1), n("MatMul", ["att", "v"], ["o0"]),
        n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]), n("Reshape", ["o1", "flat_shape"], ["o2"]),
        n("MatMul", ["o2", "wo"], ["o3"]), n("Add", ["o3", "bo"], ["o4"]), n("Add", ["x", "o4"], ["h1"]),
        n("MatMul", ["h1", "w1"], ["f0"]), n("Add", ["f0", "b1"], ["f1"]),
        n("Div", ["f1", "sqrt2"], ["g0_"]), n("Erf", ["g0_"], ["g1_"]), n("Add", ["g1_", "one"], ["g2_"]),
        n("Mul", ["f1", "g2_"], ["g3_"]), n("Mul", ["g3_", "half"], ["f2"]),
        n("MatMul", ["f2", "w2"], ["f3"]), n("Add", ["f3", "b2"], ["f4"]), n("Add", ["h1", "f4"], ["r2"]),
        n("ReduceMean", ["r2"], ["mu"], axes=[-1]), n("Sub", ["r2", "mu"], ["c0"]),
        n("Pow", ["c0", "two"], ["c1"]), n("ReduceMean", ["c1"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["var1"]), n("Sqrt", ["var1"], ["sd"]), n("Div", ["c0", "sd"], ["c2"]),
        n("Mul", ["c2", "g2"], ["c3"]), n("Add", ["c3", "be2"], ["c4"]), n("Tanh", ["c4"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "nnvm_dynamic_encoder",
        [helper.make_tensor_value_info(k, TensorProto.INT64, ["batch", "seq"])
         for k in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def dynamic_mlp(seed: int = 0, features: int = 32, hidden: int = 64, classes: int = 10):
    """Gemm -> ReLU -> Gemm -> Softmax over input ``x`` [N, features] with a symbolic batch ``N``."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = {"w1": rng.normal(0, features ** -0.5, (hidden, features)), "b1": rng.normal(0, 0.1, hidden),
         "w2": rng.normal(0, hidden ** -0.5, (hidden, classes)), "b2": rng.normal(0, 0.1, classes)}
    n = helper.make_node
    nodes = [n("Gemm", ["x", "w1", "b1"], ["h0"], transB=1), n("Relu", ["h0"], ["h1"]),
             n("Gemm", ["h1", "w2", "b2"], ["z"]), n("Softmax", ["z"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "nnvm_dynamic_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])],
        initializer=[numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def symbolic_batch_cnn(seed: int = 0, c: int = 8, size: int = 16, classes: int = 10):
    """A small CNN over input ``x`` [N, 3, size, size] with a symbolic batch ``N`` (a ``dim_param``): conv
    3x3 + batch norm + ReLU, max pool 2x2, depthwise 3x3 + ReLU, pointwise 1x1 + ReLU, global average pool,
    dense, softmax; output ``y`` [N, classes]."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    n = helper.make_node
    w = {"stem": rng.normal(0, (2 / 27) ** 0.5, (c, 3, 3, 3)), "scale": rng.uniform(0.5, 1.5, c),
         "shift": rng.normal(0, 0.1, c), "mean": rng.normal(0, 0.1, c), "var": rng.uniform(0.5, 1.5, c),
         "dw": rng.normal(0, (2 / 9) ** 0.5, (c, 1, 3, 3)), "dwb": rng.normal(0, 0.1, c),
         "pw": rng.normal(0, (2 / c) ** 0.5, (2 * c, c, 1, 1)), "fc": rng.normal(0, (2 * c) ** -0.5,
                                                                                   (2 * c, classes)),
         "fcb": rng.normal(0, 0.1, classes)}
    nodes = [n("Conv", ["x", "stem"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
             n("BatchNormalization", ["a", "scale", "shift", "mean", "var"], ["b"]),
             n("Relu", ["b"], ["r"]), n("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "dw", "dwb"], ["d"], kernel_shape=[3, 3], pads=[1] * 4, group=c),
             n("Relu", ["d"], ["dr"]), n("Conv", ["dr", "pw"], ["q"], kernel_shape=[1, 1]),
             n("Relu", ["q"], ["qr"]), n("GlobalAveragePool", ["qr"], ["g"]),
             n("Flatten", ["g"], ["f"], axis=1), n("Gemm", ["f", "fc", "fcb"], ["z"]),
             n("Softmax", ["z"], ["y"], axis=-1)]
    return _model(nodes, w, [("x", ["N", 3, size, size])], [("y", ["N", classes])])


def mask_select(threshold: float = 0.5):
    """Detection-style selection with a data-dependent count: the boxes whose score passes a threshold
    (``Greater -> NonZero -> Transpose -> GatherND``), scaled, and their row sums; ``boxes`` [count, 4]
    (a dim name no batch rule binds), ``scores`` [count]; outputs ``scaled`` [k, 4], ``area`` [k] and
    ``nz`` [1, k], k decided by the scores."""
    from onnx import TensorProto as T
    from onnx import helper

    nodes = [
        helper.make_node("Greater", ["scores", "threshold"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["boxes", "idx"], ["picked"]),
        helper.make_node("Mul", ["picked", "scale"], ["scaled"]),
        helper.make_node("ReduceSum", ["scaled", "axes"], ["area"], keepdims=0),
    ]
    inits = [helper.make_tensor("threshold", T.FLOAT, [], [threshold]),
             helper.make_tensor("scale", T.FLOAT, [4], [2.0, 0.5, 1.0, 3.0]),
             helper.make_tensor("axes", T.INT64, [1], [1])]
    graph = helper.make_graph(
        nodes, "mask_select",
        [helper.make_tensor_value_info("boxes", T.FLOAT, ["count", 4]),
         helper.make_tensor_value_info("scores", T.FLOAT, ["count"])],
        [helper.make_tensor_value_info("scaled", T.FLOAT, None),
         helper.make_tensor_value_info("area", T.FLOAT, None),
         helper.make_tensor_value_info("nz", T.INT64, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
