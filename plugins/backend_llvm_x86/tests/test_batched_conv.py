"""Convolutions at batch > 1 on x86 (issue 19: the batch is a dimension to parallelize and block over).

Depthwise and plain 3x3 convolutions at batch 1, 3 and 8, stride 1 and 2, on odd planes, compiled the
default way (NCHW[x]c, Winograd where it applies) and compared with onnxruntime; every knob value of
the NCHW[x]c template at batch 3; and the loop program the fallback gives a batch: one parallel loop
over images x channel blocks, and no padded copy of a depthwise input at root.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, optimized_graph, schedule_template
from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template
from nnvm.ops.blocked_layout import from_primal
from nnvm.target import parse_target
from nnvm.te.lower import lower_schedule


def _conv_model(path, batch, channels, hw, stride, depthwise, out_channels=None, kernel=3, pad=1):
    """Conv ``kernel`` x ``kernel`` (bias) -> Relu on a ``batch x channels x hw x hw`` input."""
    rng = np.random.default_rng(0)
    oc = channels if depthwise else (out_channels or channels)
    w = rng.standard_normal((oc, 1 if depthwise else channels, kernel, kernel)).astype(np.float32)
    w /= np.sqrt(w[0].size)
    b = rng.standard_normal(oc).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride, stride],
                              group=channels if depthwise else 1),
             helper.make_node("Relu", ["c"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "conv", [x], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def _reference(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("depthwise", [True, False], ids=["depthwise", "plain"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_batched_conv_matches_onnxruntime(tmp_path, batch, stride, depthwise):
    hw = 19 if stride == 1 else 17  # odd planes (19: prime, a partial register tile), an odd padded edge
    path = _conv_model(str(tmp_path / "conv.onnx"), batch, 32, hw, stride, depthwise)
    graph, *_ = optimized_graph(path, "llvm")
    ops = {n.op for n in graph.nodes}
    assert ops & {"conv2d_nchwc", "conv2d_winograd_nchwc"}, f"not in the blocked layout: {sorted(ops)}"
    x = np.random.default_rng(batch).standard_normal((batch, 32, hw, hw)).astype(np.float32)
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    want = _reference(path, x)
    assert got.shape == want.shape
    err = _rel_err(got, want)
    assert err < 1e-5, f"batch {batch} stride {stride} depthwise={depthwise}: max relative error {err:.2e}"


@pytest.mark.parametrize("batch", [1, 3])
def test_prime_row_width_gets_a_partial_register_tile(tmp_path, batch):
    """A 7x7/2 stem of 3 -> 32 channels on 43x43 gives 19-pixel rows (prime, like SqueezeNet's 109):
    the fallback takes a tile with a partial last one, not 1-pixel tiles (3x slower there): 10 pixels x
    2 blocks of 16 channels with AVX-512, 5 x 2 blocks of 8 with AVX2 (no embedded broadcast)."""
    path = _conv_model(str(tmp_path / "conv.onnx"), batch, 3, 43, 2, False, out_channels=32, kernel=7, pad=0)
    _, _, _, template = _nchwc_group(path)
    ow_block = template.fallback["ow_block"]
    assert 19 % ow_block and ow_block >= 5 and ow_block in template.space["ow_block"]
    assert ow_block * template.fallback["oc_blocks"] >= 10
    x = np.random.default_rng(9).standard_normal((batch, 3, 43, 43)).astype(np.float32)
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    err = _rel_err(got, _reference(path, x))
    assert err < 1e-5, f"stem at batch {batch}: max relative error {err:.2e}"


def _nchwc_group(path):
    graph, tgt, *_ = optimized_graph(path, "llvm")
    by_name = {n.name: n for n in graph.nodes}
    k = next(k for k, g in enumerate(graph.groups) if any(by_name[n].op == "conv2d_nchwc" for n in g))
    group = group_compute(graph, k, [by_name[n] for n in graph.groups[k]])
    return graph, tgt, group, conv2d_nchwc_template(tgt, group)


@pytest.mark.parametrize("depthwise", [True, False], ids=["depthwise", "plain"])
def test_every_knob_value_at_batch_3(tmp_path, cpu_switch, depthwise, every_config):
    """Each knob value of the NCHW[x]c template (one config per value, the rest at the fallback) on
    3 images of an odd plane at stride 2 (rows of a prime width), against onnxruntime (in NCHW)."""
    cpu_switch("winograd", "0")
    batch, c, hw = 3, 32, 37  # 19-pixel output rows: a partial register tile in the fallback
    path = _conv_model(str(tmp_path / "conv.onnx"), batch, c, hw, 2, depthwise)
    graph, tgt, group, template = _nchwc_group(path)
    assert "n_oc" in template.space["parallel"] and 19 % template.fallback["ow_block"]
    x = np.random.default_rng(5).standard_normal((batch, c, hw, hw)).astype(np.float32)
    (_, data), = [(v, t) for v, t in group.inputs if v not in graph.params]
    xb = np.ascontiguousarray(from_primal(x, "NCHW", f"NCHW{data.shape[-1].value}c"))
    want = from_primal(_reference(path, x), "NCHW", f"NCHW{group.outputs[0].shape[-1].value}c")
    every_config(template, group, graph.params, xb, want, "conv2d_nchwc at batch 3",
                 configs=template.one_knob_variants())


@pytest.mark.parametrize("depthwise", [True, False], ids=["depthwise", "plain"])
def test_batch_fallback_parallelizes_images_and_channel_blocks(tmp_path, depthwise):
    """At batch 8 the fallback's one parallel loop runs over images x output channel blocks (8 x 6 = 48
    chunks, or 8 x 3 when a register tile spans two blocks; not the 6 blocks with a loop over images
    inside); a depthwise input is padded per row, not
    copied whole at root (a buffer of the input's size, 40 MB for MobileNetV2's stride-2 layer at batch 8)."""
    path = _conv_model(str(tmp_path / "conv.onnx"), 8, 96, 28, 2, depthwise)
    _, _, group, template = _nchwc_group(path)
    assert template.fallback["parallel"] == "n_oc"
    assert template.fallback["pad_at"] == ("row" if depthwise else "root")
    args = [t for _, t in group.inputs] + list(group.outputs)
    text = str(lower_schedule(template.apply(template.fallback), args, "k"))
    parallel = [line for line in text.splitlines() if "# parallel" in line]
    blocks = 96 // int(group.outputs[0].shape[-1].value) // template.fallback.get("oc_blocks", 1)
    assert any(f"in range({8 * blocks})" in line for line in parallel), "\n".join(parallel)
    if depthwise:  # no second parallel loop padding the whole batch first
        assert len(parallel) == 1 and "pad = allocate(float32[8*" not in text, text[:3000]


def test_winograd_every_config_at_batch_3(tmp_path, cpu_switch, group_of, every_config):
    """Winograd F(2x2, 3x3) at batch 3 on an odd plane: one image at a time through its four stages
    (the fallback) and the whole batch per stage, every tile width, against onnxruntime."""
    cpu_switch("winograd", "1")
    path = _conv_model(str(tmp_path / "conv.onnx"), 3, 32, 11, 1, False)
    graph, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_winograd_nchwc")
    template = schedule_template(parse_target("llvm"), group)
    assert template.name == "cpu.conv2d_winograd_nchwc" and template.fallback["per_image"] is True
    x = np.random.default_rng(7).standard_normal((3, 32, 11, 11)).astype(np.float32)
    (_, data), = [(v, t) for v, t in group.inputs if v not in graph.params]
    block = int(data.shape[-1].value)
    xb = np.ascontiguousarray(x.reshape(3, 32 // block, block, 11, 11).transpose(0, 1, 3, 4, 2))
    want = _reference(path, x)
    ob = int(group.outputs[0].shape[-1].value)
    want_b = np.ascontiguousarray(want.reshape(3, 32 // ob, ob, 11, 11).transpose(0, 1, 3, 4, 2))
    every_config(template, group, graph.params, xb, want_b, "winograd at batch 3")


def test_winograd_batch_fallback_keeps_one_image_of_transforms(tmp_path, cpu_switch, group_of):
    """At batch 8 the transformed input and the products are one image's (4 x 4 x 1 x ...), not the
    batch's: on ResNet-18's 64 x 56 x 56 layer the batch's are 26 MB each, streamed through memory."""
    cpu_switch("winograd", "1")
    path = _conv_model(str(tmp_path / "conv.onnx"), 8, 32, 14, 1, False)
    graph, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_winograd_nchwc")
    template = schedule_template(parse_target("llvm"), group)
    args = [t for _, t in group.inputs] + list(group.outputs)
    text = str(lower_schedule(template.apply(template.fallback), args, "k"))
    allocs = [line.strip() for line in text.splitlines() if "winograd_" in line and "allocate(" in line]
    assert len(allocs) == 2 and all("[4*4*1*" in a for a in allocs), "\n".join(allocs)
