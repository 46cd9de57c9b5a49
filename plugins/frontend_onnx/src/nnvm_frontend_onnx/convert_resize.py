"""Resize (opsets 10-19) and Upsample, as separable per-axis resampling with constant weights.

Every ONNX resize mode is separable: the output along one axis is a fixed linear combination of input
elements along that axis, the same for every other index. So each resized axis becomes, with weights
computed here in float64 from the static shapes:

- ``nearest``: a ``take`` of constant indices (exact for every dtype);
- ``linear`` / ``cubic`` (with ``antialias``, ``exclude_outside``, any coordinate transformation):
  a ``matmul`` with a constant ``(in, out)`` weight matrix on that axis moved last, in float32 or
  float64, cast back to the input type;
- ``tf_crop_and_resize``: output positions whose source falls outside the input take
  ``extrapolation_value`` through a constant mask.

The coordinate transformations, tie rules and cubic kernel follow the ONNX operator specification.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis


# -- weights along one axis -------------------------------------------------------------------------
def source_coords(mode: str, out_len: int, in_len: int, scale: float, roi=(0.0, 1.0)) -> np.ndarray:
    """Input coordinate of each output index along one axis, for a coordinate transformation mode."""
    y = np.arange(out_len, dtype=np.float64)
    out_f = scale * in_len  # the spec uses the unrounded output length
    if mode == "align_corners":
        return np.zeros(out_len) if out_f == 1 else y * (in_len - 1) / (out_f - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        x = np.full(out_len, (end - start) * (in_len - 1) / 2) if out_f == 1 \
            else y * (end - start) * (in_len - 1) / (out_f - 1)
        return x + start * (in_len - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out_len, -0.5) if out_f == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / out_f)
        return offset + (y + 0.5) / scale - 0.5
    raise ValueError(f"coordinate_transformation_mode={mode!r} is not supported")


def _nearest(ratio: float, rule: str) -> list:
    if ratio == 1.0:  # the source coordinate is an integer
        return [0.0, 1.0]
    pick_high = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": False, "ceil": True}[rule]
    return [0.0, 1.0] if pick_high else [1.0, 0.0]


def _cubic(ratio: float, a: float) -> list:
    def k(x):
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0
    return [k(ratio + 1), k(ratio), k(1 - ratio), k(2 - ratio)]


def _antialiased(ratio: float, scale: float, kind: str, a: float) -> list:
    """The linear or cubic kernel stretched by ``1/scale`` when shrinking, normalized to sum 1."""
    scale = min(scale, 1.0)
    if kind == "linear":
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
    else:
        start = int(np.floor(-2 / scale) + 1)
        c = np.array([_cubic_kernel(scale * (i - ratio), a) for i in range(start, 2 - start)])
    return list(c / c.sum())


def _cubic_kernel(x: float, a: float) -> float:
    x = abs(x)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a if x < 2 else 0.0


def axis_weights(in_len: int, out_len: int, scale: float, *, mode: str, ctm: str, nearest_rule: str,
                 cubic_a: float, exclude_outside: bool, antialias: bool, roi=(0.0, 1.0)):
    """``(W, outside)``: the ``(out_len, in_len)`` weights and which outputs are extrapolated."""
    x = source_coords(ctm, out_len, in_len, scale, roi)
    outside = (x < 0) | (x > in_len - 1) if ctm == "tf_crop_and_resize" else np.zeros(out_len, bool)
    w = np.zeros((out_len, in_len))
    for o, xo in enumerate(x):
        base = math.floor(xo)
        ratio = 1.0 if xo == base else xo - base
        if mode == "nearest":
            coeffs = _nearest(ratio, nearest_rule)
        elif antialias:
            coeffs = _antialiased(ratio, scale, mode, cubic_a)
        elif mode == "linear":
            coeffs = [1 - ratio, ratio]
        else:
            coeffs = _cubic(ratio, cubic_a)
        n = len(coeffs)
        # the n neighbours nearest to x (ties toward the smaller index), as indices into the input
        half = math.ceil(n / 2)
        frac = (xo + half) - math.floor(xo + half)
        if n % 2 == 0:
            first = math.floor(xo + half) + (-(n // 2) if frac == 0 else -(n // 2) + 1) - half
        else:
            first = math.floor(xo + half) + (-((n - 1) // 2) + (0 if frac <= 0.5 else 1)) - half
        idx = np.arange(first, first + n)
        coeffs = np.asarray(coeffs, dtype=np.float64)
        if exclude_outside:
            coeffs = np.where((idx < 0) | (idx >= in_len), 0.0, coeffs)
            total = coeffs.sum()
            coeffs = coeffs / (total if total != 0 else 1.0)
        for i, c in zip(np.clip(idx, 0, in_len - 1), coeffs):
            w[o, i] += c
    return w, outside


# -- the converters ---------------------------------------------------------------------------------
def _resample(ctx: Context, x: str, out_shape, scales, *, mode: str, ctm: str, nearest_rule: str,
              cubic_a: float = -0.75, exclude_outside: bool = False, antialias: bool = False,
              extrapolation: float = 0.0, roi=None) -> str:
    shape = ctx.shape(x)
    rank = len(shape)
    dtype = ctx.dtype(x)
    compute = "float64" if dtype == "float64" else "float32"
    y = x if mode == "nearest" else ctx.cast(x, compute)
    extrapolated = None
    for a in range(rank):
        axis_roi = (0.0, 1.0) if roi is None else (float(roi[a]), float(roi[a + rank]))
        if out_shape[a] == shape[a] and math.isclose(scales[a], 1.0) and axis_roi == (0.0, 1.0):
            continue
        w, outside = axis_weights(shape[a], int(out_shape[a]), float(scales[a]), mode=mode, ctm=ctm,
                                  nearest_rule=nearest_rule, cubic_a=cubic_a,
                                  exclude_outside=exclude_outside, antialias=antialias, roi=axis_roi)
        if mode == "nearest":
            y = ctx.op("take", [y, ctx.param(w.argmax(axis=1).astype(np.int64), "indices")], {"axis": a})
        else:
            perm = tuple(d for d in range(rank) if d != a) + (a,)
            moved = ctx.transpose(y, perm)
            moved = ctx.op("matmul", [moved, ctx.param(w.T.astype(compute), "weights")])
            y = ctx.transpose(moved, tuple(int(p) for p in np.argsort(perm)))
        if outside.any():
            mask = outside.reshape((1,) * a + (-1,) + (1,) * (rank - a - 1))
            extrapolated = mask if extrapolated is None else extrapolated | mask
    if extrapolated is not None:
        full = np.broadcast_to(extrapolated, tuple(int(d) for d in out_shape))
        y = ctx.op("where", [ctx.param(np.ascontiguousarray(full), "outside"),
                             ctx.param(np.asarray(extrapolation, dtype=ctx.dtype(y)), "extrapolation"), y])
    if mode != "nearest" and dtype != compute:
        if np.dtype(dtype).kind in "iu":  # round and saturate like the reference's saturating cast
            info = np.iinfo(dtype)
            y = ctx.op("clip", [ctx.op("round", [y])], {"a_min": float(info.min), "a_max": float(info.max)})
        y = ctx.cast(y, dtype)
    return y


@converter("Resize")
def convert_resize(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    if ctx.opset < 11:  # Resize-10: (X, scales)
        roi_v, scales_v, sizes_v = "", inputs[1] if len(inputs) > 1 else "", ""
    else:
        roi_v = inputs[1] if len(inputs) > 1 else ""
        scales_v = inputs[2] if len(inputs) > 2 else ""
        sizes_v = inputs[3] if len(inputs) > 3 else ""
    axes = [normalize_axis(a, rank, ctx) for a in ctx.attr("axes", range(rank))]
    scales = ctx.const(scales_v, "the scales input").astype(np.float64).reshape(-1) if scales_v else None
    sizes = ctx.const_ints(sizes_v, "the sizes input") if sizes_v else None
    if scales is not None and scales.size == 0:
        scales = None
    roi = np.asarray(ctx.const(roi_v, "the roi input"), np.float64).reshape(-1) if roi_v else None
    if roi is not None and roi.size == 0:
        roi = None
    if roi is not None and len(axes) != rank:
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[a + rank] = roi[i], roi[i + len(axes)]
        roi = np.asarray(full)
    full_scales = [1.0] * rank
    out = list(shape)
    if sizes is not None:
        for i, a in enumerate(axes):
            out[a] = int(sizes[i])
            full_scales[a] = sizes[i] / shape[a]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            s = pick(full_scales[a] for a in axes)
            for a in axes:
                full_scales[a] = s
                out[a] = int(s * shape[a] + 0.5)
    elif scales is not None:
        for i, a in enumerate(axes):
            full_scales[a] = float(scales[i])
            out[a] = int(math.floor(scales[i] * shape[a]))
    else:
        raise ctx.error("neither scales nor sizes is given")
    mode = ctx.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode={mode!r} is not supported")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 11 else "asymmetric")
    rule = ctx.attr("nearest_mode", "round_prefer_floor")
    try:
        return _resample(ctx, x, out, full_scales, mode=mode, ctm=ctm, nearest_rule=rule,
                         cubic_a=float(ctx.attr("cubic_coeff_a", -0.75)),
                         exclude_outside=bool(ctx.attr("exclude_outside", 0)),
                         antialias=bool(ctx.attr("antialias", 0)),
                         extrapolation=float(ctx.attr("extrapolation_value", 0.0)), roi=roi)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None


@converter("Upsample")
def convert_upsample(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    if ctx.has_attr("scales"):
        scales = ctx.attr("scales")
    elif ctx.has_attr("height_scale"):  # Upsample-1: NCHW, a scale for H and W
        scales = (1.0, 1.0, ctx.attr("height_scale"), ctx.attr("width_scale", 1.0))
    else:
        scales = tuple(float(s) for s in ctx.const(inputs[1], "the scales input").reshape(-1))
    if len(scales) != len(shape):
        raise ctx.error(f"{len(scales)} scales for a rank-{len(shape)} input")
    out = [int(math.floor(s * d)) for s, d in zip(scales, shape)]
    mode = ctx.attr("mode", "nearest")
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return _resample(ctx, x, out, [float(s) for s in scales], mode=mode, ctm="asymmetric",
                     nearest_rule="floor")


# -- GridSample ---------------------------------------------------------------------------------------
def _reflect(ctx: Context, v: str, lo: float, hi: float) -> str:
    """Fold coordinates outside ``[lo, hi]`` back inside by reflecting at the borders (repeatedly)."""
    span = hi - lo

    def fold(dist: str, near: float, far: float) -> str:
        n = ctx.op("floor", [ctx.op("divide", [dist, ctx.scalar(span, dist)])])
        r = ctx.op("subtract", [dist, ctx.op("multiply", [n, ctx.scalar(span, n)])])
        even = ctx.op("equal", [ctx.op("floor_mod", [n, ctx.scalar(2.0, n)]), ctx.scalar(0.0, n)])
        toward = (
            ctx.op("add", [ctx.scalar(near, r), r])
            if near == lo
            else ctx.op("subtract", [ctx.scalar(near, r), r])
        )
        away = (
            ctx.op("subtract", [ctx.scalar(far, r), r])
            if far == hi
            else ctx.op("add", [ctx.scalar(far, r), r])
        )
        return ctx.op("where", [even, toward, away])

    below = fold(ctx.op("subtract", [ctx.scalar(lo, v), v]), lo, hi)
    above = fold(ctx.op("subtract", [v, ctx.scalar(hi, v)]), hi, lo)
    v = ctx.op("where", [ctx.op("less", [v, ctx.scalar(lo, v)]), below, v])
    return ctx.op("where", [ctx.op("greater", [v, ctx.scalar(hi, v)]), above, v])


@converter("GridSample")
def convert_grid_sample(ctx: Context, inputs):
    """Sampling at run-time coordinates: per spatial axis the source coordinate, its taps (1 nearest,
    2 linear, 4 cubic) and their weights are computed elementwise; each combination of taps is one
    ``gather_elements`` from the flattened input, weighted and summed, as the ONNX reference does."""
    x, grid = inputs[0], inputs[1]
    shape = ctx.shape(x)
    n, c, dims = shape[0], shape[1], shape[2:]
    nd = len(dims)
    out_spatial = ctx.shape(grid)[1:-1]
    points = math.prod(out_spatial)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(
        ctx.attr("mode", "linear"), ctx.attr("mode", "linear")
    )
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    work = "float64" if ctx.dtype(x) == "float64" else "float32"
    g = ctx.cast(ctx.reshape(grid, (n, points, nd)), work)
    taps_per_axis = []
    for j, size in enumerate(dims):
        k = nd - 1 - j  # the grid lists x (the last axis) first
        v = ctx.reshape(
            ctx.op("strided_slice", [g], {"begin": (k,), "end": (k + 1,), "strides": (1,), "axes": (2,)}),
            (n, points),
        )
        one = ctx.scalar(1.0, v)
        if align:
            v = ctx.op("multiply", [ctx.op("add", [v, one]), ctx.scalar((size - 1) / 2.0, v)])
            lo, hi = 0.0, size - 1.0
        else:
            v = ctx.op(
                "multiply",
                [
                    ctx.op(
                        "subtract",
                        [ctx.op("multiply", [ctx.op("add", [v, one]), ctx.scalar(float(size), v)]), one],
                    ),
                    ctx.scalar(0.5, v),
                ],
            )
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            v = ctx.op("round", [v])
        if padding == "border":
            outside = ctx.op(
                "logical_or",
                [ctx.op("less", [v, ctx.scalar(lo, v)]), ctx.op("greater", [v, ctx.scalar(hi, v)])],
            )
            clamped = ctx.op("clip", [v], {"a_min": 0.0, "a_max": float(size - 1)})
            v = ctx.op("where", [outside, clamped, v])
        elif padding == "reflection":
            v = _reflect(ctx, v, lo, hi)
        if mode == "nearest":
            taps = [(v, None)]
        else:
            base = ctx.op("floor", [v])
            t = ctx.op("subtract", [v, base])
            if mode == "linear":
                taps = [(base, ctx.op("subtract", [one, t])), (ctx.op("add", [base, one]), t)]
            else:
                taps = [
                    (ctx.op("add", [base, ctx.scalar(float(off), base)]), w)
                    for off, w in zip((-1, 0, 1, 2), _cubic_weights(ctx, t))
                ]
        axis_taps = []
        for pos, weight in taps:
            idx = ctx.cast(pos, "int64")
            if padding == "zeros":
                ok = ctx.op(
                    "logical_and",
                    [
                        ctx.op("greater_equal", [idx, ctx.scalar(0, idx)]),
                        ctx.op("less", [idx, ctx.scalar(size, idx)]),
                    ],
                )
            else:
                ok = None
                if padding == "reflection":
                    idx = ctx.cast(_reflect(ctx, ctx.cast(idx, work), lo, hi), "int64")
            idx = ctx.op("clip", [idx], {"a_min": 0.0, "a_max": float(size - 1)})
            axis_taps.append((idx, weight, ok))
        taps_per_axis.append(axis_taps)
    flat = ctx.cast(ctx.reshape(x, (n, c, math.prod(dims))), work)
    strides = [math.prod(dims[j + 1 :]) for j in range(nd)]
    total = None
    for combo in np.ndindex(*[len(t) for t in taps_per_axis]):
        index = weight = ok = None
        for j, which in enumerate(combo):
            idx, w, valid = taps_per_axis[j][which]
            term = ctx.op("multiply", [idx, ctx.scalar(strides[j], idx)]) if strides[j] != 1 else idx
            index = term if index is None else ctx.op("add", [index, term])
            if w is not None:
                weight = w if weight is None else ctx.op("multiply", [weight, w])
            if valid is not None:
                ok = valid if ok is None else ctx.op("logical_and", [ok, valid])
        if ok is not None:
            zero = ctx.param(np.zeros((), dtype=work), "zero")
            weight = ctx.op(
                "where", [ok, weight if weight is not None else ctx.param(np.ones((), work), "one"), zero]
            )
        index = ctx.op("broadcast_to", [ctx.reshape(index, (n, 1, points))], {"shape": (n, c, points)})
        value = ctx.op("gather_elements", [flat, index], {"axis": 2})
        if weight is not None:
            value = ctx.op("multiply", [value, ctx.reshape(weight, (n, 1, points))])
        total = value if total is None else ctx.op("add", [total, value])
    return ctx.cast(ctx.reshape(total, (n, c) + tuple(out_spatial)), ctx.dtype(x))


def _cubic_weights(ctx: Context, t: str) -> list:
    """Keys' cubic convolution weights (a = -0.75) of the taps at offsets -1, 0, 1, 2 for fraction t."""
    a = -0.75

    def poly(coeffs, v):  # Horner: c0 v^3 + c1 v^2 + c2 v + c3
        out = ctx.scalar(coeffs[0], v)
        for co in coeffs[1:]:
            out = ctx.op("add", [ctx.op("multiply", [out, v]), ctx.scalar(co, v)])
        return out

    one = ctx.scalar(1.0, t)
    far = (a, -5 * a, 8 * a, -4 * a)  # for distances in [1, 2)
    near = (a + 2, -(a + 3), 0.0, 1.0)  # for distances in [0, 1]
    return [
        poly(far, ctx.op("add", [t, one])),
        poly(near, t),
        poly(near, ctx.op("subtract", [one, t])),
        poly(far, ctx.op("subtract", [ctx.scalar(2.0, t), t])),
    ]
