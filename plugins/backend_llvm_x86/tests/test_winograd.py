"""Winograd F(2x2, 3x3) and F(4x4, 3x3) on x86: numbers within 1e-4 of a direct numpy convolution and
of onnxruntime, weights transformed at compile time, and the rule that picks it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.winograd import use_winograd, winograd_template
from nnvm.runtime.kernel import BuiltFunction
from nnvm.te.lower import lower_schedule


def numpy_conv3x3(x, w):
    """Direct 3x3 stride-1 convolution with padding 1, in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, wd = x.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out


def _model(path, c, hw, rng):
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
             helper.make_node("Add", ["c", "x"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "wino", [x], [y], [numpy_helper.from_array(w, "w"),
                                                          numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return w, b


# 7: partial tiles at the bottom and right edges; tile 4 is F(4x4, 3x3), opt-in
@pytest.mark.parametrize("hw,tile", [(8, 2), (7, 2), (7, 4)])
def test_winograd_conv_matches_numpy_and_onnxruntime(tmp_path, cpu_switch, hw, tile):
    cpu_switch("winograd", "1")
    cpu_switch("winograd_tile", str(tile))
    rng = np.random.default_rng(hw)
    path = str(tmp_path / "wino.onnx")
    c = 16
    w, b = _model(path, c, hw, rng)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    mod = nnvm.compile(path, target="llvm")
    ops = [n.op for n in mod.graph.nodes]
    assert "conv2d_winograd_nchwc" in ops
    assert "winograd_weight_transform" not in ops, "the weight transform is folded at compile time"
    alpha = tile + 2  # U is (m+2)x(m+2) per 3x3 kernel, plus the bias
    assert mod.stats()["weight_bytes"] == alpha * alpha * c * c * 4 + c * 4
    got = mod.run(x)[0]
    want = np.maximum(numpy_conv3x3(x, w) + b.reshape(1, -1, 1, 1) + x, 0)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-4, f"winograd {hw}x{hw}: max relative error {err:.2e} against numpy"
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-4


def test_tile_widths_give_numpy_numbers(tmp_path, cpu_switch, group_of):
    cpu_switch("winograd", "1")
    rng = np.random.default_rng(5)
    path = str(tmp_path / "wino.onnx")
    c, hw = 16, 8
    w, b = _model(path, c, hw, rng)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_winograd_nchwc")
    template = winograd_template(tgt, group)
    assert template is not None and len(template.space["tw_block"]) > 1
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    want = np.maximum(numpy_conv3x3(x, w) + b.reshape(1, -1, 1, 1) + x, 0)
    block = int(group.outputs[0].shape[4].value)
    xb = np.ascontiguousarray(x.reshape(1, c // block, block, hw, hw).transpose(0, 1, 3, 4, 2))
    args = [t for _, t in group.inputs] + list(group.outputs)
    for tw in sorted({min(template.space["tw_block"]), template.fallback["tw_block"]}):
        func = lower_schedule(template.apply({"tw_block": tw}), args, f"wino_tw{tw}")
        kernel = BuiltFunction(func, tgt.backend.build([func], tgt), f"wino_tw{tw}")
        out = np.zeros([int(d.value) for d in group.outputs[0].shape], np.float32)
        kernel(*[np.array(graph.params[v]) if v in graph.params else xb for v, _ in group.inputs], out)
        got = out.transpose(0, 1, 4, 2, 3).reshape(1, c, hw, hw)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-4, f"tw_block={tw}: max relative error {err:.2e}"


def test_rule_picks_sizes_of_seven_or_more(cpu_switch):
    cpu_switch("winograd", None)
    assert use_winograd((1, 64, 56, 56)) and use_winograd((1, 256, 14, 14)) and use_winograd((1, 512, 7, 7))
    assert not use_winograd((1, 16, 6, 6)) and not use_winograd((1, 16, 6, 9))
    cpu_switch("winograd", "0")
    assert not use_winograd((1, 64, 56, 56))
