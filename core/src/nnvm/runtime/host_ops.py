"""Operators whose output shape their input values decide (``NonZero``, ``TopK``, ``Range``, ``Compress``,
``Unique``, with ONNX's semantics), run in numpy on the host. One registry, ``HOST_OPS``, keyed by the
operator's name: the ONNX frontend folds these for inputs known when importing and builds the ``HostOp``
that a staged module (``nnvm.staged``) runs between its compiled stages; an exported staged module
(``nnvm.runtime.staged_file``) names the op and its attributes, and ``nnvm.load`` rebuilds the same
``HostOp`` from this registry with the core alone, so the frontend, the in-process module and the loaded
file run the very same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nnvm.errors import Error, InputError
from nnvm.graph.dims import Dim


def nonzero(x: np.ndarray) -> np.ndarray:
    """ONNX ``NonZero``: [rank, count] int64 indices in row-major order, from the flat positions divided
    down axis by axis (in int32 where they fit): numpy's ``nonzero`` of a rank-4 array is ~5x slower."""
    x = np.asarray(x)
    if x.ndim <= 1:  # a scalar as one element, [1, 0 or 1], as onnxruntime answers it
        return np.flatnonzero(x).astype(np.int64, copy=False).reshape(1, -1)
    if x.size <= 1024:  # numpy's fewer calls win on a small array
        return np.asarray(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)
    flat = np.flatnonzero(x)
    out = np.empty((x.ndim, flat.size), np.int64)
    rest = flat.astype(np.int32) if x.size < 2**31 else flat
    for axis in range(x.ndim - 1, 0, -1):
        q = rest // x.shape[axis]
        np.subtract(rest, q * x.shape[axis], out=out[axis])
        rest = q
    out[0] = rest
    return out


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


def _topk_screened(key: np.ndarray, k: int) -> np.ndarray | None:
    """The k smallest keys per row of the 2-D ``key``, in order (ties to the lower index), from
    a screen: the first ``k * 2**p`` keys of a row folded by halves into 4k-8k groups, the k-th smallest
    group minimum ``t`` has at least k keys at or below it, so only those (a few per cent of a row) are
    sorted instead of partitioning the row, which alone costs more than onnxruntime's whole TopK (numpy's
    reductions along an axis are slower still than these halvings). The picks come back as positions in
    ``key`` flattened, [rows, k]; None where a row holds a NaN."""
    rows, n = key.shape
    width = k
    while 2 * width <= n:
        width *= 2
    low = key[:, :width]
    while low.shape[1] >= 8 * k:  # NaN propagates: a row holding one screens to NaN
        half = low.shape[1] // 2
        low = np.minimum(low[:, :half], low[:, half:])
    t = low.max(axis=1) if low.shape[1] == k else np.partition(low, k - 1, axis=1)[:, k - 1]
    if t.dtype.kind == "f" and np.isnan(low).any():
        return None
    flat = np.flatnonzero(key <= t[:, None])
    order = np.argsort(key.reshape(-1)[flat], kind="stable")  # ties keep their index order
    if rows == 1:
        return flat[order[:k]].reshape(1, k)
    row = flat // n
    row = row.astype(np.uint16 if rows <= 1 << 16 else np.int64)  # radix-sorted when 16 bits
    order = order[np.argsort(row[order], kind="stable")]  # by row, each row's keys still in order
    starts = np.zeros(rows, np.int64)
    np.cumsum(np.bincount(row, minlength=rows)[:-1], out=starts[1:])
    return flat[order[starts[:, None] + np.arange(k)]]


def topk(x: np.ndarray, k: int, axis: int, largest: bool) -> list:
    """ONNX ``TopK``: the k largest (smallest) along ``axis``, ties to the lower index, sorted. A
    screen (``_topk_screened``) or a partition picks the k, so only they are sorted, not the whole axis
    (onnxruntime's way)."""
    last = axis == x.ndim - 1  # the common case, and moveaxis costs more than a small TopK's sort
    key = _descending_key(x) if largest else x
    key = key if last else np.moveaxis(key, axis, -1)
    n = key.shape[-1]
    flat = _topk_screened(key.reshape(-1, n), k) if 0 < k and n >= 8 * k and key.size else None
    if flat is not None:  # the values read at the same flat positions, no take_along_axis
        rows = flat.shape[0]
        values = (x if last else np.moveaxis(x, axis, -1)).reshape(-1)[flat].reshape(key.shape[:-1] + (k,))
        index = (flat - np.arange(0, rows * n, n)[:, None] if rows > 1 else flat).reshape(values.shape)
        if not last:
            values, index = np.moveaxis(values, -1, axis), np.moveaxis(index, -1, axis)
        return [values, index.astype(np.int64, copy=False)]
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
    index = order if last else np.moveaxis(order, -1, axis)
    return [np.take_along_axis(x, index, axis), index.astype(np.int64, copy=False)]


def arange(start, limit, delta) -> np.ndarray:
    """ONNX ``Range``: ``max(ceil((limit - start) / delta), 0)`` elements ``start + i * delta``."""
    dtype = start.dtype
    if dtype.kind in "iu":
        n = -((int(start) - int(limit)) // int(delta))
    else:
        n = math.ceil(float(np.asarray(limit - start, dtype=dtype)) / float(delta))
    out = np.arange(max(n, 0), dtype=dtype)  # in place: the same roundings, no temporaries
    out *= delta
    out += start
    return out


# -- the registry: each operator's run and output types, given its attributes -----------------------------
def _axis(where: str, attrs: dict, rank: int, default=None):
    axis = attrs.get("axis", default)
    if axis is None:
        return None
    if not -rank <= axis < rank:
        raise Error(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _numel(shape):
    n = 1
    for d in shape:
        n = d * n
    return n


def _typed(where: str, in_types):
    if in_types[0] is None or in_types[0][1] is None:
        raise Error(f"{where}: its input's shape is unknown, so its output cannot be typed")
    return in_types[0]


def _nonzero_run(where, attrs, arrays):
    return [nonzero(arrays[0])]


def _nonzero_types(where, attrs, in_types, dim):
    _, shape = _typed(where, in_types)
    if not shape:
        raise Error(f"{where}: a scalar input is not supported")
    return [("int64", (len(shape), Dim.named(dim)))], _numel(shape)


def _topk_run(where, attrs, arrays):
    x, k = arrays[0], np.asarray(arrays[1]).reshape(-1)
    axis = _axis(where, attrs, x.ndim, -1)
    if k.size != 1:
        raise InputError(f"{where}: k has {k.size} values, expected one")
    n = x.shape[axis]
    if not 0 <= int(k[0]) <= n:
        raise InputError(f"{where}: k = {int(k[0])} is outside [0, {n}], the length of axis {axis}")
    return topk(x, int(k[0]), axis, bool(attrs.get("largest", 1)))


def _topk_types(where, attrs, in_types, dim):
    dtype, shape = _typed(where, in_types)
    axis = _axis(where, attrs, len(shape), -1)
    out = tuple(Dim.named(dim) if a == axis else d for a, d in enumerate(shape))
    return [(dtype, out), ("int64", out)], shape[axis]


def _range_run(where, attrs, arrays):
    start, limit, delta = (np.asarray(a).reshape(()) for a in arrays[:3])
    if delta == 0:
        raise InputError(f"{where}: delta is 0")
    dtype = start.dtype
    return [arange(start, limit.astype(dtype, copy=False), delta.astype(dtype, copy=False))]


def _range_types(where, attrs, in_types, dim):
    dtype, _ = _typed(where, in_types)
    return [(dtype, (Dim.named(dim),))], None


def _compress_run(where, attrs, arrays):
    x, cond = arrays[0], np.asarray(arrays[1]).astype(bool).reshape(-1)
    axis = _axis(where, attrs, x.ndim)
    if axis is None:
        x, axis = x.reshape(-1), 0
    return [np.compress(cond[:x.shape[axis]], x, axis=axis)]


def _compress_types(where, attrs, in_types, dim):
    dtype, shape = _typed(where, in_types)
    axis = _axis(where, attrs, len(shape))
    if axis is None:
        return [(dtype, (Dim.named(dim),))], _numel(shape)
    out = tuple(Dim.named(dim) if a == axis else d for a, d in enumerate(shape))
    return [(dtype, out)], shape[axis]


def _unique_run(where, attrs, arrays):
    x = arrays[0]
    return unique(x, _axis(where, attrs, x.ndim), bool(attrs.get("sorted", 1)))


def _unique_types(where, attrs, in_types, dim):
    dtype, shape = _typed(where, in_types)
    axis = _axis(where, attrs, len(shape))
    d = Dim.named(dim)
    if axis is None:
        return [(dtype, (d,)), ("int64", (d,)), ("int64", (_numel(shape),)), ("int64", (d,))], _numel(shape)
    values = tuple(d if a == axis else s for a, s in enumerate(shape))
    return [(dtype, values), ("int64", (d,)), ("int64", (shape[axis],)), ("int64", (d,))], shape[axis]


@dataclass(frozen=True)
class HostKind:
    """An operator run on the host. ``run(where, attrs, arrays) -> arrays`` (``where`` names the node in
    errors; a user's value out of range is an ``InputError``); ``types(where, attrs, in_types, dim)``
    gives the outputs' ``(dtype, shape)`` (ints and ``Dim``s) with the fresh dim named ``dim``, and that
    dim's upper bound (an int, a ``Dim`` of the inputs' dims, or None)."""

    run: Callable
    types: Callable


HOST_OPS = {
    "NonZero": HostKind(_nonzero_run, _nonzero_types),
    "TopK": HostKind(_topk_run, _topk_types),
    "Range": HostKind(_range_run, _range_types),
    "Compress": HostKind(_compress_run, _compress_types),
    "Unique": HostKind(_unique_run, _unique_types),
}


@dataclass
class HostOp:
    """A data-dependent node run on the host: the operator's name in ``HOST_OPS``, its attributes (plain
    JSON values, so an exported file holds them), the values it reads (``""``: an absent input) and those
    it computes."""

    node: str
    op: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.op not in HOST_OPS:
            raise Error(f"{self.where}: no host implementation")

    @property
    def where(self) -> str:
        return f"node {self.node} ({self.op})"

    def run(self, arrays: list) -> list:
        """The outputs for ``arrays`` (None for an absent input)."""
        return HOST_OPS[self.op].run(self.where, self.attrs, arrays)

    def types(self, in_types: list, dim: str) -> tuple:
        """The outputs' types and the fresh dim's upper bound (``HostKind.types``)."""
        return HOST_OPS[self.op].types(self.where, self.attrs, in_types, dim)
