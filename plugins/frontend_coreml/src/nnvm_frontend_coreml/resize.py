"""Bilinear upsampling shared by the MIL and NeuralNetwork converters: separable, so it is two
``matmul``s with constant (out, in) interpolation matrices, one per spatial axis."""

from __future__ import annotations

import numpy as np

from nnvm.frontend import ConversionContext


def bilinear_matrix(size: int, out: int, align_corners: bool) -> np.ndarray:
    """Row ``i`` weights the input pixels that output pixel ``i`` interpolates. ``align_corners``: the
    corners line up (source ``i * (size - 1) / (out - 1)``); else half-pixel centres (source
    ``(i + 0.5) * size / out - 0.5``, clamped to the input)."""
    i = np.arange(out, dtype=np.float64)
    if align_corners:
        src = i * (size - 1) / (out - 1) if out > 1 else np.zeros(out)
    else:
        src = np.clip((i + 0.5) * size / out - 0.5, 0, size - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, size - 1)
    frac = src - lo
    m = np.zeros((out, size))
    m[np.arange(out), lo] += 1 - frac
    m[np.arange(out), hi] += frac
    return m


def resize_bilinear(ctx: ConversionContext, x: str, out_h: int, out_w: int, align_corners: bool) -> str:
    n, c, h, w = ctx.shape(x)
    dtype = ctx.dtype(x)
    rows = ctx.param(bilinear_matrix(h, out_h, align_corners).astype(dtype), "rows")
    cols = ctx.param(bilinear_matrix(w, out_w, align_corners).T.astype(dtype), "cols")
    y = ctx.op("matmul", [ctx.reshape(x, (n * c * h, w)), cols])  # (N C H, OW)
    y = ctx.transpose(ctx.reshape(y, (n * c, h, out_w)), (1, 0, 2))  # (H, N C, OW)
    y = ctx.op("matmul", [rows, ctx.reshape(y, (h, n * c * out_w))])  # (OH, N C OW)
    return ctx.transpose(ctx.reshape(y, (out_h, n, c, out_w)), (1, 2, 0, 3))
