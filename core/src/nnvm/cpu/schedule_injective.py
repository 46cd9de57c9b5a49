"""CPU schedule for groups that only move data (reshape, transpose, layout_transform): rows kept apart.

The generic schedule fuses every axis but the innermost into one parallel loop. For an index-remapping
group (ShuffleNet's channel shuffle: blocked -> NCHW -> reshape -> transpose -> reshape) each element's
source index is then divisions of ``fused * W + w``, which the simplifier cannot split back into rows,
so every vector lane divides on its own. Here only the outer axes (batch, channels) are fused and
parallel; the row loop and the vectorized innermost axis stay separate, so the divisions by a row's
size fold away (the shuffle of a 60 x 28 x 28 tensor 2.1x faster, NCHW -> NCHW16c 1.5x)::

    parallel for n.c in N * C:   for h in H:   vectorized for w in W:   out[n, c, h, w] = in[...]

A transform back from ``NCHW{b}c`` to ``NCHW`` walks the ``b`` channels of a block inside the row
loop instead (``for n.c_outer: for h: for c_inner: vectorized for w``), reusing the row it reads.

Offered through ``nnvm_schedule_group`` (no knobs to tune); groups with a reduction, or one output
short of rank 4, keep the generic schedule; symbolic extents take the same nest, the rows' count and
a symbolic innermost axis as loops over dims.
"""

from __future__ import annotations

import math
import re

from nnvm import te
from nnvm.cpu.schedule_helpers import constant, extent
from nnvm.cpu.switches import enabled
from nnvm.generic_schedule import PARALLEL_MIN_WORK
from nnvm.te.tensor import ComputeOp

INDEX_REMAPS = ("reshape", "transpose", "layout_transform")
_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def unblocking_block(group, extents) -> int | None:
    """``b`` when the group is one ``layout_transform`` from ``NCHW{b}c`` back to ``NCHW``, else None. The
    channels need not be whole blocks (136 channels in 9 blocks of 16, cropped): the split of the
    channel axis by ``b`` then guards the last block's lanes, per row, not per element."""
    if len(group.nodes) != 1 or group.nodes[0].op != "layout_transform" or len(extents) != 4:
        return None
    attrs = group.nodes[0].attrs
    found = _BLOCKED.match(str(attrs.get("src_layout", "")))
    if not found or attrs.get("dst_layout") != "NCHW":
        return None
    return int(found.group(1))


def inlined_output_stage(out, symbolic: bool = False):
    """(schedule, output stage, its axes, their constant extents, the compute stages) for a group that
    only moves data: every other compute stage inlined into the output, so its schedule is the output's
    loop nest alone. None when a stage reduces, or an extent is symbolic unless ``symbolic`` (then its
    extent is None). Shared by the data-movement schedules (this one, ``schedule_concat``)."""
    sch = te.create_schedule([out.op])
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    if any(st.op.reduce_axis for st in computes):
        return None
    stage = sch[out.op]
    axes = list(stage.op.axis)
    extents = [extent(iv) for iv in axes]
    if None in extents and not symbolic:
        return None
    for st in computes:
        if st is not stage:
            st.compute_inline()
    return sch, stage, axes, extents, computes


def merged_rows(group, width: int) -> int | None:
    """The row length of an input whose rows the output's innermost axis (``width``) strings together
    (attention's heads merged back, ``[batch, heads, seq, 64]`` read as ``[batch, seq, heads * 64]``), or
    None. Split by it, the innermost axis reads whole rows: over a symbolic ``seq`` the merged index is a
    gather LLVM's loop vectorizer gives up on (it warned "loop not vectorized"), per row a vector load."""
    found = [n for n in (constant(t.shape[-1]) for _, t in group.inputs if len(t.shape) > 1)
             if n is not None and 8 <= n < width and width % n == 0]
    return max(found) if found else None


def schedule_index_remap(target, group):
    """The rows-apart schedule for a reduction-free group that reshapes, transposes or re-lays-out a
    tensor of rank 4 or more, or packs one over symbolic dims (``batched_weight_pack``), else None."""
    if not enabled("templates"):
        return None
    if len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    rank = len(out.shape)
    if rank < 4 and not (rank == 3 and any(extent(iv) is None for iv in out.op.axis)):
        return None
    # a lone pack of attention's V over a symbolic cache (GPT-2's ``present`` value) is an index remap
    # too: generically its loops fused into one, it divided by ``past + seq`` per vector (0.28 ms of
    # a decode step's kernels against 0.03 for Llama's, whose pack takes in a reshape); bound, it keeps
    # the generic schedule it had
    remaps = any(n.op in INDEX_REMAPS for n in group.nodes)
    if not remaps and not any(n.op == "batched_weight_pack" for n in group.nodes):
        return None
    found = inlined_output_stage(out, symbolic=True)
    if found is None:
        return None
    sch, stage, axes, extents, _ = found
    if not remaps and None not in extents:
        return None
    if None in extents:
        # symbolic (attention's heads split from [batch, seq, hidden]): the same nest, parallel over the
        # outer axes whatever their count, the innermost vectorized where it is constant
        outer = axes[:-2] if rank > 3 else axes[:-1]
        fused = stage.fuse(*outer) if len(outer) > 1 else outer[0]
        stage.parallel(fused)
        if extents[-1] is not None and extents[-1] > 1:
            rows = merged_rows(group, extents[-1])
            stage.vectorize(stage.split(axes[-1], factor=rows)[1] if rows else axes[-1])
        return sch
    block = unblocking_block(group, extents)
    if block:
        # NCHW{b}c -> NCHW: the b channels of one block row are written one after the other, so the
        # row of input pixels they share (W x b floats) is read from L1 b times, not from L2 (2.6x).
        n, c, h, w = axes
        co, ci = stage.split(c, factor=block)
        stage.reorder(n, co, h, ci, w)
        fused = stage.fuse(n, co)
        if math.prod(extents) >= PARALLEL_MIN_WORK:
            stage.parallel(fused)
        stage.vectorize(w)
        return sch
    outer = axes[:-2]
    fused = stage.fuse(*outer) if len(outer) > 1 else outer[0]
    if math.prod(extents) >= PARALLEL_MIN_WORK and math.prod(extents[:-2]) > 1:
        stage.parallel(fused)
    if extents[-1] > 1:
        stage.vectorize(axes[-1])
    return sch
