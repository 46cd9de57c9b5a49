"""Register tiles of several output-channel blocks (issue 19: fallback configs chosen by a cost model).

The NCHW[x]c template's fallback tile for a plain convolution is ``ow_block`` pixels x ``oc_blocks``
channel blocks, picked by ``nnvm.cpu.cost_model``; with two or more blocks the unrolled body walks
pixels outside blocks (the weights stay in registers). These compile the shapes of the ResNet,
MobileNetV2 and DenseNet layers it changes (1x1, 3x3 stride 2, the 7x7 stem), scaled down, at batch 1
and 3, on odd planes, with bias -> relu and a residual add fused behind, and compare with onnxruntime;
likewise Winograd's products, whose register tile spans channel blocks the same way.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, optimized_graph
from nnvm.cpu.cost_model import pixel_major
from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template


def _model(path, batch, c, hw, oc, kernel, stride, residual):
    """Conv (bias) -> Relu [-> Add r] on ``batch x c x hw x hw``; pads kernel // 2."""
    rng = np.random.default_rng(kernel * 100 + stride)
    w = (rng.standard_normal((oc, c, kernel, kernel)) / np.sqrt(c * kernel * kernel)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    out_hw = (hw + 2 * (kernel // 2) - kernel) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[kernel // 2] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y" if not residual else "t"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, c, hw, hw])]
    if residual:
        nodes.append(helper.make_node("Add", ["t", "r"], ["y"]))
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, oc, out_hw, out_hw]))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "conv", inputs, [y],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    feeds = {"x": rng.standard_normal((batch, c, hw, hw)).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal((batch, oc, out_hw, out_hw)).astype(np.float32)
    return path, feeds


def _fallback(path):
    graph, tgt, *_ = optimized_graph(path, "llvm")
    by_name = {n.name: n for n in graph.nodes}
    k = next(k for k, g in enumerate(graph.groups) if any(by_name[n].op == "conv2d_nchwc" for n in g))
    group = group_compute(graph, k, [by_name[n] for n in graph.groups[k]])
    return conv2d_nchwc_template(tgt, group).fallback


# (input channels, plane, output channels, kernel, stride): ResNet's 1x1 on 14- and 28-pixel rows, its
# stride-2 1x1 and 3x3, 7-pixel rows, MobileNetV2's 8-lane blocks (24 channels), the 7x7 stem, odd planes
SHAPES = [(64, 14, 128, 1, 1), (32, 28, 64, 1, 1), (64, 28, 96, 1, 2), (32, 29, 64, 3, 2),
          (64, 7, 64, 1, 1), (96, 13, 24, 1, 1), (3, 45, 32, 7, 2), (48, 19, 48, 3, 2), (16, 9, 80, 1, 1)]


@pytest.mark.parametrize("residual", [False, True], ids=["relu", "relu_add"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_conv_tiles_match_onnxruntime(tmp_path, cpu_switch, shape, batch, residual):
    cpu_switch("winograd", "0")  # the direct template on every shape
    c, hw, oc, kernel, stride = shape
    path, feeds = _model(str(tmp_path / "conv.onnx"), batch, c, hw, oc, kernel, stride, residual)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(**feeds)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{shape} batch {batch}: max relative error {err:.2e}"


def test_fallback_is_the_cost_models_tile(tmp_path, cpu_switch):
    """The fallback of a plain convolution is ``register_tile`` for this machine; with AVX-512, on a
    14-pixel row of 8 blocks of 16 channels, it holds 2+ blocks per tile (fewer loads per multiply-add
    than one block's 14 pixels) in a pixel-major body."""
    from nnvm.cpu.cost_model import machine_of, register_tile
    from nnvm.target import parse_target

    cpu_switch("winograd", "0")
    path, _ = _model(str(tmp_path / "conv.onnx"), 1, 64, 14, 128, 1, 1, False)
    fallback = _fallback(path)
    target = parse_target("llvm")
    machine = machine_of(target)
    # the template's cap: 14 accumulators, and 4 registers for the other operands (12 of AVX2's 16)
    tile = register_tile(machine, 14, 128 // machine.lanes, max_ow=min(machine.registers - 4, 14))
    assert (fallback["ow_block"], fallback["oc_blocks"]) == (tile.ow_block, tile.oc_blocks)
    if machine.lanes == 16:
        assert tile.oc_blocks >= 2 and pixel_major(tile.ow_block, tile.oc_blocks)


# Winograd's products take the same tiles (tw_block tiles x channel blocks): ResNet's 3x3 stride-1
# layers scaled down, an odd plane (a partial 2x2 tile) and 24 channels (8-lane blocks)
WINOGRAD_SHAPES = [(64, 14, 64, 3, 1), (32, 11, 48, 3, 1), (24, 9, 24, 3, 1)]


@pytest.mark.parametrize("residual", [False, True], ids=["relu", "relu_add"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("shape", WINOGRAD_SHAPES, ids=["x".join(map(str, s)) for s in WINOGRAD_SHAPES])
def test_winograd_tiles_match_onnxruntime(tmp_path, cpu_switch, shape, batch, residual):
    cpu_switch("winograd", "1")
    c, hw, oc, kernel, stride = shape
    path, feeds = _model(str(tmp_path / "conv.onnx"), batch, c, hw, oc, kernel, stride, residual)
    graph, *_ = optimized_graph(path, "llvm")
    assert "conv2d_winograd_nchwc" in {n.op for n in graph.nodes}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(**feeds)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"winograd {shape} batch {batch}: max relative error {err:.2e}"


@pytest.mark.parametrize("batch", [1, 2])
def test_avx2_stem_walks_the_kernel_window_outside_channels(tmp_path, cpu_switch, batch):
    """A stem reading plain NCHW (3 channels, one per block): on AVX2 the fallback's reduction walks
    ry, rx outside the channels (MobileNetV2's stem ran 1.8x faster so); AVX-512 keeps channels outside.
    Numbers against onnxruntime on the host."""
    cpu_switch("winograd", "0")
    path, feeds = _model(str(tmp_path / "stem.onnx"), batch, 3, 56, 32, 3, 2, False)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(**feeds)[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5
    orders = {}
    for target in ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"):
        graph, tgt, *_ = optimized_graph(path, target)
        by_name = {n.name: n for n in graph.nodes}
        k = next(k for k, g in enumerate(graph.groups) if any(by_name[n].op == "conv2d_nchwc" for n in g))
        group = group_compute(graph, k, [by_name[n] for n in graph.groups[k]])
        orders[target] = conv2d_nchwc_template(tgt, group).fallback["reduce_order"]
    assert orders == {"llvm -mcpu=haswell": "ry_rx_rco_rci", "llvm -mcpu=skylake-avx512": "rco_ry_rx_rci"}
