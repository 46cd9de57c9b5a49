"""``cpu.rows.statistic``: a row's sum or mean and the elementwise output that reads it (T5's and Llama's
RMSNorm), the statistic in vector partial results inside the row's loop, against numpy; groups of another
shape (a statistic across rows, two statistics) are left to the templates and schedules they had."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.compiler import group_compute, schedule_template
from nnvm.graph.builder import GraphBuilder
from nnvm.target import parse_target


def _rms_norm(shape: tuple, axis: int = -1, op: str = "mean"):
    """``w * x / sqrt(op(x * x, axis) + eps)``, as the PyTorch exporter writes T5's RMSNorm."""
    b = GraphBuilder(name="rms_norm")
    x = b.input("x", shape, "float32")
    stat = b.node1(op, [b.node1("multiply", [x, x])], {"axis": (axis % len(shape),), "keepdims": True})
    eps = b.node1("add", [stat, b.param("eps", np.float32(1e-6))])
    scale = b.node1("reciprocal", [b.node1("sqrt", [eps])])
    w = np.random.default_rng(1).standard_normal(shape[axis]).astype(np.float32)
    shape_w = [1] * len(shape)
    shape_w[axis] = shape[axis]
    b.output(b.node1("multiply", [b.param("w", w.reshape(shape_w)), b.node1("multiply", [x, scale])]))
    return b.build(), w.reshape(shape_w)


def _template(graph, target: str):
    return schedule_template(parse_target(target), group_compute(graph, 0, list(graph.nodes)))


@pytest.mark.parametrize("target, shape, kb", [
    ("llvm -mcpu=znver5", (1, 512, 512), 16),   # one 16-lane vector of partial sums a row
    ("llvm -mcpu=haswell", (1, 512, 512), 16),  # two 8-lane vectors: a dependent step covers 16 floats
    ("llvm -mcpu=znver5", (2, 7, 20), 4),       # 20 floats: a quarter vector divides the row
    ("llvm -mcpu=znver5", (3, 33), 16),         # none divides 33: whole vectors, the last one guarded
    ("llvm -mcpu=haswell", (1, 5, 1, 48), 16),
])
def test_rms_norm_takes_the_row_template(target, shape, kb):
    template = _template(_rms_norm(shape)[0], target)
    assert template is not None and template.name == "cpu.rows.statistic", template
    assert template.fallback == {"kb": kb, "vb": 16 if "znver5" in target else 8}, template.fallback


@pytest.mark.parametrize("target", ["llvm -mcpu=znver5", "llvm -mcpu=haswell"])
def test_a_statistic_across_rows_is_not_a_row_statistic(target):
    template = _template(_rms_norm((4, 6, 32), axis=1)[0], target)
    assert template is None or template.name != "cpu.rows.statistic", template


@pytest.mark.parametrize("op", ["mean", "sum"])
@pytest.mark.parametrize("shape", [(1, 128, 512), (2, 7, 20), (3, 33), (1, 5, 1, 48)])
def test_row_statistic_matches_numpy(op, shape):
    graph, w = _rms_norm(shape, op=op)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[x.size // 3] = 30.0  # one large value in the middle of a row
    (got,) = nnvm.compile(graph, target="llvm").run(x)
    x64 = x.astype(np.float64)
    want = w * x64 / np.sqrt(getattr(np, op)(x64 * x64, axis=-1, keepdims=True) + 1e-6)
    err = np.abs(got - want).max()
    assert err <= 1e-5 * np.abs(want).max(), f"{op} {shape}: max error {err}"


def test_a_sum_without_kept_dims_reshaped_back_matches_numpy():
    """``x / reshape(sum(x, -1))``: the statistic has one axis fewer than the output it feeds."""
    shape = (2, 6, 40)
    b = GraphBuilder(name="row_share")
    x = b.input("x", shape, "float32")
    total = b.node1("sum", [x], {"axis": (2,), "keepdims": False})
    b.output(b.node1("divide", [x, b.node1("reshape", [total], {"newshape": (2, 6, 1)})]))
    graph = b.build()
    template = _template(graph, "llvm -mcpu=znver5")
    assert template is not None and template.name == "cpu.rows.statistic", template
    xv = np.random.default_rng(3).random(shape).astype(np.float32) + 0.5
    (got,) = nnvm.compile(graph, target="llvm").run(xv)
    want = xv.astype(np.float64) / xv.astype(np.float64).sum(-1, keepdims=True)
    assert np.abs(got - want).max() <= 1e-6, f"max error {np.abs(got - want).max()}"
