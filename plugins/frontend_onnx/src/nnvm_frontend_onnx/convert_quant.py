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
from nnvm_frontend_onnx.convert_nn import _as_2d, _from_2d, _window, convert_conv


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
    return convert_conv(ctx, [x, w])


def convert_conv_integer(ctx: Context, inputs):
    x, w = inputs[0], inputs[1]
    xzp = inputs[2] if len(inputs) > 2 else ""
    wzp = inputs[3] if len(inputs) > 3 else ""
    xf = _centered(ctx, x, xzp)
    wf = ctx.cast(w, "float32")
    if wzp:
        wf = ctx.op("subtract", [wf, ctx.cast(_per_axis(ctx, wzp, ctx.shape(w), 0, 0), "float32")])
    return ctx.cast(_conv_float(ctx, xf, wf), "int32")


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


# ---------------------------------------------------------------------------------------------------
# the integer paths: the quantized operators (nnvm.ops.quant), used when the scales and zero points
# are constants of the supported forms; anything else takes the float lowering above, which is exact.

QUANT = ("uint8", "int8")


class _NotInteger(Exception):
    """The node's operands are not of a form the quantized operators take; lower it in float."""


def _const_array(ctx: Context, v: str) -> np.ndarray:
    value = ctx.const_value(v) if v else None
    if value is None or getattr(value, "dtype", None) is None or value.dtype == object:
        raise _NotInteger
    return np.asarray(value)


def _scalar_zp(ctx: Context, v: str, dtype: str | None = None) -> int:
    """A zero point that is one value (per tensor, or per channel but all equal): the int."""
    if not v:
        return 0
    a = _const_array(ctx, v)
    if a.size == 0 or (dtype is not None and str(a.dtype) != dtype) or np.any(a != a.reshape(-1)[0]):
        raise _NotInteger
    return int(a.reshape(-1)[0])


def _scale(ctx: Context, v: str) -> np.ndarray:
    a = _const_array(ctx, v).astype(np.float32)
    if a.ndim > 1 or not np.all(a > 0):
        raise _NotInteger
    return a


def _multiplier(ctx: Context, *scales: np.ndarray, divide: np.ndarray | None = None) -> str:
    """``prod(scales) / divide`` in float32, as onnxruntime forms its requantization multiplier, as a
    scalar or a per-channel weight."""
    m = np.float32(1)
    for s in scales:
        m = (m * s).astype(np.float32)
    if divide is not None:
        m = (m / divide.reshape(())).astype(np.float32)
    m = np.asarray(m, np.float32)
    return ctx.param(m.reshape(()) if m.size == 1 else m.reshape(-1), "requant_scale")


def _requantize(ctx: Context, acc: str, multiplier: str, bias: str, y_zp_value: str, axis: int = 1) -> str:
    attrs = {"axis": axis}
    if y_zp_value is None:
        attrs["out_dtype"] = "float32"
    else:
        attrs["out_dtype"], attrs["zero_point"] = y_zp_value
    inputs = [acc, multiplier] + ([bias] if bias else [])
    return ctx.op("requantize", inputs, attrs)


def _bias(ctx: Context, bias: str, channels: int) -> str:
    if not bias:
        return ""
    b = _const_array(ctx, bias)
    if str(b.dtype) != "int32" or b.shape not in ((), (1,), (channels,)):
        raise _NotInteger
    return ctx.param(b.reshape(()) if b.size == 1 else b, "bias")


def _out_zp(ctx: Context, y_zp: str, default: str) -> tuple:
    """(dtype, zero point) of a quantized output."""
    if not y_zp:
        return default, 0
    dtype = ctx.dtype(y_zp)
    if dtype not in QUANT:
        raise _NotInteger
    return dtype, _scalar_zp(ctx, y_zp)


def _integer_conv(ctx: Context, x: str, x_zp: str, w: str, w_zp: str) -> tuple[str, int]:
    """The int32 accumulator of an 8-bit convolution (qconv2d) and its spatial rank."""
    if ctx.dtype(x) not in QUANT or ctx.dtype(w) not in QUANT or ctx.rank(x) not in (3, 4):
        raise _NotInteger
    if ctx.rank(w) != ctx.rank(x):
        raise ctx.error(f"weight of rank {ctx.rank(w)} does not match data of rank {ctx.rank(x)}")
    nsp, kernel, strides, dilations, padding = _window(ctx, x, ctx.shape(w)[2:])
    attrs = {"strides": strides, "padding": padding, "dilation": dilations,
             "groups": int(ctx.attr("group", 1)),
             "data_zero_point": _scalar_zp(ctx, x_zp), "weight_zero_point": _scalar_zp(ctx, w_zp)}
    return ctx.op("qconv2d", [_as_2d(ctx, x, nsp), _as_2d(ctx, w, nsp)], attrs), nsp


def _integer_qlinear_conv(ctx: Context, inputs) -> str:
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = inputs[:8]
    bias = inputs[8] if len(inputs) > 8 else ""
    out_zp = _out_zp(ctx, y_zp, "uint8")
    xs, ws, ys = _scale(ctx, x_scale), _scale(ctx, w_scale), _scale(ctx, y_scale)
    if xs.size != 1 or ys.size != 1:
        raise _NotInteger
    acc, nsp = _integer_conv(ctx, x, x_zp, w, w_zp)
    channels = ctx.shape(acc)[1]
    if ws.size not in (1, channels):
        raise _NotInteger
    multiplier = _multiplier(ctx, xs.reshape(()), ws, divide=ys)
    y = _requantize(ctx, acc, multiplier, _bias(ctx, bias, channels), out_zp)
    return _from_2d(ctx, y, nsp)


def _integer_matmul(ctx: Context, a: str, a_zp: str, b: str, b_zp: str, trans_b: bool = False) -> tuple:
    """The int32 product of ``a`` [..., K] and a 2-D ``b`` [K, N] (or [N, K] with ``trans_b``) through
    qdense, as [..., N] (or as [rows, N] where ``a`` has several static leading axes that are not 1), with
    the shape to give it back. A scalar zero point of ``a`` computed at run time (DynamicQuantizeLinear's) is
    an input of qdense."""
    if ctx.dtype(a) not in QUANT or ctx.dtype(b) not in QUANT or ctx.rank(b) != 2 or ctx.rank(a) < 2:
        raise _NotInteger
    if a_zp and math.prod(ctx.shape(a_zp)) != 1:
        raise _NotInteger  # per-row zero points of the left operand
    shape = ctx.shape(a)
    k = shape[-1]
    weight = b if trans_b else ctx.transpose(b, (1, 0))
    if ctx.shape(weight)[1] != k:
        raise ctx.error(f"the contracted sizes differ: {shape} and {ctx.shape(b)}")
    rows = a
    if sum(d != 1 for d in shape[:-1]) > 1 and all(isinstance(d, int) for d in shape):
        rows = ctx.reshape(a, (math.prod(shape[:-1]), k))  # the packed kernel's rows (symbolic: as is)
    inputs = [rows, weight]
    if a_zp and ctx.const_value(a_zp) is None:  # computed at run time
        if ctx.dtype(a_zp) != ctx.dtype(a):
            raise _NotInteger
        inputs.append(a_zp)
        a_zp = ""
    attrs = {"data_zero_point": _scalar_zp(ctx, a_zp), "weight_zero_point": _scalar_zp(ctx, b_zp)}
    acc = ctx.op("qdense", inputs, attrs)
    return acc, shape[:-1] + (ctx.shape(weight)[0],)


def _back(ctx: Context, y: str, shape: tuple) -> str:
    return y if ctx.shape(y) == tuple(shape) else ctx.reshape(y, shape)


def _integer_qlinear_matmul(ctx: Context, inputs) -> str:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale = inputs[:7]
    y_zp = inputs[7] if len(inputs) > 7 else ""
    out_zp = _out_zp(ctx, y_zp, ctx.dtype(a))
    sa, sb, sy = _scale(ctx, a_scale), _scale(ctx, b_scale), _scale(ctx, y_scale)
    if sa.size != 1 or sy.size != 1:
        raise _NotInteger
    acc, shape = _integer_matmul(ctx, a, a_zp, b, b_zp)
    if sb.size not in (1, shape[-1]):
        raise _NotInteger
    multiplier = _multiplier(ctx, sa.reshape(()), sb, divide=sy)
    return _back(ctx, _requantize(ctx, acc, multiplier, "", out_zp), shape)


def integer_or_float(integer, fallback):
    """A converter that takes the integer path and, where it declines, the float one."""

    def convert(ctx: Context, inputs):
        try:
            return integer(ctx, inputs)
        except _NotInteger:
            return fallback(ctx, inputs)

    convert.__doc__ = integer.__doc__
    return convert


def _integer_conv_integer(ctx: Context, inputs) -> str:
    x, w = inputs[0], inputs[1]
    acc, nsp = _integer_conv(ctx, x, _optional(inputs, 2), w, _optional(inputs, 3))
    return _from_2d(ctx, acc, nsp)


def _integer_matmul_integer(ctx: Context, inputs) -> str:
    a, b = inputs[0], inputs[1]
    acc, shape = _integer_matmul(ctx, a, _optional(inputs, 2), b, _optional(inputs, 3))
    return _back(ctx, acc, shape)




def _integer_quantize(ctx: Context, inputs) -> str:
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else ""
    if ctx.dtype(x) != "float32" or ctx.attr("block_size", 0) or ctx.attr("precision", 0):
        raise _NotInteger
    s = _scale(ctx, scale)
    dtype = ctx.dtype(zp) if zp else (
        ctx.attr_dtype("output_dtype") if ctx.attr("output_dtype", 0) else "uint8")
    if s.size != 1 or dtype not in QUANT:
        raise _NotInteger
    attrs = {"scale": float(s.reshape(())), "zero_point": _scalar_zp(ctx, zp), "out_dtype": dtype}
    return ctx.op("quantize", [x], attrs)


def _integer_dequantize(ctx: Context, inputs) -> str:
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 else ""
    out = ctx.attr_dtype("output_dtype") if ctx.attr("output_dtype", 0) else ctx.dtype(scale)
    if ctx.dtype(x) not in QUANT + ("int32",) or ctx.attr("block_size", 0) or out != "float32":
        raise _NotInteger
    s = _scale(ctx, scale)
    if s.size != 1:
        raise _NotInteger
    return ctx.op("dequantize", [x], {"scale": float(s.reshape(())), "zero_point": _scalar_zp(ctx, zp)})


@converter("DynamicQuantizeLinear")
def convert_dynamic_quantize_linear(ctx: Context, inputs):
    """uint8 ``y``, ``y_scale``, ``y_zero_point`` from the whole tensor's range (widened to hold 0), as
    onnxruntime computes them (``GetQuantizationParameter``): ``scale = (hi - lo) / 255`` in float32, or
    1 where the range is empty (an all-zero tensor; ONNX's own body would divide by 0 there),
    ``zero_point = saturate(round(0 - lo / scale))``, ``y = saturate(round(x / scale) + zero_point)``,
    rounding half to even. A MatMulInteger reading ``y`` takes the zero point as a run-time input."""
    x = inputs[0]
    if ctx.dtype(x) != "float32":
        raise ctx.error(f"DynamicQuantizeLinear of {ctx.dtype(x)} is not supported (float32 only)")
    zero = ctx.param(np.float32(0), "zero")
    lo = ctx.op("minimum", [ctx.op("min", [x], {"axis": None}), zero])
    hi = ctx.op("maximum", [ctx.op("max", [x], {"axis": None}), zero])
    span = ctx.op("divide", [ctx.op("subtract", [hi, lo]), ctx.param(np.float32(255), "levels")])
    scale = ctx.op("where", [ctx.op("equal", [hi, lo]), ctx.param(np.float32(1), "one"), span])
    zp = quantize(ctx, ctx.op("subtract", [zero, ctx.op("divide", [lo, scale])]), "uint8")
    steps = ctx.op("round", [ctx.op("divide", [x, scale])])
    y = quantize(ctx, ctx.op("add", [steps, ctx.cast(zp, "float32")]), "uint8")
    return [y, scale, zp]


quantize_linear = integer_or_float(_integer_quantize, convert_quantize)
dequantize_linear = integer_or_float(_integer_dequantize, convert_dequantize)
converter("QuantizeLinear")(quantize_linear)
converter("DequantizeLinear")(dequantize_linear)
converter("QLinearConv")(integer_or_float(_integer_qlinear_conv, convert_qlinear_conv))
converter("QLinearMatMul")(integer_or_float(_integer_qlinear_matmul, convert_qlinear_matmul))
converter("ConvInteger")(integer_or_float(_integer_conv_integer, convert_conv_integer))
converter("MatMulInteger")(integer_or_float(_integer_matmul_integer, convert_matmul_integer))


# ---------------------------------------------------------------------------------------------------
# onnxruntime's com.microsoft quantized operators


@converter("QGemm")
def convert_qgemm(ctx: Context, inputs):
    """Y = alpha * (A - a_zp)(B - b_zp) * a_scale * b_scale (+ C, int32 at that scale), requantized to
    (y_scale, y_zero_point), or float32 where there is no y_scale."""
    a, a_scale, a_zp, b, b_scale, b_zp = inputs[:6]
    bias = inputs[6] if len(inputs) > 6 else ""
    y_scale = inputs[7] if len(inputs) > 7 else ""
    y_zp = inputs[8] if len(inputs) > 8 else ""
    if int(ctx.attr("transA", 0)) or ctx.rank(a) != 2:
        raise ctx.error("only a 2-D A that is not transposed is supported")
    try:
        sa, sb = _scale(ctx, a_scale), _scale(ctx, b_scale)
        sy = _scale(ctx, y_scale) if y_scale else None
        alpha = np.float32(ctx.attr("alpha", 1.0))
        acc, shape = _integer_matmul(ctx, a, a_zp, b, b_zp, trans_b=bool(int(ctx.attr("transB", 0))))
        if sa.size != 1 or sb.size not in (1, shape[-1]) or (sy is not None and sy.size != 1):
            raise _NotInteger
        scales = (sa.reshape(()), sb) if alpha == 1 else (sa.reshape(()), sb, alpha)
        multiplier = _multiplier(ctx, *scales, divide=sy)
        out_zp = _out_zp(ctx, y_zp, ctx.dtype(a)) if y_scale else None
        return _requantize(ctx, acc, multiplier, _bias(ctx, bias, shape[-1]), out_zp)
    except _NotInteger:
        raise ctx.error("QGemm with these operand types, scales or zero points is not supported") from None


def _through_float(ctx: Context, quantized: list[tuple], out: tuple, body) -> str:
    """Dequantize the (x, scale, zero point) operands, apply ``body`` to the floats, quantize to
    ``out`` = (scale, zero point): the elementwise quantized operators, fused into one kernel."""
    floats = [dequantize_linear(ctx, [x, s, zp] if zp else [x, s]) for x, s, zp in quantized]
    y = body(floats)
    scale, zp = out
    if not zp:  # onnxruntime's contrib ops default to the input's type
        zp = ctx.param(np.zeros((), ctx.dtype(quantized[0][0])), "zero_point")
    return quantize_linear(ctx, [y, scale, zp])


def _optional(inputs, k: int) -> str:
    return inputs[k] if len(inputs) > k else ""


@converter("QLinearAdd", "QLinearMul")
def convert_qlinear_binary(ctx: Context, inputs):
    op = "add" if ctx.op_type == "QLinearAdd" else "multiply"
    operands = [(inputs[0], inputs[1], inputs[2]), (inputs[3], inputs[4], _optional(inputs, 5))]
    return _through_float(ctx, operands, (inputs[6], _optional(inputs, 7)), lambda f: ctx.op(op, f))


@converter("QLinearGlobalAveragePool")
def convert_qlinear_global_average_pool(ctx: Context, inputs):
    if int(ctx.attr("channels_last", 0)):
        raise ctx.error("channels_last=1 is not supported")
    x = inputs[0]
    if ctx.rank(x) != 4:
        raise ctx.error(f"only 4-D (NCHW) input is supported, got rank {ctx.rank(x)}")
    return _through_float(ctx, [(x, inputs[1], inputs[2])], (inputs[3], _optional(inputs, 4)),
                          lambda f: ctx.op("global_avg_pool2d", f))


@converter("QLinearSigmoid", "QLinearLeakyRelu")
def convert_qlinear_unary(ctx: Context, inputs):
    if ctx.op_type == "QLinearSigmoid":
        def body(f):
            return ctx.op("sigmoid", f)
    else:
        def body(f):
            return ctx.op("leaky_relu", f, {"alpha": float(ctx.attr("alpha", 0.01))})
    return _through_float(ctx, [(inputs[0], inputs[1], inputs[2])], (inputs[3], _optional(inputs, 4)), body)


@converter("QLinearConcat")
def convert_qlinear_concat(ctx: Context, inputs):
    y_scale, y_zp = inputs[0], inputs[1]
    rest = inputs[2:]
    if not rest or len(rest) % 3:
        raise ctx.error("expects (tensor, scale, zero point) triples after y_scale and y_zero_point")
    triples = [tuple(rest[k:k + 3]) for k in range(0, len(rest), 3)]
    axis = normalize_axis(int(ctx.attr("axis")), ctx.rank(triples[0][0]), ctx)
    return _through_float(ctx, triples, (y_scale, y_zp), lambda f: ctx.op("concatenate", f, {"axis": axis}))


# the com.microsoft operators converted here (the importer accepts these from that domain)
MICROSOFT_OPS = frozenset({"QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearSigmoid",
                           "QLinearLeakyRelu", "QLinearConcat"})
