"""Operators several formats have that nnvm builds from its primitives, written once for every frontend.

``conv2d_transpose``: a transposed (fractionally strided) convolution, ONNX's ConvTranspose and MXNet's
Deconvolution, as a plain ``conv2d`` over the input spread with zeros.
"""

from __future__ import annotations

from nnvm.frontend.context import ConversionContext


def conv2d_transpose(ctx: ConversionContext, x: str, w: str, strides, dilations, begins, ends, out_pad,
                     groups: int) -> str:
    """The transposed convolution of NCHW ``x`` with ``w`` (C, M/groups, kh, kw): spread the input with
    ``stride - 1`` zeros between elements, pad each side by ``(k - 1) * dilation`` minus the padding
    ``begins``/``ends`` (``out_pad`` more at the end), and convolve (stride 1) with the kernel flipped
    in space and its in/out channels swapped per group. Output size per axis:
    ``stride * (in - 1) + (k - 1) * dilation + 1 - begin - end + out_pad``."""
    n, c, h, wd = ctx.shape(x)
    _, m_per_group, kh, kw = ctx.shape(w)
    strides, dilations = tuple(strides), tuple(dilations)
    y = x
    if strides != (1, 1):  # (N, C, H, W) -> (N, C, (H-1)*sh+1, (W-1)*sw+1), zeros between elements
        y = ctx.reshape(y, (n, c, h, 1, wd, 1))
        width = (0, 0, 0, 0, 0, 0, 0, strides[0] - 1, 0, 0, 0, strides[1] - 1)
        y = ctx.op("pad", [y], {"pad_width": width, "pad_value": 0.0, "mode": "constant"})
        y = ctx.reshape(y, (n, c, h * strides[0], wd * strides[1]))
        y = ctx.op("strided_slice", [y], {"begin": (0, 0), "strides": (1, 1), "axes": (2, 3),
                                          "end": ((h - 1) * strides[0] + 1, (wd - 1) * strides[1] + 1)})
    full = [(k - 1) * d + 1 for k, d in zip((kh, kw), dilations)]
    lo = [f - 1 - b for f, b in zip(full, begins)]
    hi = [f - 1 - e + op for f, e, op in zip(full, ends, out_pad)]
    if any(v > 0 for v in lo + hi):
        width = (0, 0, 0, 0, max(lo[0], 0), max(hi[0], 0), max(lo[1], 0), max(hi[1], 0))
        y = ctx.op("pad", [y], {"pad_width": width, "pad_value": 0.0, "mode": "constant"})
    if any(v < 0 for v in lo + hi):  # more padding than the kernel reaches: crop instead
        shape = ctx.shape(y)
        y = ctx.op("strided_slice", [y], {"begin": (max(-lo[0], 0), max(-lo[1], 0)), "strides": (1, 1),
                                          "end": (shape[2] - max(-hi[0], 0), shape[3] - max(-hi[1], 0)),
                                          "axes": (2, 3)})
    k = ctx.reshape(w, (groups, c // groups, m_per_group, kh, kw))
    k = ctx.transpose(k, (0, 2, 1, 3, 4))
    k = ctx.reshape(k, (groups * m_per_group, c // groups, kh, kw))
    k = ctx.op("strided_slice", [k], {"begin": (kh - 1, kw - 1), "end": (-kh - 1, -kw - 1),
                                      "strides": (-1, -1), "axes": (2, 3)})
    return ctx.op("conv2d", [y, k], {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": dilations,
                                     "groups": groups})
