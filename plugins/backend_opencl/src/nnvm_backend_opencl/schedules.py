"""GPU-style schedules for the ``opencl`` target: blocks of threads, local (shared) memory, barriers.

- ``conv2d`` (plain and grouped) and ``dense``: each block computes an output tile, each
  thread a few outputs accumulated in private (``local``) memory; the reduction runs in chunks, and
  for every chunk the block's threads cooperatively copy the input and weight tiles it needs into
  ``__local`` memory (barriers before and after), so each global value is read once per block.
- Large reductions over few outputs (softmax's sums, global pooling, mean): ``rfactor`` across the
  threads of a block, partial results in ``__local`` memory, combined by one thread.
- Depthwise conv2d: a row of outputs per thread in private memory, no local memory.
- Everything else (elementwise chains, pooling windows, transforms): all output axes fused, split
  over blocks and threads, with the innermost four elements as one ``float4`` where they are
  contiguous.

A schedule that does not fit a group's shapes raises ``ScheduleError`` while being built; the group
then gets the generic GPU schedule, which fits every group.
"""

from __future__ import annotations

import math

from nnvm import te
from nnvm.errors import ScheduleError
from nnvm.te.tensor import ComputeOp
from nnvm.tir.expr import Const
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import tensors_read

THREADS = 64  # threads per block of the generic schedule
VECTOR = 4  # float4
RFACTOR_MIN = 128  # reductions at least this long (over few outputs) are split across threads


def _ext(iv) -> int:
    e = simplify(iv.dom.extent)
    if not isinstance(e, Const):
        raise ScheduleError(f"axis {iv.var.name} needs a constant extent")
    return int(e.value)


def _shape(t) -> tuple:
    return tuple(int(simplify(d).value) for d in t.shape)


def schedule_group(target, group):
    """The schedule of one fused group; never None (the generic GPU schedule fits every group)."""
    anchor = group.anchor_op
    if len(group.outputs) == 1:
        try:
            if anchor == "conv2d":
                return schedule_conv2d(group.outputs[0])
            if anchor == "dense":
                return schedule_dense(group.outputs[0])
        except ScheduleError:
            pass
    return schedule_generic(group.outputs)


# ---------------------------------------------------------------------------------------------------
# the generic schedule


def schedule_generic(outputs):
    """Inline injective stages; every other stage: rfactor across threads (long reductions over few
    outputs) or fused output axes over blocks x threads, innermost float4 where it divides."""
    sch = te.create_schedule([t.op for t in outputs])
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
            stage.compute_inline()
    for stage in list(sch.stages):
        if isinstance(stage.op, ComputeOp) and stage.attach_type == "root" and ".rf" not in stage.name:
            if not _rfactor_reduction(sch, stage):
                bind_flat(stage)
    return sch


def bind_flat(stage, threads: int = THREADS) -> None:
    """All spatial axes fused, split into blockIdx.x x threadIdx.x (x float4 when it divides)."""
    op = stage.op
    if not op.axis:
        return
    total = math.prod(_ext(iv) for iv in op.axis)
    if total == 0:
        return  # an empty tensor: the kernel's loops run zero times
    fused = stage.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
    vec = None
    if not op.reduce_axis and total % VECTOR == 0 and _ext(op.axis[-1]) % VECTOR == 0 and total >= VECTOR * 8:
        fused, vec = stage.split(fused, factor=VECTOR)
        total //= VECTOR
    if op.reduce_axis:
        stage.reorder(fused, *op.reduce_axis)
    bx, tx = stage.split(fused, factor=min(threads, total))
    stage.bind(bx, "blockIdx.x")
    stage.bind(tx, "threadIdx.x")
    if vec is not None:
        stage.vectorize(vec)


def _rfactor_reduction(sch, stage) -> bool:
    """Split a long reduction over few outputs across the threads of one block per output."""
    op = stage.op
    if len(op.reduce_axis) == 0 or len(op.body) != 1:
        return False
    red_total = math.prod(_ext(iv) for iv in op.reduce_axis)
    outputs = math.prod(_ext(iv) for iv in op.axis) if op.axis else 1
    if red_total < RFACTOR_MIN or outputs > 4096:
        return False
    k = stage.fuse(*op.reduce_axis) if len(op.reduce_axis) > 1 else op.reduce_axis[0]
    _, ki = stage.split(k, factor=THREADS)
    rf = sch.rfactor(op.outputs[0], ki)
    rf_stage = sch[rf]
    if op.axis:
        fused = stage.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
        stage.bind(fused, "blockIdx.x")
        rf_stage.compute_at(stage, fused)
    else:
        rf_stage.compute_root()
    rf_stage.set_scope("shared" if op.axis else "global")
    rf_stage.bind(rf_stage.op.axis[0], "threadIdx.x")
    return True


# ---------------------------------------------------------------------------------------------------
# tiled reductions with local memory


def _cooperative(stage, threads: list) -> None:
    """The copy stage's axes fused and spread over the block's threads (``threads``: (tag, extent),
    outermost first) so consecutive threads copy consecutive elements."""
    fused = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    rest = fused
    for tag, ext in reversed(threads):
        if ext > 1:
            rest, inner = stage.split(rest, factor=ext)
            stage.bind(inner, tag)


def _accumulator(sch, anchor_stage, out):
    """(stage computing the reduction in local memory, output stage): the anchor's local cache when
    the anchor is the output, else the anchor itself moved to local memory."""
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
            stage.compute_inline()
    if anchor_stage.is_output:
        local = sch.cache_write(anchor_stage.op.outputs[0], "local")
        return sch[local], anchor_stage
    others = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.attach_type == "root"
              and st is not anchor_stage and not st.is_output]
    if others:
        raise ScheduleError("the group has more than one reduction")
    anchor_stage.set_scope("local")
    return anchor_stage, sch[out]


def _divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` not above ``cap``: tiles that divide need no guards."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def schedule_conv2d(out):
    """NCHW conv2d (+ fused elementwise): a block computes (4 x OI channels) x TY rows x TX columns,
    thread (z, y, x) OI channels of one pixel; input and weight tiles per chunk of 8 input channels
    go through local memory."""
    sch = te.create_schedule([out.op])
    conv = next((st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag == "conv2d"), None)
    if conv is None or len(conv.op.axis) != 4 or _shape(out) != _shape(conv.op.outputs[0]):
        raise ScheduleError("no NCHW conv2d stage of the output's shape")
    if conv.op.attrs.get("depthwise"):
        return _schedule_depthwise(sch, conv, out)
    data_t, weight_t = tensors_read(conv.op.body[0])[:2]
    _, o_total, oh, ow = (_ext(iv) for iv in conv.op.axis)
    rc_ext = _ext(conv.op.reduce_axis[0])
    local, stage = _accumulator(sch, conv, out)
    tx = _divisor_at_most(ow, 8)
    ty = _divisor_at_most(oh, 8)
    tz = _divisor_at_most(o_total, 4 if tx * ty <= 32 else 2)
    oi = 4 if o_total % (4 * tz) == 0 and o_total >= 16 * tz else 1
    n, o, y, x = stage.op.axis
    oo, orest = stage.split(o, factor=tz * oi)
    oz, oin = stage.split(orest, factor=oi)
    yo, yi = stage.split(y, factor=ty)
    xo, xi = stage.split(x, factor=tx)
    stage.reorder(n, oo, yo, xo, oz, yi, xi, oin)
    bz = stage.fuse(n, oo)
    for iv, tag in ((bz, "blockIdx.z"), (yo, "blockIdx.y"), (xo, "blockIdx.x"), (oz, "threadIdx.z"),
                    (yi, "threadIdx.y"), (xi, "threadIdx.x")):
        stage.bind(iv, tag)
    local.compute_at(stage, xi)
    rc, ry, rx = local.op.reduce_axis
    rco, rci = local.split(rc, factor=min(8, rc_ext))
    local.reorder(rco, rci, ry, rx, *local.op.axis)
    threads = [("threadIdx.z", tz), ("threadIdx.y", ty), ("threadIdx.x", tx)]
    for t in (data_t, weight_t):
        shared = sch.cache_read(t, "shared", [local])
        sch[shared].compute_at(local, rco)
        _cooperative(sch[shared], threads)
    return sch


def _schedule_depthwise(sch, conv, out):
    """Depthwise conv2d: one input channel per output channel leaves little for a block to share, so no
    local memory (and no barriers); each thread accumulates a row of up to four outputs in private
    memory, reusing each weight across them, and threads of a block take consecutive rows."""
    ow = _ext(conv.op.axis[3])
    local, stage = _accumulator(sch, conv, out)
    n, c, y, x = stage.op.axis
    xo, xi = stage.split(x, factor=_divisor_at_most(ow, 4))
    fused = stage.fuse(n, c, y, xo)
    bo, t = stage.split(fused, factor=THREADS)
    stage.bind(bo, "blockIdx.x")
    stage.bind(t, "threadIdx.x")
    local.compute_at(stage, t)
    local.reorder(*local.op.reduce_axis, *local.op.axis)
    return sch


def schedule_dense(out):
    """dense (+ fused elementwise): a block computes TY rows x TX columns, one output per thread;
    data and weight tiles per chunk of 32 of K go through local memory."""
    sch = te.create_schedule([out.op])
    dense = next((st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag == "dense"), None)
    if dense is None or _shape(out) != _shape(dense.op.outputs[0]):
        raise ScheduleError("no dense stage of the output's shape")
    data_t, weight_t = tensors_read(dense.op.body[0])[:2]
    m, n_out = (_ext(iv) for iv in dense.op.axis)
    k_ext = _ext(dense.op.reduce_axis[0])
    local, stage = _accumulator(sch, dense, out)
    # tiles that divide the output: no thread of a block idles (idle threads are still right, their guards
    # go below the barriers: test_tiles_that_do_not_divide_..., but they waste the block)
    ty = _divisor_at_most(m, 8)
    tx = _divisor_at_most(n_out, THREADS // ty)
    i, j = stage.op.axis
    io, ii = stage.split(i, factor=ty)
    jo, ji = stage.split(j, factor=tx)
    stage.reorder(io, jo, ii, ji)
    for iv, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        stage.bind(iv, tag)
    local.compute_at(stage, ji)
    ko, ki = local.split(local.op.reduce_axis[0], factor=min(32, k_ext))
    local.reorder(ko, ki, *local.op.axis)
    threads = [("threadIdx.y", ty), ("threadIdx.x", tx)]
    for t in (data_t, weight_t):
        shared = sch.cache_read(t, "shared", [local])
        sch[shared].compute_at(local, ko)
        _cooperative(sch[shared], threads)
    return sch

