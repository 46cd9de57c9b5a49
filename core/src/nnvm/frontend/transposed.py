"""Transposed convolution with nnvm's ``conv2d``: spread the input by the stride, pad it fully, and
convolve with the kernel flipped in space and with its input/output channels swapped per group.

nnvm has no transposed-convolution operator; every format has one (CoreML ``conv_transpose`` and
deconvolution layers, Keras ``Conv2DTranspose``, MXNet ``Deconvolution``), and their weights are
constants, so the kernel is rearranged once in numpy.
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend.context import ConversionContext


def transposed_kernel(w: np.ndarray, groups: int) -> np.ndarray:
    """A transposed convolution's (C_in, M/groups, kh, kw) kernel as the (M, C_in/groups, kh, kw) kernel
    of the equivalent direct convolution (flipped in space)."""
    c, m_per_group, kh, kw = w.shape
    k = w.reshape(groups, c // groups, m_per_group, kh, kw).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(k.reshape(groups * m_per_group, c // groups, kh, kw)[:, :, ::-1, ::-1])


def conv_transpose2d(ctx: ConversionContext, x: str, w: np.ndarray, strides=(1, 1), pads=(0, 0, 0, 0),
                     dilations=(1, 1), groups: int = 1, output_padding=(0, 0)) -> str:
    """NCHW ``x`` through a transposed convolution with constant weight ``w`` (C_in, M/groups, kh, kw).
    ``pads`` is (top, left, bottom, right), cropped from the full output; ``output_padding`` adds rows
    and columns at the end. Output size: (H - 1) * s - top - bottom + d * (k - 1) + 1 + output_padding."""
    n, c, h, wd = ctx.shape(x)
    kh, kw = w.shape[2:]
    sh, sw = strides
    if sh > 1 or sw > 1:  # insert stride - 1 zeros between pixels
        spread = ctx.reshape(x, (n, c, h, 1, wd, 1))
        spread = ctx.op("pad", [spread], {"pad_width": (0, 0, 0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1),
                                          "pad_value": 0.0, "mode": "constant"})
        spread = ctx.reshape(spread, (n, c, h * sh, wd * sw))
        x = ctx.op("strided_slice", [spread], {"begin": (0, 0), "end": ((h - 1) * sh + 1, (wd - 1) * sw + 1),
                                               "axes": (2, 3)})
    reach = (dilations[0] * (kh - 1), dilations[1] * (kw - 1))
    before = (reach[0] - pads[0], reach[1] - pads[1])
    after = (reach[0] - pads[2] + output_padding[0], reach[1] - pads[3] + output_padding[1])
    grow = [max(v, 0) for v in (*before, *after)]
    if any(grow):
        x = ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, grow[0], grow[2], grow[1], grow[3]),
                                "pad_value": 0.0, "mode": "constant"})
    if min(*before, *after) < 0:  # padding wider than the kernel's reach crops the input instead
        _, _, ph, pw = ctx.shape(x)
        x = ctx.op("strided_slice", [x], {"begin": (max(-before[0], 0), max(-before[1], 0)),
                                          "end": (ph - max(-after[0], 0), pw - max(-after[1], 0)),
                                          "axes": (2, 3)})
    kernel = ctx.param(transposed_kernel(np.asarray(w, dtype=ctx.dtype(x)), groups), "weight")
    return ctx.op("conv2d", [x, kernel], {"strides": (1, 1), "padding": (0, 0, 0, 0),
                                          "dilation": tuple(dilations), "groups": groups})
