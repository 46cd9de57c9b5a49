"""x86 schedule for dense (``y[i, j] = sum_k x[i, k] * w[j, k]``, weight ``[out, in]``) and its epilogue.

The generic schedule vectorizes the output axis ``j``, which walks the weight across rows: every
vector lane is a load from another row (a gather), so it runs near scalar speed. Here the reduction
runs along ``k``, the contiguous axis of both operands: ``rfactor`` splits it into ``kb`` vector
lanes of partial sums (``kb`` a multiple of the vector width, so several independent accumulator
registers hide the FMA latency; when none divides ``k``, another divisor, so no lane ever reads past
a row; scalar sums for a prime ``k``), and the lanes are added up once per output::

    parallel for j.outer in N / jb:
      for i in M:
        for j.inner in jb:
          partial[kb] = 0                                 # vector registers
          for k.outer in K / kb:
            vectorized for k.inner in kb:
              partial[k.inner] += x[i, k.outer*kb + k.inner] * w[j, k.outer*kb + k.inner]
          y[i, j] = epilogue(sum(partial))

At batch 1 dense is a matrix-vector product bound by reading the weight once, which this does at
memory speed; ``jb`` (outputs per parallel chunk, so a chunk of weight rows stays in cache across the
batch rows ``i``) and ``kb`` are the knobs.
"""

from __future__ import annotations

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm_backend_llvm_x86.schedules import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    sole_anchor,
    vector_lanes,
)

MAX_KB_VECTORS = 4  # vector registers of partial sums per output: enough to cover the FMA latency


def _dense_stages(group):
    """(schedule, dense stage) for a float32 dense group with one output and one reduction, else None."""
    if group.anchor_op != "dense" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 2:
        return None
    sch = te.create_schedule([out.op])
    dense = sole_anchor(sch, "dense")
    if dense is None or any(extent(iv) is None for iv in (*dense.op.axis, *dense.op.reduce_axis)):
        return None
    return sch, dense


def dense_template(target, group) -> ScheduleTemplate | None:
    """``x86.dense.rfactor``: dense with vector partial sums along the contiguous ``k`` (scalar sums when
    no vector divides ``k``); None to decline (no dense, other dtypes, symbolic shapes)."""
    found = _dense_stages(group)
    if found is None:
        return None
    _, dense = found
    m, n = (extent(iv) for iv in dense.op.axis)
    (k,) = (extent(iv) for iv in dense.op.reduce_axis)
    lanes = vector_lanes(target)
    kb_space = [lanes * v for v in range(1, MAX_KB_VECTORS + 1) if k % (lanes * v) == 0]
    if not kb_space:  # no multiple of the vector width divides k: any width that does (a partial
        # vector still sums several lanes at once), else scalar sums along the contiguous k
        kb_space = divisors(k, MAX_KB_VECTORS * lanes, 2)[-4:] or [1]
    jb_space = divisors(n, 16)
    # one vector of partial sums and 2 outputs per chunk: 2.7x faster than (2 vectors, 8 outputs) on
    # ResNet-18's classifier on the Cascade Lake host (the tuner's best); the tuner may find better
    kb = lanes if lanes in kb_space else max(kb_space)
    fallback = {"kb": kb, "jb": largest_divisor(n, 2)}
    return ScheduleTemplate("x86.dense.rfactor", {"kb": kb_space, "jb": jb_space}, fallback,
                            lambda config: build_dense(group, config), flops=2.0 * m * n * k)


def build_dense(group, config: dict):
    """The schedule of ``x86.dense.rfactor`` for one config (see the module docstring)."""
    sch, dense = _dense_stages(group)
    inline_epilogue(sch, {dense.op})
    out_stage = sch[group.outputs[0].op]
    (k,) = dense.op.reduce_axis
    i, j = out_stage.op.axis
    jo, ji = out_stage.split(j, factor=config["jb"])
    out_stage.reorder(jo, i, ji)
    out_stage.parallel(jo)
    if config["kb"] == 1:  # no vector partial sums: one scalar reduction along k per output
        if out_stage is not dense:
            dense.compute_at(out_stage, ji)
        return sch
    _, k_inner = dense.split(k, factor=config["kb"])
    partial = sch.rfactor(dense.op.outputs[0], k_inner)
    if out_stage is not dense:
        dense.compute_at(out_stage, ji)
        sch[partial].compute_at(dense, dense.op.axis[1])
    else:
        sch[partial].compute_at(dense, ji)
    rf = sch[partial]
    lane_axis, *spatial = rf.op.axis
    rf.reorder(*spatial, *rf.op.reduce_axis, lane_axis)
    rf.vectorize(lane_axis)
    return sch
