"""Elementwise, comparison, logical and reduction operators: mostly one ONNX node to one nnvm node."""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis

UNARY = {
    "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
    "Abs": "abs", "Neg": "negative", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Erf": "erf",
    "Sign": "sign", "Reciprocal": "reciprocal", "Softplus": "softplus", "Sin": "sin", "Cos": "cos",
    "Not": "logical_not", "IsNaN": "isnan", "HardSwish": "hard_swish",
}

BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
}

# Variadic ONNX operators folded left to right with the binary nnvm operator.
NARY = {"Sum": "add", "Max": "maximum", "Min": "minimum", "Mean": "add"}


@converter(*UNARY)
def convert_unary(ctx: Context, inputs):
    return ctx.op(UNARY[ctx.op_type], inputs[:1])


@converter("Identity")
def convert_identity(ctx: Context, inputs):
    return [inputs[0]]  # a tensor, or a sequence or optional (``sequences``) as it is


@converter(*BINARY)
def convert_binary(ctx: Context, inputs):
    a, b = inputs[0], inputs[1]
    if ctx.attr("broadcast", 0) and ctx.has_attr("axis"):
        b = legacy_broadcast(ctx, a, b, ctx.attr("axis"))
    if ctx.op_type == "Pow" and ctx.dtype(b) != ctx.dtype(a):
        b = ctx.cast(b, ctx.dtype(a))  # Pow-12+ allows an exponent of another type
    return ctx.op(BINARY[ctx.op_type], [a, b])


def legacy_broadcast(ctx: Context, a: str, b: str, axis: int) -> str:
    """Opset < 7 ``broadcast=1, axis=k``: ``b``'s dimensions line up with ``a``'s from ``axis`` on."""
    ra, rb = ctx.rank(a), ctx.rank(b)
    axis = normalize_axis(axis, ra, ctx)
    trailing = ra - axis - rb
    if trailing < 0:
        raise ctx.error(f"broadcast axis {axis} does not fit a rank-{rb} operand against rank {ra}")
    return ctx.reshape(b, ctx.shape(b) + (1,) * trailing)


@converter(*NARY)
def convert_nary(ctx: Context, inputs):
    values = [v for v in inputs if v]
    out = values[0]
    for v in values[1:]:
        out = ctx.op(NARY[ctx.op_type], [out, v])
    if ctx.op_type == "Mean" and len(values) > 1:
        out = ctx.op("divide", [out, ctx.scalar(len(values), out)])
    return out


@converter("Mod")
def convert_mod(ctx: Context, inputs):
    if ctx.attr("fmod", 0):
        return ctx.op("fmod", inputs[:2])
    a, b = inputs[0], inputs[1]
    out = ctx.op("floor_mod", [a, b])
    if np.dtype(ctx.dtype(a)).kind != "f":
        return out
    # Python's float modulo at the edges: a zero result takes the divisor's sign, and a finite ``a``
    # modulo an infinite ``b`` is ``a`` when they agree in sign (or a is 0), else ``b``
    # (``a - floor(a / b) * b`` gives NaN there).
    zero = ctx.op("where", [ctx.op("less", [b, ctx.scalar(0, b)]), ctx.scalar(-0.0, b), ctx.scalar(0.0, b)])
    out = ctx.op("where", [ctx.op("equal", [out, ctx.scalar(0, out)]), zero, out])
    inf = ctx.scalar(np.inf, b)
    b_inf = ctx.op("equal", [ctx.op("abs", [b]), inf])
    a_finite = ctx.op("less", [ctx.op("abs", [a]), inf])
    same = ctx.op("logical_or", [ctx.op("equal", [ctx.op("greater", [a, ctx.scalar(0, a)]),
                                                  ctx.op("greater", [b, ctx.scalar(0, b)])]),
                                 ctx.op("equal", [a, ctx.scalar(0, a)])])
    edge = ctx.op("where", [same, a, b])
    return ctx.op("where", [ctx.op("logical_and", [b_inf, a_finite]), edge, out])


@converter("Where")
def convert_where(ctx: Context, inputs):
    return ctx.op("where", inputs[:3])


@converter("PRelu")
def convert_prelu(ctx: Context, inputs):
    x, slope = inputs[0], inputs[1]
    rx, rs = ctx.rank(x), ctx.rank(slope)
    if ctx.opset < 7 and rs == 1 and rx > 2 and ctx.shape(slope)[0] == ctx.shape(x)[1]:
        slope = ctx.reshape(slope, (ctx.shape(slope)[0],) + (1,) * (rx - 2))  # old per-channel form
    return ctx.op("prelu", [x, slope])


# -- activations with parameters --------------------------------------------------------------------
@converter("LeakyRelu")
def convert_leaky_relu(ctx: Context, inputs):
    return ctx.op("leaky_relu", inputs[:1], {"alpha": float(ctx.attr("alpha", 0.01))})


@converter("Elu")
def convert_elu(ctx: Context, inputs):
    return ctx.op("elu", inputs[:1], {"alpha": float(ctx.attr("alpha", 1.0))})


@converter("Selu")
def convert_selu(ctx: Context, inputs):
    return ctx.op("selu", inputs[:1], {"alpha": float(ctx.attr("alpha", 1.67326319217681884765625)),
                                       "gamma": float(ctx.attr("gamma", 1.05070102214813232421875))})


@converter("HardSigmoid")
def convert_hard_sigmoid(ctx: Context, inputs):
    return ctx.op("hard_sigmoid", inputs[:1], {"alpha": float(ctx.attr("alpha", 0.2)),
                                               "beta": float(ctx.attr("beta", 0.5))})


@converter("Gelu")
def convert_gelu(ctx: Context, inputs):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate={approximate!r} is not supported")
    return ctx.op("gelu", inputs[:1], {"approximate": approximate})


@converter("Softsign")
def convert_softsign(ctx: Context, inputs):
    x = inputs[0]
    denom = ctx.op("add", [ctx.op("abs", [x]), ctx.scalar(1, x)])
    return ctx.op("divide", [x, denom])


@converter("Clip")
def convert_clip(ctx: Context, inputs):
    x = inputs[0]
    dt = np.dtype(ctx.dtype(x))
    info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    lo_v = inputs[1] if len(inputs) > 1 else ""
    hi_v = inputs[2] if len(inputs) > 2 else ""
    lo, hi = ctx.attr("min"), ctx.attr("max")
    if lo_v:
        lo = ctx.const_value(lo_v)
    if hi_v:
        hi = ctx.const_value(hi_v)
    if (lo_v and lo is None) or (hi_v and hi is None):
        # Bounds computed at run time: clip with elementwise maximum/minimum instead.
        if lo_v:
            x = ctx.op("maximum", [x, lo_v])
        if hi_v:
            x = ctx.op("minimum", [x, hi_v])
        return x
    lo = float(info.min) if lo is None else float(np.asarray(lo).reshape(()))
    hi = float(info.max) if hi is None else float(np.asarray(hi).reshape(()))
    return ctx.op("clip", [x], {"a_min": lo, "a_max": hi})


@converter("Cast")
def convert_cast(ctx: Context, inputs):
    return ctx.cast(inputs[0], ctx.attr_dtype("to"))


@converter("BitCast")
def convert_bitcast(ctx: Context, inputs):
    """Between integer types (and bool) of one width a reinterpretation is a wrapping ``cast``, which
    keeps the bits (two's complement); to or from a float it needs a bit reinterpretation nnvm has not."""
    src, dst = np.dtype(ctx.dtype(inputs[0])), np.dtype(ctx.attr_dtype("to"))
    if src.itemsize != dst.itemsize:
        raise ctx.error(f"{src.name} and {dst.name} differ in width ({src.itemsize} and {dst.itemsize} "
                        f"bytes)")
    if src.kind not in "biu" or dst.kind not in "biu":
        raise ctx.error(f"reinterpreting {src.name} as {dst.name} is not supported (only between integer "
                        f"types and bool)")
    return ctx.cast(inputs[0], dst.name)


@converter("CastLike")
def convert_cast_like(ctx: Context, inputs):
    return ctx.cast(inputs[0], ctx.dtype(inputs[1]))


@converter("Dropout")
def convert_dropout(ctx: Context, inputs):
    # Inference: the identity. The mask output (rarely read) is all true.
    x = inputs[0]
    if ctx.output_used(1):
        return [x, ctx.param(np.ones(ctx.shape(x), dtype=bool), "mask")]
    return [x, None]


# -- reductions -------------------------------------------------------------------------------------
REDUCE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod"}
# Reductions composed of a map before and after a sum (or max).
REDUCE_COMPOSED = {
    "ReduceL1": ("abs", "sum", None),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceSumSquare": ("square", "sum", None),
    "ReduceLogSum": (None, "sum", "log"),
    "ReduceLogSumExp": ("exp", "sum", "log"),
}


@converter(*REDUCE, *REDUCE_COMPOSED)
def convert_reduce(ctx: Context, inputs):
    x = inputs[0]
    rank = ctx.rank(x)
    if ctx.has_attr("axes"):
        axes = ctx.attr("axes")
    elif len(inputs) > 1 and inputs[1]:
        axes = ctx.const_ints(inputs[1], "the axes input")
    else:
        axes = None
    keepdims = bool(ctx.attr("keepdims", 1))
    if axes is not None and len(axes) == 0:
        if ctx.attr("noop_with_empty_axes", 0):
            return x
        axes = None
    axis = None if axes is None else tuple(sorted({normalize_axis(a, rank, ctx) for a in axes}))
    attrs = {"axis": axis, "keepdims": keepdims}
    shape = ctx.shape(x)
    reduced = range(rank) if axis is None else axis
    if ctx.op_type in ("ReduceMax", "ReduceMin") and any(shape[a] == 0 for a in reduced):
        # the maximum of nothing is the identity of max: -inf (the lowest value), and +inf for min
        dt = np.dtype(ctx.dtype(x))
        info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt) if dt.kind in "iu" else np.iinfo(np.uint8)
        low = -np.inf if dt.kind == "f" else info.min
        fill = low if ctx.op_type == "ReduceMax" else (np.inf if dt.kind == "f" else info.max)
        out_shape = tuple(1 if a in reduced else d for a, d in enumerate(shape)
                          if keepdims or a not in reduced)
        return ctx.param(np.full(out_shape, fill, dtype=dt), "empty")
    if ctx.op_type in ("ReduceMax", "ReduceMin") and ctx.dtype(x) == "bool":
        return ctx.cast(ctx.op(REDUCE[ctx.op_type], [ctx.cast(x, "uint8")], attrs), "bool")
    if ctx.op_type in REDUCE:
        return ctx.op(REDUCE[ctx.op_type], [x], attrs)
    pre, reduce_op, post = REDUCE_COMPOSED[ctx.op_type]
    if pre == "square":
        x = ctx.op("multiply", [x, x])
    elif pre is not None:
        x = ctx.op(pre, [x])
    out = ctx.op(reduce_op, [x], attrs)
    return ctx.op(post, [out]) if post else out


@converter("ArgMax", "ArgMin")
def convert_arg(ctx: Context, inputs):
    x = inputs[0]
    attrs = {
        "axis": normalize_axis(ctx.attr("axis", 0), ctx.rank(x), ctx),
        "keepdims": bool(ctx.attr("keepdims", 1)),
        "select_last_index": bool(ctx.attr("select_last_index", 0)),
    }
    return ctx.op("argmax" if ctx.op_type == "ArgMax" else "argmin", [x], attrs)


# -- trigonometric and hyperbolic functions without an nnvm operator ----------------------------------
def _atan(ctx: Context, x: str) -> str:
    """``atan`` for any real ``x``: two half-angle steps ``u -> u / (1 + sqrt(1 + u^2))`` bring the
    argument below tan(pi/8), where 8 terms of the Taylor series are exact to float32 rounding."""
    one = ctx.scalar(1.0, x)
    u = x
    for _ in range(2):
        u = ctx.op(
            "divide",
            [u, ctx.op("add", [one, ctx.op("sqrt", [ctx.op("add", [one, ctx.op("multiply", [u, u])])])])],
        )
    u2 = ctx.op("multiply", [u, u])
    series = ctx.scalar(-1.0 / 15.0, x)  # Horner form of sum (-1)^k u^(2k+1) / (2k+1), k < 8
    for k in range(6, -1, -1):
        series = ctx.op("add", [ctx.op("multiply", [series, u2]), ctx.scalar((-1) ** k / (2 * k + 1), x)])
    return ctx.op("multiply", [ctx.op("multiply", [series, u]), ctx.scalar(4.0, x)])


@converter("Tan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Atan", "Asin", "Acos")
def convert_trig(ctx: Context, inputs):
    x = inputs[0]
    one = ctx.scalar(1.0, x)
    op = ctx.op_type
    if op == "Tan":
        return ctx.op("divide", [ctx.op("sin", [x]), ctx.op("cos", [x])])
    if op in ("Sinh", "Cosh"):
        e, inv = ctx.op("exp", [x]), ctx.op("exp", [ctx.op("negative", [x])])
        both = ctx.op("subtract" if op == "Sinh" else "add", [e, inv])
        return ctx.op("multiply", [both, ctx.scalar(0.5, x)])
    if op in ("Asinh", "Acosh"):
        sq = ctx.op("multiply", [x, x])
        root = ctx.op("sqrt", [ctx.op("add" if op == "Asinh" else "subtract", [sq, one])])
        return ctx.op("log", [ctx.op("add", [x, root])])
    if op == "Atanh":
        ratio = ctx.op("divide", [ctx.op("add", [one, x]), ctx.op("subtract", [one, x])])
        return ctx.op("multiply", [ctx.op("log", [ratio]), ctx.scalar(0.5, x)])
    if op == "Atan":
        return _atan(ctx, x)
    # asin(x) = 2 atan(x / (1 + sqrt(1 - x^2))): accurate up to |x| = 1
    root = ctx.op("sqrt", [ctx.op("subtract", [one, ctx.op("multiply", [x, x])])])
    asin = ctx.op(
        "multiply", [_atan(ctx, ctx.op("divide", [x, ctx.op("add", [one, root])])), ctx.scalar(2.0, x)]
    )
    if op == "Asin":
        return asin
    return ctx.op("subtract", [ctx.scalar(np.pi / 2, x), asin])


@converter("BitShift")
def convert_bitshift(ctx: Context, inputs):
    """Shifts as arithmetic on exact integers: ``x << y = x * 2^y`` in the unsigned type of the same
    width (wrapping), ``x >> y = floor(x / 2^y)`` (arithmetic for signed types, in int64); shifts below
    0 or not below the bit width give 0 (or -1 for a negative ``x`` shifted right), as ONNX says."""
    x, y = inputs[0], inputs[1]
    dtype = np.dtype(ctx.dtype(x))
    bits = dtype.itemsize * 8
    y = ctx.cast(y, "int64")
    outside = ctx.op(
        "logical_or",
        [ctx.op("less", [y, ctx.scalar(0, y)]), ctx.op("greater_equal", [y, ctx.scalar(bits, y)])],
    )
    safe = ctx.op("where", [outside, ctx.scalar(0, y), y])
    two = ctx.param(np.asarray(2.0, dtype=np.float64), "two")
    power = ctx.op("power", [two, ctx.cast(safe, "float64")])
    if ctx.attr("direction") == "LEFT":
        work = f"uint{bits}"
        shifted = ctx.cast(ctx.op("multiply", [ctx.cast(x, work), ctx.cast(power, work)]), str(dtype))
        return ctx.op("where", [outside, ctx.scalar(0, x), shifted])
    if dtype.kind == "u":
        shifted = ctx.op("divide", [x, ctx.cast(power, str(dtype))])
        return ctx.op("where", [outside, ctx.scalar(0, x), shifted])
    wide = ctx.cast(x, "int64")
    factor = ctx.cast(power, "int64")
    floor = ctx.op("divide", [ctx.op("subtract", [wide, ctx.op("floor_mod", [wide, factor])]), factor])
    negative = ctx.op("less", [x, ctx.scalar(0, x)])
    beyond = ctx.op("where", [negative, ctx.scalar(-1, x), ctx.scalar(0, x)])
    return ctx.op("where", [outside, beyond, ctx.cast(floor, str(dtype))])


@converter("IsInf")
def convert_isinf(ctx: Context, inputs):
    x = inputs[0]
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    hits = []
    if pos:
        hits.append(ctx.op("equal", [x, ctx.scalar(np.inf, x)]))
    if neg:
        hits.append(ctx.op("equal", [x, ctx.scalar(-np.inf, x)]))
    if not hits:
        return ctx.param(np.zeros(ctx.shape(x), dtype=bool), "none")
    return hits[0] if len(hits) == 1 else ctx.op("logical_or", hits)


_BYTE_TABLES: dict = {}


def _byte_table(op: str) -> np.ndarray:
    """``table[a * 256 + b] = a op b`` for all bytes."""
    if op not in _BYTE_TABLES:
        a, b = np.meshgrid(np.arange(256, dtype=np.uint8), np.arange(256, dtype=np.uint8), indexing="ij")
        fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
        _BYTE_TABLES[op] = fn(a, b).reshape(-1)
    return _BYTE_TABLES[op]


@converter("BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot")
def convert_bitwise(ctx: Context, inputs):
    """Bitwise operators without bit instructions in the IR: on bools they are the logical ones; on
    integers each byte of the two operands (exact unsigned arithmetic on the same-width unsigned view)
    indexes a 256 x 256 constant table, and the result bytes are summed back. NOT is ``-x - 1``."""
    x = inputs[0]
    dtype = np.dtype(ctx.dtype(x))
    op = ctx.op_type.removeprefix("Bitwise").lower()
    if dtype == np.bool_:
        if op == "not":
            return ctx.op("logical_not", [x])
        return ctx.op(f"logical_{op}", inputs[:2])
    if op == "not":
        if dtype.kind == "u":
            return ctx.op("subtract", [ctx.scalar(np.iinfo(dtype).max, x), x])
        return ctx.op("subtract", [ctx.op("negative", [x]), ctx.scalar(1, x)])
    unsigned = f"uint{dtype.itemsize * 8}"
    a, b = ctx.cast(x, unsigned), ctx.cast(inputs[1], unsigned)
    table = ctx.param(_byte_table(op), f"{op}_table")
    total = None
    for k in range(dtype.itemsize):

        def byte(v, k=k):
            if dtype.itemsize == 1:
                return ctx.cast(v, "int64")
            shifted = ctx.op("divide", [v, ctx.scalar(256**k, v)]) if k else v
            return ctx.cast(ctx.op("floor_mod", [shifted, ctx.scalar(256, v)]), "int64")

        index = ctx.op(
            "add", [ctx.op("multiply", [byte(a), ctx.param(np.asarray(256, np.int64), "base")]), byte(b)]
        )
        part = ctx.cast(ctx.op("take", [table, index], {"axis": 0}), unsigned)
        if k:
            part = ctx.op("multiply", [part, ctx.scalar(256**k, part)])
        total = part if total is None else ctx.op("add", [total, part])
    return ctx.cast(total, str(dtype))


@converter("Det")
def convert_det(ctx: Context, inputs):
    """Determinants of 1x1, 2x2 and 3x3 matrices (batched) by cofactor expansion."""
    x = inputs[0]
    shape = ctx.shape(x)
    n = shape[-1]
    if n not in (1, 2, 3) or shape[-2] != n:
        raise ctx.error(f"determinants of {shape[-2:]} matrices are not supported (only up to 3 x 3)")
    rank = len(shape)

    def at(i, j):
        v = ctx.op("strided_slice", [x], {"begin": (i, j), "end": (i + 1, j + 1), "strides": (1, 1),
                                          "axes": (rank - 2, rank - 1)})
        return ctx.reshape(v, shape[:-2])

    def mul(a, b):
        return ctx.op("multiply", [a, b])

    def minor2(r0, r1, c0, c1):
        return ctx.op("subtract", [mul(at(r0, c0), at(r1, c1)), mul(at(r0, c1), at(r1, c0))])

    if n == 1:
        return at(0, 0)
    if n == 2:
        return minor2(0, 1, 0, 1)
    terms = [mul(at(0, 0), minor2(1, 2, 1, 2)), mul(at(0, 1), minor2(1, 2, 0, 2)),
             mul(at(0, 2), minor2(1, 2, 0, 1))]
    return ctx.op("add", [ctx.op("subtract", [terms[0], terms[1]]), terms[2]])
