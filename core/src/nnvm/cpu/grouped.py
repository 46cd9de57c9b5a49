"""Grouped 1x1 convolutions whose channels per group no vector divides (ShuffleNet: 34, 68, 136).

An output block of ``x`` channels that straddles two groups needs both groups' input channels. The
straddling plan of ``layout_choice.py`` gives every block a window of two groups (zero weights for the
channels of the other group), which doubles the multiply-adds of the blocks inside one group too:
ShuffleNet's 272 -> 272 convolution in 4 groups of 68 read 17 windows of 136 channels for 17 x 16
outputs, and ran at about 105 useful GFLOP/s on a core doing 210.

The split plan gives every output block its first group's window only, and adds one weight block per
group boundary that reads the next group for the block straddling it (``conv2d_nchwc`` with
``split=1``; the extra blocks are a second reduction stage, ``conv2d_nchwc_extra``, whose result the
straddling blocks start from). 272 -> 272: 17 + 3 windows of 68 (1.7x fewer multiply-adds), every
vector full width. Taken for 1x1 kernels without padding (all of ShuffleNet's grouped convolutions)
when it needs fewer block windows than the aligned and the straddling plans.
``cpu_switches={"grouped": "0"}`` keeps those plans.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.cpu.switches import enabled
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.blocked_layout import split_group_window
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.te.tensor import ComputeOp


def split_cost(out_channels: int, groups: int, per_in: int, lanes: int) -> int | None:
    """Vector multiply-adds per output pixel of the split plan, or None where it does not apply (under
    one vector of outputs per group: a block would touch three groups)."""
    per_out = out_channels // groups
    if per_out < lanes:
        return None
    blocks = -(-out_channels // lanes)
    return (blocks + groups - 1) * per_in


def split_plan(attrs: dict, weight_shape, channels: int, lanes: int, current_cost: float) -> dict | None:
    """The ``split_weight_pack`` attributes for a grouped conv2d, when its split plan needs fewer vector
    multiply-adds than ``current_cost`` (the plan ``layout.alter_conv2d`` would take otherwise)."""
    out_channels, per_in, kh, kw = weight_shape
    groups = attrs["groups"]
    if not enabled("grouped") or (kh, kw) != (1, 1) or any(attrs["padding"]):
        return None
    if tuple(attrs["dilation"]) != (1, 1):
        return None
    cost = split_cost(out_channels, groups, per_in, lanes)
    if cost is None or cost >= current_cost:
        return None
    return {"groups": groups, "out_block": lanes}


def plan_cost(channels: int, out_channels: int, groups: int, blocks, straddle) -> float:
    """Vector multiply-adds per output pixel of the plans ``layout_choice.py`` offers: the straddling one, the
    one aligned within groups, or plain NCHW (no vector at all: counted as one per multiply-add)."""
    per_in = channels // groups
    if straddle is not None:
        _, oc, window = straddle
        return -(-out_channels // oc) * window
    if blocks is not None:
        return out_channels // blocks[1] * per_in
    return out_channels * per_in


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("split_weight_pack", in_types, ("weight",))
    groups, oc = attrs["groups"], attrs["out_block"]
    if len(w.shape) != 4 or w.shape[0] % groups or w.shape[0] // groups < oc:
        raise Error(f"split_weight_pack: the weight must be OIHW with at least {oc} output channels in each "
                    f"of {groups} groups, got shape {w.shape}")
    blocks = -(-w.shape[0] // oc)
    return [TensorType((blocks + groups - 1, w.shape[1], w.shape[2], w.shape[3], 1, oc), w.dtype)]


def _segment(s, blocks: int, oc: int, out_channels: int, groups: int):
    """(output block, group, whether the segment is used) of weight block ``s`` (ints)."""
    if s < blocks:
        return s, split_group_window(s, oc, out_channels, groups)[0], True
    group = s - blocks + 1
    co = group * (out_channels // groups) // oc
    return co, group, (group * (out_channels // groups)) % oc != 0


def _pack_eval(xs, attrs):
    (w,) = xs
    (t,) = _pack_infer([TensorType(w.shape, str(w.dtype))], attrs)
    segments, per_in, kh, kw, _, oc = t.shape
    groups, out_channels = attrs["groups"], w.shape[0]
    blocks = segments - (groups - 1)
    out = np.zeros(t.shape, w.dtype)
    for s in range(segments):
        co, group, used = _segment(s, blocks, oc, out_channels, groups)
        if not used:
            continue
        o = co * oc + np.arange(oc)
        valid = (o < out_channels) & (o // (out_channels // groups) == group)
        # [oc, per_in, kh, kw] -> [per_in, kh, kw, 1, oc]
        out[s][..., 0, valid] = w[o[valid]].transpose(1, 2, 3, 0)
    return [out]


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    out_channels = shape_of(w)[0]
    groups, oc = attrs["groups"], attrs["out_block"]
    per_out = out_channels // groups
    blocks = -(-out_channels // oc)

    def body(s, r, ky, kx, _, lane):
        extra = s >= blocks
        group_extra = s - blocks + 1
        co = te.if_then_else(extra, group_extra * per_out // oc, s)
        o = co * oc + lane
        group = te.if_then_else(extra, group_extra, s * oc // per_out)
        used = (s < blocks) | ((group_extra * per_out) % oc != 0)
        valid = te.all_of(used, o < out_channels, o // per_out == group)
        return te.if_then_else(valid, w[te.minimum(o, out_channels - 1), r, ky, kx], te.const(0, w.dtype))

    return [te.compute(out_types[0].shape, body, name="split_weight_pack", tag="injective")]


SPLIT_WEIGHT_PACK = OpDef(
    "split_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE, num_inputs=(1, 1),
    attrs={"groups": Attr(int), "out_block": Attr(int)},
    evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an OIHW grouped-conv weight as split conv2d_nchwc's blocks: each output block's first group, "
        "then one block per group boundary with the next group's weights for the block straddling it")


def split_anchor(sch):
    """The main stage of a split grouped convolution's schedule (tagged ``conv2d_nchwc``, its only other
    reduction the ``conv2d_nchwc_extra`` stage), or None."""
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.reduce_axis]
    tags = sorted(st.op.tag for st in computes)
    if tags != ["conv2d_nchwc", "conv2d_nchwc_extra"]:
        return None
    return next(st for st in computes if st.op.tag == "conv2d_nchwc")


def extra_stage(sch):
    """The ``conv2d_nchwc_extra`` stage of a split grouped convolution's schedule, or None."""
    return next((st for st in sch.stages if getattr(st.op, "tag", None) == "conv2d_nchwc_extra"), None)


def schedule_extra(stage, ow_block: int) -> None:
    """The boundary blocks' stage at root: the register tile of the main stage (``ow_block`` pixels of
    one row, the channels along the vector), the boundaries x rows on the thread pool."""
    n, b, oh, ow, oci = stage.op.axis
    rco, rci = stage.op.reduce_axis
    owo, owi = stage.split(ow, factor=ow_block)
    stage.reorder(b, n, oh, owo, rco, rci, owi, oci)
    stage.unroll(owi)
    stage.vectorize(oci)
    stage.parallel(stage.fuse(b, n))
