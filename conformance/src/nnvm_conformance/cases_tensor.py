"""Cases for reductions (sum, mean, max, min, prod, argmax, argmin) and the injective operators that
move data without arithmetic (reshape, transpose, concatenate, split, strided_slice, take, pad,
broadcast_to, tile): the latter must be exact for every dtype.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from nnvm_conformance.case import (
    FLOATS,
    NUMBERS,
    SEEDS,
    Example,
    OpCase,
    Tolerance,
    max_abs,
    rng_of,
    shapes,
    values,
)

EXACT = Tolerance(0, 0, "moves or picks elements without arithmetic: bit-exact")
SUM = Tolerance(4, 2, "a sum over the reduced axes in the schedule's order: the bound grows with the "
                      "number of terms K and their magnitude (scale: K * max|x|)")
PROD = Tolerance(4, 2, "a product of K factors near 1: relative error about K ulp (scale: K * max|result|)")
ANY_DTYPE = FLOATS + ("int32", "int64", "int8", "uint8", "bool")


def _f64(x):
    return np.asarray(x, dtype=np.float64) if x.dtype.kind == "f" else x


# ---------------------------------------------------------------------------------------------------
# reductions


def _axes(draw, rank: int):
    """None (every axis) or a tuple of distinct axes, some written negatively."""
    if draw(st.booleans()) and rank > 1:
        chosen = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        return tuple(a - rank if draw(st.booleans()) else a for a in chosen)
    return None


@st.composite
def _reduce(draw, op):
    shape = draw(shapes(1, 4, 1, 6 if op != "prod" else 4))
    dtypes = FLOATS if op == "mean" else NUMBERS
    dtype = draw(st.sampled_from(dtypes))
    rng = rng_of(draw(SEEDS))
    if op == "prod":
        x = rng.uniform(0.8, 1.25, shape) if dtype in FLOATS else rng.choice([-1, 1, 1, 2], shape)
    else:
        x = values(rng, shape, dtype, "ties" if op in ("max", "min") else "signed")
    attrs = {"axis": _axes(draw, len(shape)), "keepdims": draw(st.booleans())}
    return Example((np.asarray(x, dtype=dtype),), attrs)


def _reduce_reference(op):
    fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}[op]

    def reference(xs, a):
        x = xs[0]
        axis = None if a["axis"] is None else tuple(a["axis"])
        if x.dtype.kind == "f":
            return [fn(_f64(x), axis=axis, keepdims=a["keepdims"])]
        extra = {"dtype": x.dtype} if op in ("sum", "prod") else {}  # integers wrap in their own dtype
        return [np.asarray(fn(x, axis=axis, keepdims=a["keepdims"], **extra)).astype(x.dtype)]

    return reference


def _reduced_count(ex) -> int:
    x, axis = ex.inputs[0], ex.attrs["axis"]
    return x.size if axis is None else math.prod(x.shape[a] for a in axis)


@st.composite
def _arg(draw):
    shape = draw(shapes(1, 4))
    dtype = draw(st.sampled_from(NUMBERS))
    x = values(rng_of(draw(SEEDS)), shape, dtype, "ties")  # ties test first-or-last index selection
    attrs = {"axis": draw(st.integers(-len(shape), len(shape) - 1)), "keepdims": draw(st.booleans()),
             "select_last_index": draw(st.booleans())}
    return Example((x,), attrs)


def _arg_reference(op):
    fn = np.argmax if op == "argmax" else np.argmin

    def reference(xs, a):
        x = xs[0]
        axis = a["axis"] % x.ndim
        if a["select_last_index"]:
            out = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            out = fn(x, axis=axis)
        out = np.asarray(out, dtype=np.int64)
        return [np.expand_dims(out, axis) if a["keepdims"] else out]

    return reference


# ---------------------------------------------------------------------------------------------------
# injective operators


def _any_values(draw, shape):
    dtype = draw(st.sampled_from(ANY_DTYPE))
    return values(rng_of(draw(SEEDS)), shape, dtype)


@st.composite
def _reshape(draw):
    shape = draw(shapes(1, 4))
    n = math.prod(shape)
    sides, rest = [], n
    for _ in range(draw(st.integers(0, 3))):  # peel divisors off the element count
        d = draw(st.sampled_from([k for k in range(1, rest + 1) if rest % k == 0]))
        sides.append(d)
        rest //= d
    new = tuple(draw(st.permutations(sides + [rest])))
    return Example((_any_values(draw, shape),), {"newshape": new})


@st.composite
def _transpose(draw):
    shape = draw(shapes(1, 4))
    axes = None if draw(st.booleans()) else tuple(draw(st.permutations(range(len(shape)))))
    if axes is not None and draw(st.booleans()):
        axes = tuple(a - len(shape) for a in axes)
    return Example((_any_values(draw, shape),), {"axes": axes})


@st.composite
def _concatenate(draw):
    shape = draw(shapes(1, 4))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    dtype = draw(st.sampled_from(ANY_DTYPE))
    rng = rng_of(draw(SEEDS))
    ins = []
    for _ in range(draw(st.integers(1, 4))):
        s = list(shape)
        s[axis] = draw(st.integers(1, 4))
        ins.append(values(rng, s, dtype))
    return Example(tuple(ins), {"axis": axis})


@st.composite
def _split(draw):
    shape = draw(shapes(1, 4, 1, 8))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    points = sorted(draw(st.lists(st.integers(0, shape[axis]), min_size=1, max_size=3)))
    return Example((_any_values(draw, shape),), {"indices": tuple(points), "axis": axis})


@st.composite
def _strided_slice(draw):
    shape = draw(shapes(1, 4, 1, 8))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    begin, end, strides = [], [], []
    for a in axes:
        d = shape[a]
        begin.append(draw(st.integers(-d - 2, d + 2)))
        end.append(draw(st.integers(-d - 2, d + 2)))
        strides.append(draw(st.sampled_from([1, 1, 2, 3, -1, -2])))
    attrs = {"begin": tuple(begin), "end": tuple(end), "strides": tuple(strides), "axes": tuple(axes)}
    if axes == list(range(len(axes))) and all(s == 1 for s in strides) and draw(st.booleans()):
        attrs.update(strides=None, axes=None)  # the defaults: unit strides over the leading axes
    return Example((_any_values(draw, shape),), attrs)


def _strided_slice_reference(xs, a):
    x = xs[0]
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["begin"])))
    strides = a["strides"] if a["strides"] is not None else (1,) * len(a["begin"])
    key = [slice(None)] * x.ndim
    for ax, b, e, s in zip(axes, a["begin"], a["end"], strides):
        key[ax] = slice(b, e, s)  # Python slicing is the specification
    return [np.ascontiguousarray(x[tuple(key)])]


@st.composite
def _take(draw):
    shape = draw(shapes(1, 3))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    rng = rng_of(draw(SEEDS))
    idx_shape = draw(shapes(1, 2, 1, 4))
    indices = rng.integers(-n, n, idx_shape).astype(draw(st.sampled_from(["int32", "int64"])))
    return Example((_any_values(draw, shape), indices), {"axis": axis})


def _take_reference(xs, a):
    data, indices = xs
    axis = a["axis"] % data.ndim
    return [np.take(data, indices.astype(np.int64) % data.shape[axis], axis=axis)]


@st.composite
def _pad(draw):
    shape = draw(shapes(1, 4, 1, 5))
    mode = draw(st.sampled_from(["constant", "edge", "reflect"]))
    widths = []
    for d in shape:
        hi = d - 1 if mode == "reflect" else 3
        widths += [draw(st.integers(0, hi)), draw(st.integers(0, hi))]
    dtype = draw(st.sampled_from(FLOATS + ("int32", "int8")))
    x = values(rng_of(draw(SEEDS)), shape, dtype)
    value = draw(st.sampled_from([0.0, 1.5, -2.0])) if dtype in FLOATS else draw(st.sampled_from([0.0, 3.0]))
    return Example((x,), {"pad_width": tuple(widths), "mode": mode, "pad_value": value})


def _pad_reference(xs, a):
    x = xs[0]
    w = a["pad_width"]
    pairs = list(zip(w[0::2], w[1::2]))
    if a["mode"] == "constant":
        return [np.pad(x, pairs, mode="constant", constant_values=np.asarray(a["pad_value"]).astype(x.dtype))]
    return [np.pad(x, pairs, mode=a["mode"])]


@st.composite
def _broadcast_to(draw):
    out = draw(shapes(1, 4, 1, 5))
    drop = draw(st.integers(0, len(out) - 1))
    src = tuple(1 if draw(st.booleans()) else d for d in out[drop:])
    return Example((_any_values(draw, src),), {"shape": out})


@st.composite
def _tile(draw):
    shape = draw(shapes(1, 3, 1, 4))
    reps = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=4)))
    return Example((_any_values(draw, shape),), {"reps": reps})


@st.composite
def _arange(draw):
    """Exact in every dtype: starts and steps are multiples of 1/4, at most 64 steps."""
    dtype = draw(st.sampled_from(["int64", "int32", "float32"]))
    if dtype == "float32":
        start, delta = draw(st.integers(-40, 40)) / 4, draw(st.integers(-8, 8)) / 4
    else:
        start, delta = draw(st.integers(-50, 50)), draw(st.integers(-5, 5))
    attrs = {"start": start, "delta": delta, "length": draw(st.integers(0, 64)), "dtype": dtype}
    return Example((), attrs, out_dtypes=(dtype,))


def _arange_reference(xs, a):
    return [(a["start"] + np.arange(a["length"], dtype=np.float64) * a["delta"]).astype(a["dtype"])]


@st.composite
def _dim_values(draw):
    """Bound dims (ints) here: a symbolic module's binding gives the same node its values per run."""
    shape = draw(shapes(1, 2, 1, 4))
    values = tuple(draw(st.lists(st.integers(0, 1 << 20), min_size=int(np.prod(shape)),
                                 max_size=int(np.prod(shape)))))
    return Example((), {"values": values, "shape": shape}, out_dtypes=("int64",))


def _prod_scale(ex) -> float:
    """K times the largest product: each of the K multiplications rounds relative to the result."""
    (want,) = _reduce_reference("prod")(list(ex.inputs), ex.attrs)
    return _reduced_count(ex) * max_abs(np.asarray(want, dtype=np.float64))


def cases() -> list[OpCase]:
    """The reductions' and injective operators' cases."""
    out = [OpCase(op, _reduce(op), _reduce_reference(op), SUM,
                  scale=lambda ex: _reduced_count(ex) * max_abs(*ex.inputs), count=8)
           for op in ("sum", "mean", "max", "min")]
    out.append(OpCase("prod", _reduce("prod"), _reduce_reference("prod"), PROD,
                      scale=_prod_scale, count=8))
    index = Tolerance(0, 0, "an int64 index: equal, ties included (the first or, with select_last_index, "
                            "the last position holding the extreme value)")
    out += [OpCase(op, _arg(), _arg_reference(op), index, count=8) for op in ("argmax", "argmin")]
    out += [
        OpCase("reshape", _reshape(), lambda xs, a: [xs[0].reshape(a["newshape"])], EXACT),
        OpCase("transpose", _transpose(), lambda xs, a: [np.transpose(xs[0], a["axes"]).copy()], EXACT),
        OpCase("concatenate", _concatenate(), lambda xs, a: [np.concatenate(xs, axis=a["axis"])], EXACT),
        OpCase("split", _split(), lambda xs, a: np.split(xs[0], list(a["indices"]), axis=a["axis"]), EXACT),
        OpCase("strided_slice", _strided_slice(), _strided_slice_reference, EXACT),
        OpCase("take", _take(), _take_reference, EXACT),
        OpCase("pad", _pad(), _pad_reference, EXACT),
        OpCase("broadcast_to", _broadcast_to(), lambda xs, a: [np.broadcast_to(xs[0], a["shape"]).copy()],
               EXACT),
        OpCase("tile", _tile(), lambda xs, a: [np.tile(xs[0], a["reps"])], EXACT),
        OpCase("arange", _arange(), _arange_reference, EXACT),
        OpCase("dim_values", _dim_values(),
               lambda xs, a: [np.array(a["values"], dtype=np.int64).reshape(a["shape"])], EXACT),
    ]
    return out
