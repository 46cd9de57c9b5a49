"""Padding rules of the source formats, as the explicit (begin, end) padding nnvm's operators take.

Each format spells a window's padding its own way: explicit pads (ONNX ``pads``, MXNet ``pad``),
SAME (ONNX ``SAME_UPPER``/``SAME_LOWER``; Keras and TensorFlow ``'same'`` is SAME_UPPER: the odd
pixel goes at the end), ceil-mode pooling (ONNX and PyTorch: the last window must start inside the
input or its leading padding, which nnvm's ``ceil_mode`` does) and MXNet's ``'full'`` pooling
convention, which rounds up with no such rule and so may keep windows that lie wholly in padding.
"""

from __future__ import annotations

from nnvm.errors import Error
from nnvm.ops.pool import pool_out_size

__all__ = ["explicit_pads", "same_pads", "full_pooling_pads", "pool_out_size"]


def explicit_pads(pads, n: int) -> tuple[list, list]:
    """``(begins, ends)`` from ONNX-style ``pads`` (all begins, then all ends) for ``n`` spatial axes,
    or from one value per axis applied at both ends (MXNet's ``pad``)."""
    pads = [int(p) for p in pads]
    if len(pads) == n:
        return list(pads), list(pads)
    if len(pads) != 2 * n:
        raise Error(f"pads={tuple(pads)} should have {n} or {2 * n} values")
    return pads[:n], pads[n:]


def same_pads(in_spatial, kernel, strides, dilations=None, upper: bool = True) -> tuple[list, list]:
    """``(begins, ends)`` giving ``ceil(size / stride)`` outputs per axis. ``upper`` (ONNX SAME_UPPER,
    Keras/TF 'same') puts the odd pixel at the end, else (SAME_LOWER) at the beginning."""
    dilations = dilations or (1,) * len(kernel)
    begins, ends = [], []
    for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
        out = -(-int(size) // int(s))
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if upper else large)
        ends.append(large if upper else small)
    return begins, ends


def full_pooling_pads(size: int, kernel: int, stride: int, pad: int) -> tuple[int, int, bool, bool]:
    """MXNet's ``pooling_convention='full'`` on one axis: ``1 + ceil((size + 2 pad - kernel) / stride)``
    windows. Returns ``(before, after, ceil_mode, padding_window)`` for nnvm's pooling: usually
    ``(pad, pad, True, False)``. When the last window would start in the trailing padding (ceil mode
    drops it) the trailing padding grows so that floor mode keeps it, and ``padding_window`` is True:
    that window sees no input, and the padding may then be wider than the window, so the caller pads
    the input with a ``pad`` node itself (MXNet gives such a window the lowest float in max pooling)."""
    span = size + 2 * pad - kernel
    out = 1 + max(0, -(-span // stride))
    if (out - 1) * stride < size + pad:
        return pad, pad, True, False
    after = (out - 1) * stride + kernel - size - pad
    return pad, after, False, True
