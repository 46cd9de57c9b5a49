"""CPU schedules: register-blocked direct convolution for NCHW conv2d groups, as a tunable template.

The generic schedule keeps one vector of outputs (the innermost width loop) in flight while it walks
the whole reduction, so every weight is loaded once per output vector and every input row once per
output channel. This one keeps a tile of ``oc_block`` output channels x ``ow_block`` output columns
(times ``oh_block`` rows) in registers: each input vector loaded feeds ``oc_block`` fused
multiply-adds, each broadcast weight feeds ``oh_block`` vectors. The loop program of a conv2d group
(conv -> bias/bn/relu epilogue) becomes, with ``oh_block`` 1::

    parallel for oc_outer in ...:                   # on the thread pool
      for oh, n, ow_outer in ...:
        conv_tile[oc_block, ow_block] = 0            # the conv stage, computed at ow_outer
        for rc, ry, rx:                              # reduction outside the register tile
          unrolled for oci in oc_block:
            vectorized for owi in ow_block:
              conv_tile[oci, owi] += pad[...] * w[...]
      unrolled for oci: vectorized for owi: out[...] = epilogue(conv_tile[oci, owi])

Knobs (``conv2d_template``): ``oc_block``, ``oh_block`` and ``ow_block`` (the register tile; divisors,
so tiles need no guards), ``reduce_order`` (channels outside or inside the kernel window) and
``unroll_kw`` (unroll the kernel-width loop). The fallback is the tile this schedule always used:
8 channels x one row x one vector.

Grouped convolutions (ResNeXt, RegNet, ShuffleNet) run the same program: the vector is along the
output width, so it does not care how channels are grouped; a tile's output channels stay in one group
(``oc_block`` divides the channels per group) so they share the input rows they read. Padding is
materialized at root (as in the generic schedule), epilogue stages are inlined. Depthwise convolutions,
and groups this schedule does not recognise, are declined (``None``) so the next template (or the
generic schedule) serves them.
"""

from __future__ import annotations

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
from nnvm.cpu.switches import enabled
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.te.tensor import ComputeOp

OC_BLOCK = 8  # output channels per register tile (the fallback)
MAX_ACCUMULATORS = 28  # vector registers a tile may hold (AVX-512 has 32; a few hold inputs, weights)


def conv2d_template(target, group) -> ScheduleTemplate | None:
    """``cpu.conv2d_nchw.direct``: the register-blocked schedule for a plain or grouped NCHW conv2d
    group as a template, or None to decline."""
    if not enabled("conv_schedule"):
        return None  # A/B switch for benchmarks: the generic schedule for conv2d
    found = single_conv_stage(group, depthwise=False)
    if found is None:
        return None
    _, conv, _ = found
    _, oc, _, ow = conv.op.axis
    ext_oc, ext_ow = extent(oc), extent(ow)
    if ext_oc is not None:  # grouped: a tile of output channels stays in one group (one input row)
        ext_oc //= conv.op.attrs.get("groups", 1)
    if ext_oc is None or ext_ow is None:
        return None
    lanes = vector_lanes(target)
    ow_fallback = largest_divisor(ext_ow, lanes) if ext_ow > lanes else ext_ow
    if ow_fallback < 4 and ext_ow >= 4:
        return None  # no useful vector along the width (e.g. a prime width above the vector size)
    ow_space = sorted({d for d in divisors(ext_ow, 4 * lanes, 4)} | {ow_fallback})
    vectors = -(-ow_fallback // lanes)
    oc_space = sorted(set(divisors(ext_oc, max(1, MAX_ACCUMULATORS // vectors)))
                      | {largest_divisor(ext_oc, OC_BLOCK)})
    space = {"oc_block": oc_space, "oh_block": divisors(extent(conv.op.axis[2]) or 1, 4),
             "ow_block": ow_space, "reduce_order": ["rc_ry_rx", "ry_rx_rc"], "unroll_kw": [False, True]}
    fallback = {"oc_block": largest_divisor(ext_oc, OC_BLOCK), "oh_block": 1, "ow_block": ow_fallback,
                "reduce_order": "rc_ry_rx", "unroll_kw": False}
    return ScheduleTemplate("cpu.conv2d_nchw.direct", space, fallback,
                            lambda config: build_conv2d(group, config), flops=reduction_flops(conv.op))


def build_conv2d(group, config: dict):
    """The schedule of ``cpu.conv2d_nchw.direct`` for one config (see the module docstring)."""
    sch, conv, padded = single_conv_stage(group, depthwise=False)
    inline_epilogue(sch, {conv.op, *padded})
    out = group.outputs[0]
    n, oc, oh, ow = conv.op.axis
    oc_block, ow_block = config["oc_block"], config["ow_block"]
    rc, ry, rx = conv.op.reduce_axis
    reduce = [rc, ry, rx] if config["reduce_order"] == "rc_ry_rx" else [ry, rx, rc]
    out_stage = sch[out.op]
    # The outer loops stay unfused: bound inference cannot see through a fused index, so a conv tile
    # computed inside a fused loop would cover every row. The parallel loop is the outermost one.
    if out_stage is conv:
        oco, oci = conv.split(oc, factor=oc_block)
        oho, ohi = conv.split(oh, factor=config["oh_block"])
        owo, owi = conv.split(ow, factor=ow_block)
        conv.reorder(oco, oho, n, owo, *reduce, oci, ohi, owi)
    else:
        on, ooc, ooh, oow = out_stage.op.axis
        oco, oci = out_stage.split(ooc, factor=oc_block)
        oho, ohi = out_stage.split(ooh, factor=config["oh_block"])
        owo, owi = out_stage.split(oow, factor=ow_block)
        out_stage.reorder(oco, oho, on, owo, oci, ohi, owi)
        out_stage.unroll(oci)
        out_stage.unroll(ohi)
        out_stage.vectorize(owi)
        conv.compute_at(out_stage, owo)
        conv.reorder(n, *reduce, oc, oh, ow)
        oci, ohi, owi = oc, oh, ow
    conv.unroll(oci)
    conv.unroll(ohi)
    conv.vectorize(owi)
    if config["unroll_kw"]:
        conv.unroll(rx)
    out_stage.parallel(oco)
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and stage.op in padded and stage.attach_type == "root":
            schedule_loop_nest(stage)
    return sch


def schedule_conv2d(group, target):
    """The register-blocked schedule with its fallback config for a plain NCHW conv2d group, or None."""
    template = conv2d_template(target, group)
    return None if template is None else template.apply()
