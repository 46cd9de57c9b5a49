"""NEON schedules: register blocking at 128 bits (4 x float32), for conv2d, depthwise conv2d and dense.

- conv2d (groups=1): the x86 plugin's register-blocked schedule, imported, with 4 lanes: a tile of 8
  output channels x 4 output columns lives in 8 NEON registers across the whole reduction (aarch64
  has 32, armv7 16), each input vector feeding 8 ``fmla``.
- Other groups fall back to the core's generic schedule (outer loops parallel, innermost vectorized),
  which LLVM turns into NEON code at the target's width.
"""

from __future__ import annotations

import os

from nnvm_backend_llvm_x86.schedules import schedule_conv2d

NEON_LANES = 4


def schedule_group(target, group):
    """A NEON schedule for ``group``, or None to leave it to the generic schedule."""
    if os.environ.get("NNVM_X86_CONV_SCHEDULE", "1") == "0":
        return None  # the same A/B switch as the x86 plugin: generic schedules everywhere
    if group.anchor_op == "conv2d":
        return schedule_conv2d(group, target)  # its vector_lanes asks our resolve: 4 with NEON
    return None
