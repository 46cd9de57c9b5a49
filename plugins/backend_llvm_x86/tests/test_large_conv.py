"""Large-image convolutions and channel concatenations on x86 (VGG-19, DenseNet-121, GoogLeNet; issue 19).

Winograd on large images runs its four stages per block of tile rows (knob ``row_tiles``): compared with
onnxruntime at batch 1 and 3 on odd planes (a partial last tile), every ``row_tiles`` value, and the
lowered program's transformed input holding one block of rows rather than a whole image.

Channel concatenations of blocked tensors stay blocked (``layout.alter_concat``) and run unrolled over
their channel blocks (``schedule_concat.py``): compared with onnxruntime with DenseNet's batch norm and
ReLU and GoogLeNet's max pool after them, at batch 1 and 3, on odd planes, with the unrolled schedule
and the one past its budget; no layout transform is left around them.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph, schedule_group, schedule_template
from nnvm.cpu import schedule_concat
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.cpu.winograd import ROW_BLOCK_ABOVE
from nnvm.target import parse_target
from nnvm.te.lower import lower_schedule


def _model(path, batch, channels, hw, convs, concat=False):
    """``convs``: (out_channels, kernel) of convolutions (bias, Relu) each reading the input ``x``
    (``batch x channels x hw x hw``), padded to keep the plane; their outputs concatenated along channels
    when ``concat``, else one output each."""
    rng = np.random.default_rng(len(convs) * 100 + channels)
    nodes, inits, outs = [], [], []
    for k, (oc, kernel) in enumerate(convs):
        w = rng.standard_normal((oc, channels, kernel, kernel)).astype(np.float32)
        w /= np.float32(np.sqrt(channels * kernel**2))
        b = rng.standard_normal(oc).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes += [helper.make_node("Conv", ["x", f"w{k}", f"b{k}"], [f"c{k}"], pads=[kernel // 2] * 4),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        outs.append(f"r{k}")
    if concat:  # DenseNet's batch norm and ReLU, then GoogLeNet's 3x3/1 max pool
        total = sum(oc for oc, _ in convs)
        scale = rng.uniform(0.5, 1.5, (1, total, 1, 1)).astype(np.float32)
        shift = rng.standard_normal((1, total, 1, 1)).astype(np.float32)
        inits += [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(shift, "shift")]
        nodes += [helper.make_node("Concat", outs, ["cat"], axis=1),
                  helper.make_node("Mul", ["cat", "scale"], ["bn0"]),
                  helper.make_node("Add", ["bn0", "shift"], ["bn"]),
                  helper.make_node("Relu", ["bn"], ["act"]),
                  helper.make_node("MaxPool", ["act"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)]
        outs = ["y"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, hw, hw])
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    graph = helper.make_graph(nodes, "convs", [x], ys, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def _check(path, x, what):
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        err = float(np.abs(g - w).max() / np.abs(w).max())
        assert err < 1e-5, f"{what}: max relative error {err:.2e}"


def _winograd_template(path, group_of, target="llvm"):
    graph, *_ = optimized_graph(path, target)
    group = group_of(graph, "conv2d_winograd_nchwc")
    return graph, group, schedule_template(parse_target(target), group)


@pytest.mark.parametrize("batch", [1, 3])
def test_row_blocked_winograd_matches_onnxruntime(tmp_path, cpu_switch, group_of, batch):
    """64 -> 64 channels on 65 x 65 (33 tile rows, the last tile half outside): one image's V and M
    are 8.9 MB, above the threshold, so the fallback runs blocks of 3 tile rows."""
    cpu_switch("winograd", "1")
    path = _model(str(tmp_path / "conv.onnx"), batch, 64, 65, [(64, 3)])
    _, _, template = _winograd_template(path, group_of)
    assert template.fallback["row_tiles"] == 3 and 0 in template.space["row_tiles"]
    x = np.random.default_rng(batch).standard_normal((batch, 64, 65, 65)).astype(np.float32)
    _check(path, x, f"row-blocked winograd at batch {batch}")


def test_every_row_block_at_batch_3(tmp_path, cpu_switch, group_of, build):
    """Every ``row_tiles`` value (0: whole images) on 3 images of 64 -> 80 channels on 61 x 61 (31 tile
    rows, a prime: blocks of 1 or all), against onnxruntime."""
    cpu_switch("winograd", "1")
    batch, c, oc, hw = 3, 64, 80, 61
    path = _model(str(tmp_path / "conv.onnx"), batch, c, hw, [(oc, 3)])
    graph, group, template = _winograd_template(path, group_of)
    assert template.fallback["row_tiles"] == 1 and set(template.space["row_tiles"]) == {0, 1}
    x = np.random.default_rng(3).standard_normal((batch, c, hw, hw)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (_, data), = [(v, t) for v, t in group.inputs if v not in graph.params]
    ib, ob = int(data.shape[-1].value), int(group.outputs[0].shape[-1].value)
    xb = np.ascontiguousarray(x.reshape(batch, c // ib, ib, hw, hw).transpose(0, 1, 3, 4, 2))
    configs = [{**template.fallback, "row_tiles": r, "per_image": p}
               for r in template.space["row_tiles"] for p in (True, False)]
    args = [t for _, t in group.inputs] + list(group.outputs)
    funcs = build([lower_schedule(template.apply(cfg), args, f"k{q}") for q, cfg in enumerate(configs)])
    ins = [np.array(graph.params[v]) if v in graph.params else xb for v, _ in group.inputs]
    for q, cfg in enumerate(configs):
        out = np.full([int(d.value) for d in group.outputs[0].shape], np.nan, np.float32)
        funcs[f"k{q}"](*ins, out)
        got = out.transpose(0, 1, 4, 2, 3).reshape(batch, -1, hw, hw)[:, :oc]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 1e-5, f"config {cfg} (output block {ob}): max relative error {err:.2e}"


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"])
def test_row_blocks_keep_transforms_in_l2(tmp_path, cpu_switch, group_of, target):
    """The lowered program allocates V and M for one block of tile rows (3 of 33 here: 0.4 MB each),
    not for the image (8.9 MB together); the padded input is one copy at root at batch 1 and none at
    batch 3 (it would be the whole batch's); small layers keep the old space (the shipped tuning logs
    name no ``row_tiles``). Lowered only, for AVX-512 (4 blocks of 16 channels) and AVX2 (8 of 8)."""
    cpu_switch("winograd", "1")
    lanes = vector_lanes(parse_target(target))
    path = _model(str(tmp_path / "conv.onnx"), 1, 64, 65, [(64, 3)])
    _, group, template = _winograd_template(path, group_of, target)
    args = [t for _, t in group.inputs] + list(group.outputs)
    text = str(lower_schedule(template.apply(template.fallback), args, "k"))
    allocs = [line.strip() for line in text.splitlines() if "winograd_" in line and "allocate(" in line]
    assert allocs and all(f"[4*4*1*{64 // lanes}*3*33*{lanes}]" in a for a in allocs), "\n".join(allocs)
    assert f"pad = allocate(float32[1*{64 // lanes}*68*68*{lanes}]" in text  # batch 1: one copy at root
    path = _model(str(tmp_path / "conv3.onnx"), 3, 64, 65, [(64, 3)])
    _, group, template = _winograd_template(path, group_of, target)
    args = [t for _, t in group.inputs] + list(group.outputs)
    text = str(lower_schedule(template.apply(template.fallback), args, "k"))
    assert "pad = allocate" not in text, text[:3000]  # batch 3: no copy of the batch, read through guards
    small = _model(str(tmp_path / "small.onnx"), 1, 64, 56, [(64, 3)])  # ResNet-18's 64 x 56 x 56
    _, _, template = _winograd_template(small, group_of, target)
    assert "row_tiles" not in template.space
    assert 16 * 128 * 28 * 28 * 4 < ROW_BLOCK_ABOVE


CONCAT_BRANCHES = [(16, 1), (32, 3), (16, 5), (48, 1)]  # GoogLeNet-like branches, blocks of 16 each


@pytest.mark.parametrize("budget", [schedule_concat.UNROLL_BUDGET, 0], ids=["unrolled", "chain"])
@pytest.mark.parametrize("batch", [1, 3])
def test_blocked_concat_matches_onnxruntime(tmp_path, monkeypatch, batch, budget):
    """Four convolution branches on 13 x 13, concatenated, batch norm, ReLU, 3x3/1 max pool: all of it
    in ``NCHW16c`` (only the model's input and output are transformed) and right, with the channel
    blocks unrolled and with the chain of ``if_then_else`` kept (past the budget)."""
    monkeypatch.setattr(schedule_concat, "UNROLL_BUDGET", budget)
    path = _model(str(tmp_path / "cat.onnx"), batch, 16, 13, CONCAT_BRANCHES, concat=True)
    graph, *_ = optimized_graph(path, "llvm")
    ops = [n.op for n in graph.nodes]
    assert "concatenate" in ops and "max_pool2d_nchwc" in ops, ops
    assert ops.count("layout_transform") == 2, ops  # the model's input and output only
    x = np.random.default_rng(batch).standard_normal((batch, 16, 13, 13)).astype(np.float32)
    _check(path, x, f"blocked concat at batch {batch}, budget {budget}")


def test_concat_unrolls_blocks_and_keeps_rows_rolled(tmp_path, group_of, cpu_switch):
    """The lowered concatenation: no ``if_then_else`` left (each unrolled block reads its one input),
    the row loop holding the blocks carries the pragma that keeps LLVM from unrolling it, and an input
    whose channels take another block (24: blocks of 8 or padded ones, against 16; with AVX2's 8 lanes
    12 against 8) keeps the concatenation in NCHW, right. At batch 1 the concatenation would be planned
    in place (``concat_in_place``, no kernel): switched off here, as it is at a batch above 1."""
    cpu_switch("concat_in_place", "0")
    path = _model(str(tmp_path / "cat.onnx"), 1, 16, 13, CONCAT_BRANCHES, concat=True)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "concatenate")
    args = [t for _, t in group.inputs] + list(group.outputs)
    func = lower_schedule(schedule_group(tgt, group), args, "k")
    text = str(func)
    assert "if_then_else" not in text and "# parallel" in text, text[:2000]
    from nnvm.tir import stmt as S
    from nnvm.tir.visit import walk

    rolled = []
    walk(func.body, lambda s: rolled.append(s) if isinstance(s, S.For) and ("unroll", False) in s.annotations
         else None)
    assert len(rolled) == 1 and "for i3 in range(13)" in text, text[:2000]  # one row loop, blocks inside
    lanes = vector_lanes(tgt)
    mixed = _model(str(tmp_path / "mixed.onnx"), 3, 16, 11, [(24 * lanes // 16, 1), (lanes, 3)], concat=True)
    graph, *_ = optimized_graph(mixed, "llvm")
    assert "max_pool2d" in [n.op for n in graph.nodes]
    x = np.random.default_rng(11).standard_normal((3, 16, 11, 11)).astype(np.float32)
    _check(mixed, x, f"concat of {24 * lanes // 16} + {lanes} channels (NCHW)")
