"""ShuffleNet channel shuffles as one ``channel_shuffle_nchwc`` (``shuffle.py``): whole models against
onnxruntime for group counts 2, 3, 4 and 8, channel counts that are and are not multiples of 16 and of
4 * groups, batch 1 and 3, between a grouped convolution and a depthwise one; the kernel alone against
numpy for every pairing of input and output blocks, runs that straddle an input block included."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.shuffle import CHANNEL_SHUFFLE_NCHWC, runs_fit, schedule_channel_shuffle
from nnvm.errors import Error


def _shuffle_model(path, c, g, n, hw=6):
    """grouped 1x1 conv c -> c (g groups) + relu, channel shuffle in g groups, depthwise 3x3 conv."""
    rng = np.random.default_rng(c * 10 + g)
    inits = {"w1": rng.standard_normal((c, c // g, 1, 1)).astype(np.float32) * 0.3,
             "b1": rng.standard_normal(c).astype(np.float32) * 0.1,
             "wd": rng.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.3,
             "s1": np.array([n, g, c // g, hw, hw], np.int64), "s2": np.array([n, c, hw, hw], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], group=g),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["s"]),
             helper.make_node("Conv", ["s", "wd"], ["y"], group=c, pads=[1] * 4)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "shuffle", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


# (channels, groups, batch): multiples of 16 and of 4 * groups (112, 64, 96), of neither (68, 136, 40,
# 36, 72), group counts that do not divide a block (3: the per-lane form)
CASES = [(112, 4, 1), (112, 4, 3), (136, 4, 1), (68, 4, 3), (48, 3, 1), (72, 3, 3), (96, 2, 3),
         (36, 2, 1), (64, 8, 1), (40, 8, 3), (48, 4, 1), (24, 2, 1)]


@pytest.mark.parametrize(("c", "g", "n"), CASES)
def test_shuffle_between_convolutions_matches_onnxruntime(tmp_path, c, g, n):
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path, c, g, n)
    x = np.random.default_rng(5).standard_normal((n, c, 6, 6)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    shuffles = [nd for nd in mod.graph.nodes if nd.op == "channel_shuffle_nchwc"]
    assert len(shuffles) == 1 and not any(nd.op == "transpose" for nd in mod.graph.nodes), \
        [nd.op for nd in mod.graph.nodes]
    assert shuffles[0].attrs["groups"] == g and shuffles[0].attrs["channels"] == c
    got = mod.run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"c={c} g={g} n={n} {shuffles[0].attrs}: max relative error {err:.2e}"


def test_shufflenet_shapes_take_the_vector_form(tmp_path):
    """ShuffleNet v1 g=4's shuffles (112 channels, NCHW16c in and out) read runs of 4 channels."""
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path, 112, 4, 1)
    graph, *_ = optimized_graph(path, "llvm")
    (node,) = [nd for nd in graph.nodes if nd.op == "channel_shuffle_nchwc"]
    lanes = node.attrs["out_block"]  # 16 with AVX-512, 8 with AVX2, 4 with SSE: all divide 112
    assert lanes > 1 and node.attrs["in_block"] == lanes and runs_fit(112, 4, lanes, lanes)
    assert not any(nd.op == "layout_transform" and nd.attrs.get("dst_layout") == "NCHW"
                   and nd.outputs[0] in node.inputs for nd in graph.nodes)


def test_switch_keeps_the_chain(tmp_path, cpu_switch):
    cpu_switch("shuffle", "0")
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path, 112, 4, 1)
    graph, *_ = optimized_graph(path, "llvm")
    ops = [nd.op for nd in graph.nodes]
    assert "channel_shuffle_nchwc" not in ops and "transpose" in ops


def _reference(x, c, g, a, b):
    """numpy: NCHW{a}c (cropped to c) -> shuffle -> NCHW{b}c, padding zeros; written without the op."""
    if a > 1:
        x = np.concatenate([x[:, k] for k in range(x.shape[1])], axis=-1)  # N, H, W, blocks * a
        x = np.moveaxis(x, -1, 1)[:, :c]
    src = [(ch % g) * (c // g) + ch // g for ch in range(c)]
    y = x[:, src]
    if b == 1:
        return y
    blocks = -(-c // b)
    out = np.zeros((x.shape[0], blocks, x.shape[2], x.shape[3], b), x.dtype)
    for ch in range(c):
        out[:, ch // b, :, :, ch % b] = y[:, ch]
    return out


# (channels, groups, in block, out block): runs of 4 in blocks of 16; runs across input blocks (a=4
# under runs of 8, 34 channels per group under runs of 4); padded input and output blocks; NCHW sides
KERNELS = [(64, 4, 16, 16), (112, 4, 16, 16), (136, 4, 16, 8), (64, 2, 4, 16), (136, 4, 8, 16),
           (68, 4, 16, 1), (68, 4, 1, 16), (48, 3, 16, 16), (40, 8, 8, 8), (36, 2, 1, 1), (24, 3, 8, 4)]


@pytest.mark.parametrize(("c", "g", "a", "b"), KERNELS)
def test_kernel_and_evaluation_match_numpy(build_all, c, g, a, b):
    from nnvm import te
    from nnvm.compiler import GroupCompute
    from nnvm.graph.ir import Node, TensorType
    from nnvm.target import parse_target

    attrs = {"groups": g, "channels": c, "in_block": a, "out_block": b}
    n, h, w = 2, 3, 5
    shape = (n, c, h, w) if a == 1 else (n, -(-c // a), h, w, a)
    x = np.random.default_rng(c + g + a + b).standard_normal(shape).astype(np.float32)
    want = _reference(x, c, g, a, b)
    (evaluated,) = CHANNEL_SHUFFLE_NCHWC.evaluate([x], attrs)
    np.testing.assert_array_equal(evaluated, want)
    placeholder = te.placeholder(shape, "float32", "x")
    out_types = CHANNEL_SHUFFLE_NCHWC.infer_type([TensorType(shape, "float32")], attrs)
    (out,) = CHANNEL_SHUFFLE_NCHWC.compute([placeholder], attrs, out_types)
    plain = te.create_schedule([out.op])  # every stage at root, the last axis vectorized
    plain[out.op].vectorize(plain[out.op].op.axis[-1])
    node = Node("channel_shuffle_nchwc", "shuffle", ("x",), ("y",), attrs)
    ours = schedule_channel_shuffle(parse_target("llvm"), GroupCompute(0, [node], node, [("x", placeholder)],
                                                                       [out], ["y"]))
    fns = build_all([("plain", plain, [placeholder, out]), ("ours", ours, [placeholder, out])])
    for name, fn in fns.items():
        got = np.full(want.shape, np.nan, np.float32)
        fn(x, got)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_bad_attributes_are_one_sentence():
    from nnvm.graph.ir import TensorType

    with pytest.raises(Error, match="do not split into 5 groups"):
        CHANNEL_SHUFFLE_NCHWC.infer_type([TensorType((1, 4, 2, 2, 16), "float32")],
                                         {"groups": 5, "channels": 64, "in_block": 16, "out_block": 16})
    with pytest.raises(Error, match="is not 64 channels in blocks of 8"):
        CHANNEL_SHUFFLE_NCHWC.infer_type([TensorType((1, 4, 2, 2, 16), "float32")],
                                         {"groups": 4, "channels": 64, "in_block": 8, "out_block": 16})


def test_plain_nchw_shuffle_and_a_shuffle_as_graph_output(tmp_path, cpu_switch):
    """Without the layout pass the shuffle runs NCHW -> NCHW; a shuffle whose result is the graph's
    output keeps the output's name and layout."""
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path, 48, 4, 2)
    x = np.random.default_rng(6).standard_normal((2, 48, 6, 6)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    cpu_switch("layout", "0")
    mod = nnvm.compile(path, target="llvm")
    (node,) = [nd for nd in mod.graph.nodes if nd.op == "channel_shuffle_nchwc"]
    assert (node.attrs["in_block"], node.attrs["out_block"]) == (1, 1)
    np.testing.assert_allclose(mod.run(x)[0], want, rtol=1e-5, atol=1e-5)
    cpu_switch("layout", None)

    model = onnx.load(path)  # cut after the shuffle: its reshape's output is the graph output
    del model.graph.node[5:]
    model.graph.output[0].name = "s"
    onnx.save(model, path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = nnvm.compile(path, target="llvm")
    (node,) = [nd for nd in mod.graph.nodes if nd.op == "channel_shuffle_nchwc"]
    assert node.outputs == ("s",) and node.attrs["out_block"] == 1
    np.testing.assert_allclose(mod.run(x)[0], want, rtol=1e-5, atol=1e-5)
