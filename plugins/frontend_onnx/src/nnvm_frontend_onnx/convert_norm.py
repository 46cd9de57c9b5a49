"""Normalizations without an nnvm operator of their own, composed of reductions and elementwise ops.

Each follows its ONNX function body (the formula the reference implementation uses), so results agree
to rounding: RMSNormalization, LpNormalization, GroupNormalization, MeanVarianceNormalization.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def _stash(ctx: Context, x: str) -> tuple[str, str]:
    """``x`` in the computation type (``stash_type``, float32 by default) and the type to return to."""
    dtype = ctx.dtype(x)
    stash = ctx.attr_dtype("stash_type", "float32")
    if dtype == "float64":
        stash = "float64"
    return ctx.cast(x, stash), dtype


@converter("RMSNormalization")
def convert_rms_norm(ctx: Context, inputs):
    x, scale = inputs[0], inputs[1]
    rank = ctx.rank(x)
    axis = normalize_axis(ctx.attr("axis", -1), rank, ctx)
    xs, dtype = _stash(ctx, x)
    square = ctx.op("multiply", [xs, xs])
    mean = ctx.op("mean", [square], {"axis": tuple(range(axis, rank)), "keepdims": True})
    rms = ctx.op("sqrt", [ctx.op("add", [mean, ctx.scalar(float(ctx.attr("epsilon", 1e-5)), mean)])])
    y = ctx.cast(ctx.op("divide", [xs, rms]), dtype)
    return ctx.op("multiply", [y, ctx.cast(scale, dtype)])


@converter("LpNormalization")
def convert_lp_norm(ctx: Context, inputs):
    x = inputs[0]
    axis = normalize_axis(ctx.attr("axis", -1), ctx.rank(x), ctx)
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p={p} is not supported (ONNX allows 1 and 2)")
    attrs = {"axis": (axis,), "keepdims": True}
    if p == 1:
        norm = ctx.op("sum", [ctx.op("abs", [x])], attrs)
    else:
        norm = ctx.op("sqrt", [ctx.op("sum", [ctx.op("multiply", [x, x])], attrs)])
    zero = ctx.op("equal", [norm, ctx.scalar(0, norm)])  # an all-zero slice stays zero, not 0/0
    return ctx.op("divide", [x, ctx.op("where", [zero, ctx.scalar(1, norm), norm])])


@converter("MeanVarianceNormalization")
def convert_mvn(ctx: Context, inputs):
    x = inputs[0]
    rank = ctx.rank(x)
    axes = tuple(sorted({normalize_axis(a, rank, ctx) for a in ctx.attr("axes", (0, 2, 3))}))
    attrs = {"axis": axes, "keepdims": True}
    mean = ctx.op("mean", [x], attrs)
    mean_sq = ctx.op("mean", [ctx.op("multiply", [x, x])], attrs)
    var = ctx.op("subtract", [mean_sq, ctx.op("multiply", [mean, mean])])
    std = ctx.op("add", [ctx.op("sqrt", [var]), ctx.scalar(1e-9, x)])
    return ctx.op("divide", [ctx.op("subtract", [x, mean]), std])


@converter("GroupNormalization")
def convert_group_norm(ctx: Context, inputs):
    """GroupNormalization-18 (scale and bias per group) and -21 (per channel)."""
    x, scale, bias = inputs[:3]
    shape = ctx.shape(x)
    n, c = shape[0], shape[1]
    groups = int(ctx.attr("num_groups"))
    if groups <= 0 or c % groups:
        raise ctx.error(f"{c} channels cannot be split into {groups} groups")
    xs, dtype = _stash(ctx, x)
    grouped = ctx.reshape(xs, (n, groups, int(np.prod(shape[1:])) // groups))
    attrs = {"axis": (2,), "keepdims": True}
    mean = ctx.op("mean", [grouped], attrs)
    centered = ctx.op("subtract", [grouped, mean])
    var = ctx.op("mean", [ctx.op("multiply", [centered, centered])], attrs)
    eps = ctx.scalar(float(ctx.attr("epsilon", 1e-5)), var)
    normed = ctx.op("divide", [centered, ctx.op("sqrt", [ctx.op("add", [var, eps])])])
    y = ctx.cast(ctx.reshape(normed, shape), dtype)
    per_channel = (1, c) + (1,) * (len(shape) - 2)
    if ctx.shape(scale) == (groups,) and groups != c:  # opset 18: one scale per group
        scale = ctx.reshape(
            ctx.op("broadcast_to", [ctx.reshape(scale, (groups, 1))], {"shape": (groups, c // groups)}), (c,)
        )
        bias = ctx.reshape(
            ctx.op("broadcast_to", [ctx.reshape(bias, (groups, 1))], {"shape": (groups, c // groups)}), (c,)
        )
    y = ctx.op("multiply", [y, ctx.reshape(ctx.cast(scale, dtype), per_channel)])
    return ctx.op("add", [y, ctx.reshape(ctx.cast(bias, dtype), per_channel)])
