"""Converters for MIL operations (coremltools' ``mil.ops.defs``), registered in ``mil.TABLE``.

Semantics follow the MIL op reference: ``pad`` for conv and pooling is [top, bottom, left, right]
(nnvm's conv2d takes (top, left, bottom, right)); ``pad_type`` is valid, same (extra pixel at the
end), same_lower or custom; ``weight`` of ``linear`` is [out, in] like nnvm's ``dense``.
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend.compose import conv2d_transpose
from nnvm.frontend.padding import same_pads
from nnvm_frontend_coreml.mil import TABLE, MilContext

register = TABLE.register

BINARY = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "real_div": "divide",
    "pow": "power",
    "maximum": "maximum",
    "minimum": "minimum",
}
UNARY = {
    "relu": "relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "abs": "abs",
    "erf": "erf",
    "floor": "floor",
    "ceil": "ceil",
    "sin": "sin",
    "cos": "cos",
    "sign": "sign",
    "inverse": "reciprocal",
    "round": "round",
    "softplus": "softplus",
}
REDUCE = {
    "reduce_mean": "mean",
    "reduce_sum": "sum",
    "reduce_max": "max",
    "reduce_min": "min",
    "reduce_prod": "prod",
}
CAST = {
    "fp16": "float32",  # see mil.NNVM_DTYPE
    "fp32": "float32",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}


@register(*BINARY)
def binary(ctx: MilContext, args):
    return ctx.op(BINARY[ctx.op_type], [ctx.value("x"), ctx.value("y")])


@register(*UNARY)
def unary(ctx: MilContext, args):
    return ctx.op(UNARY[ctx.op_type], [ctx.value("x")])


@register("relu6")
def relu6(ctx: MilContext, args):
    return ctx.op("clip", [ctx.value("x")], {"a_min": 0.0, "a_max": 6.0})


@register("clip")
def clip(ctx: MilContext, args):
    return ctx.op(
        "clip", [ctx.value("x")], {"a_min": float(ctx.const("alpha")), "a_max": float(ctx.const("beta"))}
    )


@register("leaky_relu")
def leaky_relu(ctx: MilContext, args):
    return ctx.op("leaky_relu", [ctx.value("x")], {"alpha": float(ctx.const("alpha", 0.01))})


@register("elu")
def elu(ctx: MilContext, args):
    return ctx.op("elu", [ctx.value("x")], {"alpha": float(ctx.const("alpha", 1.0))})


@register("silu")
def silu(ctx: MilContext, args):
    x = ctx.value("x")
    return ctx.op("multiply", [x, ctx.op("sigmoid", [x])])


@register("gelu")
def gelu(ctx: MilContext, args):
    mode = str(ctx.const("mode", np.array("EXACT")).item())
    if mode == "SIGMOID_APPROXIMATION":  # x * sigmoid(1.702 x)
        x = ctx.value("x")
        return ctx.op("multiply", [x, ctx.op("sigmoid", [ctx.op("multiply", [x, ctx.scalar(1.702, x)])])])
    return ctx.op(
        "gelu", [ctx.value("x")], {"approximate": "tanh" if mode == "TANH_APPROXIMATION" else "none"}
    )


@register("sigmoid_hard")
def sigmoid_hard(ctx: MilContext, args):
    x = ctx.value("x")
    alpha, beta = float(ctx.const("alpha", 0.2)), float(ctx.const("beta", 0.5))
    y = ctx.op("add", [ctx.op("multiply", [x, ctx.scalar(alpha, x)]), ctx.scalar(beta, x)])
    return ctx.op("clip", [y], {"a_min": 0.0, "a_max": 1.0})


@register("thresholded_relu")
def thresholded_relu(ctx: MilContext, args):
    x = ctx.value("x")
    keep = ctx.op("greater", [x, ctx.scalar(float(ctx.const("alpha", 1.0)), x)])
    return ctx.op("where", [keep, x, ctx.scalar(0.0, x)])


@register("prelu")
def prelu(ctx: MilContext, args):
    x = ctx.value("x")
    alpha = np.asarray(ctx.const("alpha"), dtype=ctx.dtype(x))  # one slope per channel (axis 1)
    return ctx.op("prelu", [x, ctx.param(alpha.reshape((-1,) + (1,) * (ctx.rank(x) - 2)), "alpha")])


@register("softmax")
def softmax(ctx: MilContext, args):
    x = ctx.value("x")
    return ctx.op("softmax", [x], {"axis": ctx.normalize_axis(int(ctx.const("axis", -1)), ctx.rank(x))})


@register("cast")
def cast(ctx: MilContext, args):
    dtype = str(ctx.const("dtype").item())
    if dtype not in CAST:
        raise ctx.error(f"cast to {dtype} is not supported")
    return ctx.cast(ctx.value("x"), CAST[dtype])


def _window_pads(ctx: MilContext, x: str, kernel, strides, dilations) -> tuple:
    """nnvm's (top, left, bottom, right) from MIL's pad_type and pad ([top, bottom, left, right])."""
    pad_type = str(ctx.const("pad_type", np.array("valid")).item())
    size = ctx.shape(x)[2:]
    if pad_type == "valid":
        return (0, 0, 0, 0)
    if pad_type in ("same", "same_lower"):
        begins, ends = same_pads(size, kernel, strides, dilations, upper=pad_type == "same")
        return (begins[0], begins[1], ends[0], ends[1])
    if pad_type == "custom":
        p = [int(v) for v in ctx.const("pad", np.zeros(4, np.int32))]
        return (p[0], p[2], p[1], p[3])
    raise ctx.error(f"pad_type {pad_type!r} is not supported")


def _as_2d(ctx: MilContext, x: str) -> tuple[str, bool]:
    """A 1-D window's input as a 2-D one over a height of 1."""
    if ctx.rank(x) == 4:
        return x, False
    if ctx.rank(x) != 3:
        raise ctx.error(f"only 1-D and 2-D windows are supported (input of rank {ctx.rank(x)})")
    n, c, w = ctx.shape(x)
    return ctx.reshape(x, (n, c, 1, w)), True


def _from_2d(ctx: MilContext, y: str, was_1d: bool) -> str:
    if not was_1d:
        return y
    n, c, _, w = ctx.shape(y)
    return ctx.reshape(y, (n, c, w))


def _pair(values, was_1d: bool, default: int) -> tuple:
    values = [int(v) for v in values] if values is not None else None
    if was_1d:
        return (1, values[0] if values else default)
    return tuple(values) if values else (default, default)


@register("conv")
def conv(ctx: MilContext, args):
    x, was_1d = _as_2d(ctx, ctx.value("x"))
    w = ctx.value("weight")
    if was_1d:
        o, i, k = ctx.shape(w)
        w = ctx.reshape(w, (o, i, 1, k))
    kernel = ctx.shape(w)[2:]
    strides = _pair(ctx.const("strides"), was_1d, 1)
    dilations = _pair(ctx.const("dilations"), was_1d, 1)
    pads = _window_pads(ctx, x, kernel, strides, dilations)
    if was_1d and str(ctx.const("pad_type", np.array("valid")).item()) == "custom":
        p = [int(v) for v in ctx.const("pad")]
        pads = (0, p[0], 0, p[1])
    y = ctx.op(
        "conv2d",
        [x, w],
        {
            "strides": strides,
            "padding": tuple(int(p) for p in pads),
            "dilation": dilations,
            "groups": int(ctx.const("groups", 1)),
        },
    )
    if ctx.has("bias"):
        y = ctx.op("bias_add", [y, ctx.value("bias")], {"axis": 1})
    return _from_2d(ctx, y, was_1d)


def _pool(ctx: MilContext, op: str, extra: dict) -> str:
    x, was_1d = _as_2d(ctx, ctx.value("x"))
    kernel = _pair(ctx.const("kernel_sizes"), was_1d, 1)
    strides = _pair(ctx.const("strides"), was_1d, 1)
    pads = _window_pads(ctx, x, kernel, strides, (1, 1))
    if was_1d and str(ctx.const("pad_type", np.array("valid")).item()) == "custom":
        p = [int(v) for v in ctx.const("pad")]
        pads = (0, p[0], 0, p[1])
    attrs = {
        "pool_size": kernel,
        "strides": strides,
        "padding": tuple(int(p) for p in pads),
        "ceil_mode": bool(ctx.const("ceil_mode", False)),
        **extra,
    }
    return _from_2d(ctx, ctx.op(op, [x], attrs), was_1d)


@register("max_pool")
def max_pool(ctx: MilContext, args):
    return _pool(ctx, "max_pool2d", {})


@register("avg_pool")
def avg_pool(ctx: MilContext, args):
    return _pool(
        ctx, "avg_pool2d", {"count_include_pad": not bool(ctx.const("exclude_padding_from_average", False))}
    )


REDUCE_NORMS = (
    "reduce_l1_norm",
    "reduce_l2_norm",
    "reduce_log_sum",
    "reduce_log_sum_exp",
    "reduce_sum_square",
)


@register(*REDUCE, *REDUCE_NORMS)
def reduce(ctx: MilContext, args):
    x = ctx.value("x")
    axes = ctx.const("axes")
    axis = None if axes is None else tuple(sorted(ctx.normalize_axis(a, ctx.rank(x)) for a in axes.ravel()))
    attrs = {"axis": axis, "keepdims": bool(ctx.const("keep_dims", False))}
    kind = ctx.op_type
    if kind in REDUCE:
        return ctx.op(REDUCE[kind], [x], attrs)
    if kind == "reduce_l1_norm":
        return ctx.op("sum", [ctx.op("abs", [x])], attrs)
    if kind == "reduce_log_sum":
        return ctx.op("log", [ctx.op("sum", [x], attrs)])
    if kind == "reduce_log_sum_exp":  # shifted by the maximum so that exp cannot overflow
        peak = ctx.op("max", [x], {**attrs, "keepdims": True})
        total = ctx.op("sum", [ctx.op("exp", [ctx.op("subtract", [x, peak])])], attrs)
        shift = peak if attrs["keepdims"] else ctx.reshape(peak, ctx.shape(total))
        return ctx.op("add", [ctx.op("log", [total]), shift])
    square = ctx.op("sum", [ctx.op("multiply", [x, x])], attrs)
    return square if kind == "reduce_sum_square" else ctx.op("sqrt", [square])


@register("linear")
def linear(ctx: MilContext, args):
    x, w = ctx.value("x"), ctx.value("weight")
    lead = ctx.shape(x)[:-1]
    flat = ctx.reshape(x, (int(np.prod(lead, dtype=np.int64)), ctx.shape(x)[-1])) if len(lead) != 1 else x
    y = ctx.op("dense", [flat, w])
    if ctx.has("bias"):
        y = ctx.op("add", [y, ctx.value("bias")])
    return ctx.reshape(y, (*lead, ctx.shape(w)[0]))


@register("matmul")
def matmul(ctx: MilContext, args):
    x, y = ctx.value("x"), ctx.value("y")
    if bool(ctx.const("transpose_x", False)):
        x = ctx.transpose(x, (*range(ctx.rank(x) - 2), ctx.rank(x) - 1, ctx.rank(x) - 2))
    if bool(ctx.const("transpose_y", False)):
        y = ctx.transpose(y, (*range(ctx.rank(y) - 2), ctx.rank(y) - 1, ctx.rank(y) - 2))
    return ctx.op("matmul", [x, y])


@register("batch_norm")
def batch_norm(ctx: MilContext, args):
    x = ctx.value("x")
    c = ctx.shape(x)[1]
    dtype = ctx.dtype(x)
    gamma = ctx.value("gamma") if ctx.has("gamma") else ctx.param(np.ones(c, dtype), "gamma")
    beta = ctx.value("beta") if ctx.has("beta") else ctx.param(np.zeros(c, dtype), "beta")
    return ctx.op(
        "batch_norm",
        [x, gamma, beta, ctx.value("mean"), ctx.value("variance")],
        {"epsilon": float(ctx.const("epsilon", 1e-5)), "axis": 1},
    )


@register("reshape")
def reshape(ctx: MilContext, args):
    x = ctx.value("x")
    shape = [int(s) for s in ctx.const("shape")]
    known = int(np.prod([s for s in shape if s > 0], dtype=np.int64)) if shape else 1
    total = int(np.prod(ctx.shape(x), dtype=np.int64))
    shape = [ctx.shape(x)[i] if s == 0 else (total // known if s == -1 else s) for i, s in enumerate(shape)]
    return ctx.reshape(x, shape)


@register("transpose")
def transpose(ctx: MilContext, args):
    x = ctx.value("x")
    return ctx.transpose(x, [ctx.normalize_axis(a, ctx.rank(x)) for a in ctx.const("perm")])


@register("concat")
def concat(ctx: MilContext, args):
    values = ctx.values("values")
    axis = ctx.normalize_axis(int(ctx.const("axis")), ctx.rank(values[0]))
    return values[0] if len(values) == 1 else ctx.op("concatenate", values, {"axis": axis})


@register("squeeze")
def squeeze(ctx: MilContext, args):
    x = ctx.value("x")
    shape = ctx.shape(x)
    axes = ctx.const("axes")
    drop = (
        {ctx.normalize_axis(a, len(shape)) for a in axes}
        if axes is not None
        else {i for i, d in enumerate(shape) if d == 1}
    )
    return ctx.reshape(x, [d for i, d in enumerate(shape) if i not in drop])


@register("expand_dims")
def expand_dims(ctx: MilContext, args):
    x = ctx.value("x")
    shape = list(ctx.shape(x))
    rank = len(shape) + len(ctx.const("axes"))
    for a in sorted(ctx.normalize_axis(a, rank) for a in ctx.const("axes")):
        shape.insert(a, 1)
    return ctx.reshape(x, shape)


@register("pad")
def pad(ctx: MilContext, args):
    x = ctx.value("x")
    p = [int(v) for v in ctx.const("pad")]
    rank = ctx.rank(x)
    width = [0] * (2 * rank - len(p)) + p  # MIL pads the last len(pad)/2 axes, (before, after) each
    mode = str(ctx.const("mode", np.array("constant")).item())
    if mode not in ("constant", "reflect", "replicate"):
        raise ctx.error(f"pad mode {mode!r} is not supported")
    return ctx.op(
        "pad",
        [x],
        {
            "pad_width": tuple(width),
            "pad_value": float(ctx.const("constant_val", 0.0)),
            "mode": "edge" if mode == "replicate" else mode,
        },
    )


@register("layer_norm")
def layer_norm(ctx: MilContext, args):
    x = ctx.value("x")
    rank = ctx.rank(x)
    axes = sorted(ctx.normalize_axis(a, rank) for a in ctx.const("axes"))
    if axes != list(range(axes[0], rank)):
        raise ctx.error(f"layer_norm over axes {axes} (not the trailing axes) is not supported")
    shape = ctx.shape(x)[axes[0] :]
    dtype = ctx.dtype(x)
    gamma = ctx.value("gamma") if ctx.has("gamma") else ctx.param(np.ones(shape, dtype), "gamma")
    beta = ctx.value("beta") if ctx.has("beta") else ctx.param(np.zeros(shape, dtype), "beta")
    return ctx.op(
        "layer_norm", [x, gamma, beta], {"axis": axes[0], "epsilon": float(ctx.const("epsilon", 1e-5))}
    )


# -- compile-time weight decompression (constexpr_*): numpy at import, a constant in the graph --------


def _decompressed(ctx: MilContext, value: np.ndarray) -> str:
    ctx.consts[ctx.name] = value
    return ctx.binding(ctx.name)


def _blockwise(values: np.ndarray, shape) -> np.ndarray:
    """``values`` repeated along each axis to ``shape`` (MIL's blockwise broadcast: each entry covers
    ``shape[i] // values.shape[i]`` consecutive elements)."""
    values = np.asarray(values)
    for axis, (n, m) in enumerate(zip(shape, values.shape)):
        if m != n:
            values = np.repeat(values, n // m, axis)
    return values


def _along(vector: np.ndarray, rank: int, axis: int) -> np.ndarray:
    vector = np.asarray(vector)
    if vector.ndim == 0:
        return vector
    shape = [1] * rank
    shape[axis] = vector.size
    return vector.reshape(shape)


@register("constexpr_affine_dequantize")
def affine_dequantize(ctx: MilContext, args):
    q = ctx.const("quantized_data")
    axis = int(ctx.const("axis", 0)) % q.ndim
    zp = _along(ctx.const("zero_point"), q.ndim, axis).astype(np.float32)
    scale = ctx.const("scale")
    return _decompressed(ctx, ((q.astype(np.float32) - zp) * _along(scale, q.ndim, axis)).astype(scale.dtype))


@register("constexpr_blockwise_shift_scale")
def blockwise_shift_scale(ctx: MilContext, args):
    data = ctx.const("data")
    scale = ctx.const("scale")
    values = data.astype(np.float32)
    if ctx.has("offset"):
        values = values - _blockwise(ctx.const("offset"), data.shape).astype(np.float32)
    return _decompressed(ctx, (values * _blockwise(scale, data.shape)).astype(scale.dtype))


@register("constexpr_lut_to_dense")
def lut_to_dense(ctx: MilContext, args):
    lut = ctx.const("lut")
    indices = ctx.const("indices")
    if ctx.has("shape"):  # iOS16: one LUT, indices packed in bytes
        from nnvm_frontend_coreml.reader import unpack_bits

        shape = [int(s) for s in ctx.const("shape")]
        bits = int(np.log2(lut.size))
        flat = unpack_bits(indices.astype(np.uint8).ravel(), bits, int(np.prod(shape)))
        return _decompressed(ctx, lut.ravel()[flat.astype(np.int64)].reshape(shape))
    # iOS18: lut (*blocks, palettes, vector_size), indices typed (already unpacked) with the output shape
    if lut.shape[-1] != 1:
        raise ctx.error("vector palettization (a LUT vector size above 1) is not supported")
    table = _blockwise(lut[..., 0], (*indices.shape, lut.shape[-2]))
    values = np.take_along_axis(table, indices.astype(np.int64)[..., None], axis=-1)[..., 0]
    return _decompressed(ctx, values)


@register("constexpr_sparse_to_dense")
def sparse_to_dense(ctx: MilContext, args):
    data = ctx.const("nonzero_data")
    mask = ctx.const("mask")
    if ctx.has("shape"):  # iOS16: the mask is packed bits
        from nnvm_frontend_coreml.reader import unpack_bits

        shape = [int(s) for s in ctx.const("shape")]
        mask = unpack_bits(mask.astype(np.uint8).ravel(), 1, int(np.prod(shape))).reshape(shape)
    dense = np.zeros(mask.shape, data.dtype)
    dense[mask != 0] = data.ravel()
    return _decompressed(ctx, dense)


@register("constexpr_cast")
def constexpr_cast(ctx: MilContext, args):
    return _decompressed(ctx, ctx.const("source_val").astype(np.float32))


# -- more tensor and NN ops ----------------------------------------------------------------------------

COMPARE = {
    "equal": "equal",
    "not_equal": "not_equal",
    "greater": "greater",
    "greater_equal": "greater_equal",
    "less": "less",
    "less_equal": "less_equal",
    "logical_and": "logical_and",
    "logical_or": "logical_or",
    "logical_xor": "logical_xor",
    "floor_div": None,
    "mod": "floor_mod",
}


@register(*COMPARE)
def compare(ctx: MilContext, args):
    x, y = ctx.value("x"), ctx.value("y")
    if ctx.op_type == "floor_div":
        return ctx.op("floor", [ctx.op("divide", [x, y])])
    return ctx.op(COMPARE[ctx.op_type], [x, y])


@register("logical_not")
def logical_not(ctx: MilContext, args):
    return ctx.op("logical_not", [ctx.value("x")])


@register("select")
def select(ctx: MilContext, args):
    return ctx.op("where", [ctx.value("cond"), ctx.value("a"), ctx.value("b")])


@register("split")
def split(ctx: MilContext, args):
    x = ctx.value("x")
    axis = ctx.normalize_axis(int(ctx.const("axis")), ctx.rank(x))
    size = ctx.shape(x)[axis]
    if ctx.has("split_sizes"):
        sizes = [int(s) for s in ctx.const("split_sizes")]
    else:
        n = int(ctx.const("num_splits"))
        sizes = [-(-size // n)] * (size // -(-size // n)) + (
            [size % -(-size // n)] if size % -(-size // n) else []
        )
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    if not points:
        return [x]
    return ctx.ops("split", [x], {"indices": points, "axis": axis}, len(sizes))


@register("slice_by_index")
def slice_by_index(ctx: MilContext, args):
    x = ctx.value("x")
    shape = ctx.shape(x)
    rank = len(shape)
    begin = [int(v) for v in ctx.const("begin")]
    end = [int(v) for v in ctx.const("end")]
    stride = [int(v) for v in ctx.const("stride", np.ones(rank, np.int32))]
    bmask = [bool(v) for v in ctx.const("begin_mask", np.zeros(rank, bool))]
    emask = [bool(v) for v in ctx.const("end_mask", np.zeros(rank, bool))]
    smask = [bool(v) for v in ctx.const("squeeze_mask", np.zeros(rank, bool))]
    starts, stops = [], []
    for i in range(rank):
        s, e = slice(None if bmask[i] else begin[i], None if emask[i] else end[i], stride[i]).indices(
            shape[i]
        )[:2]
        if smask[i]:
            e = s + 1 if stride[i] > 0 else s - 1
        starts.append(s)
        stops.append(e if e >= 0 else -shape[i] - 1)
    y = ctx.op(
        "strided_slice",
        [x],
        {"begin": tuple(starts), "end": tuple(stops), "strides": tuple(stride), "axes": tuple(range(rank))},
    )
    if any(smask):
        y = ctx.reshape(y, [d for i, d in enumerate(ctx.shape(y)) if not smask[i]])
    return y


@register("slice_by_size")
def slice_by_size(ctx: MilContext, args):
    x = ctx.value("x")
    shape = ctx.shape(x)
    begin = [int(v) for v in ctx.const("begin")]
    size = [int(v) for v in ctx.const("size")]
    end = [n if s == -1 else b + s for b, s, n in zip(begin, size, shape)]
    return ctx.op(
        "strided_slice", [x], {"begin": tuple(begin), "end": tuple(end), "axes": tuple(range(len(shape)))}
    )


@register("gather")
def gather(ctx: MilContext, args):
    x = ctx.value("x")
    axis = ctx.normalize_axis(int(ctx.const("axis", 0)), ctx.rank(x))
    indices = ctx.value("indices")
    size = ctx.scalar(ctx.shape(x)[axis], indices)
    wrapped = ctx.op(
        "where", [ctx.op("less", [indices, ctx.scalar(0, indices)]), ctx.op("add", [indices, size]), indices]
    )
    return ctx.op("take", [x, wrapped], {"axis": axis})


@register("instance_norm")
def instance_norm(ctx: MilContext, args):
    x = ctx.value("x")
    c = ctx.shape(x)[1]
    dtype = ctx.dtype(x)
    gamma = ctx.value("gamma") if ctx.has("gamma") else ctx.param(np.ones(c, dtype), "gamma")
    beta = ctx.value("beta") if ctx.has("beta") else ctx.param(np.zeros(c, dtype), "beta")
    return ctx.op("instance_norm", [x, gamma, beta], {"epsilon": float(ctx.const("epsilon", 1e-5))})


@register("upsample_nearest_neighbor")
def upsample_nearest(ctx: MilContext, args):
    """Integer scale factors: each pixel repeated, as a broadcast over two new axes."""
    x = ctx.value("x")
    sh, sw = float(ctx.const("scale_factor_height", 1)), float(ctx.const("scale_factor_width", 1))
    if sh != int(sh) or sw != int(sw):
        raise ctx.error(f"non-integer scale factors ({sh}, {sw}) are not supported")
    n, c, h, w = ctx.shape(x)
    y = ctx.op(
        "broadcast_to", [ctx.reshape(x, (n, c, h, 1, w, 1))], {"shape": (n, c, h, int(sh), w, int(sw))}
    )
    return ctx.reshape(y, (n, c, h * int(sh), w * int(sw)))


@register("tile")
def tile(ctx: MilContext, args):
    return ctx.op("tile", [ctx.value("x")], {"reps": tuple(int(r) for r in ctx.const("reps"))})


@register("conv_transpose")
def conv_transpose(ctx: MilContext, args):
    x = ctx.value("x")
    if ctx.rank(x) != 4:
        raise ctx.error("only 2-D transposed convolutions are supported")
    w = ctx.const("weight").astype(np.float32)  # (C_in, C_out / groups, kh, kw)
    strides = _pair(ctx.const("strides"), False, 1)
    dilations = _pair(ctx.const("dilations"), False, 1)
    groups = int(ctx.const("groups", 1))
    pad_type = str(ctx.const("pad_type", np.array("valid")).item())
    _, _, h, wd = ctx.shape(x)
    kh, kw = w.shape[2:]
    full = [(n - 1) * s + d * (k - 1) + 1 for n, s, d, k in zip((h, wd), strides, dilations, (kh, kw))]
    if pad_type == "custom":
        p = [int(v) for v in ctx.const("pad", np.zeros(4, np.int32))]
        pads = (p[0], p[2], p[1], p[3])
    elif pad_type == "valid":
        pads = (0, 0, 0, 0)
    elif pad_type == "same":  # output n * s; the extra cropped at the end
        crop = [max(f - n * s, 0) for f, n, s in zip(full, (h, wd), strides)]
        pads = (crop[0] // 2, crop[1] // 2, crop[0] - crop[0] // 2, crop[1] - crop[1] // 2)
    else:
        raise ctx.error(f"pad_type {pad_type!r} is not supported")
    extra = (0, 0)
    if ctx.has("output_shape"):
        want = [int(v) for v in ctx.const("output_shape")][-2:]
        got = [full[0] - pads[0] - pads[2], full[1] - pads[1] - pads[3]]
        extra = (want[0] - got[0], want[1] - got[1])
    weight = ctx.param(np.asarray(w, dtype=ctx.dtype(x)), "weight")
    y = conv2d_transpose(ctx, x, weight, strides, dilations, pads[:2], pads[2:], extra, groups)
    if ctx.has("bias"):
        y = ctx.op("bias_add", [y, ctx.value("bias")], {"axis": 1})
    return y


@register("upsample_bilinear")
def upsample_bilinear(ctx: MilContext, args):
    from nnvm_frontend_coreml.resize import resize_bilinear

    x = ctx.value("x")
    _, _, h, w = ctx.shape(x)
    sh, sw = float(ctx.const("scale_factor_height", 1)), float(ctx.const("scale_factor_width", 1))
    if bool(ctx.const("half_pixel_centers", np.array(not bool(ctx.const("align_corners", True))))) == bool(
        ctx.const("align_corners", True)
    ):
        raise ctx.error("upsample_bilinear with align_corners equal to half_pixel_centers is not supported")
    return resize_bilinear(
        ctx, x, int(np.floor(h * sh)), int(np.floor(w * sw)), bool(ctx.const("align_corners", True))
    )
