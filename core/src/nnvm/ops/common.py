"""Helpers shared by the standard operator modules: input checks, axes, broadcasting, evaluation.

Every operator's ``evaluate`` goes through ``checked_evaluate``, which runs the operator's own
``infer_type`` on the numpy inputs and casts the numpy result to the inferred dtype, so constant
folding can never produce a value whose type disagrees with what type inference promised.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.dims import Dim, from_extent
from nnvm.graph.ir import TensorType
from nnvm.ops.registry import Attr
from nnvm.tir import expr as E

FLOAT_ATTR = (float, int)  # an integer literal is a fine float attribute (alpha=1)
TUPLE_OR_NONE = (tuple, type(None))


def float_attr(default, doc: str = "") -> Attr:
    return Attr(FLOAT_ATTR, default, doc)


def is_float(dtype: str) -> bool:
    return dtype in E.FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in E.INT_DTYPES or dtype in E.UINT_DTYPES


# ---------------------------------------------------------------------------------------------------
# input checks (messages are one sentence; the caller prefixes the node name)


def require_inputs(op: str, in_types: list, names: tuple) -> list[TensorType]:
    """The required inputs, each present: a missing one is an error naming it."""
    if len(in_types) < len(names):
        raise Error(f"{op} takes the inputs ({', '.join(names)}), got {len(in_types)}")
    for t, name in zip(in_types, names):
        if t is None:
            raise Error(f"{op}: the input {name} is required")
    return list(in_types[: len(names)])


def require_dtype(op: str, t: TensorType, kinds: str, what: str = "input") -> None:
    """``kinds`` is 'float', 'int', 'number' (float or int), 'bool' or 'any'."""
    ok = {
        "float": is_float(t.dtype), "int": is_int(t.dtype), "number": t.dtype != "bool",
        "bool": t.dtype == "bool", "any": True,
    }[kinds]
    if not ok:
        want = {"number": "a numeric", "float": "a floating-point", "int": "an integer",
                "bool": "a bool"}[kinds]
        raise Error(f"{op} expects {want} {what}, got {t.dtype}")


def require_rank(op: str, t: TensorType, rank: int, what: str = "data") -> None:
    if len(t.shape) != rank:
        raise Error(f"{op} expects a {rank}-D {what}, got shape {t.shape}")


def same_dtypes(op: str, types: list[TensorType]) -> str:
    dtypes = [t.dtype for t in types]
    if any(d != dtypes[0] for d in dtypes):
        raise Error(f"{op} needs inputs of one dtype, got {', '.join(dtypes)}; insert a cast")
    return dtypes[0]


def normalize_axis(op: str, axis: int, ndim: int, what: str = "axis") -> int:
    if not isinstance(axis, int) or not -ndim <= axis < max(ndim, 1):
        raise Error(f"{op}: {what} {axis} is out of range for a {ndim}-D input")
    return axis % ndim if ndim else 0


def normalize_axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative, distinct axes; ``None`` means all of them."""
    if axes is None:
        return tuple(range(ndim))
    out = sorted(normalize_axis(op, a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise Error(f"{op}: axis {tuple(axes)} names an axis twice")
    return tuple(out)


def int_tuple(op: str, name: str, value, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        raise Error(f"{op}: {name} must be a tuple of ints, got {value!r}")
    if length is not None and len(value) != length:
        raise Error(f"{op}: {name} must have {length} values, got {value!r}")
    return value


def dim_tuple(op: str, name: str, value, length: int | None = None) -> tuple:
    """``int_tuple`` where entries may also be symbolic dims (``graph.dims.Dim``): a shape attribute."""
    if not isinstance(value, tuple) or not all(isinstance(v, int | Dim) for v in value):
        raise Error(f"{op}: {name} must be a tuple of ints and dims, got {value!r}")
    if length is not None and len(value) != length:
        raise Error(f"{op}: {name} must have {length} values, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------------
# broadcasting


def broadcast_shapes(op: str, *shapes: tuple) -> tuple:
    """numpy's broadcasting of static shapes, as an error naming the shapes when they do not match."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            listed = ", ".join(str(tuple(s)) for s in shapes)
            raise Error(f"{op}: shapes {listed} cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_read(t: te.Tensor, idx: tuple):
    """``t`` read at output indices ``idx`` under numpy broadcasting (size-1 dims read index 0)."""
    shape = shape_of(t)
    off = len(idx) - len(shape)
    return t[tuple(E.const(0) if d == 1 else idx[off + k] for k, d in enumerate(shape))]


def shape_of(t: te.Tensor) -> tuple:
    """The shape of a tensor as Python ints, and symbolic dims (``graph.dims.Dim``) where it has them."""
    return tuple(int(d.value) if isinstance(d, E.Const) else from_extent(d) for d in t.shape)


def prod(values) -> int | Dim:
    n = 1
    for v in values:
        n = v * n if isinstance(v, Dim) else n * int(v)
    return n


# ---------------------------------------------------------------------------------------------------
# evaluation


def _owned(out: np.ndarray, dtype: str, inputs: list, attrs: dict) -> np.ndarray:
    """``out`` as a fresh, writeable, C-ordered array of ``dtype`` that shares memory with no input and
    no attribute: copied only when it is not one already (folding VGG-19's 548 MB of weights copied
    each result a second time, a second of every compile)."""
    held = [a for a in inputs if a is not None] + [v for v in attrs.values() if isinstance(v, np.ndarray)]
    if (out.flags.c_contiguous and out.flags.writeable and out.dtype == dtype
            and not any(np.may_share_memory(out, a) for a in held)):
        return out
    return np.array(out, dtype=dtype, order="C")


def checked_evaluate(infer_type: Callable, fn: Callable) -> Callable:
    """An ``evaluate`` that runs ``fn(inputs, attrs) -> list`` and casts to the inferred types."""

    def evaluate(inputs: list, attrs: dict) -> list:
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        types = infer_type([None if a is None else TensorType(a.shape, str(a.dtype)) for a in arrays], attrs)
        with np.errstate(all="ignore"):
            outs = fn(arrays, attrs)
        result = []
        for out, ty in zip(outs, types):
            out = np.asarray(out)
            if out.shape != ty.shape:
                out = out.reshape(ty.shape)
            result.append(_owned(out, ty.dtype, arrays, attrs))
        return result

    return evaluate
