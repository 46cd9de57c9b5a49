"""Indexing along one axis and running totals: ``gather_elements``, ``scatter_elements``, ``cumsum``,
``cumprod``.

``gather_elements(data, indices, axis)`` reads ``data`` at ``indices`` along ``axis`` element by element
(numpy's ``take_along_axis``); negative indices count from the end. ``scatter_elements(data, indices,
updates, axis, reduction)`` is its inverse: each update goes to the place its index names, combined
with what is there by ``reduction`` (``none`` replaces; where indices repeat the last update wins, as
in a sequential loop; ``add``, ``mul``, ``max``, ``min``). It is written as a gather over the updates:
every output element searches the updates that land on it, which costs ``O(n)`` per element along the
axis but needs no atomic writes and stays a pure compute. ``cumsum`` / ``cumprod`` along ``axis``
with ``exclusive`` (leave the element itself out) and ``reverse`` (run from the end).
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, normalize_axis, require_dtype, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _wrapped(j, n: int):
    j = j.astype("int64")
    return te.select(j < te.const(0), j + n, j)


# -- gather_elements --------------------------------------------------------------------------------
def _gather_infer(in_types, attrs):
    data, indices = require_inputs("gather_elements", in_types, ("data", "indices"))
    require_dtype("gather_elements", indices, "int", "indices")
    if len(data.shape) != len(indices.shape):
        raise Error(f"gather_elements: indices {indices.shape} and data {data.shape} differ in rank")
    normalize_axis("gather_elements", attrs["axis"], len(data.shape))
    return [TensorType(indices.shape, data.dtype)]


def _gather_compute(inputs, attrs, out_types):
    data, indices = inputs
    axis = attrs["axis"] % len(data.shape)
    n = shape_of(data)[axis]

    def body(*i):
        j = _wrapped(indices[i], n)
        j = te.minimum(te.maximum(j, te.const(0)), te.const(n - 1))
        return data[tuple(i[:axis]) + (j,) + tuple(i[axis + 1:])]

    return [te.compute(out_types[0].shape, body, name="gather_elements", tag="gather_elements")]


def _gather_eval(xs, attrs):
    data, indices = xs
    axis = attrs["axis"] % data.ndim
    j = indices.astype(np.int64)
    return [np.take_along_axis(data, np.where(j < 0, j + data.shape[axis], j), axis=axis)]


# -- scatter_elements -------------------------------------------------------------------------------
def _scatter_infer(in_types, attrs):
    data, indices, updates = require_inputs("scatter_elements", in_types, ("data", "indices", "updates"))
    require_dtype("scatter_elements", indices, "int", "indices")
    if indices.shape != updates.shape or len(indices.shape) != len(data.shape):
        raise Error(f"scatter_elements: indices {indices.shape} and updates {updates.shape} must have one "
                    f"shape and the rank of data {data.shape}")
    if updates.dtype != data.dtype:
        raise Error(f"scatter_elements: updates ({updates.dtype}) and data ({data.dtype}) differ in type")
    if attrs["reduction"] not in REDUCTIONS:
        raise Error(
            f"scatter_elements: reduction {attrs['reduction']!r} is not one of {', '.join(REDUCTIONS)}"
        )
    normalize_axis("scatter_elements", attrs["axis"], len(data.shape))
    return [TensorType(data.shape, data.dtype)]


def _scatter_compute(inputs, attrs, out_types):
    data, indices, updates = inputs
    axis = attrs["axis"] % len(data.shape)
    n = shape_of(data)[axis]
    m = shape_of(indices)[axis]
    shape = shape_of(indices)
    reduction = attrs["reduction"]

    def fits(i):
        # output position i can receive updates from positions (i but k on axis) that exist in indices
        return (
            te.all_of(*[i[d] < te.const(shape[d]) for d in range(len(shape)) if d != axis])
            if any(shape[d] != shape_of(data)[d] for d in range(len(shape)) if d != axis)
            else None
        )

    def at(i, k):
        return tuple(i[:axis]) + (k,) + tuple(i[axis + 1 :])

    def clamp(i):  # a read position inside indices/updates (guarded by ``fits``)
        return tuple(te.minimum(v, te.const(shape[d] - 1)) if d != axis else v for d, v in enumerate(i))

    def hit(i, k):
        cond = _wrapped(indices[at(clamp(i), k)], n) == i[axis]
        ok = fits(i)
        return cond if ok is None else te.all_of(ok, cond)

    if reduction == "none":

        def last(*i):
            k = te.reduce_axis((0, m), name="k")
            return te.max(te.select(hit(i, k.var), k.var, te.const(-1, "int64")), axis=[k])

        found = te.compute(data.shape, last, name="scatter_last", tag="scatter_last")

        def body(*i):
            k = found[i]
            safe = te.maximum(k, te.const(0, "int64"))
            return te.select(k >= te.const(0, "int64"), updates[at(clamp(i), safe)], data[i])

        return [te.compute(data.shape, body, name="scatter_elements", tag="scatter_elements")]

    reducer, identity = {
        "add": (te.sum, 0),
        "mul": (te.prod, 1),
        "max": (te.max, None),
        "min": (te.min, None),
    }[reduction]
    dtype = data.dtype
    if identity is None:
        info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
        identity = info.min if reduction == "max" else info.max
        if np.dtype(dtype).kind == "f":
            identity = -np.inf if reduction == "max" else np.inf

    def combined(*i):
        k = te.reduce_axis((0, m), name="k")
        return reducer(
            te.select(hit(i, k.var), updates[at(clamp(i), k.var)], te.const(identity, dtype)), axis=[k]
        )

    total = te.compute(data.shape, combined, name="scatter_reduce", tag="scatter_reduce")
    if reduction == "add":
        return [
            te.compute(
                data.shape, lambda *i: data[i] + total[i], name="scatter_elements", tag="scatter_elements"
            )
        ]
    if reduction == "mul":
        return [
            te.compute(
                data.shape, lambda *i: data[i] * total[i], name="scatter_elements", tag="scatter_elements"
            )
        ]
    pick = te.maximum if reduction == "max" else te.minimum
    return [
        te.compute(
            data.shape, lambda *i: pick(data[i], total[i]), name="scatter_elements", tag="scatter_elements"
        )
    ]


def _scatter_eval(xs, attrs):
    data, indices, updates = xs
    axis = attrs["axis"] % data.ndim
    out = data.copy()
    j = indices.astype(np.int64)
    j = np.where(j < 0, j + data.shape[axis], j)
    for pos in np.ndindex(*indices.shape):
        target = pos[:axis] + (int(j[pos]),) + pos[axis + 1 :]
        u = updates[pos]
        r = attrs["reduction"]
        out[target] = (
            u
            if r == "none"
            else out[target] + u
            if r == "add"
            else out[target] * u
            if r == "mul"
            else max(out[target], u)
            if r == "max"
            else min(out[target], u)
        )
    return [out]


# -- cumsum / cumprod -------------------------------------------------------------------------------
def _make_scan(name: str) -> OpDef:
    reducer, identity, numpy_fn = (te.sum, 0, np.cumsum) if name == "cumsum" else (te.prod, 1, np.cumprod)

    def infer_type(in_types, attrs):
        (x,) = require_inputs(name, in_types, ("data",))
        require_dtype(name, x, "number")
        normalize_axis(name, attrs["axis"], len(x.shape))
        return [TensorType(x.shape, x.dtype)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = attrs["axis"] % len(x.shape)
        n = shape_of(x)[axis]
        excl, rev = attrs["exclusive"], attrs["reverse"]

        def body(*i):
            k = te.reduce_axis((0, n), name="k")
            j = i[axis]
            inside = (k.var > j if excl else k.var >= j) if rev else (k.var < j if excl else k.var <= j)
            read = x[tuple(i[:axis]) + (k.var,) + tuple(i[axis + 1 :])]
            return reducer(te.select(inside, read, te.const(identity, x.dtype)), axis=[k])

        return [te.compute(out_types[0].shape, body, name=name, tag=name)]

    def evaluate(xs, attrs):
        (x,) = xs
        axis = attrs["axis"] % x.ndim
        y = np.flip(x, axis) if attrs["reverse"] else x
        out = numpy_fn(y, axis=axis, dtype=x.dtype)
        if attrs["exclusive"]:
            out = np.concatenate(
                [
                    np.full_like(np.take(out, [0], axis), identity),
                    np.take(out, range(x.shape[axis] - 1), axis),
                ],
                axis,
            )
        return [np.flip(out, axis) if attrs["reverse"] else out]

    return OpDef(
        name,
        infer_type,
        compute,
        OpPattern.OPAQUE,
        attrs={
            "axis": Attr(int, 0),
            "exclusive": Attr(bool, False, "leave each element itself out"),
            "reverse": Attr(bool, False, "accumulate from the end of the axis"),
        },
        num_inputs=(1, 1),
        evaluate=checked_evaluate(infer_type, evaluate),
        doc=f"running {'sum' if name == 'cumsum' else 'product'} along axis",
    )


def ops() -> list[OpDef]:
    """The indexing and running-total OpDefs."""
    return [
        OpDef(
            "gather_elements",
            _gather_infer,
            _gather_compute,
            OpPattern.INJECTIVE,
            attrs={"axis": Attr(int, 0)},
            num_inputs=(2, 2),
            evaluate=checked_evaluate(_gather_infer, _gather_eval),
            doc="read data at indices along axis, element by element (take_along_axis)",
        ),
        OpDef(
            "scatter_elements",
            _scatter_infer,
            _scatter_compute,
            OpPattern.OPAQUE,
            attrs={"axis": Attr(int, 0), "reduction": Attr(str, "none", "none, add, mul, max or min")},
            num_inputs=(3, 3),
            evaluate=checked_evaluate(_scatter_infer, _scatter_eval),
            doc="write updates at indices along axis into a copy of data",
        ),
        _make_scan("cumsum"),
        _make_scan("cumprod"),
    ]
