"""Cases for elementwise and broadcast operators: unary math, activations, casts, binary arithmetic,
comparisons, logic, ``where``, ``bias_add`` and ``prelu``.

Inputs are drawn where each function is well conditioned (``log`` of positive values, ``divide`` by
values away from zero, ``floor_mod`` of dividends away from a multiple of the divisor), because near a
pole or a jump any two correct implementations differ by more than rounding.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from nnvm_conformance.case import (
    FLOATS,
    NUMBERS,
    SEEDS,
    SIGNED_INTS,
    Example,
    OpCase,
    Tolerance,
    broadcast_shapes,
    rng_of,
    shapes,
    values,
)

EXACT = Tolerance(1, 1, "exact in real arithmetic; one rounding of the result")
ROUNDED = Tolerance(4, 4, "a few arithmetic operations, each rounded once")
LIBM = Tolerance(16, 16, "transcendental functions: backends use their own polynomial approximations "
                         "(vectorized, without libm), accurate to a few ulp; 16 ulp leaves room for the "
                         "rounding of the arithmetic around them")
COMPOSED = Tolerance(64, 64, "several transcendental steps (gelu, selu, softplus): errors of each step add, "
                             "and exp amplifies its argument's rounding error by |x|")


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


@st.composite
def _unary(draw, dtypes, kind, attrs=None):
    shape = draw(shapes())
    dtype = draw(st.sampled_from(dtypes))
    a = draw(attrs) if attrs is not None else {}
    x = values(rng_of(draw(SEEDS)), shape, dtype, kind)
    return Example((x,), a)


def unary_case(op, fn, dtypes=FLOATS, kind="signed", tolerance=LIBM, attrs=None, count=6):
    """A unary operator: ``fn(x_float64_or_exact, attrs)`` is the reference."""

    def reference(xs, a):
        x = xs[0]
        return [np.asarray(fn(_f64(x) if x.dtype.kind == "f" else x, a))]

    return OpCase(op, _unary(dtypes, kind, attrs), reference, tolerance, count=count)


def _round_half_even(x, a):
    return np.round(x) if x.dtype.kind == "f" else x


def _sign(x, a):
    return np.sign(x).astype(x.dtype)


def _clip(x, a):
    lo, hi = a["a_min"], a["a_max"]
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        lo = max(math.ceil(lo), int(info.min)) if lo != -math.inf else int(info.min)
        hi = min(math.floor(hi), int(info.max)) if hi != math.inf else int(info.max)
        return np.minimum(np.maximum(x, lo), hi).astype(x.dtype)
    return np.minimum(np.maximum(x, lo), hi)


def _gelu(x, a):
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


_ALPHA = st.sampled_from([0.01, 0.1, 0.3, 1.0, 1.7])
_BOUNDS = st.tuples(st.sampled_from([-math.inf, -2.5, -1.0, 0.0]), st.sampled_from([math.inf, 0.5, 2.0, 6.0]))

UNARY = [
    unary_case("relu", lambda x, a: np.maximum(x, 0).astype(x.dtype), NUMBERS + ("int8",), tolerance=EXACT),
    unary_case("sigmoid", lambda x, a: 1 / (1 + np.exp(-x))),
    unary_case("tanh", lambda x, a: np.tanh(x)),
    unary_case("exp", lambda x, a: np.exp(x)),
    unary_case("log", lambda x, a: np.log(x), kind="positive"),
    unary_case("sqrt", lambda x, a: np.sqrt(x), kind="positive", tolerance=ROUNDED),
    unary_case("rsqrt", lambda x, a: 1 / np.sqrt(x), kind="positive", tolerance=ROUNDED),
    unary_case("abs", lambda x, a: np.abs(x).astype(x.dtype), NUMBERS + ("int8",), tolerance=EXACT),
    unary_case("negative", lambda x, a: np.negative(x).astype(x.dtype), NUMBERS + ("int8",), tolerance=EXACT),
    unary_case("floor", lambda x, a: np.floor(x) if x.dtype.kind == "f" else x, NUMBERS, tolerance=EXACT),
    unary_case("ceil", lambda x, a: np.ceil(x) if x.dtype.kind == "f" else x, NUMBERS, tolerance=EXACT),
    unary_case("round", _round_half_even, NUMBERS, kind="ties", tolerance=EXACT),
    unary_case("erf", lambda x, a: _erf(x)),
    unary_case("sign", _sign, NUMBERS + ("int8",), kind="ties", tolerance=EXACT),
    unary_case("reciprocal", lambda x, a: 1 / x, kind="nonzero", tolerance=ROUNDED),
    unary_case("softplus", lambda x, a: np.logaddexp(0, x), tolerance=COMPOSED),
    unary_case("sin", lambda x, a: np.sin(x)),
    unary_case("cos", lambda x, a: np.cos(x)),
    unary_case("logical_not", lambda x, a: np.logical_not(x), ("bool",), tolerance=EXACT),
    unary_case("identity", lambda x, a: x, FLOATS + SIGNED_INTS + ("bool", "uint8"), tolerance=EXACT),
    unary_case("copy", lambda x, a: x, FLOATS + SIGNED_INTS + ("bool", "uint8"), tolerance=EXACT),
    unary_case("dropout", lambda x, a: x, FLOATS + ("int32",), tolerance=EXACT,
               attrs=st.fixed_dictionaries({"rate": st.sampled_from([0.0, 0.1, 0.5])})),
    unary_case("clip", _clip, NUMBERS + ("int8",), tolerance=EXACT,
               attrs=_BOUNDS.map(lambda b: {"a_min": b[0], "a_max": b[1]})),
    unary_case("leaky_relu", lambda x, a: np.where(x > 0, x, x * a["alpha"]),
               tolerance=ROUNDED, attrs=st.fixed_dictionaries({"alpha": _ALPHA})),
    unary_case("elu", lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(x)),
               tolerance=COMPOSED, attrs=st.fixed_dictionaries({"alpha": _ALPHA})),
    unary_case("selu", lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(x)),
               tolerance=COMPOSED, attrs=st.fixed_dictionaries(
                   {"alpha": st.sampled_from([1.6732632423543772, 1.0]),
                    "gamma": st.sampled_from([1.0507, 2.0])})),
    unary_case("hard_sigmoid", lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1), tolerance=ROUNDED,
               attrs=st.fixed_dictionaries({"alpha": st.sampled_from([0.2, 1 / 6]),
                                            "beta": st.sampled_from([0.5, 0.25])})),
    unary_case("hard_swish", lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1), kind="signed", tolerance=ROUNDED),
    unary_case("gelu", _gelu, tolerance=COMPOSED,
               attrs=st.fixed_dictionaries({"approximate": st.sampled_from(["none", "tanh"])})),
]


# ---------------------------------------------------------------------------------------------------
# cast and isnan


_CASTS = [("float32", "int32"), ("float32", "float64"), ("float64", "float32"), ("int32", "float32"),
          ("int64", "int32"), ("int32", "int8"), ("uint8", "float32"), ("float32", "uint8"),
          ("bool", "float32"), ("int32", "int64"), ("float64", "int64"), ("int8", "float64")]


@st.composite
def _cast_examples(draw):
    src, dst = draw(st.sampled_from(_CASTS))
    rng = rng_of(draw(SEEDS))
    shape = draw(shapes())
    if src in FLOATS:  # in range of the destination: C leaves out-of-range float to int undefined
        lo = 0.0 if dst.startswith("uint") else -100.0
        x = rng.uniform(lo, 100.0, shape).astype(src)
    elif src == "int32" and dst == "int8":
        x = rng.integers(-128, 128, shape).astype(src)
    else:
        x = values(rng, shape, src)
    return Example((x,), {"dtype": dst}, (dst,))


def _cast_reference(xs, a):
    x, dst = xs[0], a["dtype"]
    return [x.astype(dst) if np.dtype(dst).kind in "biu" else x.astype(np.float64)]


@st.composite
def _isnan_examples(draw):
    rng = rng_of(draw(SEEDS))
    x = values(rng, draw(shapes()), draw(st.sampled_from(FLOATS)))
    special = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0]), x.shape)
    x = np.where(rng.random(x.shape) < 0.3, special, x).astype(x.dtype)
    return Example((x,), {})


CAST = [
    OpCase("cast", _cast_examples(), _cast_reference, EXACT, count=8),
    OpCase("isnan", _isnan_examples(), lambda xs, a: [np.isnan(xs[0])], EXACT, count=4),
]


# ---------------------------------------------------------------------------------------------------
# binary broadcast operators


@st.composite
def _binary(draw, dtypes, kind_a="signed", kind_b="signed"):
    sa, sb = draw(broadcast_shapes(2))
    dtype = draw(st.sampled_from(dtypes))
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, sa, dtype, kind_a), values(rng, sb, dtype, kind_b)), {})


def binary_case(op, fn, dtypes=NUMBERS, kind_a="signed", kind_b="signed", tolerance=EXACT, count=6):
    def reference(xs, a):
        x, y = xs
        if x.dtype.kind == "f":
            return [np.asarray(fn(_f64(x), _f64(y)))]
        return [np.asarray(fn(x, y))]

    return OpCase(op, _binary(dtypes, kind_a, kind_b), reference, tolerance, count=count)


def _int_divide(x, y):
    if x.dtype.kind == "f":
        return x / y
    q = np.abs(x) // np.abs(y)
    return np.where((x < 0) != (y < 0), -q, q).astype(x.dtype)


@st.composite
def _remainder(draw):
    """Dividends a whole number of divisors plus a fraction in [0.1, 0.9]: no quotient near a jump."""
    sa, sb = draw(broadcast_shapes(2))
    dtype = draw(st.sampled_from(NUMBERS))
    rng = rng_of(draw(SEEDS))
    b = values(rng, sb, dtype, "nonzero")
    if dtype in FLOATS:  # the dividend takes the full shape, so each element has its own quotient
        full = np.broadcast_shapes(sa, sb)
        q = rng.integers(-4, 5, full) + rng.uniform(0.1, 0.9, full)
        a = (q * b.astype(np.float64)).astype(dtype)
    else:
        a = values(rng, sa, dtype, "signed")
    return Example((a, b), {})


def _floor_mod(x, y):
    if x.dtype.kind == "f":
        return x - np.floor(x / y) * y
    return np.mod(x, y).astype(x.dtype)


def _fmod(x, y):
    return np.fmod(x, y) if x.dtype.kind == "f" else np.fmod(x, y).astype(x.dtype)


@st.composite
def _power(draw):
    sa, sb = draw(broadcast_shapes(2))
    dtype = draw(st.sampled_from(NUMBERS))
    rng = rng_of(draw(SEEDS))
    if dtype in FLOATS:
        return Example((rng.uniform(0.1, 3.0, sa).astype(dtype), rng.uniform(-3, 3, sb).astype(dtype)), {})
    # powers up to 9 ** 9: past float32's 2 ** 24, where a pow through float rounds (Metal has no double)
    return Example((rng.integers(-9, 10, sa).astype(dtype), rng.integers(0, 10, sb).astype(dtype)), {})


def _power_reference(xs, a):
    x, y = xs
    return [np.power(_f64(x), _f64(y)) if x.dtype.kind == "f" else np.power(x, y).astype(x.dtype)]


_COMPARE = NUMBERS + ("int8",)
BINARY = [
    binary_case("add", np.add),
    binary_case("subtract", np.subtract),
    binary_case("multiply", np.multiply),
    binary_case("maximum", np.maximum),
    binary_case("minimum", np.minimum),
    binary_case("divide", _int_divide, kind_b="nonzero", tolerance=EXACT),
    OpCase("power", _power(), _power_reference, LIBM, count=6),
    OpCase("floor_mod", _remainder(), lambda xs, a: [_floor_mod(*(_f64(x) if x.dtype.kind == "f" else x
                                                                  for x in xs))],
           Tolerance(4, 16, "a - floor(a / b) * b rounds a / b and the product; the absolute error grows "
                            "with the dividend's magnitude (scale: max |a|)"),
           scale=lambda ex: float(np.abs(ex.inputs[0].astype(np.float64)).max(initial=1.0)), count=6),
    OpCase("fmod", _remainder(), lambda xs, a: [_fmod(*(_f64(x) if x.dtype.kind == "f" else x for x in xs))],
           EXACT, count=6),
    binary_case("equal", np.equal, _COMPARE + ("bool",), "ties", "ties"),
    binary_case("not_equal", np.not_equal, _COMPARE + ("bool",), "ties", "ties"),
    binary_case("less", np.less, _COMPARE, "ties", "ties"),
    binary_case("less_equal", np.less_equal, _COMPARE, "ties", "ties"),
    binary_case("greater", np.greater, _COMPARE, "ties", "ties"),
    binary_case("greater_equal", np.greater_equal, _COMPARE, "ties", "ties"),
    binary_case("logical_and", np.logical_and, ("bool",)),
    binary_case("logical_or", np.logical_or, ("bool",)),
    binary_case("logical_xor", np.logical_xor, ("bool",)),
]


# ---------------------------------------------------------------------------------------------------
# where, bias_add, prelu


@st.composite
def _where(draw):
    sc, sx, sy = draw(broadcast_shapes(3))
    dtype = draw(st.sampled_from(NUMBERS))
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, sc, "bool"), values(rng, sx, dtype), values(rng, sy, dtype)), {})


@st.composite
def _bias_add(draw):
    shape = draw(shapes(1, 4))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    dtype = draw(st.sampled_from(NUMBERS))
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, shape, dtype), values(rng, (shape[axis],), dtype)), {"axis": axis})


def _bias_add_reference(xs, a):
    x, b = xs
    axis = a["axis"] % x.ndim
    x64 = _f64(x) if x.dtype.kind == "f" else x
    b64 = _f64(b) if b.dtype.kind == "f" else b
    out = x64 + b64.reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return [out if x.dtype.kind == "f" else out.astype(x.dtype)]


@st.composite
def _prelu(draw):
    shape = draw(shapes(2, 4))
    dtype = draw(st.sampled_from(FLOATS))
    kind = draw(st.sampled_from(["channel", "scalar", "full"]))
    slope_shape = {"channel": (shape[1],) + (1,) * (len(shape) - 2), "scalar": (1,), "full": shape}[kind]
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, shape, dtype), values(rng, slope_shape, dtype, "unit")), {})


OTHER = [
    OpCase("where", _where(), lambda xs, a: [np.where(xs[0], *(_f64(x) if x.dtype.kind == "f" else x
                                                               for x in xs[1:]))], EXACT),
    OpCase("bias_add", _bias_add(), _bias_add_reference, EXACT),
    OpCase("prelu", _prelu(), lambda xs, a: [np.where(xs[0] > 0, _f64(xs[0]), _f64(xs[0]) * _f64(xs[1]))],
           EXACT),
]


def cases() -> list[OpCase]:
    """Every elementwise and broadcast operator's case."""
    return UNARY + CAST + BINARY + OTHER
