"""Grouped convolution on x86 (ShuffleNet, ResNeXt, RegNet): blocked within each group (conv2d_nchwc)
when a block fits the channels per group, else the register-tiled NCHW schedule; every shape against
onnxruntime, including groups whose channels no block divides, odd widths and batch 2."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.layout_choice import grouped_blocks, straddling_plan


def _model(path, in_shape, convs, residual=False):
    """A chain of Conv (+ bias) + Relu nodes; ``convs``: (out_channels, kernel, groups, stride) each.
    With ``residual`` the last output is added to the first conv's output (same shape required)."""
    rng = np.random.default_rng(7)
    nodes, inits, cur, c = [], {}, "x", in_shape[1]
    for k, (o, ksize, g, stride) in enumerate(convs):
        inits[f"w{k}"] = rng.standard_normal((o, c // g, ksize, ksize)).astype(np.float32) * 0.2
        inits[f"b{k}"] = rng.standard_normal(o).astype(np.float32)
        nodes += [helper.make_node("Conv", [cur, f"w{k}", f"b{k}"], [f"c{k}"], group=g, strides=[stride] * 2,
                                   pads=[ksize // 2] * 4),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        cur, c = f"r{k}", o
    if residual:
        nodes.append(helper.make_node("Add", [cur, "r0"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [cur], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    graph = helper.make_graph(nodes, "grouped", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _check(path, in_shape, target="llvm", run=True):
    """The module compiled for ``target``, its output checked against onnxruntime where ``run``."""
    mod = nnvm.compile(path, target=target, opt_level=3)
    if not run:
        return mod
    x = np.random.default_rng(8).standard_normal(in_shape).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = mod.run(x)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{path}: max relative error {err:.2e} against onnxruntime"
    return mod


@pytest.mark.parametrize("in_shape, convs, residual, blocked", [
    ((1, 48, 10, 10), [(48, 1, 3, 1)], False, 1),              # 16 per group: NCHW16c in and out
    ((1, 240, 7, 7), [(60, 1, 3, 1), (240, 1, 3, 1)], False, 2),  # ShuffleNet: 20 per group, then 60 in
    ((2, 24, 9, 9), [(36, 3, 3, 2)], False, 1),                # batch 2, stride 2, 12 out per group
    ((1, 32, 11, 11), [(32, 3, 8, 1), (32, 3, 8, 1)], True, 2),  # ResNeXt-like 3x3, odd width, residual
    ((1, 51, 6, 6), [(51, 1, 3, 1)], False, 1),                # 17 per group: straddling blocks of 16
    ((2, 12, 5, 7), [(24, 3, 2, 1)], False, 1),                # 6 in, 12 out per group, batch 2
    ((1, 16, 8, 8), [(32, 3, 16, 1)], False, 0),               # channel multiplier 2: not depthwise
    ((2, 48, 6, 5), [(36, 1, 3, 1), (48, 1, 3, 1)], False, 2),  # 12 out per group: blocks of 16 straddle
    ((1, 36, 5, 5), [(36, 3, 3, 2)], False, 1),                # 12 per group, 3x3 s2, last block padded
    # 10 per group: blocks of 16 straddle at 3.6x the work, NCHW (blocks of 8 at 2x: blocked); then 5 in
    ((1, 64, 7, 7), [(40, 1, 4, 1), (64, 1, 8, 1)], False, {16: 1, 8: 2}),
    ((1, 64, 7, 7), [(24, 1, 8, 1), (64, 1, 8, 1)], False, 1),  # 3 per group: 8x work (4x at 8), NCHW
])
def test_grouped_conv_matches_onnxruntime(tmp_path, isa_target, in_shape, convs, residual, blocked):
    """``blocked``: how many convs run blocked, per vector width where it depends on the width; checked
    for the width's named CPU and for the code built (and run, where it runs here) for that width."""
    path = str(tmp_path / "grouped.onnx")
    _model(path, in_shape, convs, residual)
    want = blocked[isa_target.lanes] if isinstance(blocked, dict) else blocked
    graph, *_ = optimized_graph(path, isa_target.decide, opt_level=3)
    assert sum(n.op == "conv2d_nchwc" for n in graph.nodes) == want, isa_target.decide
    mod = _check(path, in_shape, isa_target.build, run=isa_target.run is not None)
    assert sum(n.op == "conv2d_nchwc" for n in mod.graph.nodes) == want, isa_target.build


def test_grouped_blocks_never_straddle_a_group():
    assert grouped_blocks(240, 240, 3, 16) == (16, 16)   # 80 per group
    assert grouped_blocks(240, 60, 3, 16) == (16, 4)     # 20 out per group
    assert grouped_blocks(60, 240, 3, 16) == (1, 16)     # 60 channels have no block: NCHW input
    assert grouped_blocks(128, 128, 32, 16) == (1, 4)    # ResNeXt: 4 per group
    assert grouped_blocks(51, 51, 3, 16) is None         # 17 per group
    assert grouped_blocks(64, 64, 2, 8) == (8, 8)


def test_blocks_straddle_groups_only_when_it_pays():
    """240 -> 60 in 3 groups: 4 blocks of 16 reading 160 channels each (2.1x the multiply-adds at 4x the
    width of blocks of 4); ResNeXt's 4 per group would do 4x the work at 4x the width: aligned."""
    assert straddling_plan(240, 60, 3, 16, 4) == (16, 16, 160)
    assert straddling_plan(128, 128, 32, 16, 4) is None
    assert straddling_plan(51, 51, 3, 16, None) == (1, 16, 34)  # 17 per group: no aligned block at all
    assert straddling_plan(16, 32, 16, 16, None) is None        # channel multiplier 2: 8x the work
    assert straddling_plan(64, 40, 4, 16, None) is None          # 10 per group: 3.6x with 16 lanes,
    assert straddling_plan(64, 40, 4, 8, None) == (8, 8, 32)     # 2x with AVX2's 8
    assert straddling_plan(64, 24, 8, 8, None) is None           # 3 per group: 4x even with 8


def test_weight_pack_kernel_matches_its_numpy_evaluation(build_all):
    """``grouped_weight_pack`` is folded at compile time (its numpy evaluation, checked end to end
    above); its loop program must compute the same, for a window clamped at the last channel too."""
    from nnvm import te
    from nnvm.cpu.layout_choice import GROUPED_WEIGHT_PACK
    from nnvm.graph.ir import TensorType

    attrs = {"groups": 3, "channels": 36, "in_block": 4, "out_block": 16, "window": 24}
    w = np.random.default_rng(4).standard_normal((36, 12, 3, 3)).astype(np.float32)
    (want,) = GROUPED_WEIGHT_PACK.evaluate([w], attrs)
    assert want.shape == (3, 6, 3, 3, 4, 16) and not want[2, :, :, :, :, 4:].any()  # 36 of 48: padding
    placeholder = te.placeholder(w.shape, "float32", "w")
    out_types = GROUPED_WEIGHT_PACK.infer_type([TensorType(w.shape, "float32")], attrs)
    (packed,) = GROUPED_WEIGHT_PACK.compute([placeholder], attrs, out_types)
    fn = build_all([("pack", te.create_schedule([packed.op]), [placeholder, packed])])["pack"]
    got = np.full(want.shape, np.nan, np.float32)
    fn(w, got)
    np.testing.assert_array_equal(got, want)
