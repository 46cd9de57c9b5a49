"""The generic schedule: correct for every group on every CPU-like target, and not slow.

Injective stages are inlined into their consumers; every remaining stage gets its outer spatial loops
fused into one parallel loop, its reduce loops next, and its innermost spatial loop last, vectorized,
so the reduction's accumulator runs along a vector of outputs. Backends replace it per operator
through ``nnvm_schedule_group``.
"""

from __future__ import annotations

import math

from nnvm import te
from nnvm.te.tensor import ComputeOp
from nnvm.tir.expr import Call, Const
from nnvm.tir.visit import walk

PARALLEL_MIN_WORK = 1 << 14  # below this many loop iterations a thread pool costs more than it saves


def _extent(iv) -> int:
    ext = iv.dom.extent
    return int(ext.value) if isinstance(ext, Const) else 1 << 30


def generic_schedule(outputs, target=None):
    sch = te.create_schedule([t.op for t in outputs])
    guarded_for_reduction = guarded_inputs_of_reductions(sch)
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
            if op in guarded_for_reduction:
                continue  # padding read by a reduction: materialize it once, keep branches out of the loop
            stage.compute_inline()
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and stage.attach_type == "root":
            schedule_loop_nest(stage)
    return sch


def guarded_inputs_of_reductions(sch) -> set:
    """Stages with a lazy if_then_else (padding) that a reduction reads directly."""
    def guarded(op) -> bool:
        found = []
        for b in op.body:
            walk(b, lambda n: found.append(n) if isinstance(n, Call) and n.name == "if_then_else" else None)
        return bool(found)

    out = set()
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and op.reduce_axis:
            out.update(t.op for t in op.input_tensors if isinstance(t.op, ComputeOp) and guarded(t.op))
    return out


def schedule_loop_nest(stage) -> None:
    """(fused outer spatial, parallel) x reduce loops x (innermost spatial, vectorized)."""
    op = stage.op
    spatial, reduce = list(op.axis), list(op.reduce_axis)
    if not spatial:
        return
    work = math.prod(_extent(iv) for iv in spatial) * max(1, math.prod(_extent(iv) for iv in reduce))
    last = spatial[-1]
    outer = spatial[:-1]
    fused = None
    if len(outer) > 1:
        fused = stage.fuse(*outer)
    elif outer:
        fused = outer[0]
    if reduce:
        order = ([fused] if fused is not None else []) + reduce + [last]
        stage.reorder(*order)
    if fused is not None and work >= PARALLEL_MIN_WORK and _fused_extent(outer) > 1:
        stage.parallel(fused)
    if _extent(last) > 1:
        stage.vectorize(last)


def _fused_extent(ivs) -> int:
    return math.prod(_extent(iv) for iv in ivs)
