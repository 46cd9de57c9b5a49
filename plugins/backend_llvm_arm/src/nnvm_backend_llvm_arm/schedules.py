"""NEON schedules: the x86 plugin's register-blocked templates, imported, at 128 bits (4 x float32).

The x86 templates size their register tiles with ``vector_lanes(target)``, which asks the target's own
backend to resolve it, so for ``aarch64``/``armv7`` (NEON, no AVX) they come out at 4 lanes:

- conv2d (groups=1, NCHW): a tile of up to 8 output channels x 4 output columns stays in NEON registers
  across the whole reduction (aarch64 has 32 of them, armv7 16); each input vector feeds 8 ``fmla``;
- depthwise conv2d: a row block of output columns per channel, the 3x3 window unrolled;
- dense: vector partial sums along the reduction (``kb`` a multiple of 4), added up once per output.

They are templates (``nnvm.autotune``), so ``nnvm tune`` can search their knobs for an Arm target too.
The NCHW[x]c layout templates stay x86-only: the layout pass that feeds them runs for ``llvm`` alone.
Every other group gets the core's generic schedule, which LLVM vectorizes at the target's width.
"""

from __future__ import annotations

from nnvm.cpu.schedule_dense import dense_template
from nnvm.cpu.schedule_depthwise import depthwise_template
from nnvm.cpu.schedules import conv2d_template
from nnvm.cpu.switches import enabled

NEON_TEMPLATES = [conv2d_template, depthwise_template, dense_template]


def schedule_template(target, group):
    """The first NEON template that takes ``group``, or None for the generic schedule."""
    if not enabled("NNVM_X86_TEMPLATES"):
        return None  # the x86 plugin's A/B switch covers the same templates here
    for builder in NEON_TEMPLATES:
        template = builder(target, group)
        if template is not None:
            return template
    return None
