"""Tensors and the operations that define them: ``placeholder`` and ``compute``.

A compute says *what* each element is, as an expression of its indices; *how* the loops run is the
schedule's business (``nnvm.te.schedule``).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir.visit import tensors_read

_name_counter = itertools.count()


def _shape(shape) -> tuple:
    if isinstance(shape, int | E.Expr):
        shape = (shape,)
    return tuple(E.convert(s) for s in shape)


class Operation:
    """Base of the operations producing tensors."""

    name: str

    def output(self, index: int = 0) -> Tensor:
        return self.outputs[index]

    @property
    def input_tensors(self) -> list[Tensor]:
        return []


@dataclass(eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple
    dtype: str
    outputs: list = field(default_factory=list)

    def __repr__(self) -> str:
        return f"placeholder({self.name})"


@dataclass(eq=False)
class ComputeOp(Operation):
    """``body[k]`` is the value of output ``k`` at ``axis``; bodies of a reduction are ``Reduce`` nodes."""

    name: str
    axis: tuple  # spatial IterVars
    reduce_axis: tuple
    body: tuple
    tag: str = ""
    attrs: dict = field(default_factory=dict)
    outputs: list = field(default_factory=list)

    @property
    def input_tensors(self) -> list[Tensor]:
        found: dict = {}
        for b in self.body:
            for t in tensors_read(b):
                found.setdefault(t, None)
        return list(found)

    def __repr__(self) -> str:
        return f"compute({self.name})"


@dataclass(eq=False)
class Tensor:
    """One output of an operation. Indexing builds a read: ``A[i, j]``."""

    op: Operation
    value_index: int
    shape: tuple
    dtype: str

    @property
    def name(self) -> str:
        if len(self.op.outputs) > 1:
            return f"{self.op.name}.v{self.value_index}"
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> E.TensorLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise Error(
                f"tensor {self.name} has {len(self.shape)} dimensions but was indexed with {len(indices)}"
            )
        return E.TensorLoad(self, tuple(E.convert(i) for i in indices), self.dtype)

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {[str(s) for s in self.shape]}, {self.dtype})"


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of the given shape and dtype."""
    if dtype not in E.ALL_DTYPES:
        raise Error(f"placeholder {name}: unknown dtype {dtype!r}; expected one of {', '.join(E.ALL_DTYPES)}")
    op = PlaceholderOp(name, _shape(shape), dtype)
    op.outputs = [Tensor(op, 0, op.shape, dtype)]
    return op.outputs[0]


def reduce_axis(dom, name: str = "rv") -> E.IterVar:
    """A reduction axis over ``dom``: a ``(min, end)`` pair or an extent."""
    if isinstance(dom, tuple):
        lo, hi = (E.convert(x) for x in dom)
        rng = E.Range(lo, hi - lo)
    else:
        rng = E.Range.from_extent(dom)
    return E.IterVar(rng, E.Var(name), E.IterKind.REDUCE)


def compute(shape, fcompute, name: str = "compute", tag: str = "", attrs: dict | None = None):
    """Define a tensor by a function of its indices. Returns one Tensor, or a tuple for tuple bodies."""
    shape = _shape(shape)
    sig = inspect.signature(fcompute)
    varargs = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    names = ([f"i{k}" for k in range(len(shape))] if varargs else
             [p.name for p in sig.parameters.values() if p.default is p.empty])
    if len(names) != len(shape):
        raise Error(f"compute {name}: the function takes {len(names)} indices but the shape has "
                    f"{len(shape)} dimensions")
    axis = tuple(E.IterVar(E.Range.from_extent(n), E.Var(nm), E.IterKind.DATA_PAR)
                 for nm, n in zip(names, shape))
    result = fcompute(*[iv.var for iv in axis])
    bodies = tuple(result) if isinstance(result, list | tuple) else (result,)
    bodies = tuple(E.convert(b) for b in bodies)
    reduce_axes: list = []
    for b in bodies:
        if isinstance(b, E.Reduce):
            for iv in b.axis:
                if iv not in reduce_axes:
                    reduce_axes.append(iv)
    if any(isinstance(b, E.Reduce) for b in bodies) and not all(isinstance(b, E.Reduce) for b in bodies):
        raise Error(f"compute {name}: a reduction must be the whole body, not part of an expression")
    op = ComputeOp(name, axis, tuple(reduce_axes), bodies, tag, dict(attrs or {}))
    op.outputs = [Tensor(op, k, shape, b.dtype) for k, b in enumerate(bodies)]
    return op.outputs[0] if len(bodies) == 1 else tuple(op.outputs)


# ---------------------------------------------------------------------------------------------------
# reductions


def comm_reducer(combine, identity, name: str = "reduce"):
    """A user-defined commutative reducer: ``combine(x, y)`` and ``identity(dtype) -> value``."""
    reducer = E.CommReducer(name, combine, lambda dt: E.const(identity(dt), dt)
                            if not isinstance(identity(dt), E.Expr) else identity(dt))

    def reduce(expr, axis, where=None, init=None):
        """Reduce ``expr`` over ``axis``; with two plain expressions, combine them elementwise."""
        if not isinstance(axis, E.IterVar | list | tuple):
            a, b = E._unify(expr, axis)
            return combine(a, b)
        expr = E.convert(expr)
        axes = tuple(axis) if isinstance(axis, list | tuple) else (axis,)
        return E.Reduce(reducer, expr, axes, None if where is None else E.convert(where), expr.dtype,
                        None if init is None else E.convert(init))

    reduce.reducer = reducer
    return reduce


sum = comm_reducer(lambda x, y: x + y, lambda dt: 0, name="sum")  # noqa: A001
max = comm_reducer(lambda x, y: E.binop("max", x, y), lambda dt: E.min_value(dt), name="max")  # noqa: A001
min = comm_reducer(lambda x, y: E.binop("min", x, y), lambda dt: E.max_value(dt), name="min")  # noqa: A001
prod = comm_reducer(lambda x, y: x * y, lambda dt: 1, name="prod")
