"""``cpu.conv2d_nchwc.direct``: conv2d over NCHW[x]c data, output channels along the vector.

In the blocked layout one pixel's ``x`` output channels are one vector register. The schedule keeps
``ow_block`` output pixels of one row in registers (one accumulator vector each) and walks the
reduction outside them, so each step loads one weight vector (``x`` output channels of one input
channel, contiguous in ``OIHW{i}i{o}o``) and broadcasts ``ow_block`` input scalars into fused
multiply-adds. Depthwise (one input channel per output channel) has the same shape with the input
channel block in the vector too, so it is a vector load instead of a broadcast. The loop program of a
conv -> bias -> relu (-> residual add) group::

    parallel for oc_outer:                          # output channel blocks on the thread pool
      for n, oh, ow_outer:                          # (batch > 1: parallel for n.oc_outer, for oh, ..)
        acc[ow_block, x] = 0                          # the conv stage, computed at ow_outer
        for rco, ry, rx, rci:                         # (ry, rx for depthwise)
          unrolled for owi in ow_block:
            vectorized for oci in x:
              acc[owi, oci] += pad[n, rco, .., .., rci] * w[oc_outer, rco, ry, rx, rci, oci]
      unrolled for owi: vectorized for oci: out[...] = epilogue(acc[owi, oci])

Knobs: ``ow_block`` (accumulators: too few and the weight loads dominate, too many and they spill),
``unroll_kw`` (unroll the kernel-width loop) and ``reduce_order`` (input channels outside or inside
the kernel window), ``parallel`` (the loop on the pool: ``oc``, ``oh``, both fused (``oc_oh``) or, at
batch > 1, ``n_oc``)
and ``pad_at`` (``row``: the window one register tile reads, padded just before it; ``root``: one
padded copy of the input), ``oc_blocks`` (output channel blocks per register tile: ``ow_block x
oc_blocks`` accumulators; with two or more the unrolled body walks pixels outside blocks when the
blocks are the fewer, so their weight vectors stay in registers and each broadcast is used at once,
``cost_model.pixel_major``), ``flat_plane`` (a 1x1 stride-1 unpadded convolution walks its H x W
plane as one row of H * W pixels, so a tile may span rows: ``_flat_plane``). The fallback of a plain
convolution is the tile and parallel loop of ``cost_model.py`` (fewest modelled cycles per multiply-add
on this machine's registers: 7 x 2 on ResNet's 14-pixel rows), over the flattened plane where the
model's tile there is much cheaper than over rows (``cost_model.flat_plane_pays``: AVX2's 7-pixel rows);
depthwise and grouped ones take the largest width divisor up to 14 accumulators (and two channel blocks
for short grouped rows; on AVX2 one-block tiles as wide as the registers hold). On AVX2 a stem reading
plain NCHW walks its kernel window outside the input channels (``window_outside_channels``). Images x
channel blocks run in parallel at batch > 1; depthwise pads per row, plain convolutions at root.
"""

from __future__ import annotations

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.cost_model import (
    MAX_OC_BLOCKS,
    flat_plane_pays,
    machine_of,
    parallel_loop,
    pixel_major,
    register_budget,
    register_tile,
    registers_needed,
    widest_row,
)
from nnvm.cpu.grouped import extra_stage, schedule_extra, split_anchor
from nnvm.cpu.schedule_helpers import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    reduction_flops,
    reduction_steps,
    sole_anchor,
    vector_lanes,
)
from nnvm.cpu.switches import enabled, switch
from nnvm.generic_schedule import guarded_inputs_of_reductions, schedule_loop_nest
from nnvm.te.tensor import ComputeOp

FALLBACK_ACCUMULATORS = 14  # output vectors a fallback register tile holds
WIDE_ROW_MIN_REDUCTION = 16  # multiply-adds per output a grouped conv needs for AVX2's widest one-block tile


def row_block(width: int, cap: int) -> int:
    """Output pixels per register tile: the largest divisor of ``width`` up to ``cap``, unless that is
    at most half of ``cap`` (a prime width such as SqueezeNet's 109-wide stem gets 1 accumulator, 3x
    slower): then the block from ``cap / 2`` to ``cap`` that pads the row least (the last tile is
    partial; lowering guards it), the larger one on a tie."""
    best = largest_divisor(width, cap)
    if width <= cap or 2 * best > cap:
        return best
    return min(range(-(-cap // 2), cap + 1), key=lambda b: (-(-width // b) * b, -b))


def window_outside_channels(op) -> bool:
    """Whether a plain convolution's AVX2 fallback walks the kernel window outside the input channels:
    where its input is plain NCHW (one channel per block: a stem's 3 channels). With the channels
    outside, AVX2's 12-accumulator tiles (3 x 4, 4 x 3) ran 1.1-4.4x slower (1 thread, single layers:
    MobileNetV2's 3x3/2 stem b1 556 -> 302 us, onnxruntime 341; b8 8836 -> 2940, ort 2939; a 7x7/2 to
    96 channels 18.5 -> 4.2 ms; ResNet's 7x7/2 3153 -> 2740; AlexNet's 11x11/4 level). Not measured
    with AVX-512: there the order stays."""
    if len(op.reduce_axis) != 4:  # a split grouped convolution's main stage: (rco, rci)
        return False
    _, ry, rx, rci = op.reduce_axis
    return extent(rci) == 1 and (extent(ry) or 1) * (extent(rx) or 1) > 1


def nchwc_stage(group):
    """(schedule, conv stage, padded stages) for a float32 conv2d_nchwc group, or None."""
    if group.anchor_op != "conv2d_nchwc" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 5:
        return None
    sch = te.create_schedule([out.op])
    conv = sole_anchor(sch, "conv2d_nchwc") or split_anchor(sch)
    return None if conv is None else (sch, conv, guarded_inputs_of_reductions(sch))


def conv2d_nchwc_template(target, group) -> ScheduleTemplate | None:
    """The template for a conv2d_nchwc group (plain or depthwise), or None to decline."""
    if not enabled("conv_schedule"):
        return None
    found = nchwc_stage(group)
    if found is None:
        return None
    _, conv, padded = found
    n, oco, oh, ow, oci = conv.op.axis
    ext_ow, ext_oci, ext_oco, batch = extent(ow), extent(oci), extent(oco), extent(n)
    if ext_ow is None or ext_oci is None or ext_oco is None or batch is None:
        return None
    lanes = vector_lanes(target)
    registers = machine_of(target).registers
    # Accumulators: one vector per pixel per lane-width of the block; leave room for the weight and
    # the broadcast input.
    per_pixel = max(1, -(-ext_oci // lanes))
    fit = max(1, (registers - 4) // per_pixel)
    # At most 14 accumulators: tuning ResNet-18 on the Cascade Lake host found 7-14 best everywhere
    # (28 was up to 2.9x slower: the broadcasts and weight loads then crowd the register file).
    ow_fallback = row_block(ext_ow, min(fit, FALLBACK_ACCUMULATORS))
    ow_space = sorted(set(divisors(ext_ow, 32)) | {ow_fallback})
    depthwise = bool(conv.op.attrs.get("depthwise"))
    # A batch is one more parallel dimension: images x output channel blocks, fused into one loop of
    # enough chunks for the pool, each image's rows walked in order by one thread.
    space = {"ow_block": ow_space, "unroll_kw": [False, True],
             "parallel": ["oc", "oh"] + (["n_oc"] if batch > 1 else ["oc_oh"]), "pad_at": ["row", "root"]}
    # Depthwise pads per register row: its window is one channel block's 3 rows (recomputed 1.5x at
    # stride 2, 3x at stride 1, in L1), where a padded copy of the whole input at root is a buffer of
    # the size of the input: at batch 8 (MobileNetV2's 96 x 112 x 112) 40 MB, which the allocator maps
    # and the kernel faults in on every call (the stride-2 one ran at 2 GFLOP/s, 8.6x slower than per
    # row). Per row is also 1.5-2x faster at batch 1. A plain conv reads every input channel per row, so
    # it would pad each input row once per output channel block: one copy at root.
    pad_at = switch("pad_at") or ("row" if depthwise else "root")
    parallel = "n_oc" if batch > 1 else "oc" if ext_oco >= 8 else "oh"
    fallback = {"ow_block": ow_fallback, "unroll_kw": depthwise, "parallel": parallel, "pad_at": pad_at}
    if not depthwise:
        space["reduce_order"] = ["rco_ry_rx_rci", "ry_rx_rco_rci"]
        fallback["reduce_order"] = "rco_ry_rx_rci"
        if window_outside_channels(conv.op) and not machine_of(target).broadcast_operand:
            fallback["reduce_order"] = "ry_rx_rco_rci"
        # Several output-channel blocks per register tile: each broadcast input feeds one multiply-add
        # per block, so fewer loads per multiply-add (cost_model.py).
        space["oc_blocks"] = [b for b in range(1, MAX_OC_BLOCKS + 1) if ext_oco % b == 0]
        if conv.op.attrs.get("groups", 1) == 1 and not conv.op.attrs.get("split"):
            # The tile and the parallel loop chosen by the cost model for this workload and machine.
            machine = machine_of(target)
            tile = register_tile(machine, ext_ow, ext_oco, max_ow=min(fit, FALLBACK_ACCUMULATORS))
            space["ow_block"] = sorted(set(ow_space) | {tile.ow_block})
            fallback["ow_block"], fallback["oc_blocks"] = tile.ow_block, tile.oc_blocks
            fallback["parallel"] = parallel_loop(machine, batch, ext_oco // tile.oc_blocks, extent(oh))
            if flat_plane_fits(conv) and not padded and extent(oh) is not None:
                space["flat_plane"] = [False, True]
                flat = register_tile(machine, extent(oh) * ext_ow, ext_oco,
                                     max_ow=min(fit, FALLBACK_ACCUMULATORS))
                space["ow_block"] = sorted(set(space["ow_block"]) | {flat.ow_block})
                fallback["flat_plane"] = False
                if enabled("flat_plane") and flat_plane_pays(machine, tile, flat, batch, ext_oco):
                    fallback.update(flat_plane=True, ow_block=flat.ow_block, oc_blocks=flat.oc_blocks,
                                    parallel="n_oc" if batch > 1 else "oc")
        else:
            # Grouped: two output-channel blocks per tile when the row is too short to fill it alone
            # (measured on Zen 4: 7-wide rows gain 1.5x from two blocks, 14-wide rows lose 15%).
            machine = machine_of(target)
            pair_fits = 2 * ow_fallback <= min(FALLBACK_ACCUMULATORS, fit)
            if not machine.broadcast_operand and reduction_steps(conv.op) >= WIDE_ROW_MIN_REDUCTION:
                # AVX2: a one-block tile as wide as the registers hold (14 pixels, not 16 - 4 = 12's 7 on
                # 14- and 28-pixel rows): ShuffleNet's 272 -> 272 g=4 on 14x14 (68 steps) b1 111 -> 103
                # us, b8 892 -> 809 (onnxruntime 106 / 831); 136 -> 136 on 28x28 (34) level. A 6-step
                # reduction (24 -> 112 g=4 on 56x56) ran 1.15-1.4x slower with 14 than with 8: kept.
                ow_fallback = row_block(ext_ow, widest_row(machine, FALLBACK_ACCUMULATORS))
                fallback["ow_block"] = ow_fallback
                space["ow_block"] = sorted(set(space["ow_block"]) | {ow_fallback})
                pair_fits = registers_needed(ow_fallback, 2, False) <= register_budget(machine)
            fallback["oc_blocks"] = 2 if ext_oco % 2 == 0 and pair_fits else 1
    name = "cpu.depthwise_conv2d_nchwc.direct" if depthwise else "cpu.conv2d_nchwc.direct"
    # Revision 2 (plain convolutions): tiles over several channel blocks walk pixels outside blocks, so
    # a config measured before (oc_blocks 2 in the other order) no longer means the same loop nest.
    return ScheduleTemplate(name, space, fallback, lambda config: build_conv2d_nchwc(group, config),
                            flops=reduction_flops(conv.op), revision=1 if depthwise else 2)


def build_conv2d_nchwc(group, config: dict):
    """The schedule of ``cpu.conv2d_nchwc.direct`` for one config (see the module docstring)."""
    sch, conv, padded = nchwc_stage(group)
    extra = extra_stage(sch)  # a split grouped convolution's boundary blocks (grouped.py)
    inline_epilogue(sch, {conv.op, *padded, *([extra.op] if extra is not None else [])})
    out = group.outputs[0]
    n, oco, oh, ow, oci = conv.op.axis
    reduce = list(conv.op.reduce_axis)
    if len(reduce) == 4:  # plain: rco, ry, rx, rci
        rco, ry, rx, rci = reduce
        if config.get("reduce_order") == "ry_rx_rco_rci":
            reduce = [ry, rx, rco, rci]
    else:  # depthwise: ry, rx
        rx = reduce[1]
    ow_block = config["ow_block"]
    out_stage = sch[out.op]
    # The parallel loop is the outermost one: output channel blocks, rows when there are few blocks,
    # or images x channel blocks fused ("n_oc"; the loops under it stay unfused, and a fused index
    # fixes both of its loops, so the attached stages' bounds stay one row tile).
    by_rows = config["parallel"] == "oh"
    by_image = config["parallel"] == "n_oc"
    by_tile = config["parallel"] == "oc_oh"  # channel block groups x rows, fused (batch 1)
    oc_blocks = config.get("oc_blocks", 1)
    by_pixel = pixel_major(ow_block, oc_blocks)  # which operands stay in registers (cost_model.py)
    if config.get("flat_plane"):
        parallel, ocb, owi = _flat_plane(conv, out_stage, reduce, ow_block, oc_blocks, by_image, by_pixel)
    elif out_stage is conv:
        owo, owi = conv.split(ow, factor=ow_block)
        ocb = None
        if oc_blocks > 1:
            oco, ocb = conv.split(oco, factor=oc_blocks)
        outer = ([oh, oco, n] if by_rows else [n, oco, oh] if by_image else [oco, oh, n] if by_tile
                 else [oco, n, oh])
        tile = [owi, ocb] if ocb is not None and by_pixel else [*([ocb] if ocb is not None else []), owi]
        conv.reorder(*outer, owo, *reduce, *tile, oci)
        parallel = conv.fuse(outer[0], outer[1]) if by_image or by_tile else outer[0]
    else:
        on, ooco, ooh, oow, ooci = out_stage.op.axis
        owo, owi = out_stage.split(oow, factor=ow_block)
        ocb = None
        if oc_blocks > 1:
            ooco, ocb = out_stage.split(ooco, factor=oc_blocks)
        outer = ([ooh, ooco, on] if by_rows else [on, ooco, ooh] if by_image else [ooco, ooh, on] if by_tile
                 else [ooco, on, ooh])
        out_stage.reorder(*outer, owo, *([ocb] if ocb is not None else []), owi, ooci)
        if ocb is not None:
            out_stage.unroll(ocb)
        out_stage.unroll(owi)
        out_stage.vectorize(ooci)
        conv.compute_at(out_stage, owo)
        conv.reorder(n, oh, *reduce, *([ow, oco] if by_pixel else [oco, ow]), oci)
        ocb = oco if oc_blocks > 1 else None
        owi = ow
        parallel = out_stage.fuse(outer[0], outer[1]) if by_image or by_tile else outer[0]
    if ocb is not None:
        conv.unroll(ocb)
    conv.unroll(owi)
    conv.vectorize(oci)
    if config["unroll_kw"]:
        conv.unroll(rx)
    out_stage.parallel(parallel)
    for stage in sch.stages:
        if not (isinstance(stage.op, ComputeOp) and stage.op in padded and stage.attach_type == "root"):
            continue
        if config["pad_at"] == "row":
            # The padded window one register tile reads, made just before it (in cache, not a copy of
            # the whole input).
            stage.compute_at(conv, conv.op.axis[2] if out_stage is not conv else outer[-1])
            stage.vectorize(stage.op.axis[-1])
        else:
            schedule_loop_nest(stage)
    if extra is not None:
        schedule_extra(extra, ow_block)
    return sch


def flat_plane_fits(conv) -> bool:
    """Whether ``conv`` may walk its output plane as one row (``_flat_plane``): a 1x1, stride-1, unpadded
    plain convolution, whose input pixel ``(y, x)`` is pixel ``y * W + x`` of a contiguous plane in
    every channel block, so the input index stays affine in the flattened pixel."""
    attrs = conv.op.attrs
    return (attrs.get("groups", 1) == 1 and not attrs.get("split") and not attrs.get("depthwise")
            and tuple(attrs.get("kernel_shape", ())[2:4]) == (1, 1)
            and tuple(attrs.get("strides", ())) == (1, 1) and not any(attrs.get("padding", (1,))))


def _flat_plane(conv, out_stage, reduce, ow_block: int, oc_blocks: int, by_image: bool, by_pixel: bool):
    """Schedule ``conv`` over its H x W output plane as one row of H * W pixels (MobileNetV2's 7x7
    planes: 49 pixels in tiles of 5 instead of 7-pixel rows in tiles of 3, 3 and 1). A register tile
    then spans rows, so a tile's pixels are no box of (row, column), which is all bound inference
    knows: an epilogue stage computes the conv's whole plane of ``oc_blocks`` channel blocks (a few KiB,
    in L1) at its channel-group loop, then walks it. The pool runs channel groups (images x groups at
    ``n_oc``; the row choices ``oh`` and ``oc_oh`` have no rows to split here). Returns (the loop to run
    in parallel, the unrolled channel-block loop or None, the unrolled pixel loop)::

        parallel for oc_outer (n.oc_outer at batch > 1):
          for pixel_outer:                           # conv[oc_blocks, H * W, x], a buffer in L1
            acc[ow_block, oc_blocks, x] = 0
            for rco, rci: unrolled for pixel_inner, ocb: vectorized for oci: acc += in * w
          for ocb, pixel: vectorized for oci: out[...] = epilogue(conv[...])
    """
    n, oco, oh, ow, oci = conv.op.axis
    plane = conv.fuse(oh, ow)
    po, pi = conv.split(plane, factor=ow_block)
    ocb = None
    if out_stage is conv:
        if oc_blocks > 1:
            oco, ocb = conv.split(oco, factor=oc_blocks)
        outer = [n, oco] if by_image else [oco, n]
    else:
        on, ooco, ooh, oow, ooci = out_stage.op.axis
        oplane = out_stage.fuse(ooh, oow)
        oocb = None
        if oc_blocks > 1:
            ooco, oocb = out_stage.split(ooco, factor=oc_blocks)
        outer = [on, ooco] if by_image else [ooco, on]
        out_stage.reorder(*outer, *([oocb] if oocb is not None else []), oplane, ooci)
        out_stage.vectorize(ooci)
        ocb = oco if oc_blocks > 1 else None
    tile = [pi, ocb] if ocb is not None and by_pixel else [*([ocb] if ocb is not None else []), pi]
    if out_stage is conv:
        conv.reorder(*outer, po, *reduce, *tile, oci)
        parallel = conv.fuse(*outer) if by_image else outer[0]
    else:
        parallel = out_stage.fuse(*outer) if by_image else outer[0]
        conv.compute_at(out_stage, parallel if by_image else outer[-1])
        conv.reorder(n, po, *reduce, *tile, oci)
    return parallel, ocb, pi
