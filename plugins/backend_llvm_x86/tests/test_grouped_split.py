"""Grouped convolutions between blocked ones (ShuffleNet's shape): channels per group that are and are
not whole vector blocks, groups 2/3/4/8, batch 1 and 3, 1x1 and 3x3, every one against onnxruntime.

Where no block divides the channels per group, the convolution reads sub-blocks of its blocked input
(no transform back to NCHW in front of it) and a 1x1 one runs split (``nnvm.cpu.grouped``): each output
block reads its first group, one more weight block per group boundary adds the next group."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cpu.grouped import SPLIT_WEIGHT_PACK, split_cost
from nnvm.cpu.layout_choice import channel_block
from nnvm.target import parse_target
from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime


def _sandwich(batch: int, channels: int, mid: int, out: int, groups: int, kernel: int, hw: int):
    """x -> Conv 3x3 (channels -> mid, blocked) -> Relu -> grouped Conv (kernel, groups) + bias -> Relu
    -> Conv 1x1 (-> out, blocked): the grouped conv both reads and feeds a blocked tensor."""
    rng = np.random.default_rng(channels * 100 + groups)
    shapes = {"w0": (mid, channels, 3, 3), "w1": (mid, mid // groups, kernel, kernel), "w2": (out, mid, 1, 1)}
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), n)
             for n, s in shapes.items()]
    inits.append(numpy_helper.from_array(rng.standard_normal(mid).astype(np.float32), "b1"))
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], group=groups, pads=[kernel // 2] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "sandwich", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _grouped_node(mod):
    (node,) = [n for n in mod.graph.nodes if n.op == "conv2d_nchwc" and n.attrs.get("groups", 1) > 1]
    return node


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("mid, groups, kernel, split", [
    (272, 4, 1, True),     # ShuffleNet: 68 per group, 4 blocks and a quarter
    (136, 4, 1, True),     # 34 per group: every boundary inside a block; 136 in NCHW8c, read by 16c
    (96, 3, 1, False),     # 32 per group: whole blocks of 16, aligned
    (64, 2, 1, False),     # 32 per group: aligned blocks of 16 need no split
    (48, 3, 1, False),     # 16 per group: aligned
    (144, 8, 1, True),     # 18 per group: 16 windows of 18 where straddling reads 9 of 36
    (60, 3, 1, True),      # 20 per group, 60 channels have no block of 8 (AVX2: blocks of 4)
    (90, 3, 1, True),      # 30 per group, 90 channels have no block at any width: split over NCHW input
    (240, 3, 1, False),    # 80 per group: aligned
    (272, 4, 3, False),    # 3x3: straddling windows, read as sub-blocks of the NCHW16c input
    (96, 3, 3, False),     # 3x3, 32 per group: aligned
])
def test_grouped_between_blocked_convs_matches_onnxruntime(isa_target, batch, mid, groups, kernel, split):
    """Split or not as the case says, for the width's code (run where it runs here)."""
    model = _sandwich(batch, 16, mid, 32, groups, kernel, 9)
    mod = nnvm.compile(model, target=isa_target.build, opt_level=3)
    if isa_target.run is not None:
        x = np.random.default_rng(batch).standard_normal((batch, 16, 9, 9)).astype(np.float32)
        (want,) = run_onnxruntime(model, {"x": x})
        (got,) = mod.run(x)
        assert got.shape == want.shape
        err = relative_error(got, want)
        assert err < 1e-4, f"{isa_target.run}: max relative error {err:.2e} against onnxruntime"
    node = _grouped_node(mod)
    lanes = isa_target.lanes
    if mid % groups == 0 and (mid // groups) % lanes == 0:
        return  # aligned: the plan of test_grouped_conv.py
    assert bool(node.attrs.get("split")) == split, (isa_target.build, node.attrs)
    data = mod.graph.type_of(node.inputs[0]).shape
    blocked = channel_block(mid, lanes) is not None  # the tensor's own block: read as it is, no transform
    assert len(data) == (5 if blocked else 4), f"{isa_target.build}: the grouped conv reads {data}"


def test_no_transform_to_nchw_in_front_of_a_grouped_conv(isa_target):
    """ShuffleNet's 68 channels per group: the blocked output of one conv is read as it is."""
    mod = nnvm.compile(_sandwich(1, 16, 272, 32, 4, 1, 7), target=isa_target.build, opt_level=3)
    to_nchw = [n for n in mod.graph.nodes
               if n.op == "layout_transform" and n.attrs.get("dst_layout") == "NCHW"]
    assert len(to_nchw) == 1, to_nchw  # the model's output only


def test_split_is_off_with_the_switch(cpu_switch, isa_target):
    cpu_switch("grouped", "0")
    mod = nnvm.compile(_sandwich(1, 16, 272, 32, 4, 1, 7), target=isa_target.build, opt_level=3)
    node = _grouped_node(mod)
    assert not node.attrs.get("split") and len(mod.graph.type_of(node.inputs[0]).shape) == 4


def test_split_cost():
    assert split_cost(272, 4, 68, 16) == (17 + 3) * 68   # straddling: 17 windows of 136
    assert split_cost(136, 4, 34, 16) == (9 + 3) * 34
    assert split_cost(60, 3, 80, 16) == (4 + 2) * 80      # 20 per group: a block touches at most 2
    assert split_cost(48, 4, 12, 16) is None              # 12 per group: a block may touch 3 groups


def test_split_weight_pack_kernel_matches_its_numpy_evaluation(build_all):
    """``split_weight_pack`` is folded at compile time (its numpy evaluation, checked end to end above);
    its loop program must compute the same: first groups, boundary blocks, an aligned boundary's zeros."""
    from nnvm import te
    from nnvm.graph.ir import TensorType

    attrs = {"groups": 3, "out_block": 16}
    w = np.random.default_rng(4).standard_normal((120, 7, 1, 1)).astype(np.float32)  # 40 per group
    (want,) = SPLIT_WEIGHT_PACK.evaluate([w], attrs)
    assert want.shape == (8 + 2, 7, 1, 1, 1, 16)
    np.testing.assert_array_equal(want[2, :, 0, 0, 0, :8], w[32:40, :, 0, 0].T)  # block 2: group 0 lanes
    assert not want[2, :, :, :, :, 8:].any()
    np.testing.assert_array_equal(want[8, :, 0, 0, 0, 8:], w[40:48, :, 0, 0].T)  # boundary 40: group 1
    assert not want[9].any()                                                      # boundary 80: aligned
    assert not want[7, :, :, :, :, 8:].any()                                      # 120 of 128: padding
    placeholder = te.placeholder(w.shape, "float32", "w")
    out_types = SPLIT_WEIGHT_PACK.infer_type([TensorType(w.shape, "float32")], attrs)
    (packed,) = SPLIT_WEIGHT_PACK.compute([placeholder], attrs, out_types)
    fn = build_all([("pack", te.create_schedule([packed.op]), [placeholder, packed])])["pack"]
    got = np.full(want.shape, np.nan, np.float32)
    fn(w, got)
    np.testing.assert_array_equal(got, want)


def test_split_conv_evaluation_matches_a_grouped_reference():
    """conv2d_nchwc's numpy evaluation in split mode (constant folding) against a plain grouped conv."""
    from nnvm.ops.blocked_layout import from_primal
    from nnvm.ops.registry import get_op

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 136, 3, 4)).astype(np.float32)
    w = rng.standard_normal((136, 34, 1, 1)).astype(np.float32)
    (packed,) = SPLIT_WEIGHT_PACK.evaluate([w], {"groups": 4, "out_block": 16})
    attrs = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 4,
             "out_channels": 136, "split": 1}
    (got,) = get_op("conv2d_nchwc").evaluate([from_primal(x, "NCHW", "NCHW8c"), packed], attrs)
    per = slice(0, 34)
    want = np.concatenate([np.einsum("nchw,oc->nohw", x[:, g * 34:][:, per], w[g * 34:][per, :, 0, 0])
                           for g in range(4)], axis=1)
    want = np.pad(want, [(0, 0), (0, 8), (0, 0), (0, 0)])
    np.testing.assert_allclose(got, from_primal(want, "NCHW", "NCHW16c"), rtol=1e-5, atol=1e-5)


def test_every_config_of_a_split_conv_at_batch_3(group_of, every_config, isa_target):
    """The conv2d_nchwc template on a split grouped conv (136 -> 136 in 4 groups of 34, padded last
    block, data NCHW8c; with AVX2's 8 lanes 68 in groups of 17, data NCHW4c): every config of its
    space, batch 3, against onnxruntime (the decisions only where this machine cannot run the width)."""
    from nnvm.compiler import optimized_graph, schedule_template
    from nnvm.ops.blocked_layout import from_primal

    lanes, target = isa_target.lanes, isa_target.build
    c = 136 * lanes // 16  # eight and a half vectors
    rng = np.random.default_rng(9)
    w = numpy_helper.from_array((rng.standard_normal((c, c // 4, 1, 1)) * 0.2).astype(np.float32), "w")
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, c, 3, 3])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], group=4)
    graph = helper.make_graph([conv], "g", [x_info], [y_info], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = rng.standard_normal((3, c, 3, 3)).astype(np.float32)
    (want,) = run_onnxruntime(model, {"x": x})
    g, *_ = optimized_graph(model, target)
    group = group_of(g, "conv2d_nchwc")
    template = schedule_template(parse_target(target), group)
    assert template.name == "cpu.conv2d_nchwc.direct" and len(list(template.configs())) >= 24
    assert any(n.op == "conv2d_nchwc" and n.attrs.get("split") for n in g.nodes)
    (_, data), = [(v, t) for v, t in group.inputs if v not in g.params]
    block = int(data.shape[-1].value)
    assert block == lanes // 2
    if isa_target.run is None:
        return  # an AVX2 machine: the AVX-512 decisions checked, its configs run where it is the host's
    want = from_primal(np.pad(want, [(0, 0), (0, -c % lanes), (0, 0), (0, 0)]), "NCHW", f"NCHW{lanes}c")
    xb = np.ascontiguousarray(from_primal(x, "NCHW", f"NCHW{block}c"))
    every_config(template, group, g.params, xb, np.ascontiguousarray(want), "split conv", target=target)


def _grouped_fallback(model, target: str) -> dict:
    from nnvm.compiler import group_compute, optimized_graph
    from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template

    graph, tgt, *_ = optimized_graph(model, target)
    by_name = {n.name: n for n in graph.nodes}
    (k,) = [k for k, g in enumerate(graph.groups)
            if any(by_name[n].op == "conv2d_nchwc" and by_name[n].attrs.get("groups", 1) > 1 for n in g)]
    return conv2d_nchwc_template(tgt, group_compute(graph, k, [by_name[n] for n in graph.groups[k]])).fallback


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("hw", [14, 28])
def test_avx2_grouped_1x1_takes_the_widest_one_block_tile(batch, hw):
    """ShuffleNet's 272 -> 272 g=4 (68 multiply-adds per output) on 14- and 28-pixel rows: on AVX2 a
    tile of 14 pixels x 1 block (16 registers with the weight and the broadcast; 12 allowed before: 7),
    as AVX-512 had already; against onnxruntime on the host."""
    model = _sandwich(batch, 16, 272, 32, 4, 1, hw)
    x = np.random.default_rng(hw).standard_normal((batch, 16, hw, hw)).astype(np.float32)
    (want,) = run_onnxruntime(model, {"x": x})
    (got,) = nnvm.compile(model, target="llvm", opt_level=3).run(x)
    assert relative_error(got, want) < 1e-4
    for target in ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"):
        fallback = _grouped_fallback(model, target)
        assert (fallback["ow_block"], fallback["oc_blocks"]) == (14, 1), (target, fallback)


def test_avx2_grouped_short_reduction_keeps_its_tile():
    """24 -> 112 g=4 (6 multiply-adds per output) on 56-pixel rows ran 1.15-1.4x slower with 14 pixels
    than with 8: kept at the largest divisor up to 12."""
    model = _sandwich(1, 16, 24, 32, 4, 1, 56)
    fallback = _grouped_fallback(model, "llvm -mcpu=haswell")
    assert fallback["ow_block"] == 8, fallback
