"""8-bit convolution on CPUs with a byte dot product, over channel-blocked uint8 activations:
``qconv2d`` as ``qconv2d_nchwc``.

With NCHW data the four bytes one ``vpdpbusd`` lane reads (four input channels) come from four
channel planes, and gathering them into im2col rows costs as much as the products at 64 output
channels (issue 40, stage 1). Here activations between quantized convolutions are stored as
``NCHW[Cb]c`` with the block ``Cb`` the whole channel count (rounded up to the intrinsic's lanes;
NHWC in effect), so at each kernel offset ``(ky, kx)`` a pixel's channels are ``Cb`` consecutive
bytes: the 32-bit word one lane reads is a plain load, and one ``dot_u8s8`` call (with its ``window``
axes) reduces the whole kernel window, its accumulators in registers throughout. No im2col buffer;
the weight is packed at compile time by ``qconv2d_weight_pack`` as ``[O/L, KH·KW·Cb/4, L, 4]``: the
reduction in (ky, kx, channel) order, channels padded to the block with zero weights, four consecutive
reduction bytes per 32-bit lane, ``L`` output channels per vector (16 with AVX-512 VNNI's ``vpdpbusd``,
8 with AVX-VNNI or AVX2's exact form: the backend's answer, never a guess).

The loop program of a ``qconv2d_nchwc -> requantize [-> dequantize, add, quantize]`` group::

    parallel for o_outer, y:                         # blocks of L * nb channels x output rows
      for x_outer:                                   # tiles of m pixels of the row
        acc[nb, m, L] = 0
        for ky, kx, c4:                              # one dot_u8s8 call: m x nb accumulator vectors
          acc += data[y*s + ky, x*s + kx, 4c4:4c4+4] . w[o, ky, kx, c4]   # in registers throughout
          prefetch w[o + nb, ky, kx, c4]             # the next block's weights (knob ``prefetch``)
        for x_inner: vectorized for o_inner:         # the epilogue on the tile just computed
                                                     # (a ragged last tile: tile_width):
          out[y, x, o] = u8(requantize(acc - zp * wsum[o]) [+ residual])   # bias, ReLU, residual add

The products run on raw bytes, as ``vpdpbusd`` multiplies them, so a data zero point is taken off as
``zp * wsum`` (the weight's sum per output channel: ``dot_zero_point_correction``, a third input
folded at compile time, not summed on every run); int8 data is moved to uint8 by adding 128 (its
zero point with it) in the padded copy of the input that a padded convolution reads anyway.

An input of fewer than ``PLANAR_CHANNELS`` channels with a wide window (ResNet's 7x7 RGB stem) is read
*planar*, from NCHW as it is: a word is four consecutive pixels of one channel's row (``kx`` padded
to 4 with zero weights), the intrinsic's window axes walk (channel, ky): 42 words per output where
4-byte pixels would take 49, and no layout transform of the image before it.

The layout pass (``alter_qconv2d_nchwc``) takes a plain 8-bit ``qconv2d`` with a constant int8 weight
of zero point 0; ``requantize`` and the residual
``dequantize -> add -> quantize`` then follow in the blocked layout (``alter_op_layout.follow``), so
the next convolution reads the bytes this one wrote.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import divisors, extent, inline_epilogue, largest_divisor, tagged_stages
from nnvm.cpu.switches import enabled
from nnvm.errors import Error, ScheduleError
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.nn import _conv2d_eval, conv2d_geometry
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.passes.alter_op_layout import AlteredNode

MAX_TILE_PIXELS = {16: 12, 8: 6}  # pixels per tile (accumulator vectors): zmm has 32 registers, ymm 16
# pixels x channel blocks per tile, leaving registers for operands; 10 of 16 ymm at 8 lanes: ResNet-18/50
# and MobileNetV2 int8 4-6% faster than 8 for haswell, 6-16% for alderlake (one thread; bench/RESULTS.md)
MAX_ACCUMULATORS = {16: 16, 8: 10}
PLANAR_CHANNELS = 4  # fewer input channels (an RGB stem): read NCHW, four pixels of a row per word


def tile_limits(target, lanes: int) -> tuple[int, int]:
    """(pixels, accumulator vectors) one tile may hold: the tables above for x86's 16 and 8 lanes; at 4
    lanes (Arm NEON) by the register file: ``sdot``/``usdot`` read four weight vectors per block and a
    row per pixel each step of four words, so 3/8 of it (12 of AArch64's 32: measured with
    ``bench/int8_arm.py``, 16 spilled in every layer4 kernel of ResNet-18); the NEON form keeps two
    vectors per accumulator, a quarter (8 of 32, 4 of ARMv7's 16). Up to 8 pixels."""
    if lanes in MAX_TILE_PIXELS:
        return MAX_TILE_PIXELS[lanes], MAX_ACCUMULATORS[lanes]
    registers = target.backend.vector_registers(target)
    neon = te.backend_intrinsic(target, "dot_u8s8", m=1, k4=1).params.get("isa") == "neon"
    vectors = registers // 4 if neon else registers * 3 // 8
    return min(8, vectors), vectors


def dot_lanes(target) -> int | None:
    """The lanes of the backend's ``dot_u8s8`` intrinsic on ``target``, or None if it has none."""
    try:
        return te.backend_intrinsic(target, "dot_u8s8", m=1, k4=1).params["lanes"]
    except (ScheduleError, AttributeError, KeyError):
        return None


# ---------------------------------------------------------------------------------------------------
# qconv2d_weight_pack: [O, C, KH, KW] int8 -> [O/L, K/4, L, 4]


def packed_shape(weight_shape: tuple, lanes: int, in_block: int = 0, planar: bool = False) -> tuple:
    """``[O/L, KH * KW * C/4, L, 4]``: the reduction in (ky, kx, channel) order, channels padded to 4 (or
    to ``in_block``, the channel block of the data ``qconv2d_nchwc`` reads). ``planar``: ``[O/L, C * KH
    * KW/4, L, 4]`` in (channel, ky, kx) order, ``kx`` padded to 4 (four pixels of one row per word)."""
    o, c, kh, kw = weight_shape
    if planar:
        return (-(-o // lanes), c * kh * -(-kw // 4), lanes, 4)
    return (-(-o // lanes), kh * kw * -(-max(c, in_block) // 4), lanes, 4)


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("qconv2d_weight_pack", in_types, ("weight",))
    if w.dtype != "int8" or len(w.shape) != 4:
        raise Error(f"qconv2d_weight_pack: expects an int8 OIHW weight, got {w.dtype}{list(w.shape)}")
    return [TensorType(packed_shape(w.shape, attrs["lanes"], attrs["in_block"], attrs["planar"]), "int8")]


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    o, c, kh, kw = shape_of(w)
    lanes = attrs["lanes"]
    if attrs["planar"]:
        g4 = -(-kw // 4)

        def planar(ob, q, j, r):
            oc, kx = ob * lanes + j, (q % g4) * 4 + r
            inside = te.all_of(oc < o, kx < kw)
            return te.if_then_else(inside, w[oc, q // (kh * g4), (q // g4) % kh, kx], te.const(0, "int8"))

        return [te.compute(out_types[0].shape, planar, name="qconv2d_weight_pack", tag="injective")]

    c4 = -(-max(c, attrs["in_block"]) // 4)

    def body(ob, q, j, r):
        oc, ch, kyx = ob * lanes + j, (q % c4) * 4 + r, q // c4
        inside = te.all_of(oc < o, ch < c)
        return te.if_then_else(inside, w[oc, ch, kyx // kw, kyx % kw], te.const(0, "int8"))

    return [te.compute(out_types[0].shape, body, name="qconv2d_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    w = xs[0]
    o, c, kh, kw = w.shape
    ob, k4, lanes, _ = packed_shape(w.shape, attrs["lanes"], attrs["in_block"], attrs["planar"])
    if attrs["planar"]:
        full = np.zeros((ob * lanes, c, kh, -(-kw // 4) * 4), np.int8)
        full[:o, :, :, :kw] = w
        return [full.reshape(ob, lanes, k4, 4).transpose(0, 2, 1, 3)]
    c4 = k4 // (kh * kw)
    full = np.zeros((ob * lanes, kh, kw, c4 * 4), np.int8)
    full[:o, :, :, :c] = w.transpose(0, 2, 3, 1)
    return [full.reshape(ob, lanes, k4, 4).transpose(0, 2, 1, 3)]


QCONV2D_WEIGHT_PACK = OpDef(
    "qconv2d_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE,
    attrs={"lanes": Attr(int), "in_block": Attr(int, 0, "channels padded to this (0: to 4)"),
           "planar": Attr(bool, False, "words of four kx of one channel row (NCHW data)")},
    num_inputs=(1, 1), evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an int8 OIHW weight as [O/L, K/4, L, 4] for dot_u8s8 (zeros past O and K)")



# ---------------------------------------------------------------------------------------------------
# dot_zero_point_correction: a packed weight [B, K/4, L, 4] -> int32 [B * L], zp * its sums


def _correction_infer(in_types, attrs):
    (w,) = require_inputs("dot_zero_point_correction", in_types, ("packed_weight",))
    if w.dtype != "int8" or len(w.shape) != 4 or w.shape[3] != 4:
        raise Error(f"dot_zero_point_correction: expects an int8 [B, K/4, L, 4] packed weight, got "
                    f"{w.dtype}{list(w.shape)}")
    return [TensorType((w.shape[0] * w.shape[2],), "int32")]


def _correction_compute(inputs, attrs, out_types):
    (w,) = inputs
    _, k4, lanes, _ = shape_of(w)
    q = te.reduce_axis((0, k4), name="q")
    r = te.reduce_axis((0, 4), name="r")
    zp = te.const(attrs["zero_point"], "int32")
    return [te.compute(out_types[0].shape, lambda o: zp * te.sum(
        w[o // lanes, q, o % lanes, r].astype("int32"), axis=[q, r]), name="dot_zero_point_correction")]


def _correction_eval(xs, attrs):
    w = xs[0].astype(np.int64)
    sums = w.sum(axis=(1, 3)).reshape(-1)  # [B, L] in output-channel order
    return [(attrs["zero_point"] * sums).astype(np.int32)]


DOT_ZERO_POINT_CORRECTION = OpDef(
    "dot_zero_point_correction", _correction_infer, _correction_compute, OpPattern.REDUCTION,
    attrs={"zero_point": Attr(int)}, num_inputs=(1, 1),
    evaluate=checked_evaluate(_correction_infer, _correction_eval),
    doc="zero_point * the sums of a weight packed for dot_u8s8, per output channel (folded at compile "
        "time: the term a data zero point takes off products run on raw bytes)")


def zero_point_correction(zp: int, packed_input: int = 1) -> tuple:
    """``AlteredNode.extra`` for a kernel whose data zero point ``zp`` (with int8 data's 128) is not 0:
    the correction computed from its packed weight (input ``packed_input``), else nothing."""
    return ((packed_input, "dot_zero_point_correction", {"zero_point": zp}),) if zp else ()


# ---------------------------------------------------------------------------------------------------
# qconv2d_nchwc


def channel_block(channels: int, lanes: int) -> int:
    """The block (the whole padded channel count) an 8-bit activation of ``channels`` is stored in:
    rounded up to ``lanes``, so the producer's tiles of ``lanes`` channels fill it and its consumer
    reads it as it is."""
    return -(-channels // lanes) * lanes


def input_block(channels: int, lanes: int) -> int:
    """The block a convolution reads: ``channel_block``, but only rounded up to 4 (one dot word) below
    ``lanes`` channels (an RGB image: 4 bytes a pixel, not 16)."""
    return -(-channels // 4) * 4 if channels < lanes else channel_block(channels, lanes)


def _geometry(data_shape, attrs) -> tuple:
    """(n, oh, ow, channels read): NCHW[C]c data, or NCHW data read planar (``PLANAR_CHANNELS``)."""
    if len(data_shape) == 4:
        n, cb, h, w = data_shape
    else:
        n, _, h, w, cb = data_shape
    kh, kw = attrs["kernel"]
    _, _, oh, ow = conv2d_geometry((n, cb, h, w), (attrs["channels"], cb, kh, kw), {**attrs, "groups": 1})
    return n, oh, ow, cb


def _infer(in_types, attrs):
    data, packed = require_inputs("qconv2d_nchwc", in_types[:2], ("data", "packed_weight"))
    planar = len(data.shape) == 4
    blocked = len(data.shape) == 5 and data.shape[1] == 1
    if data.dtype not in ("uint8", "int8") or packed.dtype != "int8" or not (planar or blocked) \
            or (planar and tuple(attrs["dilation"]) != (1, 1)):
        raise Error(f"qconv2d_nchwc: expects 8-bit NCHW[x]c data with one channel block (or NCHW, undilated) "
                    f"and an int8 packed weight, got {data.dtype}{list(data.shape)} and "
                    f"{packed.dtype}{list(packed.shape)}")
    o, (kh, kw), lanes = attrs["channels"], attrs["kernel"], attrs["lanes"]
    n, oh, ow, cb = _geometry(data.shape, attrs)
    if tuple(packed.shape) != packed_shape((o, cb, kh, kw), lanes, planar=planar):
        raise Error(f"qconv2d_nchwc: the packed weight {list(packed.shape)} does not fit {(o, cb, kh, kw)}")
    ob = channel_block(o, lanes)
    check_correction("qconv2d_nchwc", in_types, attrs, data.dtype, ob)
    return [TensorType((n, 1, oh, ow, ob), "int32")]


def check_correction(op: str, in_types, attrs, dtype: str, channels: int) -> None:
    """The third input: ``dot_zero_point_correction``'s [channels] int32, there exactly when the data's zero
    point as the kernel reads it (int8 data: plus 128) is not 0."""
    zp = attrs["data_zero_point"] + (128 if dtype == "int8" else 0)
    extra = in_types[2:]
    fits = bool(extra) and (extra[0].dtype, tuple(extra[0].shape)) == ("int32", (channels,))
    if bool(zp) != bool(extra) or (extra and not fits):
        got = f"{extra[0].dtype}{list(extra[0].shape)}" if extra else "none"
        raise Error(f"{op}: a data zero point of {zp} needs a zero point correction int32[{channels}] "
                    f"(0: none), got {got}")


def tile_width(width: int, lanes: int) -> int:
    """The width the accumulator stage computes: ``width``, or rounded up to a whole number of good tiles
    where ``width`` has no divisor of at least half the tile limit (a 13-pixel row would otherwise be
    thirteen 1-pixel tiles): the extra pixels read padding and are never stored."""
    limit = MAX_TILE_PIXELS.get(lanes, 4)
    if width <= limit or largest_divisor(width, limit) * 2 > limit:
        return width
    return min(-(-width // m) * m for m in range(limit, limit // 2, -1))


def _compute(inputs, attrs, out_types):
    if len(shape_of(inputs[0])) == 4:
        return _compute_planar(inputs, attrs, out_types)
    data, packed = inputs[:2]
    _, _, h, w, cb = shape_of(data)
    n, _, oh, ow, ob = out_types[0].shape
    _, k4, lanes, _ = shape_of(packed)
    kh, kw = attrs["kernel"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    signed = data.dtype == "int8"
    zp = attrs["data_zero_point"] + (128 if signed else 0)  # int8 data is read as uint8 + 128
    owp = tile_width(ow, lanes)
    width = max(w + pl + pr, (owp - 1) * sw + (kw - 1) * dw + 1)  # the last tile's extra pixels too
    if signed or any(attrs["padding"]) or width > w:
        def pad_body(b, c, y, x, ch):
            iy, ix = y - pt, x - pl
            v = data[b, c, iy, ix, ch]
            v = (v.astype("int32") + te.const(128, "int32")).astype("uint8") if signed else v
            return te.if_then_else(te.all_of(iy >= 0, iy < h, ix >= 0, ix < w), v, te.const(zp, "uint8"))

        src = te.compute((n, 1, h + pt + pb, width, cb), pad_body, name="qconv2d_nchwc_pad",
                         tag="qconv2d_nchwc_pad")
    else:
        src = data
    c4 = cb // 4
    ky = te.reduce_axis((0, kh), name="ky")
    kx = te.reduce_axis((0, kw), name="kx")
    q = te.reduce_axis((0, c4), name="q")
    r = te.reduce_axis((0, 4), name="r")

    def gemm_body(b, o, y, x, j):
        a = src[b, 0, y * sh + ky * dh, x * sw + kx * dw, q * 4 + r].astype("int32")
        return te.sum(a * packed[o, (ky * kw + kx) * c4 + q, j, r].astype("int32"), axis=[ky, kx, q, r])

    gemm = te.compute((n, ob // lanes, oh, owp, lanes), gemm_body, name="qconv2d_nchwc_gemm",
                      tag="qconv2d_nchwc_gemm")
    workload = {"data_shape": (n, 1, h, w, cb), "channels": attrs["channels"], "kernel": (kh, kw),
                "lanes": lanes, "strides": (sh, sw), "padding": tuple(attrs["padding"]),
                "dilation": (dh, dw), "data_dtype": data.dtype, "data_zero_point": zp, "layout": f"NCHW{cb}c"}
    if zp == 0:
        def body(b, c, y, x, o):
            return gemm[b, o // lanes, y, x, o % lanes]
    else:
        correction = inputs[2]

        def body(b, c, y, x, o):
            return gemm[b, o // lanes, y, x, o % lanes] - correction[o]

    return [te.compute(out_types[0].shape, body, name="qconv2d_nchwc", tag="qconv2d_nchwc",
                       attrs={"workload": workload, **workload})]


def _compute_planar(inputs, attrs, out_types):
    """NCHW data (a few channels: an RGB image), each word four consecutive ``kx`` of one channel's row:
    ``gemm[.., o, y, x, j] = sum(c, ky, g, r) src[c, y*sh + ky, x*sw + 4g + r] * w[o, c, ky, 4g + r]``,
    the window axes of ``dot_u8s8`` walking (channel, ky). The padded copy is wide enough for the last
    word's bytes past the window (they meet zero weights)."""
    data, packed = inputs[:2]
    _, c, h, w = shape_of(data)
    n, _, oh, ow, ob = out_types[0].shape
    _, _, lanes, _ = shape_of(packed)
    kh, kw = attrs["kernel"]
    g4 = -(-kw // 4)
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["padding"]
    signed = data.dtype == "int8"
    zp = attrs["data_zero_point"] + (128 if signed else 0)
    owp = tile_width(ow, lanes)
    width = max(w + pl + pr, (owp - 1) * sw + 4 * g4)

    def pad_body(b, ch, y, x):
        iy, ix = y - pt, x - pl
        v = data[b, ch, iy, ix]
        v = (v.astype("int32") + te.const(128, "int32")).astype("uint8") if signed else v
        return te.if_then_else(te.all_of(iy >= 0, iy < h, ix >= 0, ix < w), v, te.const(zp, "uint8"))

    src = te.compute((n, c, h + pt + pb, width), pad_body, name="qconv2d_nchwc_pad", tag="qconv2d_nchwc_pad")
    u = te.reduce_axis((0, c), name="u")
    v = te.reduce_axis((0, kh), name="v")
    g = te.reduce_axis((0, g4), name="g")
    r = te.reduce_axis((0, 4), name="r")

    def gemm_body(b, o, y, x, j):
        a = src[b, u, y * sh + v, x * sw + g * 4 + r].astype("int32")
        return te.sum(a * packed[o, (u * kh + v) * g4 + g, j, r].astype("int32"), axis=[u, v, g, r])

    gemm = te.compute((n, ob // lanes, oh, owp, lanes), gemm_body, name="qconv2d_nchwc_gemm",
                      tag="qconv2d_nchwc_gemm")
    workload = {"data_shape": (n, c, h, w), "channels": attrs["channels"], "kernel": (kh, kw), "lanes": lanes,
                "strides": (sh, sw), "padding": tuple(attrs["padding"]), "dilation": (1, 1),
                "data_dtype": data.dtype, "data_zero_point": zp, "layout": "NCHW"}
    correction = inputs[2] if zp else None

    def body(b, cb, y, x, o):
        acc = gemm[b, o // lanes, y, x, o % lanes]
        return acc - correction[o] if zp else acc

    return [te.compute(out_types[0].shape, body, name="qconv2d_nchwc", tag="qconv2d_nchwc",
                       attrs={"workload": workload, **workload})]


def _eval(xs, attrs):
    data, packed = xs[:2]
    (kh, kw), lanes = attrs["kernel"], attrs["lanes"]
    ob, k4, _, _ = packed.shape
    if data.ndim == 4:  # planar
        c = data.shape[1]
        weight = packed.transpose(0, 2, 1, 3).reshape(ob * lanes, c, kh, -1)[:, :, :, :kw]
        x = data.astype(np.int64) - attrs["data_zero_point"]
        (y,) = _conv2d_eval([x, weight.astype(np.int64)], {**attrs, "groups": 1})
        return [y.transpose(0, 2, 3, 1)[:, None]]
    cb = data.shape[4]
    weight = packed.transpose(0, 2, 1, 3).reshape(ob * lanes, kh, kw, cb).transpose(0, 3, 1, 2)
    x = data[:, 0].transpose(0, 3, 1, 2).astype(np.int64) - attrs["data_zero_point"]
    (y,) = _conv2d_eval([x, weight.astype(np.int64)], {**attrs, "groups": 1})
    return [y.transpose(0, 2, 3, 1)[:, None]]


QCONV2D_NCHWC = OpDef(
    "qconv2d_nchwc", _infer, _compute, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"strides": Attr(tuple), "padding": Attr(tuple), "dilation": Attr(tuple), "kernel": Attr(tuple),
           "channels": Attr(int), "lanes": Attr(int), "data_zero_point": Attr(int, 0)},
    num_inputs=(2, 3), evaluate=checked_evaluate(_infer, _eval),
    doc="qconv2d (weight zero point 0, groups 1) of NCHW[C]c 8-bit data into NCHW[O]c int32, over a "
        "weight packed by qconv2d_weight_pack with the channels padded to the data's block (and, with a "
        "data zero point, its dot_zero_point_correction)")


def alter_qconv2d_nchwc(target, node, in_types) -> AlteredNode | None:
    """qconv2d -> qconv2d_nchwc where the backend has ``dot_u8s8``, the weight is an int8 constant with
    zero point 0 and one group; None: not mine (``schedule_qconv.py``'s im2col kernel may take it)."""
    if node.op != "qconv2d" or len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    attrs = dict(node.attrs)
    if (weight.dtype != "int8" or data.dtype not in ("uint8", "int8") or attrs.get("groups", 1) != 1
            or attrs.get("weight_zero_point", 0) != 0 or data.symbolic or weight.symbolic
            ):
        return None
    lanes = dot_lanes(target)
    if lanes is None:
        return None
    cb, ob = input_block(data.shape[1], lanes), channel_block(weight.shape[0], lanes)
    kw = weight.shape[3]
    # a few channels and a wide window (a 7x7 RGB stem): words of four pixels of a row, read from NCHW
    planar = (data.shape[1] < PLANAR_CHANNELS and tuple(attrs.get("dilation", (1, 1))) == (1, 1)
              and data.shape[1] * -(-kw // 4) <= kw)
    new = {"strides": tuple(attrs.get("strides", (1, 1))),
           "padding": tuple(attrs.get("padding", (0, 0, 0, 0))),
           "dilation": tuple(attrs.get("dilation", (1, 1))), "kernel": tuple(weight.shape[2:]),
           "channels": int(weight.shape[0]), "lanes": lanes,
           "data_zero_point": int(attrs.get("data_zero_point", 0))}
    zp = new["data_zero_point"] + (128 if data.dtype == "int8" else 0)
    pack = {"lanes": lanes, "in_block": 0 if planar else cb, "planar": planar}
    return AlteredNode("qconv2d_nchwc", new, inputs=(None if planar else ("NCHW", f"NCHW{cb}c"), None),
                       outputs=(("NCHW", f"NCHW{ob}c"),), prepare=(None, ("qconv2d_weight_pack", pack)),
                       constant_inputs=(1,), extra=zero_point_correction(zp))


# ---------------------------------------------------------------------------------------------------
# the schedule

_TAGS = ("qconv2d_nchwc_pad", "qconv2d_nchwc_gemm", "qconv2d_nchwc")


def _stages(group):
    return tagged_stages(group, "qconv2d_nchwc", _TAGS, _TAGS[1:])


def qconv2d_nchwc_template(target, group) -> ScheduleTemplate | None:
    """``cpu.qconv2d_nchwc.direct``: tiles of ``m`` pixels of a row x ``nb`` blocks of ``L`` channels,
    one ``dot_u8s8`` call over the whole kernel window; None to decline."""
    found = _stages(group)
    if found is None:
        return None
    gemm = found[1]["qconv2d_nchwc_gemm"]
    n, ob, oh, ow, lanes = (extent(iv) for iv in gemm.op.axis)
    steps = 1
    for iv in gemm.op.reduce_axis:
        steps *= extent(iv)
    limit, budget = tile_limits(target, lanes)
    # no wider than the row: the computed width (``tile_width``) may be rounded up past it
    limit = min(limit, extent(group.outputs[0].op.axis[3]))
    m = largest_divisor(ow, limit)
    nb_space = divisors(ob, 4)
    nb = max(d for d in nb_space if d * m <= budget) if any(d * m <= budget for d in nb_space) else 1
    space = {"m": divisors(ow, limit), "nb": nb_space, "rows_outer": [False, True], "prefetch": [False, True]}
    workload = found[1]["qconv2d_nchwc"].op.attrs["workload"]
    fallback = {"m": m, "nb": nb, "rows_outer": enabled("qconv_rows_outer") and rows_outer(workload),
                "prefetch": enabled("qconv_prefetch")}
    return ScheduleTemplate("cpu.qconv2d_nchwc.direct", space, fallback,
                            lambda config: build_qconv2d_nchwc(target, group, config),
                            flops=2.0 * n * ob * lanes * oh * ow * steps)


def weight_bytes(workload: dict) -> int:
    """The packed weight's bytes: output channels x window x the channels read."""
    shape, (kh, kw) = workload["data_shape"], workload["kernel"]
    channels = shape[-1] if len(shape) == 5 else shape[1]  # NCHW[C]c, or NCHW read planar
    return workload["channels"] * kh * kw * channels


def rows_outer(workload: dict) -> bool:
    """Whether the parallel loop runs over rows outside channel blocks: where the weight is smaller than
    the data it is read against (ResNet's layer1-2), so each thread writes every channel of a band of
    rows, which the next convolution (reading every channel of its rows) then finds in the same core's
    L2, and only the weight, small, is read by both cores. Channel blocks outside rows (the other case,
    large weights: layer3-4) split the weight between the threads and read it once per block. The
    switch ``qconv_rows_outer`` (on by default; ``0`` for A/B) lets the fallback ask it: quiet, 2 threads,
    ResNet-18 int8 2.89 -> 2.40 ms and ResNet-50 6.18 -> 5.35 ms (neutral at one thread; bench/RESULTS.md)."""
    return weight_bytes(workload) < int(np.prod(workload["data_shape"]))


def build_qconv2d_nchwc(target, group, config: dict):
    sch, stages = _stages(group)
    keep = {stages[t].op for t in _TAGS[:2] if t in stages}
    inline_epilogue(sch, keep)
    if "qconv2d_nchwc_pad" in stages:  # one padded copy of the input, a row per task
        pad = stages["qconv2d_nchwc_pad"]
        if len(pad.op.axis) == 5:  # NCHW[C]c: one channel block, rows outermost already
            pb, pcb, py, _, pc = pad.op.axis
            pad.parallel(pad.fuse(pb, pcb, py))
            pad.vectorize(pc)
        else:  # planar NCHW: rows outside channels, so each thread pads the rows its convolution reads
            pb, pc, py, px = pad.op.axis  # (the pool splits both loops alike; channels outside would
            pad.reorder(pb, py, pc, px)  # hand a third of the copy to the other core: bench/RESULTS.md)
            pad.parallel(pad.fuse(pb, py))
    gemm = stages["qconv2d_nchwc_gemm"]
    lanes = extent(gemm.op.axis[-1])
    m, nb = config["m"], config["nb"]
    out = sch[group.outputs[0].op]
    b, cb, y, x, o = out.op.axis
    oo, oi = out.split(o, factor=lanes * nb)
    ot, ol = out.split(oi, factor=lanes)  # one vector per accumulator block: contiguous, no gather
    xo, xi = out.split(x, factor=m)
    if config.get("rows_outer", False):  # (a tuning log's config from before the knob: channels outer)
        out.reorder(b, cb, y, oo, xo, xi, ot, ol)
        out.parallel(out.fuse(b, cb, y, oo))
    else:  # channel blocks outside rows: a block's weights (KH*KW*C*L*nb bytes) stay in L2 for its rows
        out.reorder(b, cb, oo, y, xo, xi, ot, ol)
        out.parallel(out.fuse(b, cb, oo, y))
    out.unroll(xi)  # the epilogue on the accumulators where they are, in registers: a loop would
    out.unroll(ot)  # store them to the stack and read them back (LLVM unrolls only short bodies)
    out.vectorize(ol)
    gemm.compute_at(out, xo)
    gb, go, gy, gx, j = gemm.op.axis
    ky, kx, q, r = gemm.op.reduce_axis
    gemm.reorder(gb, gy, go, gx, j, ky, kx, q, r)
    extra = {"prefetch": True} if config.get("prefetch", False) else {}
    intrin = te.backend_intrinsic(target, "dot_u8s8", m=m, k4=extent(q), nb=nb,
                                  window=(extent(ky), extent(kx)), **extra)
    gemm.tensorize(go, intrin)
    return sch
