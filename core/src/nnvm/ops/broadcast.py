"""Binary operators with numpy broadcasting, plus ``where``, ``bias_add`` and ``prelu``.

Inputs of a binary operator must share a dtype (as in ONNX); the frontend inserts casts. The one
exception is ``power``, whose exponent is converted to the base's dtype. Integer ``divide`` truncates
toward zero (C, ONNX), ``floor_mod`` takes the divisor's sign (Python, numpy) and ``fmod`` the
dividend's (C).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import (
    broadcast_read,
    broadcast_shapes,
    checked_evaluate,
    is_float,
    normalize_axis,
    require_dtype,
    require_inputs,
    same_dtypes,
)
from nnvm.ops.registry import Attr, OpDef, OpPattern


@dataclass(frozen=True)
class Binary:
    name: str
    te_fn: Callable  # (a_expr, b_expr, dtype) -> expr
    np_fn: Callable  # (a, b) -> array
    accepts: str = "number"
    out_dtype: str | None = None  # None: the inputs' dtype
    doc: str = ""


def _np_divide(a, b):
    if is_float(str(a.dtype)):
        return a / b
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where(b == 0, 0, np.where((a < 0) != (b < 0), -q, q))


def _floor_mod(a, b, dt):
    if is_float(dt):
        return a - te.floor(a / b) * b
    return te.floormod(a, b)


def _np_floor_mod(a, b):
    if is_float(str(a.dtype)):
        return a - np.floor(a / b) * b
    return np.mod(a, np.where(b == 0, 1, b))


def _np_fmod(a, b):
    return np.fmod(a, b) if is_float(str(a.dtype)) else np.fmod(a, np.where(b == 0, 1, b))


def _np_power(a, b):
    if is_float(str(a.dtype)):
        return np.power(a, b)
    # integers: a negative exponent gives trunc(a ** b), i.e. 0 unless |a| == 1 (ONNX, C's pow)
    neg = np.trunc(np.power(np.where(a == 0, 1, a).astype(np.float64), np.minimum(b, 0)))
    return np.where(b >= 0, np.power(a, np.maximum(b, 0)), np.where(a == 0, 0, neg))


BINARY = [
    Binary("add", lambda a, b, dt: a + b, np.add),
    Binary("subtract", lambda a, b, dt: a - b, np.subtract),
    Binary("multiply", lambda a, b, dt: a * b, np.multiply),
    Binary("divide", lambda a, b, dt: a / b, _np_divide, doc="integers truncate toward zero"),
    Binary("power", lambda a, b, dt: te.power(a, b), _np_power),
    Binary("maximum", lambda a, b, dt: te.maximum(a, b), np.maximum),
    Binary("minimum", lambda a, b, dt: te.minimum(a, b), np.minimum),
    Binary("floor_mod", _floor_mod, _np_floor_mod, doc="remainder with the divisor's sign"),
    Binary("fmod", lambda a, b, dt: te.fmod(a, b), _np_fmod, doc="remainder with the dividend's sign"),
    Binary("equal", lambda a, b, dt: a == b, np.equal, "any", "bool"),
    Binary("not_equal", lambda a, b, dt: a != b, np.not_equal, "any", "bool"),
    Binary("less", lambda a, b, dt: a < b, np.less, "number", "bool"),
    Binary("less_equal", lambda a, b, dt: a <= b, np.less_equal, "number", "bool"),
    Binary("greater", lambda a, b, dt: a > b, np.greater, "number", "bool"),
    Binary("greater_equal", lambda a, b, dt: a >= b, np.greater_equal, "number", "bool"),
    Binary("logical_and", lambda a, b, dt: a & b, np.logical_and, "bool"),
    Binary("logical_or", lambda a, b, dt: a | b, np.logical_or, "bool"),
    Binary("logical_xor", lambda a, b, dt: a != b, np.logical_xor, "bool"),
]


def _make_binary(op: Binary) -> OpDef:
    def infer_type(in_types, attrs):
        a, b = require_inputs(op.name, in_types, ("lhs", "rhs"))
        require_dtype(op.name, a, op.accepts, "lhs")
        if op.name == "power":
            require_dtype(op.name, b, "number", "exponent")
        else:
            same_dtypes(op.name, [a, b])
        return [TensorType(broadcast_shapes(op.name, a.shape, b.shape), op.out_dtype or a.dtype)]

    def compute(inputs, attrs, out_types):
        a, b = inputs
        shape = out_types[0].shape

        def body(*i):
            x, y = broadcast_read(a, i), broadcast_read(b, i)
            return op.te_fn(x, y.astype(a.dtype), a.dtype)

        return [te.compute(shape, body, name=op.name, tag=op.name)]

    def np_fn(xs, a):
        x, y = xs
        return [op.np_fn(x, y.astype(x.dtype) if op.name == "power" else y)]

    return OpDef(op.name, infer_type, compute, OpPattern.BROADCAST, num_inputs=(2, 2),
                 evaluate=checked_evaluate(infer_type, np_fn),
                 doc=op.doc or f"elementwise {op.name}, broadcast")


# ---------------------------------------------------------------------------------------------------
# where, bias_add, prelu


def _where_infer(in_types, attrs):
    c, x, y = require_inputs("where", in_types, ("condition", "x", "y"))
    require_dtype("where", c, "bool", "condition")
    dtype = same_dtypes("where", [x, y])
    return [TensorType(broadcast_shapes("where", c.shape, x.shape, y.shape), dtype)]


def _where_compute(inputs, attrs, out_types):
    c, x, y = inputs

    def body(*i):
        return te.select(broadcast_read(c, i), broadcast_read(x, i), broadcast_read(y, i))

    return [te.compute(out_types[0].shape, body, name="where", tag="where")]


def _bias_add_infer(in_types, attrs):
    data, bias = require_inputs("bias_add", in_types, ("data", "bias"))
    same_dtypes("bias_add", [data, bias])
    axis = normalize_axis("bias_add", attrs["axis"], len(data.shape))
    if bias.shape != (data.shape[axis],):
        raise Error(f"bias_add: the bias must have shape ({data.shape[axis]},) to match axis {axis} of the "
                    f"data {data.shape}, got {bias.shape}")
    return [data]


def _bias_add_compute(inputs, attrs, out_types):
    data, bias = inputs
    axis = attrs["axis"] % len(data.shape)
    return [te.compute(data.shape, lambda *i: data[i] + bias[i[axis]], name="bias_add", tag="bias_add")]


def _bias_add_eval(xs, attrs):
    data, bias = xs
    axis = attrs["axis"] % data.ndim
    return [data + bias.reshape((-1,) + (1,) * (data.ndim - axis - 1))]


def _prelu_infer(in_types, attrs):
    data, slope = require_inputs("prelu", in_types, ("data", "slope"))
    require_dtype("prelu", data, "float")
    same_dtypes("prelu", [data, slope])
    try:
        fits = broadcast_shapes("prelu", data.shape, slope.shape) == data.shape
    except Error:
        fits = False
    if not fits:
        raise Error(f"prelu: the slope {slope.shape} must broadcast to the data shape {data.shape}")
    return [data]


def _prelu_compute(inputs, attrs, out_types):
    data, slope = inputs

    def body(*i):
        x = data[i]
        return te.select(x > te.const(0, data.dtype), x, x * broadcast_read(slope, i))

    return [te.compute(data.shape, body, name="prelu", tag="prelu")]


def ops() -> list[OpDef]:
    """The binary broadcast operators' OpDefs, then where, bias_add and prelu."""
    out = [_make_binary(op) for op in BINARY]
    out.append(OpDef("where", _where_infer, _where_compute, OpPattern.BROADCAST, num_inputs=(3, 3),
                     evaluate=checked_evaluate(_where_infer, lambda xs, a: [np.where(*xs)]),
                     doc="x where condition holds, else y (broadcast)"))
    out.append(OpDef("bias_add", _bias_add_infer, _bias_add_compute, OpPattern.BROADCAST,
                     attrs={"axis": Attr(int, 1, "the data axis the 1-D bias runs along")}, num_inputs=(2, 2),
                     evaluate=checked_evaluate(_bias_add_infer, _bias_add_eval),
                     doc="data + bias along axis"))
    out.append(OpDef("prelu", _prelu_infer, _prelu_compute, OpPattern.BROADCAST, num_inputs=(2, 2),
                     evaluate=checked_evaluate(_prelu_infer, lambda xs, a: [np.where(xs[0] > 0, xs[0],
                                                                                     xs[0] * xs[1])]),
                     doc="x where x > 0, else slope * x (slope broadcast to x)"))
    return out
