"""Sequences and optionals as the ONNX importer holds them: plain Python values over nnvm tensor values.

An nnvm graph holds tensors only; an ONNX sequence is resolved when importing into a ``TensorSequence``
(a tuple of nnvm tensor values) and an optional into an ``OptionalValue`` (a value or nothing). See
``convert_sequence`` for the operators and docs/dynamic-shapes.md ("ONNX sequences and optionals")
for the design.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnvm_frontend_onnx.context import Context, ValueDependentError


@dataclass(frozen=True)
class TensorSequence:
    """An ONNX sequence of tensors: their nnvm values, and the element type (for an empty sequence)."""

    items: tuple
    dtype: str | None = None


@dataclass(frozen=True)
class OptionalValue:
    """An ONNX optional: a tensor value, a ``TensorSequence``, or None when empty."""

    value: object = None


# Operators whose inputs may be sequences or optionals; any other operator takes tensors only.
CONTAINER_OPS = frozenset({
    "Identity", "If", "Loop", "SequenceConstruct", "SequenceEmpty", "SequenceLength", "SequenceAt",
    "SequenceInsert", "SequenceErase", "SequenceMap", "ConcatFromSequence", "Optional",
    "OptionalHasElement", "OptionalGetElement",
})


def is_container(value) -> bool:
    """Whether an environment value is a sequence or an optional rather than an nnvm tensor value."""
    return isinstance(value, TensorSequence | OptionalValue)


def flatten(value) -> list[str]:
    """The nnvm tensor values a sequence or optional holds, in order (a tensor value: itself)."""
    if isinstance(value, TensorSequence):
        return [v for item in value.items for v in flatten(item)]
    if isinstance(value, OptionalValue):
        return [] if value.value is None else flatten(value.value)
    return [value]


def regroup(template, arrays):
    """The arrays (an iterator, in ``flatten``'s order) in the shape of ``template``: a list for a
    sequence, None for an empty optional, an array for a tensor."""
    if isinstance(template, TensorSequence):
        return [regroup(item, arrays) for item in template.items]
    if isinstance(template, OptionalValue):
        return None if template.value is None else regroup(template.value, arrays)
    return next(arrays)


def merged(ctx: Context, flag: str, cond: str, a, b):
    """``where(flag, a, b)`` element by element for two branch results of the same structure; a
    difference in structure (sequence lengths, an empty optional) is a ``ValueDependentError`` on
    ``cond``, which the backend adapter specializes on."""
    def differ(what: str):
        return ValueDependentError(f"{ctx.label}: the branches give {what} and the condition is only known "
                                   f"at run time", cond)

    if isinstance(a, TensorSequence) or isinstance(b, TensorSequence):
        if not (isinstance(a, TensorSequence) and isinstance(b, TensorSequence)):
            raise differ("a sequence and a tensor")
        if len(a.items) != len(b.items):
            raise differ(f"sequences of {len(a.items)} and {len(b.items)} tensors")
        return TensorSequence(tuple(merged(ctx, flag, cond, x, y) for x, y in zip(a.items, b.items)),
                              a.dtype or b.dtype)
    if isinstance(a, OptionalValue) or isinstance(b, OptionalValue):
        if not (isinstance(a, OptionalValue) and isinstance(b, OptionalValue)):
            raise differ("an optional and a tensor")
        if (a.value is None) != (b.value is None):
            raise differ("an empty and a present optional")
        return a if a.value is None else OptionalValue(merged(ctx, flag, cond, a.value, b.value))
    if ctx.shape(a) != ctx.shape(b):
        raise ctx.error(f"the branches give outputs of different shapes {ctx.shape(a)} and {ctx.shape(b)} "
                        f"and the condition is only known at run time")
    return ctx.op("where", [flag, a, b])
