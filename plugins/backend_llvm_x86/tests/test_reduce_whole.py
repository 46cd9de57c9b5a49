"""``cpu.reduce.whole``: a min, max or sum of a whole tensor into one number (DynamicQuantizeLinear's
range), in vector partial results along the last axis, against numpy; a last axis no vector divides
into at least 4 is left to the generic schedule."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.compiler import group_compute, schedule_template
from nnvm.graph.builder import GraphBuilder
from nnvm.target import parse_target


def _graph(op: str, shape: tuple):
    """``op`` over all axes, then ``minimum(., 0)`` (an elementwise tail, as DynamicQuantizeLinear's)."""
    b = GraphBuilder(name="whole")
    x = b.input("x", shape, "float32")
    r = b.node1(op, [x], {"axis": None})
    b.output(b.node1("minimum", [r, b.param("zero", np.float32(0))]))
    return b.build()


def _template(graph, target: str):
    group = group_compute(graph, 0, list(graph.nodes))
    return schedule_template(parse_target(target), group)


@pytest.mark.parametrize("target, shape, kb", [
    ("llvm -mcpu=znver5", (1, 128, 3072), 64),   # four 16-lane vectors: independent chains
    ("llvm -mcpu=haswell", (1, 128, 3072), 32),  # four 8-lane vectors
    ("llvm -mcpu=znver5", (3, 5, 12), 4),        # a last axis of 12: a quarter vector
    ("llvm -mcpu=znver5", (7, 3), None),         # 3 floats: the generic schedule
])
def test_whole_reduction_template_per_target(target, shape, kb):
    template = _template(_graph("max", shape), target)
    if kb is None:
        assert template is None or template.name != "cpu.reduce.whole", template
    else:
        assert template.name == "cpu.reduce.whole" and template.fallback["kb"] == kb, template


@pytest.mark.parametrize("op", ["min", "max", "sum"])
@pytest.mark.parametrize("shape", [(1, 128, 768), (3, 5, 12), (7, 3)])
def test_whole_reduction_matches_numpy(op, shape):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) - 3
    x.reshape(-1)[len(x.reshape(-1)) // 3] = 40.0  # one extreme in the middle of a vector
    (got,) = nnvm.compile(_graph(op, shape), target="llvm").run(x)
    want = np.minimum(getattr(np, op)(x.astype(np.float64)), 0)
    tol = 1e-5 * np.abs(x).sum() if op == "sum" else 0
    assert abs(float(got) - want) <= tol, f"{op} {shape}: {float(got)} against {want}"
