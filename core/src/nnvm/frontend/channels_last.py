"""Layout helpers: nnvm's operators are channels-first (NCHW, OIHW); some formats are not.

Activations move with ``transpose`` nodes (``to_channels_first``/``to_channels_last``, any rank);
weights are constants and are transposed once in numpy while importing.
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend.context import ConversionContext


def channels_first_axes(rank: int) -> tuple:
    """The permutation NHWC -> NCHW (NWC -> NCW, NDHWC -> NCDHW)."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last_axes(rank: int) -> tuple:
    """The permutation NCHW -> NHWC (and the other ranks)."""
    return (0,) + tuple(range(2, rank)) + (1,)


def to_channels_first(ctx: ConversionContext, v: str) -> str:
    return ctx.transpose(v, channels_first_axes(ctx.rank(v)))


def to_channels_last(ctx: ConversionContext, v: str) -> str:
    return ctx.transpose(v, channels_last_axes(ctx.rank(v)))


def hwio_to_oihw(w) -> np.ndarray:
    """A Keras/TF convolution kernel (spatial..., in, out) as nnvm's (out, in, spatial...)."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.transpose((w.ndim - 1, w.ndim - 2) + tuple(range(w.ndim - 2))))


def depthwise_to_oihw(w) -> np.ndarray:
    """A Keras/TF depthwise kernel (spatial..., channels, multiplier) as a grouped convolution's
    (channels * multiplier, 1, spatial...), output channel ``c * multiplier + m``."""
    w = np.asarray(w)
    *spatial, c, m = w.shape
    moved = w.transpose((w.ndim - 2, w.ndim - 1) + tuple(range(w.ndim - 2)))
    return np.ascontiguousarray(moved.reshape((c * m, 1, *spatial)))


def hwoi_to_iohw(w) -> np.ndarray:
    """A Keras/TF transposed-convolution kernel (spatial..., out, in) as nnvm's (in, out, spatial...)."""
    w = np.asarray(w)
    return np.ascontiguousarray(w.transpose((w.ndim - 1, w.ndim - 2) + tuple(range(w.ndim - 2))))
