"""CPU schedule for depthwise conv2d (one input channel per output channel, NCHW) and its epilogue.

Depthwise convolution does few operations per byte (9 multiply-adds per output for 3x3), so what
matters is touching each input and output once and keeping the accumulators in registers. The generic
schedule pads the whole input at root, then accumulates every kernel tap into memory. This one
computes a tile of ``oh_block`` rows x ``ow_block`` columns of one channel in registers, with the
kernel window fully unrolled (each weight a broadcast scalar, each input row loaded once and reused
by the output rows it feeds), and pads only the input window of one tile right before it is read
(the halo is padded twice, but the copy stays in L1 instead of a second copy of the whole input)::

    parallel for c in C:
      for n, oh.outer, ow.outer:
          pad_tile[...] = pad(x[n, c, rows, columns])  # knob pad_at: "tile" (else at root)
          tile[oh_block, ow_block] = 0
          unrolled for ry, rx, oh.inner:
            vectorized for ow.inner:
              tile[oh.inner, ow.inner] += pad_plane[...] * w[c, 0, ry, rx]
          unrolled for oh.inner: vectorized for ow.inner: y[n, c, ...] = epilogue(tile[...])
"""

from __future__ import annotations

import math

from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    reduction_flops,
    single_conv_stage,
    vector_lanes,
)
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.te.tensor import ComputeOp

MAX_TILE = 24  # accumulator vectors per tile: AVX-512 has 32 registers, some hold inputs and weights


def depthwise_template(target, group) -> ScheduleTemplate | None:
    """``cpu.depthwise_conv2d_nchw.direct`` for a depthwise NCHW conv2d group, or None to decline."""
    found = single_conv_stage(group, depthwise=True)
    if found is None:
        return None
    _, conv, padded = found
    _, _, oh, ow = conv.op.axis
    ext_oh, ext_ow = extent(oh), extent(ow)
    if ext_oh is None or ext_ow is None or any(extent(iv) is None for iv in conv.op.reduce_axis):
        return None
    lanes = vector_lanes(target)
    # Measured on MobileNetV2's layers: two vectors wide, 8 rows high at stride 1; at stride 2 every
    # lane is a load of its own (a gather), which makes wide tiles slow to compile for little gain:
    # half a vector, 4 rows. A small plane (7x7) in one tile.
    stride = conv.op.attrs.get("strides", (1, 1))[1]
    ow_fallback = largest_divisor(ext_ow, 2 * lanes if stride == 1 else max(4, lanes // 2))
    # the fallback is always in the space: with 8 lanes a 14-wide stride-2 plane's 2 is under the
    # space's smallest width (4), and compiling MobileNetV2 in NCHW failed with AVX2
    ow_space = sorted(set(divisors(ext_ow, 2 * lanes, min(4, ext_ow)))
                      | {largest_divisor(ext_ow, lanes), ow_fallback})
    oh_space = divisors(ext_oh, 8)
    oh_fallback = largest_divisor(ext_oh, max(1, min(8 if stride == 1 else 4, MAX_TILE // math.ceil(
        ow_fallback / lanes))))
    if oh_fallback == 1 and ext_oh <= 8:
        oh_fallback = ext_oh
    pad_space = ["tile", "root"] if padded else ["root"]
    space = {"oh_block": oh_space, "ow_block": ow_space, "pad_at": pad_space, "unroll_kh": [True, False]}
    # Kernel rows unrolled for 3x3; from 5x5 on (NASNet's 5x5 and 7x7) the rows stay a loop: the same
    # speed measured (NASNetMobile 1.37 -> 1.34 ms, one thread) and a sixth less to compile (14.2 -> 11.8
    # CPU s), 392 unrolled statements a tile for 7x7 over 8 rows
    kh = extent(conv.op.reduce_axis[1])
    fallback = {"oh_block": oh_fallback, "ow_block": ow_fallback, "pad_at": pad_space[0], "unroll_kh": kh < 5}
    return ScheduleTemplate("cpu.depthwise_conv2d_nchw.direct", space, fallback,
                            lambda config: build_depthwise(group, config), flops=reduction_flops(conv.op))


def build_depthwise(group, config: dict):
    """The schedule of ``cpu.depthwise_conv2d_nchw.direct`` for one config (see the module docstring)."""
    sch, conv, padded = single_conv_stage(group, depthwise=True)
    inline_epilogue(sch, {conv.op, *padded})
    out_stage = sch[group.outputs[0].op]
    n, c, oh, ow = out_stage.op.axis
    oho, ohi = out_stage.split(oh, factor=config["oh_block"])
    owo, owi = out_stage.split(ow, factor=config["ow_block"])
    out_stage.reorder(c, n, oho, owo, ohi, owi)
    if out_stage is not conv:
        out_stage.unroll(ohi)
        out_stage.vectorize(owi)
        conv.compute_at(out_stage, owo)
        cn, cc, coh, cow = conv.op.axis
        conv.reorder(cn, cc, *conv.op.reduce_axis, coh, cow)
        ohi, owi = coh, cow
    else:
        conv.reorder(c, n, oho, owo, *conv.op.reduce_axis, ohi, owi)
    tile_loop = conv.leaf_iter_vars[conv.leaf_iter_vars.index(conv.op.reduce_axis[0]) - 1]
    rc, ry, rx = conv.op.reduce_axis
    conv.unroll(rc)
    conv.unroll(rx)
    if config["unroll_kh"]:  # else LLVM keeps the tile in registers across the kernel-row loop
        conv.unroll(ry)
    conv.unroll(ohi)
    conv.vectorize(owi)
    out_stage.parallel(c)
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and stage.op in padded:
            if config["pad_at"] == "tile":
                stage.compute_at(conv, tile_loop)
                stage.vectorize(stage.op.axis[-1])
            else:
                schedule_loop_nest(stage)
    return sch
