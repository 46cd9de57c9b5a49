"""Shape computations over symbolic dims, folded at import (docs/dynamic-shapes.md).

Exporters compute reshape targets from the input's shape: ``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape``. With static shapes those fold to constants on their own; with symbolic dims (``graph.dims.Dim``)
``Shape`` gives a *symbolic value*: an int64 tensor, known at import, whose entries are ints and dims.
It lives in the context (``Context.symbolic_values``: a numpy object array under a name no graph node
defines), the few operators exporters apply to shapes compute on it here, and ``Reshape``'s target,
``Slice``'s bounds, ``Range``'s limit, ``ConstantOfShape``'s and ``Expand``'s shapes and ``Tile``'s repeats
read it (``Context.const_ints`` keeps dims). No node is left to run. A value whose entries are all ints
becomes an ordinary constant again; one that an operator takes as data (position ids times ``seq``)
becomes a tensor computed from the dims at each run (``dim_values``).
"""

from __future__ import annotations

import numpy as np

from nnvm.graph.dims import Dim
from nnvm_frontend_onnx.context import Context, normalize_axis

# operator -> input positions that may hold a symbolic value (read through ``Context.const_ints``)
CONSUMERS = {"Reshape": (1,), "Slice": (1, 2, 3, 4), "Range": (0, 1, 2), "ConstantOfShape": (0,),
             "Expand": (1,), "Tile": (1,)}


def symbolic(arr: np.ndarray) -> bool:
    return any(isinstance(x, Dim) for x in arr.reshape(-1))


def _axes(ctx: Context, inputs: list, pos: int) -> tuple | None:
    if ctx.has_attr("axes"):
        return tuple(ctx.attr("axes"))
    if len(inputs) > pos and inputs[pos]:
        return ctx.const_ints(inputs[pos], "the axes input")
    return None


def _shape(ctx, values, inputs):
    shape = values[0].shape if inputs[0] in ctx.symbolic_values else ctx.shape(inputs[0])
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return np.array(list(shape[start:end]), dtype=object).reshape(-1)


def _gather(ctx, values, inputs):
    data, indices = values[0], np.asarray(values[1]).astype(np.int64)
    axis = normalize_axis(ctx.attr("axis", 0), data.ndim, ctx)
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take(data, indices, axis=axis)


def _unsqueeze(ctx, values, inputs):
    x = values[0]
    given = _axes(ctx, inputs, 1)
    rank = x.ndim + len(given)
    axes = sorted(normalize_axis(a, rank, ctx) for a in given)
    dims = iter(x.shape)
    return x.reshape(tuple(1 if i in axes else next(dims) for i in range(rank)))


def _squeeze(ctx, values, inputs):
    x = values[0]
    given = _axes(ctx, inputs, 1)
    axes = [i for i, d in enumerate(x.shape) if d == 1] if given is None else \
        [normalize_axis(a, x.ndim, ctx) for a in given]
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _concat(ctx, values, inputs):
    return np.concatenate([np.asarray(v, dtype=object) for v in values],
                          axis=normalize_axis(ctx.attr("axis"), values[0].ndim, ctx))


def _cast(ctx, values, inputs):
    if ctx.attr_dtype("to") not in ("int64", "int32"):
        raise ctx.error(f"a shape of symbolic dims cast to {ctx.attr_dtype('to')} is not supported yet")
    return values[0]


def _slice(ctx, values, inputs):
    x = values[0]
    if x.ndim != 1:
        raise ctx.error("slicing a shape of symbolic dims of rank above 1 is not supported yet")
    starts = ctx.const_ints(inputs[1], "the starts input")
    ends = ctx.const_ints(inputs[2], "the ends input")
    steps = ctx.const_ints(inputs[4], "the steps input") if len(inputs) > 4 and inputs[4] else (1,)
    if len(starts) != 1 or not all(isinstance(v, int) for v in (*starts, *ends, *steps)):
        raise ctx.error("a shape of symbolic dims sliced by symbolic bounds is not supported yet")
    return x[slice(starts[0], ends[0], steps[0])]


def _reshape(ctx, values, inputs):
    x = values[0]
    spec = list(ctx.const_ints(inputs[1], "the shape input"))
    if any(isinstance(d, Dim) for d in spec):
        raise ctx.error("a shape of symbolic dims reshaped to symbolic dims is not supported yet")
    spec = [x.shape[i] if d == 0 else d for i, d in enumerate(spec)]
    return x.reshape(spec)


def _where(ctx, values, inputs):
    cond, a, b = (np.asarray(v, dtype=object) for v in values)
    return np.where(cond.astype(bool), a, b)


def _arith(op):
    def run(ctx, values, inputs):
        a, b = (np.asarray(v, dtype=object) for v in values)
        return op(a, b)
    return run


RULES = {
    "Shape": _shape, "Gather": _gather, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Concat": _concat,
    "Cast": _cast, "Slice": _slice, "Identity": lambda ctx, values, inputs: values[0],
    "Add": _arith(np.add), "Sub": _arith(np.subtract), "Mul": _arith(np.multiply),
    "Div": _arith(np.floor_divide),  # ONNX's integer Div truncates: the same for dims, which are positive
    "Reshape": _reshape, "Where": _where,
    "Equal": _arith(lambda a, b: np.frompyfunc(lambda x, y: x == y, 2, 1)(a, b)),
}


def wants(ctx: Context, op_type: str, inputs: list) -> bool:
    """Whether this module converts the node: a ``Shape`` of a symbolic shape, or one of ``RULES`` whose
    inputs are symbolic values and constants."""
    if op_type == "Shape":
        return bool(inputs) and (inputs[0] in ctx.symbolic_values or
                                 any(isinstance(d, Dim) for d in ctx.shape(inputs[0])))
    if op_type not in RULES:
        return False
    several = ("Concat", "Add", "Sub", "Mul", "Div", "Equal", "Where")
    data_inputs = inputs if op_type in several else inputs[:1]
    known = all(v in ctx.symbolic_values or ctx.const_value(v) is not None for v in data_inputs if v)
    return known and any(v in ctx.symbolic_values for v in data_inputs)


def convert(ctx: Context, op_type: str, inputs: list) -> str:
    """The node's output: a symbolic value (its name), or a constant when every entry is an int."""
    values = [ctx.symbolic_values.get(v) if v in ctx.symbolic_values else
              np.asarray(ctx.const_value(v), dtype=object) if v else None for v in inputs]
    out = np.asarray(RULES[op_type](ctx, values, inputs), dtype=object)
    if not symbolic(out):
        is_bool = out.size and all(isinstance(x, bool | np.bool_) for x in out.reshape(-1))
        return ctx.param(out.astype(bool if is_bool else np.int64), "shape")
    name = f"{ctx.name}/symbolic"
    while name in ctx.symbolic_values:
        name += "_"
    ctx.symbolic_values[name] = out
    return name


def materialize(ctx: Context, op_type: str, inputs: list) -> list:
    """``inputs`` with every symbolic value the converter takes as data (not as a shape: ``CONSUMERS``)
    made a tensor computed at each run from the dims (``dim_values``): ``seq`` times position ids."""
    allowed = CONSUMERS.get(op_type, ())
    out = list(inputs)
    for k, v in enumerate(inputs):
        if v in ctx.symbolic_values and k not in allowed:
            arr = ctx.symbolic_values[v]
            values = tuple(x if isinstance(x, Dim) else int(x) for x in arr.reshape(-1))
            out[k] = ctx.op("dim_values", [], {"values": values, "shape": tuple(arr.shape)})
    return out
