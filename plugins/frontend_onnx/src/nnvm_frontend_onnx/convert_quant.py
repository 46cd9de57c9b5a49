"""Integer quantization: QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv, MatMulInteger,
ConvInteger (8- and 16-bit integer types; the 8-bit float and 4-bit types are out of scope).

Quantized values are computed exactly: integer operands are widened and their zero points
subtracted in float32 (integers below 2^24 are exact there, as are their products and the sums of a
small matmul or convolution), results are rounded half to even (``round``) and saturated to the output
type, as the ONNX specification says.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def _per_axis(ctx: Context, v: str, x_shape: tuple, axis: int, block: int) -> str:
    """A scale or zero point (scalar, 1-D along ``axis``, or blocked) shaped to broadcast against x."""
    shape = ctx.shape(v)
    rank = len(x_shape)
    if math.prod(shape) == 1 and block == 0:
        return ctx.reshape(v, ())
    axis = normalize_axis(axis, rank, ctx)
    if block:
        n = x_shape[axis]
        idx = ctx.param((np.arange(n) // block).astype(np.int64), "block_index")
        return ctx.op("take", [v, idx], {"axis": axis})
    if len(shape) != 1 or shape[0] != x_shape[axis]:
        raise ctx.error(f"a scale or zero point of shape {shape} does not fit axis {axis} of {x_shape}")
    return ctx.reshape(v, tuple(shape[0] if d == axis else 1 for d in range(rank)))


def quantize(ctx: Context, y: str, dtype: str) -> str:
    """Round half to even, saturate to ``dtype``'s range and cast (``y`` is float)."""
    info = np.iinfo(dtype)
    return ctx.cast(
        ctx.op("clip", [ctx.op("round", [y])], {"a_min": float(info.min), "a_max": float(info.max)}), dtype
    )


def _centered(ctx: Context, x: str, zp: str, axis: int = 1, block: int = 0) -> str:
    """``float32(x) - zero_point``."""
    xf = ctx.cast(x, "float32")
    if not zp:
        return xf
    return ctx.op("subtract", [xf, ctx.cast(_per_axis(ctx, zp, ctx.shape(x), axis, block), "float32")])


@converter("QuantizeLinear")
def convert_quantize(ctx: Context, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else ""
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    if zp:
        dtype = ctx.dtype(zp)
    elif ctx.attr("output_dtype", 0):
        dtype = ctx.attr_dtype("output_dtype")
    else:
        dtype = "uint8"
    if np.dtype(dtype).kind not in "iu":
        raise ctx.error(f"quantizing to {dtype} is not supported")
    work = "float64" if ctx.dtype(x) == "float64" else "float32"
    if ctx.attr("precision", 0):
        work = ctx.attr_dtype("precision")
    xs = ctx.op(
        "divide", [ctx.cast(x, work), ctx.cast(_per_axis(ctx, scale, ctx.shape(x), axis, block), work)]
    )
    y = ctx.op("round", [xs])
    if zp:
        y = ctx.op("add", [y, ctx.cast(_per_axis(ctx, zp, ctx.shape(x), axis, block), work)])
    return quantize(ctx, y, dtype)


@converter("DequantizeLinear")
def convert_dequantize(ctx: Context, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else ""
    axis, block = int(ctx.attr("axis", 1)), int(ctx.attr("block_size", 0))
    out = (
        ctx.attr_dtype("output_dtype")
        if ctx.attr("output_dtype", 0)
        else ctx.dtype(scale)
    )
    if np.dtype(ctx.dtype(x)).kind not in "iu":
        raise ctx.error(f"dequantizing {ctx.dtype(x)} is not supported")
    y = ctx.op(
        "multiply",
        [
            _centered(ctx, x, zp, axis, block),
            ctx.cast(_per_axis(ctx, scale, ctx.shape(x), axis, block), "float32"),
        ],
    )
    return ctx.cast(y, out)


def _column_param(ctx: Context, v: str, rank: int) -> str:
    """A per-column (last axis) scale or zero point of a matmul's right operand, or a scalar."""
    shape = ctx.shape(v)
    if math.prod(shape) == 1:
        return ctx.reshape(v, ())
    return ctx.reshape(v, (1,) * (rank - 1) + (shape[-1],)) if len(shape) == 1 else v


def _row_param(ctx: Context, v: str, rank: int) -> str:
    """A per-row scale or zero point of a matmul's left operand ((M,) or (M, 1)), or a scalar."""
    shape = ctx.shape(v)
    if math.prod(shape) == 1:
        return ctx.reshape(v, ())
    return ctx.reshape(v, (shape[0], 1)) if len(shape) == 1 else v


@converter("MatMulInteger")
def convert_matmul_integer(ctx: Context, inputs):
    a, b = inputs[0], inputs[1]
    azp = inputs[2] if len(inputs) > 2 else ""
    bzp = inputs[3] if len(inputs) > 3 else ""
    af, bf = ctx.cast(a, "float32"), ctx.cast(b, "float32")
    if azp:
        af = ctx.op("subtract", [af, ctx.cast(_row_param(ctx, azp, ctx.rank(a)), "float32")])
    if bzp:
        bf = ctx.op("subtract", [bf, ctx.cast(_column_param(ctx, bzp, ctx.rank(b)), "float32")])
    return ctx.cast(ctx.op("matmul", [af, bf]), "int32")


@converter("QLinearMatMul")
def convert_qlinear_matmul(ctx: Context, inputs):
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale = inputs[:7]
    y_zp = inputs[7] if len(inputs) > 7 else ""
    af = ctx.op("subtract", [ctx.cast(a, "float32"), ctx.cast(_row_param(ctx, a_zp, ctx.rank(a)), "float32")])
    bf = ctx.op(
        "subtract", [ctx.cast(b, "float32"), ctx.cast(_column_param(ctx, b_zp, ctx.rank(b)), "float32")]
    )
    acc = ctx.op("matmul", [af, bf])  # exact integers
    work = ctx.dtype(a_scale)
    factor = ctx.op(
        "divide",
        [
            ctx.op(
                "multiply", [_row_param(ctx, a_scale, ctx.rank(a)), _column_param(ctx, b_scale, ctx.rank(b))]
            ),
            ctx.reshape(y_scale, ()) if math.prod(ctx.shape(y_scale)) == 1 else y_scale,
        ],
    )
    y = ctx.op("multiply", [ctx.cast(acc, work), factor])
    y = ctx.cast(y, "float32")
    if y_zp:
        y = ctx.op("add", [y, ctx.cast(ctx.reshape(y_zp, ()), "float32")])
    return quantize(ctx, y, ctx.dtype(y_zp) if y_zp else ctx.dtype(a))


def _conv_float(ctx: Context, x: str, w: str) -> str:
    """A Conv of float operands through the Conv converter (same attributes as the node)."""
    from nnvm_frontend_onnx.convert_nn import convert_conv

    return convert_conv(ctx, [x, w])


@converter("ConvInteger")
def convert_conv_integer(ctx: Context, inputs):
    x, w = inputs[0], inputs[1]
    xzp = inputs[2] if len(inputs) > 2 else ""
    wzp = inputs[3] if len(inputs) > 3 else ""
    xf = _centered(ctx, x, xzp)
    wf = ctx.cast(w, "float32")
    if wzp:
        wf = ctx.op("subtract", [wf, ctx.cast(_per_axis(ctx, wzp, ctx.shape(w), 0, 0), "float32")])
    return ctx.cast(_conv_float(ctx, xf, wf), "int32")


@converter("QLinearConv")
def convert_qlinear_conv(ctx: Context, inputs):
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else ""
    xf = _centered(ctx, x, x_zp)
    wf = ctx.op(
        "subtract", [ctx.cast(w, "float32"), ctx.cast(_per_axis(ctx, w_zp, ctx.shape(w), 0, 0), "float32")]
    )
    acc = _conv_float(ctx, xf, wf)
    if bias:
        shape = (ctx.shape(bias)[0],) + (1,) * (ctx.rank(acc) - 2)
        acc = ctx.op("add", [acc, ctx.reshape(ctx.cast(bias, "float32"), shape)])
    rank = ctx.rank(acc)
    ws = (
        ctx.reshape(w_scale, ())
        if math.prod(ctx.shape(w_scale)) == 1
        else ctx.reshape(w_scale, (ctx.shape(w_scale)[0],) + (1,) * (rank - 2))
    )
    factor = ctx.op("divide", [ctx.op("multiply", [ctx.reshape(x_scale, ()), ws]), ctx.reshape(y_scale, ())])
    y = ctx.op(
        "add",
        [ctx.op("multiply", [acc, ctx.cast(factor, "float32")]), ctx.cast(ctx.reshape(y_zp, ()), "float32")],
    )
    return quantize(ctx, y, ctx.dtype(y_zp))
