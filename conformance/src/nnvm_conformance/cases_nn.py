"""Cases for the neural-network operators: convolution, dense, matmul, normalizations, softmax, LRN and
pooling, each with a plain numpy reference written here (loops where that is clearest).

Operators that sum many products get an absolute tolerance scaled by the sum of the magnitudes of
the terms (``K * max|x| * max|w|`` for K terms): the classic bound on the rounding error of a
floating-point sum, whatever order the backend's schedule adds the terms in.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from nnvm_conformance.case import FLOATS, SEEDS, Example, OpCase, Tolerance, max_abs, rng_of, shapes, values

SUMS = Tolerance(4, 2, "a sum of K products, added in whatever order the schedule picks (tiles, vector "
                       "lanes, threads): the error bound grows with K and the terms' magnitudes "
                       "(scale: K * max|x| * max|w|)")
NORMS = Tolerance(64, 64, "mean and variance are sums over the normalized axes, then a square root and a "
                          "division: a few ulp per step, amplified where the variance is small")
SOFTMAX = Tolerance(64, 64, "exp of shifted values, a sum over the axis and a division (or a log)")
POOL = Tolerance(4, 4, "max is exact; an average is a short sum and one division")


def _f64(x):
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------------------------------
# conv2d, dense, matmul


@st.composite
def _conv2d(draw):
    n = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["dense", "grouped", "depthwise"]))
    groups = {"dense": 1, "grouped": 2, "depthwise": draw(st.integers(1, 6))}[kind]
    cg = 1 if kind == "depthwise" else draw(st.integers(1, 4))
    og = draw(st.integers(1, 2)) if kind == "depthwise" else draw(st.integers(1, 4))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pad[0] - pad[2]), 9))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pad[1] - pad[3]), 9))
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    x = values(rng, (n, cg * groups, h, w), dtype, "unit")
    wt = values(rng, (og * groups, cg, kh, kw), dtype, "unit")
    attrs = {"strides": (sh, sw), "padding": pad, "dilation": (dh, dw), "groups": groups}
    return Example((x, wt), attrs)


def conv2d_reference(xs, a):
    """Direct convolution in float64: every output is the sum over its window's taps."""
    x, w = _f64(xs[0]), _f64(xs[1])
    (sh, sw), (dh, dw), groups = a["strides"], a["dilation"], a["groups"]
    pt, pl, pb, pr = a["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for oc in range(o):
        g = oc // og
        for i in range(kh):
            for j in range(kw):
                window = x[:, g * cg:(g + 1) * cg, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                           j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, oc] += np.tensordot(window, w[oc, :, i, j], axes=([1], [0]))
    return [out]


def _product_scale(k_axis_len):
    def scale(ex):
        x, w = ex.inputs[:2]
        return k_axis_len(ex) * max_abs(x) * max_abs(w)

    return scale


@st.composite
def _dense(draw):
    m, k, n = draw(st.integers(1, 8)), draw(st.integers(1, 40)), draw(st.integers(1, 20))
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, (m, k), dtype, "unit"), values(rng, (n, k), dtype, "unit")), {})


@st.composite
def _matmul(draw):
    """numpy matmul operands: 1-D ones, and batch axes that broadcast (some of them 1 or missing)."""
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(1, 12)), draw(st.integers(1, 6))
    batch = draw(shapes(0, 2, 1, 3))

    def operand(core):
        rank = draw(st.integers(1, 2 + len(batch)))
        if rank == 1:
            return (k,)
        lead = batch[len(batch) - (rank - 2):] if rank > 2 else ()
        return tuple(draw(st.sampled_from([d, 1])) for d in lead) + core

    sa, sb = operand((m, k)), operand((k, n))
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    return Example((values(rng, sa, dtype, "unit"), values(rng, sb, dtype, "unit")), {})


# ---------------------------------------------------------------------------------------------------
# batch_norm, layer_norm, instance_norm


@st.composite
def _batch_norm(draw):
    shape = draw(shapes(2, 4))
    axis = draw(st.integers(0, len(shape) - 1))
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    c = (shape[axis],)
    ins = (values(rng, shape, dtype), values(rng, c, dtype, "positive"), values(rng, c, dtype),
           values(rng, c, dtype), values(rng, c, dtype, "positive"))
    return Example(ins, {"axis": axis, "epsilon": draw(st.sampled_from([1e-5, 1e-3]))})


def _batch_norm_reference(xs, a):
    x, gamma, beta, mean, var = (_f64(v) for v in xs)
    shape = (-1,) + (1,) * (x.ndim - a["axis"] - 1)
    g, b, m, v = (t.reshape(shape) for t in (gamma, beta, mean, var))
    return [(x - m) / np.sqrt(v + a["epsilon"]) * g + b]


@st.composite
def _layer_norm(draw):
    shape = draw(shapes(1, 4, 1, 6))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    norm_shape = shape[axis % len(shape):]
    trailing = draw(st.integers(1, len(norm_shape)))
    affine = norm_shape[len(norm_shape) - trailing:]  # gamma and beta broadcast over the normalized axes
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    ins = [values(rng, shape, dtype), values(rng, affine, dtype, "positive")]
    if draw(st.booleans()):
        ins.append(values(rng, affine, dtype))
    return Example(tuple(ins), {"axis": axis, "epsilon": 1e-5})


def _normalize(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def _layer_norm_reference(xs, a):
    x = _f64(xs[0])
    axes = tuple(range(a["axis"] % x.ndim, x.ndim))
    y = _normalize(x, axes, a["epsilon"]) * _f64(xs[1])
    return [y + _f64(xs[2]) if len(xs) > 2 else y]


@st.composite
def _instance_norm(draw):
    shape = draw(shapes(3, 4, 1, 6))
    dtype = draw(st.sampled_from(FLOATS))
    rng = rng_of(draw(SEEDS))
    c = (shape[1],)
    ins = [values(rng, shape, dtype), values(rng, c, dtype, "positive")]
    if draw(st.booleans()):
        ins.append(values(rng, c, dtype))
    return Example(tuple(ins), {"epsilon": draw(st.sampled_from([1e-5, 1e-3]))})


def _instance_norm_reference(xs, a):
    x = _f64(xs[0])
    bshape = (-1,) + (1,) * (x.ndim - 2)
    y = _normalize(x, tuple(range(2, x.ndim)), a["epsilon"]) * _f64(xs[1]).reshape(bshape)
    return [y + _f64(xs[2]).reshape(bshape) if len(xs) > 2 else y]


# ---------------------------------------------------------------------------------------------------
# softmax, log_softmax, lrn


@st.composite
def _softmax(draw):
    shape = draw(shapes(1, 4, 1, 7))
    dtype = draw(st.sampled_from(FLOATS))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return Example((values(rng_of(draw(SEEDS)), shape, dtype) * 3,), {"axis": axis})


def _softmax_reference(log: bool):
    def reference(xs, a):
        x = _f64(xs[0])
        z = x - x.max(axis=a["axis"], keepdims=True)
        lse = np.log(np.exp(z).sum(axis=a["axis"], keepdims=True))
        return [z - lse if log else np.exp(z - lse)]

    return reference


@st.composite
def _lrn(draw):
    shape = draw(shapes(3, 4, 1, 6))
    dtype = draw(st.sampled_from(FLOATS))
    attrs = {"size": draw(st.integers(1, 5)), "alpha": draw(st.sampled_from([1e-4, 0.1, 1.0])),
             "beta": draw(st.sampled_from([0.75, 0.5, 1.0])), "bias": draw(st.sampled_from([1.0, 2.0]))}
    return Example((values(rng_of(draw(SEEDS)), shape, dtype),), attrs)


def _lrn_reference(xs, a):
    """ONNX LRN: the window over channels is floor((size-1)/2) before and ceil((size-1)/2) after."""
    x = _f64(xs[0])
    size, channels = a["size"], x.shape[1]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    square_sum = np.zeros_like(x)
    for c in range(channels):
        lo, hi = max(0, c - before), min(channels, c + after + 1)
        square_sum[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    return [x / (a["bias"] + a["alpha"] / size * square_sum) ** a["beta"]]


# ---------------------------------------------------------------------------------------------------
# pooling


def _out_size(size, k, s, d, before, after, ceil_mode):
    span = size + before + after - d * (k - 1) - 1
    if ceil_mode:
        out = -(-span // s) + 1
        return out - 1 if (out - 1) * s >= size + before else out
    return span // s + 1


@st.composite
def pool_examples(draw, op):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pad = (draw(st.integers(0, kh * dh - 1)), draw(st.integers(0, kw * dw - 1)),
           draw(st.integers(0, kh * dh - 1)), draw(st.integers(0, kw * dw - 1)))
    pad = tuple(min(p, 2) for p in pad)
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pad[0] - pad[2]), 9))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pad[1] - pad[3]), 9))
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    # 8-bit too: a quantized model pools its uint8 activations
    dtypes = FLOATS + ("int32", "uint8", "int8") if op == "max_pool2d" else FLOATS
    dtype = draw(st.sampled_from(dtypes))
    attrs = {"pool_size": (kh, kw), "strides": (sh, sw), "padding": pad, "dilation": (dh, dw),
             "ceil_mode": draw(st.booleans())}
    if op == "avg_pool2d":
        attrs["count_include_pad"] = draw(st.booleans())
    # a window made only of padding has no defined value (ONNX says nothing); such layers are left out
    assume(not _has_empty_window(h, w, attrs))
    return Example((values(rng_of(draw(SEEDS)), (n, c, h, w), dtype),), attrs)


def _taps(y, size, k, s, d, before):
    return [y * s - before + i * d for i in range(k)]


def _has_empty_window(h: int, w: int, a: dict) -> bool:
    (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
    pt, pl, pb, pr = a["padding"]
    oh = _out_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = _out_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    empty_row = any(all(not 0 <= r < h for r in _taps(y, h, kh, sh, dh, pt)) for y in range(oh))
    empty_col = any(all(not 0 <= q < w for q in _taps(z, w, kw, sw, dw, pl)) for z in range(ow))
    return empty_row or empty_col


def pool_reference(is_max: bool):
    """ONNX pooling: padded taps never count in a max; an average divides by the real taps, or with
    ``count_include_pad`` by the taps inside the padded input (never those past it in ceil mode)."""

    def reference(xs, a):
        x = xs[0]
        (kh, kw), (sh, sw), (dh, dw) = a["pool_size"], a["strides"], a["dilation"]
        pt, pl, pb, pr = a["padding"]
        n, c, h, w = x.shape
        oh = _out_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
        ow = _out_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
        out = np.zeros((n, c, oh, ow), dtype=x.dtype if is_max else np.float64)
        for y in range(oh):
            for z in range(ow):
                rows = [y * sh - pt + i * dh for i in range(kh)]
                cols = [z * sw - pl + j * dw for j in range(kw)]
                real_r = [r for r in rows if 0 <= r < h]
                real_c = [q for q in cols if 0 <= q < w]
                window = x[:, :, real_r][:, :, :, real_c]
                if is_max:
                    out[:, :, y, z] = window.max(axis=(2, 3))
                    continue
                if a["count_include_pad"]:
                    count = sum(-pt <= r < h + pb for r in rows) * sum(-pl <= q < w + pr for q in cols)
                else:
                    count = len(real_r) * len(real_c)
                out[:, :, y, z] = _f64(window).sum(axis=(2, 3)) / count
        return [out if not is_max or x.dtype.kind != "f" else _f64(out)]

    return reference


@st.composite
def _global_pool(draw, op):
    shape = draw(shapes(4, 4, 1, 7))
    dtypes = FLOATS + ("int32", "uint8", "int8") if op == "global_max_pool2d" else FLOATS
    return Example((values(rng_of(draw(SEEDS)), shape, draw(st.sampled_from(dtypes))),), {})


def _global_reference(is_max: bool):
    def reference(xs, a):
        x = xs[0]
        if is_max:
            return [x.max(axis=(2, 3), keepdims=True)]
        return [_f64(x).mean(axis=(2, 3), keepdims=True)]

    return reference


def _window_scale(ex):
    """The sum of magnitudes of a window's terms: what the error of the window's sum grows with."""
    x = ex.inputs[0]
    return max_abs(x) * math.prod(ex.attrs.get("pool_size", x.shape[2:]))


def cases() -> list[OpCase]:
    """The neural-network operators' cases."""
    return [
        OpCase("conv2d", _conv2d(), conv2d_reference, SUMS,
               scale=_product_scale(lambda ex: math.prod(ex.inputs[1].shape[1:])), count=8),
        OpCase("dense", _dense(), lambda xs, a: [_f64(xs[0]) @ _f64(xs[1]).T], SUMS,
               scale=_product_scale(lambda ex: ex.inputs[0].shape[1]), count=6),
        OpCase("matmul", _matmul(), lambda xs, a: [np.matmul(_f64(xs[0]), _f64(xs[1]))], SUMS,
               scale=_product_scale(lambda ex: ex.inputs[0].shape[-1]), count=8),
        OpCase("batch_norm", _batch_norm(), _batch_norm_reference,
               Tolerance(8, 8, "a subtraction, a square root, a division, a product and a sum"),
               scale=lambda ex: max_abs(*ex.inputs), count=6),
        OpCase("layer_norm", _layer_norm(), _layer_norm_reference, NORMS,
               scale=lambda ex: max_abs(*ex.inputs), count=6),
        OpCase("instance_norm", _instance_norm(), _instance_norm_reference, NORMS,
               scale=lambda ex: max_abs(*ex.inputs), count=6),
        OpCase("softmax", _softmax(), _softmax_reference(False), SOFTMAX, count=6),
        OpCase("log_softmax", _softmax(), _softmax_reference(True), SOFTMAX,
               scale=lambda ex: max_abs(*ex.inputs), count=6),
        OpCase("lrn", _lrn(), _lrn_reference, Tolerance(64, 64, "a sum of squares over a window of channels, "
                                                               "then a power with a fractional exponent"),
               scale=lambda ex: max_abs(*ex.inputs), count=6),
        OpCase("max_pool2d", pool_examples("max_pool2d"), pool_reference(True), POOL, count=8),
        OpCase("avg_pool2d", pool_examples("avg_pool2d"), pool_reference(False), POOL, scale=_window_scale,
               count=8),
        OpCase("global_max_pool2d", _global_pool("global_max_pool2d"), _global_reference(True), POOL,
               count=4),
        OpCase("global_avg_pool2d", _global_pool("global_avg_pool2d"), _global_reference(False), POOL,
               scale=_window_scale, count=4),
    ]
