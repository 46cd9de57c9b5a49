"""Unary elementwise operators: ``out[i] = f(in[i])``.

Each operator is one row: the dtypes it accepts, the output dtype, its tensor expression and its
numpy evaluation. Activations with several branches use ``te.select`` (both sides are plain
arithmetic, so evaluating both is safe and keeps the loop branch-free).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, float_attr, is_float, require_dtype, require_inputs
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.tir import expr as E

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Unary:
    """One unary operator: ``te_fn(x_expr, attrs, dtype)`` and ``np_fn(x_array, attrs)``."""

    name: str
    te_fn: Callable
    np_fn: Callable
    accepts: str = "float"  # float | number | bool | any (see common.require_dtype)
    out_dtype: str | None = None  # None: the input's dtype
    attrs: dict | None = None
    doc: str = ""


def _c(v, dtype):
    return te.const(v, dtype)


def _relu(x, a, dt):
    return te.maximum(x, _c(0, dt))


def _abs(x, a, dt):
    return te.abs(x) if is_float(dt) else te.select(x < _c(0, dt), _c(0, dt) - x, x)


def _sign(x, a, dt):
    if is_float(dt):
        return E.call("sign", x)
    return te.select(x > _c(0, dt), _c(1, dt), te.select(x < _c(0, dt), _c(-1, dt), _c(0, dt)))


def _int_identity(fn):
    """floor, ceil and round of an integer are the integer itself."""
    return lambda x, a, dt: fn(x) if is_float(dt) else x


def _softplus(x, a, dt):
    # log(1 + exp(x)) without overflow: max(x, 0) + log(1 + exp(-|x|))
    return te.maximum(x, _c(0, dt)) + te.log(_c(1, dt) + te.exp(_c(0, dt) - te.abs(x)))


def _clip_bounds(a: dict, dt: str):
    """(low, high) as constants of ``dt``; None where the bound is infinite (no clamp needed)."""
    lo, hi = float(a["a_min"]), float(a["a_max"])
    if is_float(dt):
        return (None if lo == -math.inf else lo), (None if hi == math.inf else hi)
    tmin, tmax = E.min_value(dt).value, E.max_value(dt).value
    lo_i = None if lo == -math.inf or math.ceil(lo) <= tmin else min(math.ceil(lo), tmax)
    hi_i = None if hi == math.inf or math.floor(hi) >= tmax else max(math.floor(hi), tmin)
    return lo_i, hi_i


def _clip(x, a, dt):
    lo, hi = _clip_bounds(a, dt)
    if lo is not None:
        x = te.maximum(x, _c(lo, dt))
    if hi is not None:
        x = te.minimum(x, _c(hi, dt))
    return x


def _np_clip(x, a):
    lo, hi = _clip_bounds(a, str(x.dtype))
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi, x.dtype))
    return x


def _elu(x, a, dt):
    return te.select(x > _c(0, dt), x, (te.exp(x) - _c(1, dt)) * _c(a["alpha"], dt))


def _selu(x, a, dt):
    neg = (te.exp(x) - _c(1, dt)) * _c(a["alpha"], dt)
    return te.select(x > _c(0, dt), x, neg) * _c(a["gamma"], dt)


def _hard_sigmoid(x, a, dt):
    y = x * _c(a["alpha"], dt) + _c(a["beta"], dt)
    return te.minimum(te.maximum(y, _c(0, dt)), _c(1, dt))


def _hard_swish(x, a, dt):
    return x * te.minimum(te.maximum(x * _c(1.0 / 6.0, dt) + _c(0.5, dt), _c(0, dt)), _c(1, dt))


def _gelu(x, a, dt):
    # x/2 + x/2 * f(x) rather than x/2 * (1 + f(x)): one FMA, and f near -1 loses nothing to 1 + f's rounding;
    # tanh's argument as x * (c + c * 0.044715 * x**2): three operations instead of five
    half_x = x * _c(0.5, dt)
    if a["approximate"] == "tanh":
        inner = x * (_c(SQRT_2_OVER_PI, dt) + x * x * _c(SQRT_2_OVER_PI * 0.044715, dt))
        return half_x + half_x * te.tanh(inner)
    return half_x + half_x * te.erf(x * _c(1.0 / math.sqrt(2.0), dt))


def _np_erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype) if x.size else x


def _np_gelu(x, a):
    x64 = x.astype(np.float64)
    if a["approximate"] == "tanh":
        return 0.5 * x64 * (1 + np.tanh(SQRT_2_OVER_PI * (x64 + 0.044715 * x64**3)))
    return 0.5 * x64 * (1 + _np_erf(x64 / math.sqrt(2.0)))


def _np_selu(x, a):
    return a["gamma"] * np.where(x > 0, x, a["alpha"] * (np.exp(x) - 1))


def _np_hard_sigmoid(x, a):
    return np.clip(a["alpha"] * x + a["beta"], 0, 1)


def _cast_check(a):
    if a["dtype"] not in E.ALL_DTYPES:
        raise Error(f"cast: unknown dtype {a['dtype']!r}; expected one of {', '.join(E.ALL_DTYPES)}")


UNARY = [
    Unary("relu", _relu, lambda x, a: np.maximum(x, 0), "number", doc="max(x, 0)"),
    Unary("sigmoid", lambda x, a, dt: te.sigmoid(x), lambda x, a: 1 / (1 + np.exp(-x)), doc="1 / (1 + e^-x)"),
    Unary("tanh", lambda x, a, dt: te.tanh(x), lambda x, a: np.tanh(x)),
    Unary("exp", lambda x, a, dt: te.exp(x), lambda x, a: np.exp(x)),
    Unary("log", lambda x, a, dt: te.log(x), lambda x, a: np.log(x)),
    Unary("sqrt", lambda x, a, dt: te.sqrt(x), lambda x, a: np.sqrt(x)),
    Unary("rsqrt", lambda x, a, dt: te.rsqrt(x), lambda x, a: 1 / np.sqrt(x), doc="1 / sqrt(x)"),
    Unary("abs", _abs, lambda x, a: np.abs(x), "number"),
    Unary("negative", lambda x, a, dt: _c(0, dt) - x, lambda x, a: np.negative(x), "number"),
    Unary("floor", _int_identity(te.floor), lambda x, a: np.floor(x), "number"),
    Unary("ceil", _int_identity(te.ceil), lambda x, a: np.ceil(x), "number"),
    Unary("round", _int_identity(te.round), lambda x, a: np.round(x), "number", doc="half to even"),
    Unary("erf", lambda x, a, dt: te.erf(x), lambda x, a: _np_erf(x)),
    Unary("sign", _sign, lambda x, a: np.sign(x), "number"),
    Unary("reciprocal", lambda x, a, dt: _c(1, dt) / x, lambda x, a: 1 / x),
    Unary("softplus", _softplus, lambda x, a: np.logaddexp(0, x), doc="log(1 + e^x)"),
    Unary("sin", lambda x, a, dt: te.sin(x), lambda x, a: np.sin(x)),
    Unary("cos", lambda x, a, dt: te.cos(x), lambda x, a: np.cos(x)),
    Unary("logical_not", lambda x, a, dt: ~x, lambda x, a: np.logical_not(x), "bool"),
    # te.isnan types its call like its argument, so the bool result type is spelled out here
    Unary("isnan", lambda x, a, dt: E.call("isnan", x, dtype="bool"), lambda x, a: np.isnan(x),
          "float", "bool"),
    Unary("identity", lambda x, a, dt: x, lambda x, a: x.copy(), "any"),
    Unary("copy", lambda x, a, dt: x, lambda x, a: x.copy(), "any"),
    Unary("cast", lambda x, a, dt: x.astype(a["dtype"]), lambda x, a: x.astype(a["dtype"]), "any", "attr",
          {"dtype": Attr(str, doc="the output dtype")}, "convert to another dtype (floats truncate to ints)"),
    Unary("clip", _clip, _np_clip, "number", None,
          {"a_min": float_attr(-math.inf), "a_max": float_attr(math.inf)}, "min(max(x, a_min), a_max)"),
    Unary("leaky_relu", lambda x, a, dt: te.select(x > _c(0, dt), x, x * _c(a["alpha"], dt)),
          lambda x, a: np.where(x > 0, x, x * a["alpha"]), attrs={"alpha": float_attr(0.01)}),
    Unary("elu", _elu, lambda x, a: np.where(x > 0, x, a["alpha"] * (np.exp(x) - 1)),
          attrs={"alpha": float_attr(1.0)}),
    Unary("selu", _selu, _np_selu,
          attrs={"alpha": float_attr(1.67326319217681884765625),
                 "gamma": float_attr(1.05070102214813232421875)}),
    Unary("hard_sigmoid", _hard_sigmoid, _np_hard_sigmoid,
          attrs={"alpha": float_attr(0.2), "beta": float_attr(0.5)}, doc="clip(alpha * x + beta, 0, 1)"),
    Unary("hard_swish", _hard_swish, lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1), doc="x * hard_sigmoid(x)"),
    Unary("gelu", _gelu, _np_gelu, attrs={"approximate": Attr(str, "none", "'none' (erf) or 'tanh'")}),
    Unary("dropout", lambda x, a, dt: x, lambda x, a: x.copy(), "any", None, {"rate": float_attr(0.5)},
          "inference form: the identity"),
]


def _make(u: Unary) -> OpDef:
    def infer_type(in_types, attrs):
        (x,) = require_inputs(u.name, in_types, ("data",))
        require_dtype(u.name, x, u.accepts)
        if u.name == "cast":
            _cast_check(attrs)
        if u.name == "gelu" and attrs.get("approximate") not in ("none", "tanh"):
            raise Error(f"gelu: approximate must be 'none' or 'tanh', got {attrs.get('approximate')!r}")
        dtype = attrs["dtype"] if u.out_dtype == "attr" else (u.out_dtype or x.dtype)
        return [TensorType(x.shape, dtype)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        return [te.compute(x.shape, lambda *i: u.te_fn(x[i], attrs, x.dtype), name=u.name, tag=u.name)]

    return OpDef(u.name, infer_type, compute, OpPattern.ELEMWISE, attrs=dict(u.attrs or {}),
                 num_inputs=(1, 1),
                 evaluate=checked_evaluate(infer_type, lambda xs, a: [u.np_fn(xs[0], a)]),
                 doc=u.doc or f"elementwise {u.name}")


def ops() -> list[OpDef]:
    """The unary operators' OpDefs."""
    return [_make(u) for u in UNARY]
