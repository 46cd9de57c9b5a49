"""``x86.conv2d_nchwc.direct``: conv2d over NCHW[x]c data, output channels along the vector.

In the blocked layout one pixel's ``x`` output channels are one vector register. The schedule keeps
``ow_block`` output pixels of one row in registers (one accumulator vector each) and walks the
reduction outside them, so each step loads one weight vector (``x`` output channels of one input
channel, contiguous in ``OIHW{i}i{o}o``) and broadcasts ``ow_block`` input scalars into fused
multiply-adds. Depthwise (one input channel per output channel) has the same shape with the input
channel block in the vector too, so it is a vector load instead of a broadcast. The loop program of a
conv -> bias -> relu (-> residual add) group::

    parallel for oc_outer:                          # output channel blocks on the thread pool
      for n, oh, ow_outer:
        acc[ow_block, x] = 0                          # the conv stage, computed at ow_outer
        for rco, ry, rx, rci:                         # (ry, rx for depthwise)
          unrolled for owi in ow_block:
            vectorized for oci in x:
              acc[owi, oci] += pad[n, rco, .., .., rci] * w[oc_outer, rco, ry, rx, rci, oci]
      unrolled for owi: vectorized for oci: out[...] = epilogue(acc[owi, oci])

Knobs: ``ow_block`` (accumulators: too few and the weight loads dominate, too many and they spill),
``unroll_kw`` (unroll the kernel-width loop) and ``reduce_order`` (input channels outside or inside
the kernel window). The fallback takes the largest width divisor up to 14 accumulators (and two
channel blocks for short rows).
"""

from __future__ import annotations

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.schedules import guarded_inputs_of_reductions, schedule_loop_nest
from nnvm.te.tensor import ComputeOp
from nnvm_backend_llvm_x86.schedules import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    reduction_flops,
    sole_anchor,
    vector_lanes,
)
from nnvm_backend_llvm_x86.switches import enabled, switch

FALLBACK_ACCUMULATORS = 14  # output vectors a fallback register tile holds


def nchwc_stage(group):
    """(schedule, conv stage, padded stages) for a float32 conv2d_nchwc group, or None."""
    if group.anchor_op != "conv2d_nchwc" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 5:
        return None
    sch = te.create_schedule([out.op])
    conv = sole_anchor(sch, "conv2d_nchwc")
    return None if conv is None else (sch, conv, guarded_inputs_of_reductions(sch))


def conv2d_nchwc_template(target, group) -> ScheduleTemplate | None:
    """The template for a conv2d_nchwc group (plain or depthwise), or None to decline."""
    if not enabled("NNVM_X86_CONV_SCHEDULE"):
        return None
    found = nchwc_stage(group)
    if found is None:
        return None
    _, conv, _ = found
    _, oco, _, ow, oci = conv.op.axis
    ext_ow, ext_oci, ext_oco = extent(ow), extent(oci), extent(oco)
    if ext_ow is None or ext_oci is None or ext_oco is None:
        return None
    lanes = vector_lanes(target)
    registers = 32 if lanes == 16 else 16
    # Accumulators: one vector per pixel per lane-width of the block; leave room for the weight and
    # the broadcast input.
    per_pixel = max(1, -(-ext_oci // lanes))
    fit = max(1, (registers - 4) // per_pixel)
    # At most 14 accumulators: tuning ResNet-18 on the Cascade Lake host found 7-14 best everywhere
    # (28 was up to 2.9x slower: the broadcasts and weight loads then crowd the register file).
    ow_fallback = largest_divisor(ext_ow, min(fit, FALLBACK_ACCUMULATORS))
    ow_space = sorted(set(divisors(ext_ow, 32)) | {ow_fallback})
    depthwise = bool(conv.op.attrs.get("depthwise"))
    space = {"ow_block": ow_space, "unroll_kw": [False, True], "parallel": ["oc", "oh"],
             "pad_at": ["row", "root"]}
    fallback = {"ow_block": ow_fallback, "unroll_kw": depthwise, "parallel": "oc" if ext_oco >= 8 else "oh",
                "pad_at": switch("NNVM_X86_PAD_AT")}
    if not depthwise:
        space["reduce_order"] = ["rco_ry_rx_rci", "ry_rx_rco_rci"]
        fallback["reduce_order"] = "rco_ry_rx_rci"
        # Two output-channel blocks per register tile when the row is too short to fill it alone.
        space["oc_blocks"] = [1, 2] if ext_oco % 2 == 0 else [1]
        # (Measured on Zen 4: 7-wide rows gain 1.5x from two blocks, 14-wide rows lose 15%.)
        pair_fits = 2 * ow_fallback <= min(FALLBACK_ACCUMULATORS, fit)
        fallback["oc_blocks"] = 2 if ext_oco % 2 == 0 and pair_fits else 1
    name = "x86.depthwise_conv2d_nchwc.direct" if depthwise else "x86.conv2d_nchwc.direct"
    return ScheduleTemplate(name, space, fallback, lambda config: build_conv2d_nchwc(group, config),
                            flops=reduction_flops(conv.op))


def build_conv2d_nchwc(group, config: dict):
    """The schedule of ``x86.conv2d_nchwc.direct`` for one config (see the module docstring)."""
    sch, conv, padded = nchwc_stage(group)
    inline_epilogue(sch, {conv.op, *padded})
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
    # Outer loops stay unfused (bound inference cannot see through a fused index); the parallel loop
    # is the outermost one: output channel blocks, or rows when there are few blocks.
    by_rows = config["parallel"] == "oh"
    oc_blocks = config.get("oc_blocks", 1)
    if out_stage is conv:
        owo, owi = conv.split(ow, factor=ow_block)
        ocb = None
        if oc_blocks > 1:
            oco, ocb = conv.split(oco, factor=oc_blocks)
        outer = [oh, oco, n] if by_rows else [oco, n, oh]
        conv.reorder(*outer, owo, *reduce, *([ocb] if ocb is not None else []), owi, oci)
        parallel = outer[0]
    else:
        on, ooco, ooh, oow, ooci = out_stage.op.axis
        owo, owi = out_stage.split(oow, factor=ow_block)
        ocb = None
        if oc_blocks > 1:
            ooco, ocb = out_stage.split(ooco, factor=oc_blocks)
        outer = [ooh, ooco, on] if by_rows else [ooco, on, ooh]
        out_stage.reorder(*outer, owo, *([ocb] if ocb is not None else []), owi, ooci)
        if ocb is not None:
            out_stage.unroll(ocb)
        out_stage.unroll(owi)
        out_stage.vectorize(ooci)
        conv.compute_at(out_stage, owo)
        conv.reorder(n, oh, *reduce, oco, ow, oci)
        ocb = oco if oc_blocks > 1 else None
        owi = ow
        parallel = outer[0]
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
    return sch
