"""CPU schedule for a reduction of a whole tensor to one number (``min``, ``max`` or ``sum`` over all axes).

DynamicQuantizeLinear takes the range of every activation it quantizes (a dynamically quantized BERT:
48 of them a run, up to [128, 3072]). The generic schedule has no spatial axis to vectorize there: one
scalar chain over the tensor (0.48 ms for [1, 128, 3072], load 5). Here the last, contiguous axis gives
vector partial results, several vectors wide so that the chains are independent, halved in vector
steps at the end (``schedule_softmax.vector_reduction``)::

    partial[kb] = init; for r0, r1, k.outer: partial = min(partial, x[r0, r1, k.outer*kb + :])
    m = min(halved(partial)); epilogue(m)          # an elementwise tail (``minimum(m, 0)``) inlined
"""

from __future__ import annotations

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import extent, inline_epilogue, sole_anchor, vector_lanes
from nnvm.cpu.schedule_softmax import vector_reduction
from nnvm.te.tensor import ComputeOp

WHOLE_OPS = ("min", "max", "sum")
CHAINS = 4  # independent vector partial results: a min has a latency of several cycles, a load one


def _whole_stages(group):
    """(schedule, the reduction's stage) of a one-output group whose reduction reads a float32 input as
    it is over all its axes into a scalar (with an elementwise tail), else None."""
    if group.anchor_op not in WHOLE_OPS or len(group.outputs) != 1 or group.outputs[0].shape != ():
        return None
    out = group.outputs[0]
    if out.dtype != "float32":
        return None
    sch = te.create_schedule([out.op])
    stat = sole_anchor(sch, group.anchor_op)
    if stat is None or stat.op.axis or any(extent(iv) is None for iv in stat.op.reduce_axis):
        return None
    if any(isinstance(t.op, ComputeOp) for t in stat.op.input_tensors):
        return None  # an injective producer fused in: its loads need not be contiguous
    return sch, stat


def whole_reduction_template(target, group) -> ScheduleTemplate | None:
    """``cpu.reduce.whole``: knob ``kb``, the partial results along the last axis; None to decline (a
    last axis shorter than 4 floats, or one no useful vector divides)."""
    found = _whole_stages(group)
    if found is None:
        return None
    n = extent(found[1].op.reduce_axis[-1])
    lanes = vector_lanes(target)
    space = [b for b in (CHAINS * lanes, 2 * lanes, lanes, lanes // 2, lanes // 4) if b >= 4 and n % b == 0]
    if not space:
        return None
    return ScheduleTemplate("cpu.reduce.whole", {"kb": sorted(space)}, {"kb": space[0]},
                            lambda config: build_whole_reduction(group, config))


def build_whole_reduction(group, config: dict):
    sch, stat = _whole_stages(group)
    inline_epilogue(sch, {stat.op})
    vector_reduction(sch, stat, config["kb"], None)
    return sch
