"""CPU schedule for softmax (log_softmax, layer_norm, RMSNorm's row mean) along the last, contiguous axis.

The core computes softmax in three stages: the row maximum, the sum of ``exp(x - max)``, and the
output ``exp(x - max) / sum``. The generic schedule runs each at root with the innermost spatial axis
vectorized: for the two reductions that axis is the *rows*, so every lane reads another row (a gather
with the row stride) and the statistics of all rows are written out and read back. Here each
statistic is a reduction in vector partial results along the contiguous axis (``rfactor``, one vector
of lanes, added up once per row): the maximum in a pass of its own over the rows (the sum and the
output both read it, and a ``compute_at`` stage may have one reader), the sum where the row's output
is computed, and the output row is vectorized along the same axis (12x128x128: 0.34 -> 0.13 ms)::

    parallel for rows (the outer axis with the most iterations; the ones before it are loops around):
      partial[lanes] = -inf; for k.outer: partial = max(partial, x[row, k.outer*lanes + :])
      m[row] = max(partial)
    parallel for rows:
      partial[lanes] = 0; for k.outer: partial += exp(x[row, ...] - m[row])
      s = sum(partial)
      for j.outer: vectorized for j.inner: y[row, j] = exp(x[row, j] - m) / s

LayerNorm has the same shape of program (the row's sum, then the sum of squared deviations from its
mean, then the output), and runs the same way.

When no vector divides the row (ViT's 197 tokens), the widest of lanes/2, lanes/4 that does serves,
else whole vectors with the last one guarded (``reduce_block``).
"""

from __future__ import annotations

import math

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import extent, inline_epilogue, vector_lanes
from nnvm.te.tensor import ComputeOp

SCALAR_LANES = 4  # partial results a row's statistic adds up one by one, after halving them in vector steps
STATISTIC_STEP_FLOATS = 16  # floats a dependent step of a row kernel's statistic covers (row_kernel_template)
PARALLEL_MIN_WORK = 1 << 14  # elements below which a parallel region costs more than it saves


ROW_OPS = {"softmax": ("max", "sum"), "log_softmax": ("max", "sum"), "layer_norm": ("sum", "sum")}


def _softmax_stages(group):
    """(schedule, output stage, [first statistic, second statistic]) for a float32 softmax,
    log_softmax or layer_norm along the last axis alone, else None."""
    tags = ROW_OPS.get(group.anchor_op)
    if tags is None or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or not out.shape or (group.anchor_attrs.get("axis", -1) % len(out.shape)
                                                   != len(out.shape) - 1):
        return None
    sch = te.create_schedule([out.op])
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    stats = [st for st in computes if st.op.reduce_axis]
    out_stage = sch[out.op]
    if len(computes) != 3 or tuple(st.op.tag for st in stats) != tags or out_stage.op.reduce_axis or any(
            len(st.op.reduce_axis) != 1 for st in stats):
        return None
    if extent(out_stage.op.axis[-1]) is None or any(extent(iv) is None for st in stats
                                                    for iv in st.op.reduce_axis):
        return None  # a symbolic count of rows (a sequence) is served; a symbolic row length is not yet
    return sch, out_stage, stats


def reduce_block(n: int, lanes: int) -> int:
    """The vector of partial results a row's reduction keeps: the widest of lanes, lanes/2, lanes/4
    dividing ``n``, else a whole vector with the row's last partial vector guarded (the lowering peels
    that iteration off: ViT's 197 tokens are 12 vectors and a guarded one, 2.3x faster than the
    generic schedule; scalar sums were 3x slower than it), scalar for rows shorter than 4."""
    divides = next((b for b in (lanes, lanes // 2, lanes // 4) if b >= 4 and n % b == 0), None)
    return divides or (lanes if n >= lanes else 1)


def softmax_template(target, group) -> ScheduleTemplate | None:
    """``cpu.softmax.rows`` (``cpu.layer_norm.rows``): statistics computed per row in vector partial
    results; None to decline."""
    found = _softmax_stages(group)
    if found is None:
        return None
    name = "cpu.layer_norm.rows" if group.anchor_op == "layer_norm" else "cpu.softmax.rows"
    return row_template(target, name, found[1], lambda config: build_softmax(group, config))


def row_template(target, name: str, out_stage, build, chains: int = 1) -> ScheduleTemplate:
    """A template over rows of ``out_stage``'s last axis: knob ``kb`` the partial-result vector of the
    row's statistic (fallback ``reduce_block``, or ``chains`` whole vectors where the row has that many),
    ``vb`` the output's vector (the target's lanes)."""
    n = extent(out_stage.op.axis[-1])
    lanes = vector_lanes(target)
    if n is None:  # a symbolic row length: whole vectors, the row's last partial one peeled off
        kb = chains * lanes
        space = sorted({kb, lanes})
        return ScheduleTemplate(name, {"kb": space, "vb": [lanes]}, {"kb": kb, "vb": lanes}, build,
                                revision=2)
    kb = reduce_block(n, lanes)
    if kb == lanes and n >= chains * lanes:
        kb = chains * lanes
    space = sorted({kb, 1, *(b for b in (lanes // 4, lanes // 2, lanes) if 4 <= b <= n)})
    # revision 2: the partial results halved in vector steps (``vector_reduction``)
    return ScheduleTemplate(name, {"kb": space, "vb": [lanes]}, {"kb": kb, "vb": lanes}, build, revision=2)


def _parallel_rows(stage, axes, row_length: int):
    """The outer axes fused into one loop over the rows, parallel when there is enough work; the fused
    axis (None when there are no outer axes). Parallel over one of several axes left the others as
    serial loops around a parallel region: 24 regions a softmax for attention's [1, 12, 128, 128]."""
    if not axes:
        return None
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    extents = [extent(iv) for iv in axes]
    rows = None if None in extents else math.prod(extents)  # None: symbolic, parallel (one fork a run)
    if rows is None or row_length is None or rows > 1 and rows * row_length >= PARALLEL_MIN_WORK:
        stage.parallel(fused)
    return fused


def vector_reduction(sch, stat, kb: int, row) -> None:
    """``stat``'s reduction along the row (its last reduce axis) in ``kb`` partial results, vectorized,
    then halved in vector steps down to ``SCALAR_LANES`` and those added up once a row (``row``: the
    stat's loop over the rows, None when it has none)."""
    if kb == 1:
        return
    *_, k = stat.op.reduce_axis
    _, k_inner = stat.split(k, factor=kb)
    partial = sch.rfactor(stat.op.outputs[0], k_inner)
    rf = sch[partial]
    if row is not None:
        rf.compute_at(stat, row)
    lane_axis, *spatial = rf.op.axis
    rf.reorder(*spatial, *rf.op.reduce_axis, lane_axis)
    rf.vectorize(lane_axis)
    width, prev = kb, rf
    while width > SCALAR_LANES:
        # the lanes halved in a vector step each (a tree) down to SCALAR_LANES: added up one by one, the
        # 16 lanes of a row's maximum were a chain of 16 dependent steps (softmax_exp of [8, 12, 128,
        # 128]: 0.86 -> 0.73 ms, [8, 3, 197, 197]: 0.51 -> 0.45 ms, one thread; halving down to 2 lanes
        # was level with 4, to 8 lanes 0.80 / 0.48 ms)
        (lanes,) = stat.op.reduce_axis
        _, half = stat.split(lanes, factor=width // 2)
        folded = sch[sch.rfactor(stat.op.outputs[0], half)]
        lane_axis, *spatial = folded.op.axis
        if row is not None:
            folded.compute_at(stat, row)
            prev.compute_at(folded, spatial[-1])
        folded.reorder(*spatial, *folded.op.reduce_axis, lane_axis)
        folded.vectorize(lane_axis)
        width, prev = width // 2, folded


def build_softmax(group, config: dict):
    """The schedule of ``cpu.softmax.rows`` for one config (see the module docstring). The first
    statistic (softmax's maximum, LayerNorm's sum) is read by both the second and the output, so it
    runs at root (one float a row; a compute_at stage may have one reader) in a pass of its own over
    the rows; the second is computed in the output's row."""
    sch, out_stage, (first, second) = _softmax_stages(group)
    *outer, j = out_stage.op.axis
    n = extent(j)
    _, ji = out_stage.split(j, factor=config["vb"])
    out_stage.vectorize(ji)
    row = _parallel_rows(out_stage, outer, n)
    first_row = _parallel_rows(first, list(first.op.axis), n)
    second_row = None
    if row is not None:
        second.compute_at(out_stage, row)
        second_row = second.op.axis[-1]
    vector_reduction(sch, first, config["kb"], first_row)
    vector_reduction(sch, second, config["kb"], second_row)
    return sch


# -- softmax as two row kernels (``softmax_rows.py``) ---------------------------------------------------

ROW_KERNELS = {"softmax_exp": "max", "softmax_normalize": "sum"}


def _row_kernel_stages(group):
    """(schedule, output stage, statistic stage) for ``softmax_exp`` or ``softmax_normalize``, else None."""
    tag = ROW_KERNELS.get(group.anchor_op)
    if tag is None or len(group.outputs) != 1 or group.outputs[0].dtype != "float32":
        return None
    sch = te.create_schedule([group.outputs[0].op])
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    out_stage = sch[group.outputs[0].op]
    stats = [st for st in computes if st.op.reduce_axis]
    if len(computes) != 2 or len(stats) != 1 or stats[0].op.tag != tag or out_stage.op.reduce_axis:
        return None
    # symbolic rows and row lengths (attention's [batch, heads, seq, seq]) are served: the row's vector
    # steps are a constant split of it, whose tail lowering peels off (``tir.lower.partition_loops``)
    return sch, out_stage, stats[0]


def row_kernel_template(target, group) -> ScheduleTemplate | None:
    """``cpu.softmax.exp_rows`` / ``cpu.softmax.normalize_rows``: one loop over the rows, each row's
    statistic in vector partial results and its output vectorized along the row; None to decline.

    The statistic's partial results span ``STATISTIC_STEP_FLOATS`` floats whatever the vector width: a
    row's statistic is one chain of dependent vector steps (vmaxps, vaddps), bound by their latency, not
    by the pipes, once softmax_exp's exp was short, so its time is the row's floats over the floats one
    step covers. Two vectors of 8 (AVX2) against one, one thread: 3x197x197 exp 0.0525 -> 0.0497 ms,
    normalize 0.0204 -> 0.0170; 12x128x128 0.081 -> 0.075, 0.0265 -> 0.0233. AVX-512's one vector of
    16 covers as much (as before; not measured with two). SSE's four vectors of 4 against one (ViT-B/16,
    ``-mcpu=x86-64``, 12 kernels each): exp 1.84 -> 1.73 ms, normalize 0.49 -> 0.27. NEON would take
    four too, but Arm makes no row kernels (they come from the layout pass, off there)."""
    found = _row_kernel_stages(group)
    if found is None:
        return None
    name = "cpu.softmax.exp_rows" if group.anchor_op == "softmax_exp" else "cpu.softmax.normalize_rows"
    chains = max(1, STATISTIC_STEP_FLOATS // vector_lanes(target))
    return row_template(target, name, found[1], lambda config: build_row_kernel(group, config), chains)


def build_row_kernel(group, config: dict):
    """The schedule of a row kernel: the rows fused into one parallel loop, the statistic computed in
    each row (its only reader is the row's output), the output vectorized along the row."""
    sch, out_stage, stat = _row_kernel_stages(group)
    return _rows_with_statistic(sch, out_stage, stat, config)


def _rows_with_statistic(sch, out_stage, stat, config: dict):
    """The row kernels' shared nest: the output vectorized along the row, the rows parallel, the
    statistic computed in each row and reduced in vector chains (``kb``)."""
    *outer, j = out_stage.op.axis
    n = extent(j)
    _, ji = out_stage.split(j, factor=config["vb"])
    out_stage.vectorize(ji)
    row = _parallel_rows(out_stage, outer, n)
    stat_row = None
    if row is not None:
        stat.compute_at(out_stage, row)
        stat_row = stat.op.axis[-1]
    vector_reduction(sch, stat, config["kb"], stat_row)
    return sch


# -- a row's sum or mean and the elementwise output that reads it (RMSNorm) ------------------------------

ROW_STATISTIC_OPS = ("sum", "mean")


def _row_statistic_stages(group):
    """(schedule, output stage, statistic stage) for a one-output float32 group anchored by a sum or mean
    over the last axis alone whose output has the input's shape (T5's and Llama's RMSNorm:
    ``x * (1 / sqrt(mean(x * x) + eps)) * w``), else None."""
    if group.anchor_op not in ROW_STATISTIC_OPS or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    rank = len(out.shape)
    axis = group.anchor_attrs.get("axis")
    if out.dtype != "float32" or rank < 2 or axis is None or tuple(a % rank for a in axis) != (rank - 1,):
        return None
    sch = te.create_schedule([out.op])
    out_stage = sch[out.op]
    stats = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.reduce_axis]
    if len(stats) != 1 or len(stats[0].op.reduce_axis) != 1 or out_stage.op.reduce_axis:
        return None
    (k,) = stats[0].op.reduce_axis
    n = extent(out_stage.op.axis[-1])
    if n is None or extent(k) != n or len(stats[0].op.axis) not in (rank - 1, rank):
        return None  # the output is not a row of the statistic's input (a symbolic row length: not yet)
    return sch, out_stage, stats[0]


def row_statistic_template(target, group) -> ScheduleTemplate | None:
    """``cpu.rows.statistic``: a row's sum (mean) in vector partial results, computed in the row whose
    output reads it, the output vectorized along the row (``build_row_kernel``'s loop program); None to
    decline. The generic schedule vectorized the statistic across rows (a gather with the row stride)
    and ran it in a pass of its own: T5-small's RMSNorm at [1, 512, 512] took ~0.25 ms."""
    found = _row_statistic_stages(group)
    if found is None:
        return None
    chains = max(1, STATISTIC_STEP_FLOATS // vector_lanes(target))
    return row_template(target, "cpu.rows.statistic", found[1],
                        lambda config: build_row_statistic(group, config), chains)


def build_row_statistic(group, config: dict):
    """The schedule of ``cpu.rows.statistic`` for one config: the injective stages inlined (the square
    into the sum, the mean's division and the rest into the output), then ``build_row_kernel``'s."""
    sch, out_stage, stat = _row_statistic_stages(group)
    inline_epilogue(sch, {stat.op})
    return _rows_with_statistic(sch, out_stage, stat, config)
