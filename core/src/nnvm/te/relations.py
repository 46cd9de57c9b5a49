"""The relations a schedule records between a stage's loops (split, fuse), and what they imply: the range
of every loop (``infer_bounds``) and the value of every original axis from the leaf loops
(``axis_values``). Shared by the schedule (``rfactor``), bound inference and lowering.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnvm.errors import ScheduleError
from nnvm.tir import expr as E
from nnvm.tir.simplify import simplify


@dataclass(eq=False)
class Split:
    parent: E.IterVar
    outer: E.IterVar
    inner: E.IterVar
    factor: E.Expr | None
    nparts: E.Expr | None


@dataclass(eq=False)
class Fuse:
    outer: E.IterVar
    inner: E.IterVar
    fused: E.IterVar


def _const_int(e, what: str, stage) -> int:
    e = simplify(E.convert(e))
    if not isinstance(e, E.Const):
        raise ScheduleError(f"stage {stage.name}: {what} must be a constant after simplification, got {e}")
    return int(e.value)


def _extent(e):
    """An extent as an int when it simplifies to a constant, else the simplified expression of symbolic
    dims (a shape such as ``(n, 64)``: docs/dynamic-shapes.md)."""
    e = simplify(E.convert(e))
    return int(e.value) if isinstance(e, E.Const) else e


def root_ranges(stage) -> dict:
    """Ranges (min as an int, extent as an int or an expression of symbolic dims) of the stage's original
    axes when computed at root."""
    out = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        out[iv] = (_const_int(iv.dom.min, "an axis minimum", stage), _extent(iv.dom.extent))
    return out


def infer_bounds(stage, roots: dict) -> dict:
    """Ranges of all iter vars of a stage, from its root ranges through its relations. A symbolic extent
    split by a constant factor gives ``ceil(extent / factor)`` outer iterations of ``factor`` (the tail
    guarded, ``root_values``); fusing with one gives the product."""
    ranges = dict(roots)
    for rel in stage.relations:
        if isinstance(rel, Split) and isinstance(ranges[rel.parent][1], E.Expr):
            ext = ranges[rel.parent][1]
            if rel.factor is not None:
                factor = _const_int(rel.factor, "a split factor", stage)
                ranges[rel.outer] = (0, _extent((ext + (factor - 1)) // factor))
                ranges[rel.inner] = (0, factor)
            else:
                nparts = _const_int(rel.nparts, "a split nparts", stage)
                ranges[rel.outer] = (0, nparts)
                ranges[rel.inner] = (0, _extent((ext + (nparts - 1)) // nparts))
        elif isinstance(rel, Split):
            _, ext = ranges[rel.parent]
            if rel.factor is not None:
                factor = _const_int(rel.factor, "a split factor", stage)
                ranges[rel.outer] = (0, -(-ext // factor))
                ranges[rel.inner] = (0, min(factor, ext) if ext >= 1 else factor)
                if ext < factor:
                    ranges[rel.inner] = (0, ext)
            else:
                nparts = _const_int(rel.nparts, "a split nparts", stage)
                inner = -(-ext // nparts)
                ranges[rel.outer] = (0, nparts)
                ranges[rel.inner] = (0, inner)
        elif isinstance(rel, Fuse):
            outer, inner = ranges[rel.outer][1], ranges[rel.inner][1]
            product = outer * inner
            ranges[rel.fused] = (0, product if isinstance(product, int) else _extent(product))
    return ranges


def axis_values(stage, ranges: dict, leaf_values: dict) -> tuple[dict, list]:
    """Each original axis variable (spatial and reduce) -> its value in ``leaf_values``, the values of
    the leaf loops, offset by the axis's minimum; and the split guards, ``(axis, condition)`` pairs."""
    values, guards = root_values(stage, ranges, leaf_values)
    vmap = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        mn = ranges[iv][0]
        vmap[iv.var] = values[iv] if isinstance(mn, int) and mn == 0 else values[iv] + mn
    return vmap, guards


def root_values(stage, ranges: dict, leaf_values: dict) -> tuple[dict, list]:
    """Values of all iter vars from the leaf loop variables; returns (values, guard conditions)."""
    values = dict(leaf_values)
    guards: list = []
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            inner_ext = ranges[rel.inner][1]
            values[rel.parent] = values[rel.outer] * inner_ext + values[rel.inner]
            p_min, p_ext = ranges[rel.parent]
            covered = ranges[rel.outer][1] * inner_ext
            symbolic = isinstance(covered, E.Expr) or isinstance(p_ext, E.Expr)
            if symbolic or covered != p_ext:  # a symbolic extent: the tail is guarded
                guards.append((rel.parent, values[rel.parent] < p_ext))
        elif isinstance(rel, Fuse) and isinstance(ranges[rel.outer][1], int) and ranges[rel.outer][1] == 1:
            # an outer axis of one iteration (a batch of 1 beside symbolic rows): the fused loop is the
            # inner one, where ``f % P`` over a symbolic ``P`` would hide that from the simplifier and keep
            # a row guard in a packed dense's reduction ([1, seq] rows 4.8x slower than [batch, seq])
            values[rel.outer] = E.convert(0)
            values[rel.inner] = values[rel.fused]
        elif isinstance(rel, Fuse):
            inner_ext = ranges[rel.inner][1]
            values[rel.outer] = values[rel.fused] // inner_ext
            values[rel.inner] = values[rel.fused] % inner_ext
    return values, guards
