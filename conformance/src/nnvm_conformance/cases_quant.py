"""Cases for the quantized operators: quantize, dequantize, qconv2d, qdense (with a zero point given
at run time too), requantize.

Integer outputs are compared exactly, so the examples avoid values whose rounding depends on how a
target divides: quantize's scales are powers of two (``x / scale`` is exact everywhere, and the
drawn values include exact halves, which must round to even), requantize multiplies in float32 (one
correctly rounded product on every target). The references are written here in numpy, integer
arithmetic in int64, never with nnvm's own ``evaluate``. About half the qconv2d and qdense examples
hold their weight as a constant (int8, zero point 0), so the compile-time paths a model's weights take
(packed weights, dot-product kernels) are checked on every target, not only the generic one.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from nnvm_conformance.case import SEEDS, Example, OpCase, Tolerance, rng_of
from nnvm_conformance.cases_nn import conv2d_reference

EXACT = Tolerance(0, 0, "integer results are exact")
DEQUANTIZE = Tolerance(1, 0, "one float32 product of an exact integer and the scale")
FLOAT_REQUANTIZE = Tolerance(1, 0, "one float32 product of the exact int32 sum and the scale")
QDTYPES = ("uint8", "int8")


def _zero_point(rng, dtype: str) -> int:
    info = np.iinfo(dtype)
    return int(rng.integers(int(info.min), int(info.max) + 1)) if rng.random() < 0.7 else 0


def _q(rng, shape, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def _round_saturate(v: np.ndarray, zp: int, dtype: str, lo=None, hi=None) -> np.ndarray:
    """Round half to even, add the zero point, saturate (``np.rint`` rounds half to even)."""
    info = np.iinfo(dtype)
    lo = int(info.min) if lo is None else max(lo, int(info.min))
    hi = int(info.max) if hi is None else min(hi, int(info.max))
    return np.clip(np.rint(v).astype(np.int64) + zp, lo, hi).astype(dtype)


@st.composite
def _quantize(draw):
    rng = rng_of(draw(SEEDS))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(QDTYPES))
    scale = float(2.0 ** draw(st.integers(-6, 2)))
    # multiples of half a step (ties among them) and far out of range (saturation)
    x = (rng.integers(-600, 601, shape) * 0.5 * scale).astype(np.float32)
    return Example((x,), {"scale": scale, "zero_point": _zero_point(rng, dtype), "out_dtype": dtype},
                   out_dtypes=(dtype,))


def _quantize_reference(xs, a):
    return [_round_saturate(xs[0].astype(np.float64) / a["scale"], a["zero_point"], a["out_dtype"])]


@st.composite
def _dequantize(draw):
    rng = rng_of(draw(SEEDS))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from(QDTYPES + ("int32",)))
    if dtype == "int32":
        x, zp = rng.integers(-(1 << 20), 1 << 20, shape).astype(np.int32), 0
    else:
        x, zp = _q(rng, shape, dtype), _zero_point(rng, dtype)
    scale = float(np.float32(rng.uniform(1e-3, 0.5)))
    return Example((x,), {"scale": scale, "zero_point": zp}, out_dtypes=("float32",))


def _dequantize_reference(xs, a):
    return [(xs[0].astype(np.int64) - a["zero_point"]).astype(np.float64) * np.float32(a["scale"])]


@st.composite
def _qconv2d(draw):
    rng = rng_of(draw(SEEDS))
    # a constant weight as a model has it (int8, zero point 0: what the packed kernels take), half the time
    const = draw(st.booleans())
    n = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 1, 2]))
    cg, og = draw(st.integers(1, 9)), draw(st.integers(1, 5))
    if const and draw(st.booleans()):  # depthwise, one channel a group as MobileNet's, the graph's output
        groups, cg, og = draw(st.integers(1, 40)), 1, 1
    elif const:  # channels past a packed kernel's block, so its padding and remainders are exercised
        groups, cg, og = 1, draw(st.integers(1, 40)), draw(st.integers(1, 40))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strides = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), 1)
    pad = tuple(draw(st.integers(0, 1)) for _ in range(4))
    h = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - pad[0] - pad[2]), 8))
    w = draw(st.integers(max(1, kw - pad[1] - pad[3]), 8))
    xdt = draw(st.sampled_from(QDTYPES))
    wdt = "int8" if const else draw(st.sampled_from(("int8", "int8", "uint8")))
    x, wt = _q(rng, (n, cg * groups, h, w), xdt), _q(rng, (og * groups, cg, kh, kw), wdt)
    attrs = {"strides": strides, "padding": pad, "dilation": dilation, "groups": groups,
             "data_zero_point": _zero_point(rng, xdt),
             "weight_zero_point": 0 if const else _zero_point(rng, wdt)}
    return Example((x, wt), attrs, out_dtypes=("int32",), constants=(1,) if const else ())


def _qconv2d_reference(xs, a):
    # padding is the data's zero point: centred, it is zero, as conv2d_reference pads
    x = xs[0].astype(np.int64) - a["data_zero_point"]
    w = xs[1].astype(np.int64) - a["weight_zero_point"]
    return [np.rint(conv2d_reference([x, w], a)[0]).astype(np.int32)]


@st.composite
def _qdense(draw):
    rng = rng_of(draw(SEEDS))
    const = draw(st.booleans())  # a constant int8 weight with zero point 0, as a model's
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(1, 70)), draw(st.integers(1, 40 if const else 20))
    xdt = draw(st.sampled_from(QDTYPES))
    wdt = "int8" if const else draw(st.sampled_from(("int8", "int8", "uint8")))
    attrs = {"data_zero_point": _zero_point(rng, xdt),
             "weight_zero_point": 0 if const else _zero_point(rng, wdt)}
    return Example((_q(rng, (m, k), xdt), _q(rng, (n, k), wdt)), attrs, out_dtypes=("int32",),
                   constants=(1,) if const else ())


@st.composite
def _qdense_dynamic(draw):
    """[..., K] data (a transformer's [batch, tokens, K]) and the data's zero point as a scalar input, as
    DynamicQuantizeLinear computes it at run time (uint8, per tensor)."""
    rng = rng_of(draw(SEEDS))
    lead = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=2)))
    k, n = draw(st.integers(1, 70)), draw(st.integers(1, 20))
    x, wt = _q(rng, (*lead, k), "uint8"), _q(rng, (n, k), "int8")
    zp = np.asarray(rng.integers(0, 256), np.uint8).reshape(draw(st.sampled_from([(), (1,)])))
    attrs = {"data_zero_point": 0, "weight_zero_point": 0}
    return Example((x, wt, zp), attrs, out_dtypes=("int32",))


def _qdense_reference(xs, a):
    zp = int(xs[2].reshape(-1)[0]) if len(xs) > 2 else a["data_zero_point"]
    x = xs[0].astype(np.int64) - zp
    w = xs[1].astype(np.int64) - a["weight_zero_point"]
    return [(x @ w.T).astype(np.int32)]


@st.composite
def _requantize(draw):
    rng = rng_of(draw(SEEDS))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 5)))
    c = shape[1]
    out = draw(st.sampled_from(QDTYPES + ("float32",)))
    per_channel = draw(st.booleans())
    acc = rng.integers(-40000, 40000, shape).astype(np.int32)
    if draw(st.booleans()):  # powers of two: exact ties, which round to even
        scale = 2.0 ** rng.integers(-9, -5, (c,) if per_channel else (1,))
    else:
        scale = rng.uniform(1e-4, 1e-2, (c,) if per_channel else (1,))
    inputs = [acc, np.asarray(scale, np.float32)]
    if draw(st.booleans()):
        inputs.append(rng.integers(-3000, 3000, (c,) if per_channel else (1,)).astype(np.int32))
    if per_channel and draw(st.booleans()):  # at the data's rank, broadcast (a blocked layout's form)
        inputs[1:] = [t.reshape(1, c, 1) for t in inputs[1:]]
    attrs = {"axis": 1, "out_dtype": out, "zero_point": 0, "out_min": None, "out_max": None}
    if out != "float32":
        attrs["zero_point"] = _zero_point(rng, out)
        if draw(st.booleans()):  # a fused ReLU (and a Clip's upper bound)
            attrs["out_min"] = attrs["zero_point"]
            attrs["out_max"] = draw(st.sampled_from([None, attrs["zero_point"] + 20]))
    return Example(tuple(inputs), attrs, out_dtypes=(out,))


def _requantize_reference(xs, a):
    acc = xs[0].astype(np.int64)
    shape = (1, -1, 1)
    if len(xs) > 2:
        acc = acc + xs[2].astype(np.int64).reshape(shape if xs[2].size > 1 else ())
    scale = xs[1].reshape(shape if xs[1].size > 1 else ())
    v = acc.astype(np.float32) * scale  # float32, as MLAS: the sum converts to float32 first
    if a["out_dtype"] == "float32":
        return [v.astype(np.float64)]
    return [_round_saturate(v, a["zero_point"], a["out_dtype"], a["out_min"], a["out_max"])]


def cases() -> list[OpCase]:
    """The quantized operators' cases."""
    return [
        OpCase("quantize", _quantize(), _quantize_reference, EXACT, count=6),
        OpCase("dequantize", _dequantize(), _dequantize_reference, DEQUANTIZE, count=6),
        OpCase("qconv2d", _qconv2d(), _qconv2d_reference, EXACT, count=10),
        OpCase("qdense", st.one_of(_qdense(), _qdense_dynamic()), _qdense_reference, EXACT, count=8),
        OpCase("requantize", _requantize(), _requantize_reference, FLOAT_REQUANTIZE, count=8),
    ]
