"""Reductions over axes: ``sum, mean, max, min, prod`` and ``argmax, argmin``.

``axis=None`` reduces over every axis; ``keepdims`` keeps reduced axes with extent 1. ``mean`` is a sum
then a division (so it rounds like numpy's sum-then-divide, and integer means truncate). ``argmax`` is
two reductions: the extreme value, then the first (or last) index holding it; a single reduction over
(value, index) pairs would need multi-output reducers, which lowering does not have.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import (
    TUPLE_OR_NONE,
    checked_evaluate,
    normalize_axes,
    normalize_axis,
    prod,
    require_dtype,
    require_inputs,
    shape_of,
)
from nnvm.ops.registry import Attr, OpDef, OpPattern

_REDUCERS = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min, "prod": te.prod}
_NUMPY = {"sum": np.sum, "mean": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def reduced_shape(shape: tuple, axes: tuple, keepdims: bool) -> tuple:
    """``shape`` without ``axes`` (or with them as 1 when ``keepdims``)."""
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def reduce_axes_read(x: te.Tensor, axes: tuple, keepdims: bool, out_idx: tuple, prefix: str = "k"):
    """(reduce IterVars, input indices) for reading ``x`` at output ``out_idx`` over ``axes``."""
    shape = shape_of(x)
    rvs = [te.reduce_axis((0, shape[a]), name=f"{prefix}{a}") for a in axes]
    by_axis = dict(zip(axes, rvs))
    idx, j = [], 0
    for d in range(len(shape)):
        if d in by_axis:
            idx.append(by_axis[d].var)
            j += 1 if keepdims else 0
        else:
            idx.append(out_idx[j])
            j += 1
    return rvs, tuple(idx)


def _make_reduce(name: str) -> OpDef:
    def infer_type(in_types, attrs):
        (x,) = require_inputs(name, in_types, ("data",))
        require_dtype(name, x, "number")
        axes = normalize_axes(name, attrs["axis"], len(x.shape))
        if any(x.shape[a] == 0 for a in axes) and name in ("max", "min"):
            raise Error(f"{name}: cannot reduce over an empty axis of shape {x.shape}")
        return [TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axes = normalize_axes(name, attrs["axis"], len(x.shape))
        shape = out_types[0].shape
        if not axes:
            return [te.compute(shape, lambda *i: x[i], name=name, tag=name)]
        reducer = _REDUCERS[name]

        def body(*i):
            rvs, idx = reduce_axes_read(x, axes, attrs["keepdims"], i)
            return reducer(x[idx], axis=rvs)

        if name != "mean":
            return [te.compute(shape, body, name=name, tag=name)]
        total = te.compute(shape, body, name="mean_sum", tag="sum")
        count = prod(shape_of(x)[a] for a in axes)
        return [te.compute(shape, lambda *i: total[i] / te.const(count, x.dtype), name="mean", tag="mean")]

    def evaluate(xs, attrs):
        (x,) = xs
        axes = normalize_axes(name, attrs["axis"], x.ndim)
        # sums and products accumulate in the input dtype, as the compiled reduction does
        extra = {"dtype": x.dtype} if name in ("sum", "mean", "prod") else {}
        out = _NUMPY[name](x, axis=axes, keepdims=attrs["keepdims"], **extra)
        if name == "mean":
            count = prod(x.shape[a] for a in axes)
            out = out / count if x.dtype.kind == "f" else np.trunc(out / count)
        return [out]

    return OpDef(name, infer_type, compute, OpPattern.REDUCTION,
                 attrs={"axis": Attr(TUPLE_OR_NONE, None, "axes to reduce; None for all"),
                        "keepdims": Attr(bool, False, "keep reduced axes with extent 1")},
                 num_inputs=(1, 1), evaluate=checked_evaluate(infer_type, evaluate),
                 doc=f"{name} over axes")


def _make_arg(name: str) -> OpDef:
    extreme = te.max if name == "argmax" else te.min

    def infer_type(in_types, attrs):
        (x,) = require_inputs(name, in_types, ("data",))
        require_dtype(name, x, "number")
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        if x.shape[axis] == 0:
            raise Error(f"{name}: cannot reduce over the empty axis {axis} of shape {x.shape}")
        return [TensorType(reduced_shape(x.shape, (axis,), attrs["keepdims"]), "int64")]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        axis = normalize_axis(name, attrs["axis"], len(x.shape))
        keep, last = attrs["keepdims"], attrs["select_last_index"]
        n = shape_of(x)[axis]
        shape = out_types[0].shape

        def value(*i):
            rvs, idx = reduce_axes_read(x, (axis,), keep, i)
            return extreme(x[idx], axis=rvs)

        best = te.compute(shape, value, name=f"{name}_value", tag=name.replace("arg", ""))

        def index(*i):
            rvs, idx = reduce_axes_read(x, (axis,), keep, i)
            k = rvs[0].var
            if last:
                return te.max(te.select(x[idx] == best[i], k, te.const(-1, "int64")), axis=rvs)
            return te.min(te.select(x[idx] == best[i], k, te.const(n, "int64")), axis=rvs)

        return [te.compute(shape, index, name=name, tag=name)]

    def evaluate(xs, attrs):
        (x,) = xs
        axis = normalize_axis(name, attrs["axis"], x.ndim)
        fn = np.argmax if name == "argmax" else np.argmin
        if attrs["select_last_index"]:
            out = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            out = fn(x, axis=axis)
        return [np.expand_dims(out, axis) if attrs["keepdims"] else out]

    return OpDef(name, infer_type, compute, OpPattern.REDUCTION,
                 attrs={"axis": Attr(int, 0), "keepdims": Attr(bool, True),
                        "select_last_index": Attr(bool, False, "ties give the last index, not the first")},
                 num_inputs=(1, 1), evaluate=checked_evaluate(infer_type, evaluate),
                 doc=f"index of the {'largest' if name == 'argmax' else 'smallest'} value along axis (int64)")


def ops() -> list[OpDef]:
    """The reductions' OpDefs."""
    return [_make_reduce(n) for n in _REDUCERS] + [_make_arg(n) for n in ("argmax", "argmin")]
