"""The loop program: statements over flat buffers, the output of lowering and input of code generators.

Thread binding (``For`` of kind ``thread_binding`` with a ``thread_tag``) and memory scopes (``Buffer.scope``
of ``shared``/``local``) are part of the program from the start, so GPU-style backends print the same
program the CPU backends compile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nnvm.tir.expr import Expr, Var
from nnvm.tir.printer import func_str, stmt_str


@dataclass(frozen=True, eq=False)
class Buffer:
    """A typed region of memory. ``shape`` is the logical shape; access is flat (row-major)."""

    name: str
    shape: tuple  # of Expr
    dtype: str
    scope: str = "global"  # global | shared | local

    def __repr__(self) -> str:
        return f"buffer({self.name}, {self.dtype}, {list(self.shape)}, {self.scope})"


class Stmt:
    def __repr__(self) -> str:
        return stmt_str(self)


class ForKind:
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    thread_tag: str = ""  # blockIdx.x, threadIdx.y, vthread, ... for THREAD_BINDING
    annotations: tuple = ()  # (key, value) pairs, e.g. pragmas


@dataclass(frozen=True, eq=False, repr=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr
    predicate: Expr | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """Storage for ``buffer`` (its scope says where), live for ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """An expression for its effect, e.g. the ``barrier`` intrinsic of shared memory."""

    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class AttrStmt(Stmt):
    """Annotates ``body`` with ``key = value`` (pragmas, storage alignment, double buffering)."""

    key: str
    value: Any
    body: Stmt


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A compiled unit: a loop program over parameter buffers. Buffers are passed by pointer; a function
    over symbolic shapes also takes its dims (``dims``: the variables in the parameters' shapes, each
    passed after the buffers as a pointer to its int64 value)."""

    name: str
    params: tuple  # of Buffer
    body: Stmt
    attrs: dict = field(default_factory=dict)

    @property
    def dims(self) -> tuple:
        return self.attrs.get("dims", ())

    def __repr__(self) -> str:
        return func_str(self)


def seq(*stmts) -> Stmt:
    """Flatten nested sequences and drop empty ones."""
    flat: list = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
