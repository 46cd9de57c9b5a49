"""ONNX's data-dependent operators as numpy on the host: what their converters fold for inputs known when
importing, and what ``staging`` runs between compiled stages for inputs computed at run time, so both
read the operator the same way."""

from __future__ import annotations

import math

import numpy as np


def nonzero(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def unique(x: np.ndarray, axis: int | None, sort: bool) -> list:
    """ONNX ``Unique``'s four outputs: values, first indices, inverse indices, counts."""
    data = x.reshape(-1) if axis is None else x
    values, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sort:  # in order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


def _descending_key(x: np.ndarray) -> np.ndarray:
    """A key whose ascending order is ``x``'s descending one, with no overflow (``~`` on integers)."""
    if x.dtype == bool:
        return ~x
    return ~x if x.dtype.kind in "iu" else -x


def topk(x: np.ndarray, k: int, axis: int, largest: bool) -> list:
    """ONNX ``TopK``: the k largest (smallest) along ``axis``, ties to the lower index, sorted. A
    partition picks the k, so only they are sorted, not the whole axis (onnxruntime's way)."""
    key = np.moveaxis(_descending_key(x) if largest else x, axis, -1)
    n = key.shape[-1]
    if 0 < k < n:
        picked = np.argpartition(key, k - 1, axis=-1)[..., :k]  # the k smallest keys, ties cut anyhow
        kth = np.take_along_axis(key, picked, -1).max(axis=-1, keepdims=True)
        tied = key == kth
        if (tied.sum(axis=-1, keepdims=True) != (np.take_along_axis(key, picked, -1) == kth).sum(
                axis=-1, keepdims=True)).any():  # a tie at the cut: the lowest indices make it
            less = key < kth
            room = k - less.sum(axis=-1, keepdims=True)
            chosen = less | (tied & (np.cumsum(tied, axis=-1) <= room))
            picked = np.nonzero(chosen)[-1].reshape(key.shape[:-1] + (k,))
        picked = np.sort(picked, axis=-1)  # index order, so the stable sort by key breaks ties by index
        order = np.take_along_axis(picked, np.argsort(np.take_along_axis(key, picked, -1), axis=-1,
                                                      kind="stable"), -1)
    else:
        order = np.argsort(key, axis=-1, kind="stable")[..., :k]
    index = np.moveaxis(order, -1, axis)
    return [np.take_along_axis(x, index, axis), index.astype(np.int64)]


def arange(start, limit, delta) -> np.ndarray:
    """ONNX ``Range``: ``max(ceil((limit - start) / delta), 0)`` elements ``start + i * delta``."""
    dtype = start.dtype
    if dtype.kind in "iu":
        n = -((int(start) - int(limit)) // int(delta))
    else:
        n = math.ceil(float(np.asarray(limit - start, dtype=dtype)) / float(delta))
    return (start + np.arange(max(n, 0), dtype=dtype) * delta).astype(dtype)
