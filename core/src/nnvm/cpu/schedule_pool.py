"""CPU schedule for NCHW average pooling: the window sums of one output row, not of the whole tensor.

An average pool is two stages, the window sum (a reduction) and the division. The generic schedule
gives the sum a buffer of the whole output at root and walks the tensor twice; at batch 8 that buffer
(ShuffleNet's 8 x 24 x 28 x 28 floats: 600 KB) leaves L2 between the two passes and the pool runs 23
times slower than at batch 1. Here the sum is computed at each output row, into one row of floats::

    parallel for n.c.y:   for ry, rx:  vectorized for x: sum[x] += in[..]     vectorized for x: out = sum / k

Offered through ``nnvm_schedule_group``; a group with a padded copy of its input (read by the
reduction), another reduction, or a rank other than 4 keeps the generic schedule.
"""

from __future__ import annotations

import math

from nnvm import te
from nnvm.cpu.schedule_helpers import extent
from nnvm.cpu.switches import enabled
from nnvm.generic_schedule import PARALLEL_MIN_WORK, guarded_inputs_of_reductions
from nnvm.te.tensor import ComputeOp

POOLS = ("avg_pool2d",)


def schedule_pool_rows(target, group):
    """The row-at-a-time schedule for an NCHW average pool group (with elementwise followers), else None."""
    if not enabled("templates"):
        return None
    if len(group.outputs) != 1 or group.anchor_op not in POOLS or len(group.outputs[0].shape) != 4:
        return None
    out = group.outputs[0]
    sch = te.create_schedule([out.op])
    if guarded_inputs_of_reductions(sch):
        return None
    stage = sch[out.op]
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    sums = [st for st in computes if st.op.reduce_axis]
    if len(sums) != 1 or sums[0] is stage or len(sums[0].op.axis) != 4:
        return None
    (total,) = sums
    axes = list(stage.op.axis)
    extents = [extent(iv) for iv in axes]
    if None in extents or [extent(iv) for iv in total.op.axis] != extents:
        return None
    for st in computes:
        if st is not stage and st is not total:
            st.compute_inline()
    fused = stage.fuse(*axes[:3])
    work = math.prod(extents) * math.prod(extent(r) or 1 for r in total.op.reduce_axis)
    if work >= PARALLEL_MIN_WORK and math.prod(extents[:3]) > 1:
        stage.parallel(fused)
    stage.vectorize(axes[3])
    total.compute_at(stage, fused)
    total.reorder(*total.op.axis[:3], *total.op.reduce_axis, total.op.axis[3])
    total.vectorize(total.op.axis[3])
    return sch
