"""RoiAlign as tensor arithmetic over the run-time boxes, and one gather per bilinear corner.

With a fixed ``sampling_ratio`` the sampling grid has a static size: every box has ``oh * s`` sample rows
and ``ow * s`` sample columns. Their coordinates are computed from the boxes at run time (start + bin
size times a constant fraction), clamped and floored per axis as the operator specifies (a sample more
than one pixel outside contributes 0); the four corners of each sample are gathered from the flattened
input at ``((batch * C + c) * H + y) * W + x``, weighted, and averaged (or maxed, as the reference does:
the largest weighted corner) over each bin's ``s * s`` samples. An adaptive ``sampling_ratio`` (0) makes
the grid depend on each box's size, so it needs the boxes when importing.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter


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
            corners.append(ctx.op("multiply", [ctx.op("take", [flat, index], {"axis": 0}), weight]))
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
