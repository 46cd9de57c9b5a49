"""``cpu.depthwise_conv2d_nchwc.tiles``: depthwise conv2d over NCHW[x]c data in small 2-D register tiles.

Depthwise convolution does 9 multiply-adds per output for a 3x3 window. In the blocked layout one
pixel's ``x`` channels are one vector, so an output vector is 9 vector loads and 9 fused multiply-adds
with the channel block's 9 weight vectors, which stay in registers; the zero padding is read from a
small copy of the input window each register tile reads, made right before it (in L1; a padded copy
of the whole input is a buffer as large as the input, at batch 8 larger than the last-level cache).

``conv2d_nchwc_template`` (the same loops as a plain convolution) computes one row of up to 14
pixels a tile. Measured on MobileNetV2's layers (1 thread, Zen 5), tiles of about 8 vectors, a few
rows by a few columns, run 1.1-1.7x faster (most at stride 2: 96 channels 112 -> 56, 84 -> 50 us;
144 channels 56 -> 28, 28 -> 18 us), and 7-wide planes as well in whole rows. Their padded windows are
a few rows of a few pixels: at stride 2 a 4 x 2 tile reads 9 x 5 input pixels.

The parallel loop is images x channel blocks x bands of rows, fused: at batch 1 a 112 x 112 plane with
2 channel blocks is still 16 chunks or more for the pool, and at batch 8 the images are part of it::

    parallel for n.oco.oho:                       # images x channel blocks x bands of oh_block rows
      for ohm, owo:                                 # tiles of tile_rows x ow_block pixels
        pad[tile's window] = x[...] or 0              # (tile_rows - 1) * s + kh rows, in L1
        acc[tile_rows, ow_block, x] = 0
        unrolled for ry, rx, rows, cols:              # weight vector w[oco, ry, rx] in a register
          vectorized for oci in x:
            acc[rows, cols, oci] += pad[rows * s + ry, cols * s + rx, oci] * w[oco, ry, rx, oci]
        unrolled for rows, cols: vectorized for oci: out[...] = epilogue(acc[rows, cols, oci])

Where a stride-1 layer's input and output together exceed half the last-level cache (they stream
from memory: MobileNetV2's 144 channels on 56 x 56 and 32 on 112 x 112 at batch 8) and the tile's
accumulators and 3x3 weights do not fit the register file (16 vector registers, AVX2), the fallback
tile is one row: measured on a 2-core Zen 4 without AVX-512 (1 thread, batch 6-8), 2 x 4 and 2 x 2
tiles ran 1.4-3.4x slower than 1 x 4 there and swung from run to run, where at batch 1 (in cache) the
2 x 4 tile is 5-10% faster. At stride 2 (ShuffleNet's 136 and MobileNetV2's 96 and 144 channels at
batch 8) tall 4 x 2 tiles ran 1-18% faster than 2 x 4 alone, one-row tiles no faster; at batch 1
level (7% slower on 96 channels 112 -> 56). In the models only the 48 MB layer (96 channels 112 -> 56)
gained (9-25%); the 17-18 MB ones ran level (within the 5% that identical kernels swing by in these
runs), so at stride 2 the data must exceed the whole last-level cache. Not measured on a 32-register
machine, which keeps its tile.
``cpu_switches={"depthwise_stream": "0"}`` keeps the 2-D tile, for A/B benchmarks.

Knobs: ``oh_block`` (rows a parallel chunk), ``tile_rows`` x ``ow_block`` (the register tile),
``unroll_ry`` (unroll the kernel rows too; rolled it ran 1.2x slower). ``cpu_switches={"depthwise_tiles":
"0"}`` declines every group (``conv2d_nchwc_template`` then takes them), for A/B benchmarks.
"""

from __future__ import annotations

import math

from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.cost_model import machine_of, streams_from_memory
from nnvm.cpu.schedule_helpers import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    reduction_flops,
    vector_lanes,
)
from nnvm.cpu.schedule_nchwc import nchwc_stage, row_block
from nnvm.cpu.switches import enabled
from nnvm.te.tensor import ComputeOp

NAME = "cpu.depthwise_conv2d_nchwc.tiles"
TILE_VECTORS = 8  # output vectors of one register tile (fallback)
TILE_WIDTH = 4  # of which along a row, at most (fallback)
MIN_CHUNKS = 16  # parallel chunks the fallback keeps at least, where the plane has rows enough
def depthwise_tile(target, rows: int, cols: int, lanes_c: int, stride: int) -> tuple[int, int]:
    """(tile rows, tile columns) of the register tile over an output of ``rows`` x ``cols`` pixels whose
    input is in cache: about ``TILE_VECTORS`` output vectors, up to ``TILE_WIDTH`` pixels along a row."""
    per_pixel = max(1, -(-lanes_c // vector_lanes(target)))
    width = max(1, TILE_WIDTH // per_pixel)
    ow_block = largest_divisor(cols, width)
    if ow_block == 1 and stride > 1 and cols * per_pixel <= TILE_VECTORS:
        ow_block = cols  # a 7-wide output at stride 2: whole rows (7 rows of a pixel: 1.7x slower)
    elif 2 * ow_block <= width and cols * per_pixel > TILE_VECTORS:
        ow_block = row_block(cols, width)  # a prime width (13): a guarded last tile, not 1 pixel
    return largest_divisor(rows, max(1, TILE_VECTORS // (ow_block * per_pixel))), ow_block


def depthwise_nchwc_template(target, group) -> ScheduleTemplate | None:
    """``cpu.depthwise_conv2d_nchwc.tiles`` for a depthwise conv2d_nchwc group, or None to decline."""
    if not enabled("depthwise_tiles") or not enabled("conv_schedule"):
        return None
    found = nchwc_stage(group)
    if found is None:
        return None
    _, conv, padded = found
    if not conv.op.attrs.get("depthwise") or len(conv.op.reduce_axis) != 2 or len(padded) > 1:
        return None
    n, oco, oh, ow, oci = conv.op.axis
    sizes = [extent(iv) for iv in (n, oco, oh, ow, oci, *conv.op.reduce_axis)]
    if None in sizes:
        return None
    batch, blocks, ext_oh, ext_ow, lanes_c, ext_ry, ext_rx = sizes
    per_pixel = max(1, -(-lanes_c // vector_lanes(target)))
    stride = conv.op.attrs.get("strides", (1, 1))[1]
    rows_fallback, ow_fallback = depthwise_tile(target, ext_oh, ext_ow, lanes_c, stride)
    if rows_fallback > 1 and stride <= 2 and enabled("depthwise_stream") \
            and machine_of(target).registers < TILE_VECTORS + ext_ry * ext_rx * per_pixel:
        data_bytes = (1 + stride * stride) * 4 * batch * blocks * ext_oh * ext_ow * lanes_c  # input + output
        # at stride 2 the data must exceed twice the threshold: the whole cache (17-18 MB layers gained
        # nothing, see above)
        if streams_from_memory(target, data_bytes // stride):
            if stride == 1:
                rows_fallback = 1  # one-row tiles (see the module docstring)
            elif ext_ow % 2 == 0 and ext_oh % (TILE_VECTORS // 2) == 0:
                ow_fallback, rows_fallback = 2, TILE_VECTORS // 2  # tall tiles at stride 2
    # The band: whole planes when images x channel blocks alone make MIN_CHUNKS chunks, else the most
    # rows (a multiple of the tile's) that do.
    bands = [b for b in divisors(ext_oh, ext_oh) if b % rows_fallback == 0]
    oh_fallback = max((b for b in bands if batch * blocks * (ext_oh // b) >= MIN_CHUNKS), default=bands[0])
    space = {"oh_block": divisors(ext_oh, ext_oh), "tile_rows": divisors(ext_oh, 8),
             "ow_block": sorted(set(divisors(ext_ow, 16)) | {ow_fallback}), "unroll_ry": [True, False]}
    fallback = {"oh_block": oh_fallback, "tile_rows": rows_fallback, "ow_block": ow_fallback,
                "unroll_ry": True}
    return ScheduleTemplate(NAME, space, fallback, lambda config: build_depthwise_nchwc(group, config),
                            flops=reduction_flops(conv.op))


def build_depthwise_nchwc(group, config: dict):
    """The schedule of ``cpu.depthwise_conv2d_nchwc.tiles`` for one config (see the module docstring)."""
    sch, conv, padded = nchwc_stage(group)
    inline_epilogue(sch, {conv.op, *padded})
    out_stage = sch[group.outputs[0].op]
    on, ooco, ooh, oow, ooci = out_stage.op.axis
    oho, ohi = out_stage.split(ooh, factor=config["oh_block"])
    ohm, oht = out_stage.split(ohi, factor=math.gcd(config["tile_rows"], config["oh_block"]))
    owo, owi = out_stage.split(oow, factor=config["ow_block"])
    out_stage.reorder(on, ooco, oho, ohm, owo, oht, owi, ooci)
    band = out_stage.fuse(on, ooco, oho)
    schedule_tiles(sch, out_stage, conv, padded, (band, ohm, owo), oht, owi, ooci, config["unroll_ry"])
    out_stage.parallel(band)
    return sch


def schedule_tiles(sch, out_stage, conv, padded, outer, rows, cols, lanes, unroll_ry: bool = True) -> None:
    """The register tile of a depthwise ``conv`` whose output stage's loops end in ``outer`` (the last
    one walks the tiles) then the tile's ``rows``, ``cols`` and vector ``lanes``: the tile accumulates in
    registers over the unrolled window (the conv computed at that loop, unless it is the output itself),
    each weight vector loaded once, its padded input window copied right before it (``padded``)."""
    ry, rx = conv.op.reduce_axis
    if out_stage is conv:
        conv.reorder(*outer, ry, rx, rows, cols, lanes)
        pad_loop = outer[-1]
    else:
        out_stage.unroll(rows)
        out_stage.unroll(cols)
        out_stage.vectorize(lanes)
        conv.compute_at(out_stage, outer[-1])
        n, oco, rows, cols, lanes = conv.op.axis
        conv.reorder(n, oco, ry, rx, rows, cols, lanes)
        pad_loop = oco
    conv.unroll(rows)
    conv.unroll(cols)
    conv.unroll(rx)
    if unroll_ry:
        conv.unroll(ry)
    conv.vectorize(lanes)
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and stage.op in padded:
            stage.compute_at(conv, pad_loop)
            stage.vectorize(stage.op.axis[-1])
