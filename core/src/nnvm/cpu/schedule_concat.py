"""CPU schedule for channel concatenations (DenseNet, GoogLeNet): the source input known per loop.

``concatenate`` picks each element's source by comparing its channel with the inputs' offsets: a chain
of ``if_then_else`` as long as the list of inputs (33 in DenseNet-121's largest). The generic schedule
fuses every axis but the innermost, so the chain (and the divisions that recover the channel from the
fused index) is evaluated for every vector of every pixel: DenseNet-121's concatenations with their
batch norm and ReLU took 6.6 ms at batch 1, a fifth of the model. In ``NCHW{b}c`` the channel blocks
are unrolled inside the pixels of each parallel row, so every block's chain folds to its one input at
compile time and each inner step is a plain vector load, the fused epilogue and a store (1.0 ms)::

    parallel for n.h in N * H:   for w in W (kept rolled):   unrolled for co in C/b/step:
        for ci in step:   vectorized for cv in b:   out[n, co*step + ci, h, w, cv] = f(in_k[...])

``step`` is the inputs' common block count. The ``w`` loop carries ``pragma("unroll", False)``: LLVM
would otherwise unroll it and re-vectorize the lot (seconds of compile time per kernel); with the
blocks inside one loop rather than one short loop per block, DenseNet-121 also compiles ~5 s faster.
Each block's short ``ci`` loop is unrolled here, not left to LLVM: LLVM unrolling DenseNet's 32
two-step copies doubled the kernel's O3 and code generation (96 -> 59 ms), and 32 loops kept rolled still
cost their loop passes (IndVarSimplify alone a sixth of O3) and their lowering (the loop program of
DenseNet-121's 57 concatenations lowers in 0.7 CPU s unrolled, 1.4 s with the loops).
Plain NCHW outputs, and concatenations of more blocks x inputs than ``UNROLL_BUDGET``, run
``parallel for n.c: for h: for w`` (the chain per vector, but no divisions). Offered through
``nnvm_schedule_group`` for reduction-free groups holding one ``concatenate`` along axis 1 with an
output of rank 4 or 5.
"""

from __future__ import annotations

import math

from nnvm.cpu.schedule_injective import inlined_output_stage
from nnvm.cpu.switches import enabled
from nnvm.generic_schedule import PARALLEL_MIN_WORK
from nnvm.ops.common import shape_of

UNROLL_BUDGET = 4096  # channel blocks x inputs of a concatenation unrolled over its blocks, at most


def schedule_channel_concat(target, group):
    """The schedule above for a group that concatenates along channels (then elementwise ops), or None."""
    if not enabled("templates"):
        return None
    concats = [n for n in group.nodes if n.op == "concatenate"]
    if len(group.outputs) != 1 or len(concats) != 1 or concats[0].attrs.get("axis") != 1:
        return None
    out = group.outputs[0]
    if len(out.shape) not in (4, 5):
        return None
    found = inlined_output_stage(out)
    if found is None:
        return None
    sch, stage, axes, extents, computes = found
    n, c, h = axes[:3]
    sources = next(st for st in computes if st.op.tag == "concatenate").op.input_tensors
    inputs = len(sources)
    if len(axes) == 4 or extents[1] * inputs > UNROLL_BUDGET:
        fused = stage.fuse(n, c)
        if math.prod(extents) >= PARALLEL_MIN_WORK and extents[0] * extents[1] > 1:
            stage.parallel(fused)
    else:
        # Blocks in steps of the inputs' common block count (DenseNet's 32-channel inputs: 2): the
        # chain folds all the same (each step lies in one input) with half the code to compile.
        step = math.gcd(*(shape_of(t)[1] for t in sources))
        co, ci = stage.split(c, factor=step)
        stage.reorder(n, h, axes[3], co, ci, axes[4])
        fused = stage.fuse(n, h)
        if math.prod(extents) >= PARALLEL_MIN_WORK and extents[0] * extents[2] > 1:
            stage.parallel(fused)
        stage.unroll(co)
        stage.pragma(axes[3], "unroll", False)
        if step <= 4:
            stage.unroll(ci)
        else:  # a long step (inputs of many blocks each) stays one loop a block
            stage.pragma(ci, "unroll", False)
    if extents[-1] > 1:
        stage.vectorize(axes[-1])
    return sch
