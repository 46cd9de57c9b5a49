"""8-bit convolution on CPUs with a byte dot product: ``qconv2d`` as ``qconv2d_packed``.

The layout pass (``alter_qconv2d``) rewrites a ``qconv2d`` of uint8 (or int8) data and a constant
int8 weight with zero point 0 (onnxruntime's quantizer writes symmetric weights) into
``qconv2d_packed`` over the weight packed at compile time (``qconv2d_weight_pack``) in the layout the
backend's ``dot_u8s8`` tensor intrinsic reads: ``[O/L, K/4, L, 4]``, four consecutive reduction
elements per 32-bit lane, ``L`` output channels per vector (16 with AVX-512 VNNI's ``vpdpbusd``, 8
with AVX-VNNI or the exact widened form). The lane count is the backend's answer, never a guess.

``qconv2d_packed`` computes, in one kernel (``cpu.qconv2d.packed``):

1. ``im2col``: the windows as ``[N, OH, OW, K/4, 4]`` uint8 rows (``K = C * KH * KW``; padding is the
   data's zero point; int8 data moves to uint8 by adding 128, and its zero point with it);
2. ``gemm``: ``[N, O/L, OH, OW, L]`` int32, each tile of ``m`` pixels x ``L`` channels one
   ``dot_u8s8`` call over the whole reduction (its accumulators stay in registers);
3. ``wsum``: the weight's sum per output channel, so that ``sum((x - zp) * w) = sum(x * w) - zp * wsum``
   (the products run on raw bytes, as ``vpdpbusd`` multiplies them);
4. the NCHW int32 result, where the requantize epilogue fuses.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import divisors, extent, largest_divisor
from nnvm.errors import Error, ScheduleError
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.nn import _conv2d_eval, conv2d_geometry
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.passes.alter_op_layout import AlteredNode
from nnvm.te.tensor import ComputeOp

MAX_TILE_PIXELS = {16: 12, 8: 6}  # pixels per tile (accumulator vectors): zmm has 32 registers, ymm 16
MAX_ACCUMULATORS = {16: 16, 8: 8}  # pixels x channel blocks per tile, leaving registers for operands
ROW_WINDOWS = 1  # im2col one output row at a time, inside the parallel loop (0: the whole image first)


def dot_lanes(target) -> int | None:
    """The lanes of the backend's ``dot_u8s8`` intrinsic on ``target``, or None if it has none."""
    try:
        return te.backend_intrinsic(target, "dot_u8s8", m=1, k4=1).params["lanes"]
    except (ScheduleError, AttributeError, KeyError):
        return None


# ---------------------------------------------------------------------------------------------------
# qconv2d_weight_pack: [O, C, KH, KW] int8 -> [O/L, K/4, L, 4]


def packed_shape(weight_shape: tuple, lanes: int, in_block: int = 0) -> tuple:
    """``[O/L, KH * KW * C/4, L, 4]``: the reduction in (ky, kx, channel) order, channels padded to 4 (or
    to ``in_block``, the channel block of the data ``qconv2d_nchwc`` reads)."""
    o, c, kh, kw = weight_shape
    return (-(-o // lanes), kh * kw * -(-max(c, in_block) // 4), lanes, 4)


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("qconv2d_weight_pack", in_types, ("weight",))
    if w.dtype != "int8" or len(w.shape) != 4:
        raise Error(f"qconv2d_weight_pack: expects an int8 OIHW weight, got {w.dtype}{list(w.shape)}")
    return [TensorType(packed_shape(w.shape, attrs["lanes"], attrs["in_block"]), "int8")]


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    o, c, kh, kw = shape_of(w)
    lanes = attrs["lanes"]

    c4 = -(-max(c, attrs["in_block"]) // 4)

    def body(ob, q, j, r):
        oc, ch, kyx = ob * lanes + j, (q % c4) * 4 + r, q // c4
        inside = te.all_of(oc < o, ch < c)
        return te.if_then_else(inside, w[oc, ch, kyx // kw, kyx % kw], te.const(0, "int8"))

    return [te.compute(out_types[0].shape, body, name="qconv2d_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    w = xs[0]
    o, c, kh, kw = w.shape
    ob, k4, lanes, _ = packed_shape(w.shape, attrs["lanes"], attrs["in_block"])
    c4 = k4 // (kh * kw)
    full = np.zeros((ob * lanes, kh, kw, c4 * 4), np.int8)
    full[:o, :, :, :c] = w.transpose(0, 2, 3, 1)
    return [full.reshape(ob, lanes, k4, 4).transpose(0, 2, 1, 3)]


QCONV2D_WEIGHT_PACK = OpDef(
    "qconv2d_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE,
    attrs={"lanes": Attr(int), "in_block": Attr(int, 0, "channels padded to this (0: to 4)")},
    num_inputs=(1, 1), evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an int8 OIHW weight as [O/L, K/4, L, 4] for dot_u8s8 (zeros past O and K)")


# ---------------------------------------------------------------------------------------------------
# qconv2d_packed


def _packed_infer(in_types, attrs):
    data, packed = require_inputs("qconv2d_packed", in_types, ("data", "packed_weight"))
    if data.dtype not in ("uint8", "int8") or packed.dtype != "int8" or len(data.shape) != 4:
        raise Error(f"qconv2d_packed: expects 8-bit NCHW data and an int8 packed weight, got "
                    f"{data.dtype}{list(data.shape)} and {packed.dtype}{list(packed.shape)}")
    o, (kh, kw) = attrs["channels"], attrs["kernel"]
    weight = (o, data.shape[1], kh, kw)
    if tuple(packed.shape) != packed_shape(weight, attrs["lanes"]):
        raise Error(f"qconv2d_packed: the packed weight {list(packed.shape)} does not fit {weight}")
    return [TensorType(conv2d_geometry(data.shape, weight, {**attrs, "groups": 1}), "int32")]


def _packed_compute(inputs, attrs, out_types):
    data, packed = inputs
    n, c, h, w = shape_of(data)
    _, oc, oh, ow = out_types[0].shape
    ob, k4, lanes, _ = shape_of(packed)
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    pt, pl = attrs["padding"][0], attrs["padding"][1]
    signed = data.dtype == "int8"
    zp = attrs["data_zero_point"] + (128 if signed else 0)  # int8 data is read as uint8 + 128

    c4 = k4 // (kh * kw)

    def window(b, y, x, q, r):
        ch, kyx = (q % c4) * 4 + r, q // c4
        ky, kx = kyx // kw, kyx % kw
        iy, ix = y * sh + ky * dh - pt, x * sw + kx * dw - pl
        inside = te.all_of(ch < c, iy >= 0, iy < h, ix >= 0, ix < w)
        v = data[b, ch, iy, ix]
        v = (v.astype("int32") + te.const(128, "int32")).astype("uint8") if signed else v
        # padded channels meet zero weights, any byte does; the zero point keeps padding a real zero
        return te.if_then_else(inside, v, te.const(zp, "uint8"))

    rows = te.compute((n, oh, ow, k4, 4), window, name="qconv2d_im2col", tag="qconv2d_im2col")
    q = te.reduce_axis((0, k4), name="q")
    r = te.reduce_axis((0, 4), name="r")
    gemm = te.compute((n, ob, oh, ow, lanes),
                      lambda b, o, y, x, j: te.sum(rows[b, y, x, q, r].astype("int32")
                                                   * packed[o, q, j, r].astype("int32"), axis=[q, r]),
                      name="qconv2d_gemm", tag="qconv2d_gemm")
    workload = {"data_shape": (n, c, h, w), "channels": oc, "kernel": (kh, kw), "lanes": lanes,
                "strides": tuple(attrs["strides"]), "padding": tuple(attrs["padding"]),
                "dilation": tuple(attrs["dilation"]), "data_dtype": data.dtype, "data_zero_point": zp}
    if zp == 0:
        def body(b, o, y, x):
            return gemm[b, o // lanes, y, x, o % lanes]
    else:
        qs = te.reduce_axis((0, k4), name="qs")
        rs = te.reduce_axis((0, 4), name="rs")
        wsum = te.compute((oc,), lambda o: te.sum(packed[o // lanes, qs, o % lanes, rs].astype("int32"),
                                                  axis=[qs, rs]), name="qconv2d_wsum", tag="qconv2d_wsum")

        def body(b, o, y, x):
            return gemm[b, o // lanes, y, x, o % lanes] - te.const(zp, "int32") * wsum[o]

    return [te.compute((n, oc, oh, ow), body, name="qconv2d_packed", tag="qconv2d_packed",
                       attrs={"workload": workload, **workload})]


def _packed_eval(xs, attrs):
    data, packed = xs
    o, (kh, kw) = attrs["channels"], attrs["kernel"]
    ob, k4, lanes, _ = packed.shape
    c = data.shape[1]
    full = packed.transpose(0, 2, 1, 3).reshape(ob * lanes, kh, kw, -1)[:o, :, :, :c]
    weight = full.transpose(0, 3, 1, 2).astype(np.int64)
    x = data.astype(np.int64) - attrs["data_zero_point"]
    return _conv2d_eval([x, weight], {**attrs, "groups": 1})


QCONV2D_PACKED = OpDef(
    "qconv2d_packed", _packed_infer, _packed_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": Attr(tuple), "padding": Attr(tuple), "dilation": Attr(tuple), "kernel": Attr(tuple),
           "channels": Attr(int), "lanes": Attr(int), "data_zero_point": Attr(int, 0)},
    num_inputs=(2, 2), evaluate=checked_evaluate(_packed_infer, _packed_eval),
    doc="qconv2d (weight zero point 0, groups 1) over a weight packed by qconv2d_weight_pack")


def alter_qconv2d(target, node, in_types) -> AlteredNode | None:
    """qconv2d -> qconv2d_packed where the backend has ``dot_u8s8`` and the weight is an int8 constant
    with zero point 0 and one group; None keeps it (the generic schedule runs it, exactly)."""
    if node.op != "qconv2d" or len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    attrs = dict(node.attrs)
    if (weight.dtype != "int8" or data.dtype not in ("uint8", "int8") or attrs.get("groups", 1) != 1
            or attrs.get("weight_zero_point", 0) != 0 or data.symbolic or weight.symbolic):
        return None
    lanes = dot_lanes(target)
    if lanes is None:
        return None
    new = {"strides": tuple(attrs.get("strides", (1, 1))),
           "padding": tuple(attrs.get("padding", (0, 0, 0, 0))),
           "dilation": tuple(attrs.get("dilation", (1, 1))), "kernel": tuple(weight.shape[2:]),
           "channels": int(weight.shape[0]), "lanes": lanes,
           "data_zero_point": int(attrs.get("data_zero_point", 0))}
    return AlteredNode("qconv2d_packed", new, inputs=(None, None), outputs=((None, None),),
                       prepare=(None, ("qconv2d_weight_pack", {"lanes": lanes})), constant_inputs=(1,))


# ---------------------------------------------------------------------------------------------------
# the schedule


def _stages(group):
    if group.anchor_op != "qconv2d_packed" or len(group.outputs) != 1:
        return None
    sch = te.create_schedule([group.outputs[0].op])
    found = {st.op.tag: st for st in sch.stages if isinstance(st.op, ComputeOp)
             and st.op.tag in ("qconv2d_im2col", "qconv2d_gemm", "qconv2d_wsum", "qconv2d_packed")}
    if not {"qconv2d_im2col", "qconv2d_gemm", "qconv2d_packed"} <= set(found):
        return None
    return sch, found


def qconv2d_packed_template(target, group) -> ScheduleTemplate | None:
    """``cpu.qconv2d.packed``: tiles of ``m`` pixels of a row x ``L`` channels, one ``dot_u8s8`` call
    each over the whole reduction; None to decline."""
    found = _stages(group)
    if found is None:
        return None
    _, stages = found
    gemm = stages["qconv2d_gemm"]
    n, ob, oh, ow, lanes = (extent(iv) for iv in gemm.op.axis)
    k4 = extent(gemm.op.reduce_axis[0])
    limit = MAX_TILE_PIXELS.get(lanes, 4)
    m = largest_divisor(ow, limit)
    nb_space = divisors(ob, 4)
    nb = max(d for d in nb_space if d * m <= MAX_ACCUMULATORS.get(lanes, 4)) if lanes in MAX_ACCUMULATORS \
        else 1
    space = {"m": divisors(ow, limit), "nb": nb_space, "row_windows": [0, 1]}
    fallback = {"m": m, "nb": nb, "row_windows": ROW_WINDOWS}
    return ScheduleTemplate("cpu.qconv2d.packed", space, fallback,
                            lambda config: build_qconv2d_packed(target, group, config),
                            flops=2.0 * n * ob * lanes * oh * ow * k4 * 4)


def build_qconv2d_packed(target, group, config: dict):
    sch, stages = _stages(group)
    keep = {stages[t].op for t in ("qconv2d_im2col", "qconv2d_gemm", "qconv2d_wsum") if t in stages}
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and not stage.is_output and stage.op not in keep:
            stage.compute_inline()
    rows = stages["qconv2d_im2col"]
    kh, kw = stages["qconv2d_packed"].op.attrs["kernel"]
    rb, ry, rx, q, r = rows.op.axis
    # q walks (ky, kx, channel block): split so each index is a loop variable, not a division
    kyx, c4 = rows.split(q, nparts=kh * kw)
    ky, kx = rows.split(kyx, factor=kw)
    rows.reorder(rb, ry, ky, kx, rx, c4, r)
    rows.unroll(r)
    if "qconv2d_wsum" in stages:
        schedule_loop_nest(stages["qconv2d_wsum"])
    gemm = stages["qconv2d_gemm"]
    lanes = extent(gemm.op.axis[-1])
    out = sch[group.outputs[0].op]
    # the epilogue runs per tile, on the tile just computed: m pixels x L channels, still in L1
    b, o, y, x = out.op.axis
    oo, oi = out.split(o, factor=lanes * config["nb"])
    xo, xi = out.split(x, factor=config["m"])
    if config["row_windows"]:
        # each output row's windows are gathered once, next to the tiles that read them (a row of
        # windows is ~OW x K bytes: L1 or L2), instead of the whole image's going through memory
        out.reorder(b, y, oo, xo, oi, xi)
        row = out.fuse(b, y)
        out.parallel(row)
        rows.compute_at(out, row)
    else:
        out.reorder(b, oo, y, xo, oi, xi)
        out.parallel(out.fuse(b, oo, y))
        rows.parallel(rows.fuse(rb, ry))
    out.vectorize(xi)
    gemm.compute_at(out, xo)
    gb, go, gy, gx, j = gemm.op.axis
    q, r = gemm.op.reduce_axis
    gemm.reorder(gb, gy, go, gx, j, q, r)
    intrin = te.backend_intrinsic(target, "dot_u8s8", m=config["m"], k4=extent(q), nb=config["nb"])
    gemm.tensorize(go, intrin)
    return sch
