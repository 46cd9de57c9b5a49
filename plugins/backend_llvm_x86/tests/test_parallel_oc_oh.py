"""Batch-1 convolutions whose channel block groups or rows do not split evenly over the pool's chunks
run with groups x rows fused into one parallel loop (``parallel="oc_oh"``, ``cost_model.parallel_loop``).
Against onnxruntime: shapes of MobileNetV2's 7x7 and 14x14 layers (with and without a residual add),
a 3x3 conv on an odd plane, stride 2."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu import templates


def _model(path, in_ch, out_ch, k, stride, plane, residual):
    rng = np.random.default_rng(in_ch * out_ch + k)
    inits = {"w": rng.standard_normal((out_ch, in_ch, k, k)).astype(np.float32) * 0.1,
             "b": rng.standard_normal(out_ch).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["r" if residual else "y"])]
    if residual:
        nodes.append(helper.make_node("Add", ["r", "x"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_ch, plane, plane])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    graph = helper.make_graph(nodes, "oc_oh", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.mark.parametrize("in_ch,out_ch,k,stride,plane,residual", [
    (960, 160, 1, 1, 7, False), (160, 160, 1, 1, 7, True), (96, 576, 1, 1, 14, False),
    (384, 64, 1, 1, 14, False), (32, 48, 3, 1, 13, False), (48, 80, 3, 2, 15, False)])
def test_fused_parallel_loop_matches_onnxruntime(tmp_path, monkeypatch, cpu_switch, isa_target, in_ch, out_ch,
                                                 k, stride, plane, residual):
    """The loop is chosen for a team of 2 (``-cores=2``: the chunk rule depends on the team) at each
    vector width; the code runs on whatever team the pool has here."""
    # rows, not a flattened plane (which AVX2 takes for 960 -> 160 on 7x7: its loop is the channel groups)
    cpu_switch("flat_plane", "0")
    chosen = []
    original = templates.schedule_template

    def spy(target, group):
        template = original(target, group)
        if isinstance(template, ScheduleTemplate) and template.name == "cpu.conv2d_nchwc.direct":
            chosen.append(template.fallback["parallel"])
        return template

    monkeypatch.setattr(templates, "schedule_template", spy)
    path = str(tmp_path / "m.onnx")
    _model(path, in_ch, out_ch, k, stride, plane, residual)
    mod = nnvm.compile(path, target=f"{isa_target.build} -cores=2", tuning_log=False)
    if (in_ch, plane) in ((960, 7), (96, 14)):  # 5 and 12 channel block groups (16 lanes): the fused loop
        assert chosen == ["oc_oh"], isa_target
    if isa_target.run is None:
        return  # an AVX2 machine: the AVX-512 code compiled, run where it is the host's
    x = np.random.default_rng(3).standard_normal((1, in_ch, plane, plane)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = mod.run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{isa_target.build}: max relative error {err:.2e} against onnxruntime"


@pytest.mark.parametrize("pad_at", ["row", "root"])
@pytest.mark.parametrize("oc_blocks", [1, 2])
def test_fused_loop_with_each_padding_and_tile(tmp_path, monkeypatch, cpu_switch, pad_at, oc_blocks):
    """Configs a tuner may pick: ``oc_oh`` with the padded window made per row or once at root, one or
    two channel blocks a tile, on a padded 3x3 conv (with and without an epilogue stage)."""
    original = templates.schedule_template
    applied = []

    def forced(target, group):
        template = original(target, group)
        if isinstance(template, ScheduleTemplate) and template.name == "cpu.conv2d_nchwc.direct":
            applied.append(template.name)
            config = {**template.fallback, "parallel": "oc_oh", "pad_at": pad_at, "oc_blocks": oc_blocks}
            template = dataclasses.replace(template, fallback=config)
        return template

    monkeypatch.setattr(templates, "schedule_template", forced)
    cpu_switch("winograd", "0")  # the direct template, not Winograd's
    for residual in (False, True):
        path = str(tmp_path / f"m{residual}.onnx")
        _model(path, 32, 32, 3, 1, 11, residual)
        x = np.random.default_rng(4).standard_normal((1, 32, 11, 11)).astype(np.float32)
        want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 1e-4, f"pad_at={pad_at}, residual={residual}: max relative error {err:.2e}"
    assert len(applied) == 2
