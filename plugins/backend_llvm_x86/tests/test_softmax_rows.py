"""Softmax along the last axis as two row kernels (``nnvm.cpu.softmax_rows``: ``softmax_exp`` then
``softmax_normalize``, each ``exp`` once, results under float32's smallest normal number flushed to 0),
against onnxruntime: attention's ranks 3 and 4, rows a vector divides and rows it does not (7, 13, 197),
GPT-2's causal mask (-1e9, and -inf), every config of both templates; a softmax along another axis and
log_softmax keep the core's kernel."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnvm
from nnvm.compiler import group_compute, import_model, schedule_template
from nnvm.cpu.softmax_rows import EXP_FLOOR
from nnvm.target import parse_target


def _model(path, shape, op="Softmax", axis=-1, mask=None):
    """x -> [x + mask] -> op(axis): torch's attention exports the mask as an Add of a constant."""
    nodes, inits, src = [], [], "x"
    if mask is not None:
        inits.append(onnx.numpy_helper.from_array(mask.astype(np.float32), "mask"))
        nodes.append(helper.make_node("Add", ["x", "mask"], ["xm"]))
        src = "xm"
    nodes.append(helper.make_node(op, [src], ["y"], axis=axis))
    graph = helper.make_graph(nodes, "sm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _causal(rows, cols, value):
    return np.where(np.triu(np.ones((rows, cols), bool), 1), np.float32(value), np.float32(0))


def _run(path, x):
    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return mod, mod.run(x)[0], want


@pytest.mark.parametrize("shape, mask", [
    ((1, 3, 197, 197), None),      # ViT-tiny's scores: 12 whole vectors and a guarded one a row
    ((1, 4, 128, 128), -1e9),      # GPT-2's causal scores (torch_zoo's mask value)
    ((2, 3, 7, 7), -np.inf),       # rows shorter than a vector, an -inf mask
    ((5, 13, 13), None),           # rank 3, 13 = no divisor of the vector
    ((2, 64), None),               # rank 2
])
def test_two_row_kernels_match_onnxruntime(tmp_path, shape, mask):
    path = str(tmp_path / "sm.onnx")
    _model(path, shape, mask=None if mask is None else _causal(*shape[-2:], mask))
    x = (3 * np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    mod, got, want = _run(path, x)
    kernels = " ".join(call["kernel"] for call in mod.plan["calls"])
    assert "softmax_exp" in kernels and "softmax_normalize" in kernels, kernels
    err = float(np.abs(got - want).max())
    assert err < 1e-6, f"softmax {shape}: max abs error {err:.2e} against onnxruntime"
    if mask is not None:  # masked probabilities are exactly 0, as onnxruntime's
        hidden = np.broadcast_to(np.triu(np.ones(shape[-2:], bool), 1), shape)
        assert not got[hidden].any() and not want[hidden].any()
    assert np.allclose(got.sum(axis=-1), 1.0, atol=1e-5)


def test_tiny_probabilities_are_flushed_not_denormal(tmp_path):
    """A row whose other scores sit 80..100 below its maximum: those under exp(EXP_FLOOR) are exactly 0,
    none of the outputs is a denormal number, the others match float64."""
    path = str(tmp_path / "sm.onnx")
    _model(path, (1, 21))
    x = -np.linspace(0, 100, 21, dtype=np.float32)[None]
    _, got, _ = _run(path, x)
    z = x.astype(np.float64) - x.max()
    want = np.exp(z) / np.exp(z).sum()
    tiny = np.finfo(np.float32).tiny
    assert not ((got != 0) & (np.abs(got) < tiny)).any(), got
    assert (got[z < EXP_FLOOR] == 0).all()
    normal = want > 1e3 * tiny
    np.testing.assert_allclose(got[normal], want[normal], rtol=1e-6)


def _row_group(path, op):
    """The group of ``op`` (``softmax_exp`` or ``softmax_normalize``) standing for the model's softmax."""
    graph = import_model(path)
    (node,) = graph.nodes
    graph = dataclasses.replace(graph, nodes=(dataclasses.replace(node, op=op, attrs={}),))
    group = group_compute(graph, 0, list(graph.nodes))
    return graph, group


@pytest.mark.parametrize("op, name", [("softmax_exp", "cpu.softmax.exp_rows"),
                                      ("softmax_normalize", "cpu.softmax.normalize_rows")])
def test_every_config_of_both_templates(tmp_path, every_config, op, name):
    """All partial-result widths on rows no vector divides (37: guarded last vectors, and scalar)."""
    path = str(tmp_path / "sm.onnx")
    shape = (2, 5, 37)
    _model(path, shape)
    graph, group = _row_group(path, op)
    template = schedule_template(parse_target("llvm -mcpu=skylake-avx512"), group)
    assert template.name == name and template.space["kb"] == [1, 4, 8, 16], (template.name, template.space)
    every_config(template, group, graph.params, *_row_case(op, shape, 2), op)


def _row_case(op: str, shape: tuple, seed: int):
    """(input, numpy's answer) for one of the two row kernels: normalize gets positive rows."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    if op == "softmax_exp":
        return x, np.exp(x - x.max(axis=-1, keepdims=True))
    x = np.abs(x)
    return x, x / x.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("op", ["softmax_exp", "softmax_normalize"])
def test_two_chains_of_partial_results_on_8_lanes(tmp_path, every_config, op):
    """With 8 lanes (AVX2) the fallback keeps two vectors of partial results (16), one where a row is
    shorter than two vectors; every config of the space right on rows of 37 (guarded) and 197."""
    for shape in ((2, 5, 37), (3, 197)):
        path = str(tmp_path / "sm.onnx")
        _model(path, shape)
        graph, group = _row_group(path, op)
        template = schedule_template(parse_target("llvm -mcpu=haswell"), group)
        assert template.fallback["kb"] == 16 and template.space["kb"] == [1, 4, 8, 16], template.space
        every_config(template, group, graph.params, *_row_case(op, shape, 5), op)
    _model(path, (4, 12))
    graph, group = _row_group(path, op)
    assert schedule_template(parse_target("llvm -mcpu=haswell"), group).fallback["kb"] == 4


@pytest.mark.parametrize("op, axis", [("Softmax", 1), ("LogSoftmax", -1)])
def test_other_axes_and_log_softmax_keep_the_core_kernel(tmp_path, op, axis):
    path = str(tmp_path / "sm.onnx")
    shape = (2, 9, 5)
    _model(path, shape, op=op, axis=axis)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    mod, got, want = _run(path, x)
    assert not any("softmax_exp" in call["kernel"] for call in mod.plan["calls"])
    assert np.abs(got - want).max() < 1e-5


def test_floor_as_one_select_gives_the_same_results(tmp_path, cpu_switch):
    """``softmax_exp``'s floor as a select on its own compare (``cpu_switches["softmax_select"]``, default)
    and as ``maximum`` (off) agree bit for bit: values below the floor (-1e9, -inf), at it, a NaN row and an
    all -inf row (NaN either way)."""
    path = str(tmp_path / "sm.onnx")
    shape = (4, 37)
    _model(path, shape)
    x = (3 * np.random.default_rng(2).standard_normal(shape)).astype(np.float32)
    x[0, :5] = [-1e9, -np.inf, EXP_FLOOR, EXP_FLOOR - 1e-3, -100.0]
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    outs = []
    cpu_switch("softmax_bounded_exp", "0")  # the clamped exp, where the select is used
    for value in ("0", "1"):
        cpu_switch("softmax_select", value)
        outs.append(nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.isnan(outs[1][1]).all() and np.isnan(outs[1][2]).all() and not np.isnan(outs[1][[0, 3]]).any()


@pytest.mark.parametrize("bounded_exp, max_skips_nan", [("1", "1"), ("1", "0"), ("0", "1")])
def test_short_forms_match_onnxruntime_on_special_rows(tmp_path, cpu_switch, bounded_exp, max_skips_nan):
    """``softmax_exp``'s exp without clamps (``exp_bounded``, ``cpu_switches["softmax_bounded_exp"]``) and row
    maximum skipping NaN (``cpu_switches["softmax_max_skips_nan"]``), both default, against onnxruntime and
    the full forms: arguments below exp's range (-1e9, -inf: flushed to 0 by the select, whatever exp gave),
    at the floor; rows with a NaN, all NaN, all -inf and with +inf (NaN, as onnxruntime's), rows of 37
    (vector and scalar tails); within 1e-6 of onnxruntime and of the full forms."""
    path = str(tmp_path / "sm.onnx")
    shape = (8, 37)
    _model(path, shape)
    x = (10 * np.random.default_rng(4).standard_normal(shape)).astype(np.float32)
    x[0, :6] = [-1e9, -np.inf, EXP_FLOOR, EXP_FLOOR - 1e-3, -100.0, 3e38]
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, :] = np.linspace(-87.5, 0, 37)
    x[5, :] = np.nan
    x[6, 36] = np.nan
    x[7, 20] = np.inf
    outs = {}
    for value in ("0", "1"):
        cpu_switch("softmax_bounded_exp", value if bounded_exp == "1" else "0")
        cpu_switch("softmax_max_skips_nan", value if max_skips_nan == "1" else "0")
        mod, outs[value], want = _run(path, x)
    got = outs["1"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[[1, 2, 5, 6, 7]]).all() and not np.isnan(got[[0, 3, 4]]).any()
    rows = [0, 3, 4]
    assert np.abs(got[rows] - want[rows]).max() < 1e-6
    assert np.abs(got[rows] - outs["0"][rows]).max() < 1e-6
    assert (got[0, :2] == 0).all() and (got[3, :1] == 0).all()
