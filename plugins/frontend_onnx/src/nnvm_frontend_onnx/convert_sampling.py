"""RoiAlign and DeformConv: bilinear sampling at positions computed at run time, as gathers.

Both sample the input at fractional positions that depend on run-time tensors (the boxes; the offsets),
on a grid of static size. The positions are computed with tensor arithmetic; each of a sample's four
bilinear corners is one ``take`` from the flattened input at ``((n * C + c) * H + y) * W + x``
(``_gather``), times its weight.

- RoiAlign, with a fixed ``sampling_ratio``: every box has ``oh * s`` sample rows and ``ow * s`` columns
  (start + bin size times a constant fraction), clamped and floored per axis as the operator specifies (a
  sample more than one pixel outside contributes 0); the weighted corners are averaged (or maxed, as the
  reference does: the largest weighted corner) over each bin's ``s * s`` samples. An adaptive
  ``sampling_ratio`` (0) sizes the grid per box, so it is refused.
- DeformConv (2-D): each kernel tap of each output position samples at its regular place plus its
  offset (a corner outside the image reads 0, as GridSample's zero padding), times the mask; the samples,
  laid out as im2col columns, go through one grouped ``matmul`` with the weights.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter


def _gather(ctx: Context, flat: str, index: str) -> str:
    """``flat[index]``: elements of the flattened input at run-time flat positions."""
    return ctx.op("take", [flat, index], {"axis": 0})


def _const(ctx: Context, value, dtype, hint: str) -> str:
    return ctx.param(np.asarray(value, dtype), hint)


def _axis_samples(ctx: Context, start: str, size: str, bins: int, grid: int, length: int, dtype: str):
    """Per box, along one axis: ``(low index, high index, low weight, high weight)``, each
    ``[rois, bins * grid]``, for the samples ``start + (b + (i + 0.5) / grid) * size / bins``."""
    frac = np.array([b + (i + 0.5) / grid for b in range(bins) for i in range(grid)], dtype=dtype)
    step = ctx.op("divide", [size, ctx.param(np.asarray(bins, dtype), "bins")])  # [R, 1]
    pos = ctx.op("add", [start, ctx.op("multiply", [step, ctx.param(frac.reshape(1, -1), "frac")])])
    inside = ctx.op("logical_and", [
        ctx.op("greater_equal", [pos, ctx.param(np.asarray(-1.0, dtype), "lo")]),
        ctx.op("less_equal", [pos, ctx.param(np.asarray(float(length), dtype), "hi")])])
    pos = ctx.op("clip", [pos], {"a_min": 0.0, "a_max": float(length - 1)})  # at the edge: low = high
    low = ctx.op("floor", [pos])
    frac_hi = ctx.op("subtract", [pos, low])
    zero = ctx.param(np.asarray(0.0, dtype), "zero")
    w_hi = ctx.op("where", [inside, frac_hi, zero])
    frac_lo = ctx.op("subtract", [ctx.param(np.asarray(1.0, dtype), "one"), frac_hi])
    w_lo = ctx.op("where", [inside, frac_lo, zero])
    low_i = ctx.cast(low, "int64")
    high_i = ctx.op("minimum", [ctx.op("add", [low_i, ctx.param(np.asarray(1, np.int64), "one_i")]),
                                ctx.param(np.asarray(length - 1, np.int64), "last")])
    return low_i, high_i, w_lo, w_hi


@converter("RoiAlign")
def convert_roi_align(ctx: Context, inputs):
    x, rois, batch = inputs[0], inputs[1], inputs[2]
    n, c, h, w = ctx.shape(x)
    r = ctx.shape(rois)[0]
    dtype = ctx.dtype(x)
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    s = int(ctx.attr("sampling_ratio", 0))
    if s <= 0:
        raise ctx.error("sampling_ratio 0 (a grid sized per box at run time) is not supported; give a "
                        "positive sampling_ratio")
    mode = ctx.attr("mode", "avg")
    half_pixel = ctx.attr("coordinate_transformation_mode", "half_pixel" if ctx.opset >= 16 else
                          "output_half_pixel") == "half_pixel"
    scale = float(ctx.attr("spatial_scale", 1.0))
    boxes = ctx.op("multiply", [ctx.cast(rois, dtype), ctx.param(np.asarray(scale, dtype), "scale")])
    if half_pixel:
        boxes = ctx.op("subtract", [boxes, ctx.param(np.asarray(0.5, dtype), "half")])

    def column(k: int) -> str:
        return ctx.op("strided_slice", [boxes], {"begin": (k,), "end": (k + 1,), "strides": (1,),
                                                 "axes": (1,)})

    start_x, start_y, end_x, end_y = (column(k) for k in range(4))  # [R, 1] each
    size_x, size_y = ctx.op("subtract", [end_x, start_x]), ctx.op("subtract", [end_y, start_y])
    if not half_pixel:  # the legacy mode makes every box at least one pixel
        one = ctx.param(np.asarray(1.0, dtype), "one")
        size_x, size_y = ctx.op("maximum", [size_x, one]), ctx.op("maximum", [size_y, one])
    ys = _axis_samples(ctx, start_y, size_y, oh, s, h, dtype)
    xs = _axis_samples(ctx, start_x, size_x, ow, s, w, dtype)
    # flat offset of (box's image, channel): [R, C, 1, 1]
    image = ctx.reshape(ctx.cast(batch, "int64"), (r, 1, 1, 1))
    channel = ctx.op("add", [ctx.op("multiply", [image, ctx.param(np.asarray(c, np.int64), "c")]),
                             ctx.param(np.arange(c, dtype=np.int64).reshape(1, c, 1, 1), "channels")])
    base = ctx.op("multiply", [channel, ctx.param(np.asarray(h * w, np.int64), "hw")])
    flat = ctx.reshape(x, (n * c * h * w,))
    p, q = oh * s, ow * s
    corners = []
    for yi, wy in ((ys[0], ys[2]), (ys[1], ys[3])):
        row = ctx.reshape(ctx.op("multiply", [yi, ctx.param(np.asarray(w, np.int64), "w")]), (r, 1, p, 1))
        for xi, wx in ((xs[0], xs[2]), (xs[1], xs[3])):
            index = ctx.op("add", [ctx.op("add", [base, row]), ctx.reshape(xi, (r, 1, 1, q))])  # [R, C, P, Q]
            weight = ctx.op("multiply", [ctx.reshape(wy, (r, 1, p, 1)), ctx.reshape(wx, (r, 1, 1, q))])
            corners.append(ctx.op("multiply", [_gather(ctx, flat, index), weight]))
    grid = (r, c, oh, s, ow, s)
    if mode == "max":
        best = corners[0]
        for v in corners[1:]:
            best = ctx.op("maximum", [best, v])
        return ctx.op("max", [ctx.reshape(best, grid)], {"axis": (3, 5), "keepdims": False})
    if mode != "avg":
        raise ctx.error(f"unknown mode {mode!r} (avg or max)")
    total = corners[0]
    for v in corners[1:]:
        total = ctx.op("add", [total, v])
    summed = ctx.op("sum", [ctx.reshape(total, grid)], {"axis": (3, 5), "keepdims": False})
    return ctx.op("divide", [summed, ctx.param(np.asarray(s * s, dtype), "count")])


@converter("DeformConv")
def convert_deform_conv(ctx: Context, inputs):
    x, weight, offset = inputs[0], inputs[1], inputs[2]
    bias = inputs[3] if len(inputs) > 3 and inputs[3] else None
    mask = inputs[4] if len(inputs) > 4 and inputs[4] else None
    if ctx.rank(x) != 4:
        raise ctx.error(f"only 2-D deformable convolutions are supported; input has {ctx.rank(x) - 2} "
                        f"spatial dimensions")
    n, c, h, w = ctx.shape(x)
    oc, icpg, kh, kw = ctx.shape(weight)
    _, _, oh, ow = ctx.shape(offset)
    group, ogroups = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    sh, sw = ctx.attr("strides", (1, 1))
    dh, dw = ctx.attr("dilations", (1, 1))
    top, left = ctx.attr("pads", (0, 0, 0, 0))[:2]
    if c != icpg * group or oc % group or c % ogroups or ctx.shape(offset)[1] != ogroups * kh * kw * 2:
        raise ctx.error(f"inconsistent shapes: input {ctx.shape(x)}, weights {ctx.shape(weight)}, offset "
                        f"{ctx.shape(offset)}, group {group}, offset_group {ogroups}")
    dtype = ctx.dtype(x)
    taps = (n, ogroups, kh, kw, oh, ow)
    off = ctx.reshape(offset, (n, ogroups, kh, kw, 2, oh, ow))

    def along(k: int, size: int, stride: int, dilation: int, pad: int, axis: int) -> str:
        """Sample positions on one axis: the regular place of each tap plus its offset, ``taps``."""
        part = ctx.op("strided_slice", [off], {"begin": (k,), "end": (k + 1,), "strides": (1,), "axes": (4,)})
        tap = np.arange(size) * dilation
        out = np.arange(oh if axis == 2 else ow) * stride - pad
        place = (tap.reshape(-1, 1) + out.reshape(1, -1)).reshape(  # [kh, 1, oh, 1] or [kw, 1, ow]
            (size, 1, len(out), 1) if axis == 2 else (size, 1, len(out)))
        return ctx.op("add", [ctx.reshape(part, taps), _const(ctx, place, dtype, "place")])

    py = along(0, kh, sh, dh, top, 2)
    px = along(1, kw, sw, dw, left, 3)
    y0, x0 = ctx.op("floor", [py]), ctx.op("floor", [px])
    ly, lx = ctx.op("subtract", [py, y0]), ctx.op("subtract", [px, x0])
    one = _const(ctx, 1.0, dtype, "one")
    y0i, x0i = ctx.cast(y0, "int64"), ctx.cast(x0, "int64")
    # channel base per offset group: [1, G, cpg, 1, 1, 1, 1] + n * C * H * W
    cpg = c // ogroups
    chan = np.arange(c, dtype=np.int64).reshape(1, ogroups, cpg, 1, 1, 1, 1) * (h * w)
    image = np.arange(n, dtype=np.int64).reshape(n, 1, 1, 1, 1, 1, 1) * (c * h * w)
    base = _const(ctx, chan + image, np.int64, "base")
    flat = ctx.reshape(x, (n * c * h * w,))
    zero = _const(ctx, 0.0, dtype, "zero")
    sampled = None
    for yi, wy in ((y0i, ctx.op("subtract", [one, ly])), (None, ly)):
        yi = yi if yi is not None else ctx.op("add", [y0i, _const(ctx, 1, np.int64, "one_i")])
        for xi, wx in ((x0i, ctx.op("subtract", [one, lx])), (None, lx)):
            xi = xi if xi is not None else ctx.op("add", [x0i, _const(ctx, 1, np.int64, "one_i")])
            inside = ctx.op("logical_and", [
                ctx.op("logical_and", [ctx.op("greater_equal", [yi, _const(ctx, 0, np.int64, "zero_i")]),
                                       ctx.op("less", [yi, _const(ctx, h, np.int64, "h")])]),
                ctx.op("logical_and", [ctx.op("greater_equal", [xi, _const(ctx, 0, np.int64, "zero_i")]),
                                       ctx.op("less", [xi, _const(ctx, w, np.int64, "w")])])])
            weight_c = ctx.op("where", [inside, ctx.op("multiply", [wy, wx]), zero])  # taps
            yc = ctx.op("clip", [yi], {"a_min": 0, "a_max": h - 1})
            xc = ctx.op("clip", [xi], {"a_min": 0, "a_max": w - 1})
            pos = ctx.op("add", [ctx.op("multiply", [yc, _const(ctx, w, np.int64, "w")]), xc])
            index = ctx.op("add", [ctx.reshape(pos, (n, ogroups, 1, kh, kw, oh, ow)), base])
            value = ctx.op("multiply", [_gather(ctx, flat, index),
                                        ctx.reshape(weight_c, (n, ogroups, 1, kh, kw, oh, ow))])
            sampled = value if sampled is None else ctx.op("add", [sampled, value])
    if mask is not None:
        sampled = ctx.op("multiply", [sampled, ctx.reshape(mask, (n, ogroups, 1, kh, kw, oh, ow))])
    columns = ctx.reshape(sampled, (n, group, icpg * kh * kw, oh * ow))
    kernels = ctx.reshape(weight, (group, oc // group, icpg * kh * kw))
    y = ctx.reshape(ctx.op("matmul", [kernels, columns]), (n, oc, oh, ow))
    if bias is not None:
        y = ctx.op("add", [y, ctx.reshape(bias, (1, oc, 1, 1))])
    return y
