"""Tensor operators: arithmetic (elemwise, broadcast, ``_*_scalar``), shapes (Reshape with its special
codes, transpose, slices, split, stack, tile, repeat, pad), reductions, casts and products."""

from __future__ import annotations

import math

import numpy as np

from nnvm_frontend_mxnet.context import Context, converter

# -- arithmetic -------------------------------------------------------------------------------------
_BINARY = {
    "add": ("elemwise_add", "broadcast_add", "broadcast_plus", "_plus", "_Plus", "_add"),
    "subtract": ("elemwise_sub", "broadcast_sub", "broadcast_minus", "_minus", "_Minus", "_sub"),
    "multiply": ("elemwise_mul", "broadcast_mul", "_mul", "_Mul"),
    "divide": ("elemwise_div", "broadcast_div", "_div", "_Div"),
    "maximum": ("broadcast_maximum", "_maximum", "_Maximum"),
    "minimum": ("broadcast_minimum", "_minimum", "_Minimum"),
    "power": ("broadcast_power", "_power", "_Power"),
    "floor_mod": ("broadcast_mod", "_mod"),
}
_BINARY_OP = {name: op for op, names in _BINARY.items() for name in names}
# Comparisons give 1 or 0 in the inputs' dtype in MXNet.
_COMPARE = {"broadcast_equal": "equal", "broadcast_not_equal": "not_equal", "broadcast_greater": "greater",
            "broadcast_greater_equal": "greater_equal", "broadcast_lesser": "less",
            "broadcast_lesser_equal": "less_equal", "_equal": "equal", "_not_equal": "not_equal",
            "_greater": "greater", "_greater_equal": "greater_equal", "_lesser": "less",
            "_lesser_equal": "less_equal"}


@converter(*_BINARY_OP, "ElementWiseSum", "add_n")
def convert_binary(ctx: Context, inputs):
    if ctx.op_type in ("ElementWiseSum", "add_n"):
        out = inputs[0]
        for v in inputs[1:]:
            out = ctx.op("add", [out, v])
        return out
    return ctx.op(_BINARY_OP[ctx.op_type], inputs[:2])


@converter(*_COMPARE)
def convert_compare(ctx: Context, inputs):
    return ctx.cast(ctx.op(_COMPARE[ctx.op_type], inputs[:2]), ctx.dtype(inputs[0]))


_SCALAR = {"_plus_scalar": ("add", False), "_PlusScalar": ("add", False),
           "_minus_scalar": ("subtract", False), "_MinusScalar": ("subtract", False),
           "_rminus_scalar": ("subtract", True), "_RMinusScalar": ("subtract", True),
           "_mul_scalar": ("multiply", False), "_MulScalar": ("multiply", False),
           "_div_scalar": ("divide", False), "_DivScalar": ("divide", False),
           "_rdiv_scalar": ("divide", True), "_RDivScalar": ("divide", True),
           "_power_scalar": ("power", False), "_PowerScalar": ("power", False),
           "_rpower_scalar": ("power", True), "_RPowerScalar": ("power", True),
           "_maximum_scalar": ("maximum", False), "_MaximumScalar": ("maximum", False),
           "_minimum_scalar": ("minimum", False), "_MinimumScalar": ("minimum", False),
           "_mod_scalar": ("floor_mod", False), "_rmod_scalar": ("floor_mod", True)}
_SCALAR_COMPARE = {"_equal_scalar": "equal", "_not_equal_scalar": "not_equal", "_greater_scalar": "greater",
                   "_greater_equal_scalar": "greater_equal", "_lesser_scalar": "less",
                   "_lesser_equal_scalar": "less_equal"}


@converter(*_SCALAR, *_SCALAR_COMPARE)
def convert_scalar(ctx: Context, inputs):
    x = inputs[0]
    s = ctx.scalar(ctx.attr_float("scalar", None), x)
    if ctx.op_type in _SCALAR_COMPARE:
        return ctx.cast(ctx.op(_SCALAR_COMPARE[ctx.op_type], [x, s]), ctx.dtype(x))
    op, reverse = _SCALAR[ctx.op_type]
    return ctx.op(op, [s, x] if reverse else [x, s])


_UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log", "sqrt": "sqrt",
          "rsqrt": "rsqrt", "abs": "abs", "negative": "negative", "floor": "floor", "ceil": "ceil",
          "round": "round", "reciprocal": "reciprocal", "sin": "sin", "cos": "cos", "erf": "erf",
          "sign": "sign", "softrelu": "softplus", "_copy": "copy", "identity": "copy"}
_PASS = ("BlockGrad", "stop_gradient", "make_loss", "MakeLoss")


@converter(*_UNARY, "square", "softsign", "log_sigmoid", *_PASS)
def convert_unary(ctx: Context, inputs):
    x = inputs[0]
    if ctx.op_type in _PASS:
        return x
    if ctx.op_type == "square":
        return ctx.op("multiply", [x, x])
    if ctx.op_type == "softsign":
        return ctx.op("divide", [x, ctx.op("add", [ctx.op("abs", [x]), ctx.scalar(1, x)])])
    if ctx.op_type == "log_sigmoid":
        return ctx.op("negative", [ctx.op("softplus", [ctx.op("negative", [x])])])
    return ctx.op(_UNARY[ctx.op_type], [x])


@converter("clip")
def convert_clip(ctx: Context, inputs):
    return ctx.op("clip", [inputs[0]], {"a_min": ctx.attr_float("a_min", None),
                                        "a_max": ctx.attr_float("a_max", None)})


@converter("where")
def convert_where(ctx: Context, inputs):
    cond, x, y = inputs[:3]
    if ctx.dtype(cond) != "bool":
        cond = ctx.op("not_equal", [cond, ctx.scalar(0, cond)])
    return ctx.op("where", [cond, x, y])


@converter("zeros_like", "ones_like")
def convert_fill_like(ctx: Context, inputs):
    value = 0 if ctx.op_type == "zeros_like" else 1
    return ctx.param(np.full(ctx.shape(inputs[0]), value, dtype=ctx.dtype(inputs[0])), ctx.op_type)


@converter("Cast", "cast", "amp_cast")
def convert_cast(ctx: Context, inputs):
    dtype = ctx.attr_str("dtype", "float32")
    if dtype not in ("float16", "float32", "float64", "uint8", "int8", "int32", "int64", "bool"):
        raise ctx.error(f"dtype={dtype!r} is not supported")
    return ctx.cast(inputs[0], dtype)


# -- shapes -----------------------------------------------------------------------------------------
@converter("Flatten", "flatten")
def convert_flatten(ctx: Context, inputs):
    shape = ctx.shape(inputs[0])
    return ctx.reshape(inputs[0], (shape[0], math.prod(shape[1:])) if shape else (1, 1))


@converter("Concat", "concat")
def convert_concat(ctx: Context, inputs):
    axis = ctx.normalize_axis(ctx.attr_int("dim", 1), ctx.rank(inputs[0]))
    if len(inputs) == 1:
        return inputs[0]
    return ctx.op("concatenate", inputs, {"axis": axis})


@converter("stack")
def convert_stack(ctx: Context, inputs):
    axis = ctx.normalize_axis(ctx.attr_int("axis", 0), ctx.rank(inputs[0]) + 1)
    parts = []
    for v in inputs:
        shape = list(ctx.shape(v))
        parts.append(ctx.reshape(v, shape[:axis] + [1] + shape[axis:]))
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", parts, {"axis": axis})


def reshape_codes(ctx: Context, dshape: tuple, spec: tuple) -> tuple:
    """MXNet's Reshape ``shape`` with its special codes: 0 copies an input dimension, -1 is inferred,
    -2 copies all the rest, -3 merges two input dimensions, -4 splits one into the next two values."""
    out, src, infer, i = [], 0, None, 0
    try:
        while i < len(spec):
            p = spec[i]
            if p > 0:
                out.append(p)
                src += 1
            elif p == 0:
                out.append(dshape[src])
                src += 1
            elif p == -1:
                if infer is not None:
                    raise ctx.error(f"shape={spec} has more than one -1")
                infer = len(out)
                out.append(1)
                src += 1
            elif p == -2:
                out.extend(dshape[src:])
                src = len(dshape)
            elif p == -3:
                out.append(dshape[src] * dshape[src + 1])
                src += 2
            elif p == -4:
                d0, d1 = spec[i + 1], spec[i + 2]
                whole = dshape[src]
                d0 = whole // d1 if d0 == -1 else d0
                d1 = whole // d0 if d1 == -1 else d1
                out.extend([d0, d1])
                src += 1
                i += 2
            else:
                raise ctx.error(f"shape={spec} holds the unknown code {p}")
            i += 1
    except IndexError:
        raise ctx.error(f"shape={spec} does not fit the input shape {dshape}") from None
    if infer is not None:
        rest = math.prod(d for k, d in enumerate(out) if k != infer)
        out[infer] = math.prod(dshape) // rest if rest else 0
    if math.prod(out) != math.prod(dshape):
        raise ctx.error(f"shape={spec} gives {tuple(out)}, which does not hold the {math.prod(dshape)} "
                        f"elements of the input shape {dshape}")
    return tuple(out)


@converter("Reshape", "reshape")
def convert_reshape(ctx: Context, inputs):
    x = inputs[0]
    dshape = ctx.shape(x)
    spec = ctx.attr_ints("shape", ())
    if not spec and ctx.attr("target_shape") not in (None, ()):
        raise ctx.error("the legacy target_shape attribute is not supported; use shape")
    if ctx.attr_bool("reverse", False):
        return ctx.reshape(x, reshape_codes(ctx, dshape[::-1], spec[::-1])[::-1])
    return ctx.reshape(x, reshape_codes(ctx, dshape, spec))


@converter("transpose")
def convert_transpose(ctx: Context, inputs):
    axes = ctx.attr_ints("axes", ())
    rank = ctx.rank(inputs[0])
    axes = tuple(ctx.normalize_axis(a, rank) for a in axes) if axes else tuple(range(rank))[::-1]
    return ctx.transpose(inputs[0], axes)


@converter("expand_dims")
def convert_expand_dims(ctx: Context, inputs):
    shape = list(ctx.shape(inputs[0]))
    axis = ctx.normalize_axis(ctx.attr_int("axis", None), len(shape) + 1)
    return ctx.reshape(inputs[0], shape[:axis] + [1] + shape[axis:])


@converter("squeeze")
def convert_squeeze(ctx: Context, inputs):
    shape = ctx.shape(inputs[0])
    axis = ctx.attr("axis")
    if axis is None:
        axes = {k for k, d in enumerate(shape) if d == 1}
    else:
        axes = {ctx.normalize_axis(a, len(shape)) for a in (axis if isinstance(axis, tuple) else (axis,))}
        bad = [a for a in axes if shape[a] != 1]
        if bad:
            raise ctx.error(f"cannot squeeze axis {bad[0]} of size {shape[bad[0]]}")
    new = [d for k, d in enumerate(shape) if k not in axes]
    return ctx.reshape(inputs[0], new or [1])


def _bound(value, dim: int, step: int, is_begin: bool) -> int:
    if value is None:
        if step > 0:
            return 0 if is_begin else dim
        return dim - 1 if is_begin else -(dim + 1)
    return int(value)


@converter("slice", "crop")
def convert_slice(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    begin, end = ctx.attr("begin"), ctx.attr("end")
    step = ctx.attr("step", ()) or ()
    n = len(begin)
    steps = [1 if k >= len(step) or step[k] is None else int(step[k]) for k in range(n)]
    if 0 in steps:
        raise ctx.error("step 0 is not allowed")
    b = tuple(_bound(begin[k], shape[k], steps[k], True) for k in range(n))
    e = tuple(_bound(end[k], shape[k], steps[k], False) for k in range(n))
    return ctx.op("strided_slice", [x], {"begin": b, "end": e, "strides": tuple(steps),
                                         "axes": tuple(range(n))})


@converter("slice_axis")
def convert_slice_axis(ctx: Context, inputs):
    x = inputs[0]
    axis = ctx.normalize_axis(ctx.attr_int("axis", None), ctx.rank(x))
    dim = ctx.shape(x)[axis]
    begin = _bound(ctx.attr("begin"), dim, 1, True)
    end = _bound(ctx.attr("end"), dim, 1, False)
    return ctx.op("strided_slice", [x], {"begin": (begin,), "end": (end,), "axes": (axis,)})


@converter("slice_like")
def convert_slice_like(ctx: Context, inputs):
    x, like = inputs[0], inputs[1]
    axes = ctx.attr_ints("axes", ())
    rank = ctx.rank(x)
    axes = tuple(ctx.normalize_axis(a, rank) for a in axes) if axes else tuple(range(rank))
    ends = tuple(ctx.shape(like)[a] for a in axes)
    return ctx.op("strided_slice", [x], {"begin": (0,) * len(axes), "end": ends, "axes": axes})


@converter("split", "SliceChannel", "_split_v2")
def convert_split(ctx: Context, inputs):
    x = inputs[0]
    axis = ctx.normalize_axis(ctx.attr_int("axis", 1), ctx.rank(x))
    dim = ctx.shape(x)[axis]
    if ctx.op_type == "_split_v2" and ctx.attr("indices") not in (None, ()):
        points = tuple(p for p in ctx.attr_ints("indices") if p > 0)
    else:
        n = ctx.attr_int("num_outputs", None) or ctx.attr_int("sections", None)
        if dim % n:
            raise ctx.error(f"axis {axis} of size {dim} does not split into {n} equal parts")
        points = tuple(dim // n * k for k in range(1, n))
    outs = ctx.ops("split", [x], {"indices": points, "axis": axis}, len(points) + 1)
    if ctx.attr_bool("squeeze_axis", False):
        outs = [ctx.reshape(o, [d for k, d in enumerate(ctx.shape(o)) if k != axis]) for o in outs]
    return outs


@converter("tile")
def convert_tile(ctx: Context, inputs):
    x = inputs[0]
    reps = ctx.attr_ints("reps", ())
    rank = ctx.rank(x)
    if len(reps) > rank:
        x = ctx.reshape(x, (1,) * (len(reps) - rank) + ctx.shape(x))
    reps = (1,) * (ctx.rank(x) - len(reps)) + reps
    return ctx.op("tile", [x], {"reps": reps})


@converter("repeat")
def convert_repeat(ctx: Context, inputs):
    x = inputs[0]
    repeats = ctx.attr_int("repeats", None)
    axis = ctx.attr("axis")
    if axis is None:
        x = ctx.reshape(x, (math.prod(ctx.shape(x)),))
        axis = 0
    shape = list(ctx.shape(x))
    axis = ctx.normalize_axis(axis, len(shape))
    y = ctx.reshape(x, shape[: axis + 1] + [1] + shape[axis + 1 :])
    y = ctx.op("broadcast_to", [y], {"shape": tuple(shape[: axis + 1] + [repeats] + shape[axis + 1 :])})
    return ctx.reshape(y, shape[:axis] + [shape[axis] * repeats] + shape[axis + 1 :])


@converter("Pad", "pad")
def convert_pad(ctx: Context, inputs):
    mode = ctx.attr_str("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise ctx.error(f"mode={mode!r} is not supported")
    return ctx.op("pad", [inputs[0]], {"pad_width": ctx.attr_ints("pad_width", None), "mode": mode,
                                       "pad_value": ctx.attr_float("constant_value", 0.0)})


@converter("broadcast_to")
def convert_broadcast_to(ctx: Context, inputs):
    shape = ctx.shape(inputs[0])
    target = tuple(s if t == 0 else t for s, t in zip(shape, ctx.attr_ints("shape", ())))
    return ctx.op("broadcast_to", [inputs[0]], {"shape": target})


@converter("broadcast_like")
def convert_broadcast_like(ctx: Context, inputs):
    return ctx.op("broadcast_to", [inputs[0]], {"shape": ctx.shape(inputs[1])})


@converter("broadcast_axis", "broadcast_axes")
def convert_broadcast_axis(ctx: Context, inputs):
    shape = list(ctx.shape(inputs[0]))
    axes = ctx.attr_ints("axis", ())
    sizes = ctx.attr_ints("size", ())
    for a, s in zip(axes, sizes):
        shape[ctx.normalize_axis(a, len(shape))] = s
    return ctx.op("broadcast_to", [inputs[0]], {"shape": tuple(shape)})


# -- reductions -------------------------------------------------------------------------------------
def _reduce_axes(ctx: Context, rank: int) -> tuple:
    axis = ctx.attr("axis")
    if axis is None or axis == ():
        axes = tuple(range(rank))
    else:
        axes = tuple(ctx.normalize_axis(a, rank) for a in (axis if isinstance(axis, tuple) else (axis,)))
    if ctx.attr_bool("exclude", False):
        axes = tuple(a for a in range(rank) if a not in axes)
    return axes


@converter("sum", "mean", "max", "min", "prod", "sum_axis", "max_axis", "min_axis")
def convert_reduce(ctx: Context, inputs):
    x = inputs[0]
    op = ctx.op_type.removesuffix("_axis")
    axes = _reduce_axes(ctx, ctx.rank(x))
    keep = ctx.attr_bool("keepdims", False)
    if not axes:
        return x
    return ctx.op(op, [x], {"axis": axes, "keepdims": keep})


@converter("argmax", "argmin")
def convert_argmax(ctx: Context, inputs):
    """MXNet gives the index as a float (the input's dtype)."""
    x = inputs[0]
    axis = ctx.attr("axis")
    keep = ctx.attr_bool("keepdims", False)
    if axis is None:
        x = ctx.reshape(x, (math.prod(ctx.shape(x)),))
        axis = 0
    axis = ctx.normalize_axis(axis, ctx.rank(x))
    out = ctx.op(ctx.op_type, [x], {"axis": axis, "keepdims": keep})
    return ctx.cast(out, ctx.dtype(inputs[0]))


# -- products ---------------------------------------------------------------------------------------
@converter("dot")
def convert_dot(ctx: Context, inputs):
    """``dot`` of N-D arrays: the last axis of ``a`` with the first of ``b`` (after the transposes)."""
    a, b = inputs[:2]
    if ctx.attr_bool("transpose_a", False):
        a = ctx.transpose(a, tuple(range(ctx.rank(a)))[::-1])
    if ctx.attr_bool("transpose_b", False):
        b = ctx.transpose(b, tuple(range(ctx.rank(b)))[::-1])
    sa, sb = ctx.shape(a), ctx.shape(b)
    a2 = ctx.reshape(a, (math.prod(sa[:-1]), sa[-1]))
    b2 = ctx.reshape(b, (sb[0], math.prod(sb[1:])))
    return ctx.reshape(ctx.op("matmul", [a2, b2]), sa[:-1] + sb[1:])


@converter("batch_dot")
def convert_batch_dot(ctx: Context, inputs):
    a, b = inputs[:2]
    if ctx.attr_bool("transpose_a", False):
        a = ctx.transpose(a, tuple(range(ctx.rank(a) - 2)) + (ctx.rank(a) - 1, ctx.rank(a) - 2))
    if ctx.attr_bool("transpose_b", False):
        b = ctx.transpose(b, tuple(range(ctx.rank(b) - 2)) + (ctx.rank(b) - 1, ctx.rank(b) - 2))
    return ctx.op("matmul", [a, b])
