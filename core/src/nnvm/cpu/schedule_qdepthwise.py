"""8-bit depthwise convolution over channel-blocked activations: ``qconv2d`` (one channel per group)
as ``qdepthwise_nchwc``.

A depthwise convolution has no reduction over channels, so there is nothing for a byte dot product
to sum: each output is 9 products (3x3) of one channel. It runs in int32 vectors along the channels
instead, which the blocked layout of ``schedule_qconv.py`` (``NCHW[Cb]c``, a pixel's channels
contiguous) makes plain loads; it reads and writes the same blocks as the 1x1 convolutions around
it (MobileNetV2's expand -> depthwise -> project), so no layout transform sits between them. The
weight is packed at compile time by ``qdepthwise_weight_pack`` as int32 ``[KH, KW, Cb]`` with its zero
point already subtracted (so any weight zero point is served). The loop program::

    parallel for y:                                  # output rows
      pad[KH rows] = data rows, zero point around    # (pad_at "row"; "root": one copy before)
      for x_outer, c_outer:                          # tiles of m pixels x V channels (V: the vector)
        acc[m, V] = 0                                 # m vector registers
        for ky, kx:
          unrolled for x_inner: vectorized for c_inner:
            acc += (int32(data[y*s + ky, x*s + kx, c]) - zp) * w[ky, kx, c]
        unrolled for x_inner: vectorized for c_inner: out = epilogue(acc)   # requantize, ReLU6
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    tagged_stages,
    vector_lanes,
)
from nnvm.cpu.schedule_qconv import channel_block, dot_lanes
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.nn import _conv2d_eval, conv2d_geometry
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.passes.alter_op_layout import AlteredNode

MAX_TILE_PIXELS = 8  # accumulator vectors per tile
PAD_AT = "row"  # where the padded input is made: per output row, in L1 ("row"), or one copy ("root")


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("qdepthwise_weight_pack", in_types, ("weight",))
    if w.dtype not in ("int8", "uint8") or len(w.shape) != 4 or w.shape[1] != 1:
        raise Error(f"qdepthwise_weight_pack: expects an 8-bit [C, 1, KH, KW] weight, got "
                    f"{w.dtype}{list(w.shape)}")
    return [TensorType((w.shape[2], w.shape[3], attrs["block"]), "int32")]


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    c = shape_of(w)[0]
    zp = te.const(attrs["weight_zero_point"], "int32")

    def body(ky, kx, ch):
        return te.if_then_else(ch < c, w[ch, 0, ky, kx].astype("int32") - zp, te.const(0, "int32"))

    return [te.compute(out_types[0].shape, body, name="qdepthwise_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    w = xs[0]
    c, _, kh, kw = w.shape
    out = np.zeros((kh, kw, attrs["block"]), np.int32)
    out[:, :, :c] = w[:, 0].transpose(1, 2, 0).astype(np.int32) - attrs["weight_zero_point"]
    return [out]


QDEPTHWISE_WEIGHT_PACK = OpDef(
    "qdepthwise_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE,
    attrs={"block": Attr(int), "weight_zero_point": Attr(int, 0)}, num_inputs=(1, 1),
    evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an 8-bit depthwise [C, 1, KH, KW] weight less its zero point as int32 [KH, KW, block]")


def _infer(in_types, attrs):
    data, packed = require_inputs("qdepthwise_nchwc", in_types, ("data", "packed_weight"))
    if data.dtype not in ("uint8", "int8") or packed.dtype != "int32" or len(data.shape) != 5 \
            or data.shape[1] != 1:
        raise Error(f"qdepthwise_nchwc: expects 8-bit NCHW[x]c data with one channel block and an int32 "
                    f"packed weight, got {data.dtype}{list(data.shape)} and "
                    f"{packed.dtype}{list(packed.shape)}")
    n, _, h, w, cb = data.shape
    kh, kw = attrs["kernel"]
    if tuple(packed.shape) != (kh, kw, cb):
        raise Error(f"qdepthwise_nchwc: the packed weight {list(packed.shape)} does not fit {[kh, kw, cb]}")
    _, _, oh, ow = conv2d_geometry((n, cb, h, w), (cb, 1, kh, kw), {**attrs, "groups": cb})
    return [TensorType((n, 1, oh, ow, cb), "int32")]


def _compute(inputs, attrs, out_types):
    data, packed = inputs
    _, _, h, w, cb = shape_of(data)
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    zp = attrs["data_zero_point"]
    n, _, oh, ow, _ = out_types[0].shape
    if any(attrs["padding"]):
        def pad_body(b, c, y, x, ch):
            iy, ix = y - pt, x - pl
            inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < w)
            return te.if_then_else(inside, data[b, c, iy, ix, ch], te.const(zp, data.dtype))

        src = te.compute((n, 1, h + pt + pb, w + pl + pr, cb), pad_body, name="qdepthwise_nchwc_pad",
                         tag="qdepthwise_nchwc_pad")
    else:
        src = data
    ky = te.reduce_axis((0, kh), name="ky")
    kx = te.reduce_axis((0, kw), name="kx")

    def body(b, c, y, x, ch):
        v = src[b, c, y * sh + ky * dh, x * sw + kx * dw, ch].astype("int32")
        if zp:
            v = v - te.const(zp, "int32")
        return te.sum(v * packed[ky, kx, ch], axis=[ky, kx])

    workload = {"data_shape": (n, 1, h, w, cb), "kernel": (kh, kw), "strides": (sh, sw),
                "padding": tuple(attrs["padding"]), "dilation": (dh, dw), "data_dtype": data.dtype,
                "data_zero_point": zp, "layout": f"NCHW{cb}c"}
    return [te.compute(out_types[0].shape, body, name="qdepthwise_nchwc", tag="qdepthwise_nchwc",
                       attrs={"workload": workload, **workload})]


def _eval(xs, attrs):
    data, packed = xs
    cb = data.shape[4]
    x = data[:, 0].transpose(0, 3, 1, 2).astype(np.int64) - attrs["data_zero_point"]
    weight = packed.transpose(2, 0, 1)[:, None].astype(np.int64)
    (y,) = _conv2d_eval([x, weight], {**attrs, "groups": cb})
    return [y.transpose(0, 2, 3, 1)[:, None]]


QDEPTHWISE_NCHWC = OpDef(
    "qdepthwise_nchwc", _infer, _compute, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": Attr(tuple), "padding": Attr(tuple), "dilation": Attr(tuple), "kernel": Attr(tuple),
           "data_zero_point": Attr(int, 0)},
    num_inputs=(2, 2), evaluate=checked_evaluate(_infer, _eval),
    doc="depthwise qconv2d of NCHW[C]c 8-bit data into NCHW[C]c int32, over a weight packed by "
        "qdepthwise_weight_pack")


def alter_qdepthwise(target, node, in_types) -> AlteredNode | None:
    """A depthwise qconv2d (groups = channels = outputs) with a constant weight -> ``qdepthwise_nchwc``
    in the channel blocks ``qconv2d_nchwc`` uses, where the backend has ``dot_u8s8`` (so its neighbours
    are blocked); None: not mine."""
    if node.op != "qconv2d" or len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    attrs = dict(node.attrs)
    c = data.shape[1] if not data.symbolic else None
    if (c is None or weight.symbolic or data.dtype not in ("uint8", "int8") or attrs.get("groups", 1) != c
            or tuple(weight.shape[:2]) != (c, 1)):
        return None
    lanes = dot_lanes(target)
    if lanes is None:
        return None
    cb = channel_block(c, lanes)
    new = {"strides": tuple(attrs.get("strides", (1, 1))),
           "padding": tuple(attrs.get("padding", (0, 0, 0, 0))),
           "dilation": tuple(attrs.get("dilation", (1, 1))), "kernel": tuple(weight.shape[2:]),
           "data_zero_point": int(attrs.get("data_zero_point", 0))}
    pack = {"block": cb, "weight_zero_point": int(attrs.get("weight_zero_point", 0))}
    return AlteredNode("qdepthwise_nchwc", new, inputs=(("NCHW", f"NCHW{cb}c"), None),
                       outputs=(("NCHW", f"NCHW{cb}c"),), prepare=(None, ("qdepthwise_weight_pack", pack)),
                       constant_inputs=(1,))


# ---------------------------------------------------------------------------------------------------
# the schedule


def _stages(group):
    return tagged_stages(group, "qdepthwise_nchwc", ("qdepthwise_nchwc_pad", "qdepthwise_nchwc"),
                         ("qdepthwise_nchwc",))


def qdepthwise_nchwc_template(target, group) -> ScheduleTemplate | None:
    """``cpu.qdepthwise_nchwc.tiles``: tiles of ``m`` pixels x one vector of channels; None to decline."""
    found = _stages(group)
    if found is None:
        return None
    conv = found[1]["qdepthwise_nchwc"]
    n, _, oh, ow, cb = (extent(iv) for iv in conv.op.axis)
    lanes = vector_lanes(target)
    if cb % lanes:
        return None
    kh, kw = (extent(iv) for iv in conv.op.reduce_axis)
    m = largest_divisor(ow, MAX_TILE_PIXELS)
    return ScheduleTemplate("cpu.qdepthwise_nchwc.tiles", {"m": divisors(ow, MAX_TILE_PIXELS),
                                                            "pad_at": ["row", "root"]},
                            {"m": m, "pad_at": PAD_AT},
                            lambda config: build_qdepthwise_nchwc(target, group, config),
                            flops=2.0 * n * oh * ow * cb * kh * kw)


def build_qdepthwise_nchwc(target, group, config: dict):
    sch, stages = _stages(group)
    conv = stages["qdepthwise_nchwc"]
    keep = {conv.op} | ({stages["qdepthwise_nchwc_pad"].op} if "qdepthwise_nchwc_pad" in stages else set())
    inline_epilogue(sch, keep)
    lanes = vector_lanes(target)
    out = sch[group.outputs[0].op]
    if out is conv:  # the group's output itself (no epilogue): accumulate in a local tile, copy it out
        conv = sch[sch.cache_write(group.outputs[0], "local").op]
    b, cb, y, x, c = out.op.axis
    xo, xi = out.split(x, factor=config["m"])
    co, ci = out.split(c, factor=lanes)
    out.reorder(b, cb, y, xo, co, xi, ci)
    row = out.fuse(b, cb, y)
    out.parallel(row)
    if "qdepthwise_nchwc_pad" in stages:
        pad = stages["qdepthwise_nchwc_pad"]
        if config["pad_at"] == "row":  # the KH padded rows an output row reads, in L1
            pad.compute_at(out, row)
        else:  # one padded copy of the input, a row per task
            pb, pcb, py, _, _ = pad.op.axis
            pad.parallel(pad.fuse(pb, pcb, py))
        pad.vectorize(pad.op.axis[-1])
    out.unroll(xi)
    out.vectorize(ci)
    conv.compute_at(out, co)
    gb, gcb, gy, gx, gc = conv.op.axis
    ky, kx = conv.op.reduce_axis
    conv.reorder(gb, gcb, gy, ky, kx, gx, gc)
    conv.unroll(gx)
    conv.vectorize(gc)
    return sch
