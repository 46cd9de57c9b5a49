"""ONNX sequences and optionals, resolved when importing: they never reach the nnvm graph.

An nnvm graph holds tensors only, and a compiler can resolve almost every use of a sequence: what a
model does with one (construct, insert, erase, index, map, split, concatenate) depends on its length
and on positions, which are known when importing once the graph inputs are bound. So a sequence is a
``TensorSequence`` (a tuple of nnvm tensor values) in the converter's environment, and an optional an
``OptionalValue`` (a value or nothing); the converters here edit them as lists. ``SequenceMap`` is
unrolled over the sequence; ``SplitToSequence`` is a split; ``ConcatFromSequence`` a concatenate or
a stack; ``SequenceLength`` and ``OptionalHasElement`` are constants.

Positions and split sizes must be known when importing (``ctx.const``): a graph input that gives one is
specialized on by ``nnvm_frontend_onnx.backend``; one computed at run time is an error naming the node.
A graph input or output that is a sequence or an optional is flattened by the importer and the backend
adapter (``flatten``, ``regroup``): the compiled module takes and returns its tensors one by one.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis, onnx_dtype
from nnvm_frontend_onnx.convert_control import graph_attr, run_body, stack
from nnvm_frontend_onnx.sequences import OptionalValue, TensorSequence


def _sequence(ctx: Context, value, what: str = "input 0") -> TensorSequence:
    if not isinstance(value, TensorSequence):
        raise ctx.error(f"{what} must be a sequence of tensors")
    return value


def _position(ctx: Context, v: str, n: int, what: str, end_ok: bool) -> int:
    """A position in a sequence of ``n``: negative counts from the end; ``end_ok`` allows ``n``."""
    pos = int(np.asarray(ctx.const(v, what)).reshape(-1)[0])
    hi = n if end_ok else n - 1
    if not -n <= pos <= hi:
        raise ctx.error(f"{what} {pos} is out of range for a sequence of {n} tensors")
    return pos + n if pos < 0 else pos


def _elem_dtype(ctx: Context, items: tuple, declared: str | None) -> str | None:
    dtypes = {ctx.dtype(v) for v in items}
    if len(dtypes) > 1:
        raise ctx.error(f"a sequence holds tensors of one element type, got {', '.join(sorted(dtypes))}")
    return dtypes.pop() if dtypes else declared


@converter("SequenceConstruct")
def convert_sequence_construct(ctx: Context, inputs):
    items = tuple(inputs)
    return [TensorSequence(items, _elem_dtype(ctx, items, None))]


@converter("SequenceEmpty")
def convert_sequence_empty(ctx: Context, inputs):
    return [TensorSequence((), ctx.attr_dtype("dtype", "float32"))]


@converter("SequenceLength")
def convert_sequence_length(ctx: Context, inputs):
    seq = _sequence(ctx, inputs[0])
    return ctx.param(np.asarray(len(seq.items), dtype=np.int64), "length")


@converter("SequenceAt")
def convert_sequence_at(ctx: Context, inputs):
    seq = _sequence(ctx, inputs[0])
    if not seq.items:
        raise ctx.error("the sequence is empty")
    return [seq.items[_position(ctx, inputs[1], len(seq.items), "the position", end_ok=False)]]


@converter("SequenceInsert")
def convert_sequence_insert(ctx: Context, inputs):
    seq = _sequence(ctx, inputs[0])
    items = list(seq.items)
    pos = len(items)
    if len(inputs) > 2 and inputs[2]:
        pos = _position(ctx, inputs[2], len(items), "the position", end_ok=True)
    items.insert(pos, inputs[1])
    return [TensorSequence(tuple(items), _elem_dtype(ctx, tuple(items), seq.dtype))]


@converter("SequenceErase")
def convert_sequence_erase(ctx: Context, inputs):
    seq = _sequence(ctx, inputs[0])
    items = list(seq.items)
    if not items:
        raise ctx.error("cannot erase from an empty sequence")
    pos = len(items) - 1
    if len(inputs) > 1 and inputs[1]:
        pos = _position(ctx, inputs[1], len(items), "the position", end_ok=False)
    del items[pos]
    return [TensorSequence(tuple(items), seq.dtype)]


@converter("SplitToSequence")
def convert_split_to_sequence(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = normalize_axis(ctx.attr("axis", 0), len(shape), ctx)
    dim = shape[axis]
    if not isinstance(dim, int | np.integer):
        raise ctx.error(f"the split axis has the symbolic length {dim}; its length must be known to split it")
    split = ctx.const_ints(inputs[1], "the split input") if len(inputs) > 1 and inputs[1] else None
    scalar = split is not None and np.asarray(ctx.const_value(inputs[1])).ndim == 0
    if split is None:
        sizes = (1,) * dim
    elif scalar:
        chunk = int(split[0])
        if chunk <= 0:
            raise ctx.error(f"the split size {chunk} must be positive")
        sizes = tuple(min(chunk, dim - k) for k in range(0, dim, chunk))
    else:
        sizes = tuple(int(s) for s in split)
        if sum(sizes) != dim or min(sizes, default=0) < 0:
            raise ctx.error(f"split sizes {sizes} do not add up to the axis length {dim}")
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    parts = [x] if len(sizes) == 1 else ctx.ops("split", [x], {"indices": points, "axis": axis}, len(sizes))
    if split is None and not ctx.attr("keepdims", 1):
        parts = [ctx.reshape(p, shape[:axis] + shape[axis + 1:]) for p in parts]
    return [TensorSequence(tuple(parts), ctx.dtype(x))]


@converter("ConcatFromSequence")
def convert_concat_from_sequence(ctx: Context, inputs):
    seq = _sequence(ctx, inputs[0])
    if not seq.items:
        raise ctx.error("cannot concatenate an empty sequence")
    axis = int(ctx.attr("axis"))
    if ctx.attr("new_axis", 0):
        return stack(ctx, list(seq.items), axis)
    axis = normalize_axis(axis, ctx.rank(seq.items[0]), ctx)
    if len(seq.items) == 1:
        return [seq.items[0]]
    return ctx.op("concatenate", list(seq.items), {"axis": axis})


@converter("SequenceMap")
def convert_sequence_map(ctx: Context, inputs):
    """Unrolled: the body runs once per element, with the elements of every sequence input at that
    position and the tensor inputs as they are."""
    body = graph_attr(ctx, "body")
    first = _sequence(ctx, inputs[0])
    n = len(first.items)
    for k, v in enumerate(inputs[1:], 1):
        if isinstance(v, TensorSequence) and len(v.items) != n:
            raise ctx.error(f"input {k} holds {len(v.items)} tensors and input 0 {n}; they must agree")
    collected: list[list] = [[] for _ in body.output]
    for i in range(n):
        bindings = [v.items[i] if isinstance(v, TensorSequence) else v for v in inputs]
        for k, out in enumerate(run_body(ctx, body, bindings, f"map{i}")):
            collected[k].append(out)
    declared = [_declared_elem_dtype(o) for o in body.output]
    return [TensorSequence(tuple(items), _elem_dtype(ctx, tuple(items), dt))
            for items, dt in zip(collected, declared)]


def _declared_elem_dtype(value_info) -> str | None:
    t = value_info.type
    while t.HasField("sequence_type") or t.HasField("optional_type"):
        t = t.sequence_type.elem_type if t.HasField("sequence_type") else t.optional_type.elem_type
    if t.HasField("tensor_type") and t.tensor_type.elem_type:
        return onnx_dtype(t.tensor_type.elem_type, f"output {value_info.name!r}")
    return None


@converter("Optional")
def convert_optional(ctx: Context, inputs):
    return [OptionalValue(inputs[0] if inputs and inputs[0] else None)]


@converter("OptionalHasElement")
def convert_optional_has_element(ctx: Context, inputs):
    value = inputs[0] if inputs else ""
    present = bool(value) and not (isinstance(value, OptionalValue) and value.value is None)
    return ctx.param(np.asarray(present), "has_element")


@converter("OptionalGetElement")
def convert_optional_get_element(ctx: Context, inputs):
    value = inputs[0]
    if isinstance(value, OptionalValue):
        if value.value is None:
            raise ctx.error("the optional is empty, so it has no element to get")
        return [value.value]
    return [value]  # a tensor or a sequence: itself (opset 18)
