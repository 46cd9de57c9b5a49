"""Scalar and vector expressions shared by tensor expressions and the loop program.

One small family of immutable nodes: every transformation (simplifier, lowering, code generators)
pattern-matches on them. Binary arithmetic and comparisons are a single node type, ``BinOp``, whose
``op`` string names the operation, so a new pass handles all of them in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from nnvm.errors import Error
from nnvm.tir.printer import expr_str

# ---------------------------------------------------------------------------------------------------
# dtypes

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64")
UINT_DTYPES = ("uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + UINT_DTYPES + ("bool",)
INDEX_DTYPE = "int64"


@cache  # asked for every node a pass builds, of a handful of dtype strings
def split_lanes(dtype: str) -> tuple[str, int]:
    """'float32x8' -> ('float32', 8); 'int64' -> ('int64', 1)."""
    if "x" in dtype:
        base, lanes = dtype.rsplit("x", 1)
        return base, int(lanes)
    return dtype, 1


def with_lanes(dtype: str, lanes: int) -> str:
    base, _ = split_lanes(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


@cache
def is_float(dtype: str) -> bool:
    return split_lanes(dtype)[0] in FLOAT_DTYPES


@cache
def is_int(dtype: str) -> bool:
    return split_lanes(dtype)[0] in INT_DTYPES + UINT_DTYPES


@cache
def is_uint(dtype: str) -> bool:
    return split_lanes(dtype)[0] in UINT_DTYPES


@cache
def bits(dtype: str) -> int:
    base = split_lanes(dtype)[0]
    if base == "bool":
        return 1
    return int("".join(c for c in base if c.isdigit()))


def _promote(a: str, b: str) -> str:
    """Result dtype of arithmetic between two dtypes (numpy-like, ints win over nothing)."""
    if a == b:
        return a
    if is_float(a) and not is_float(b):
        return a
    if is_float(b) and not is_float(a):
        return b
    return a if bits(a) >= bits(b) else b


# ---------------------------------------------------------------------------------------------------
# nodes


class Expr:
    """Base class of every expression. Nodes compare by identity; ``==`` builds an ``eq`` node."""

    dtype: str

    # arithmetic ------------------------------------------------------------------------------------
    def __add__(self, other):
        return binop("add", self, other)

    def __radd__(self, other):
        return binop("add", other, self)

    def __sub__(self, other):
        return binop("sub", self, other)

    def __rsub__(self, other):
        return binop("sub", other, self)

    def __mul__(self, other):
        return binop("mul", self, other)

    def __rmul__(self, other):
        return binop("mul", other, self)

    def __truediv__(self, other):
        return binop("div", self, other)

    def __rtruediv__(self, other):
        return binop("div", other, self)

    def __floordiv__(self, other):
        return binop("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binop("floordiv", other, self)

    def __mod__(self, other):
        return binop("floormod", self, other)

    def __rmod__(self, other):
        return binop("floormod", other, self)

    def __neg__(self):
        return binop("sub", const(0, self.dtype), self)

    # comparisons -----------------------------------------------------------------------------------
    def __lt__(self, other):
        return binop("lt", self, other)

    def __le__(self, other):
        return binop("le", self, other)

    def __gt__(self, other):
        return binop("gt", self, other)

    def __ge__(self, other):
        return binop("ge", self, other)

    def __eq__(self, other):  # type: ignore[override]
        return binop("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        return binop("ne", self, other)

    def __and__(self, other):
        return binop("and", self, other)

    def __or__(self, other):
        return binop("or", self, other)

    def __invert__(self):
        return Call("not", (self,), "bool")

    __hash__ = object.__hash__

    def __bool__(self):
        raise Error(
            f"cannot use the symbolic expression {self} as a Python bool; "
            "use te.if_then_else / te.select for conditions"
        )

    def astype(self, dtype: str) -> Expr:
        return cast(dtype, self)

    def __repr__(self) -> str:
        return expr_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a loop index, a size, or a function parameter."""

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A literal. ``value`` is a Python int, float or bool matching ``dtype``."""

    value: Any
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    """``op`` is one of BINOPS; comparisons and logic produce bool."""

    op: str
    a: Expr
    b: Expr
    dtype: str

    def __bool__(self):
        # Lets `var in list` and dict look-ups work despite the symbolic `==`: identity decides.
        if self.op == "eq":
            return self.a is self.b
        if self.op == "ne":
            return self.a is not self.b
        return Expr.__bool__(self)


ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max", "pow", "fmod")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGIC_OPS = ("and", "or")
BINOPS = ARITH_OPS + COMPARE_OPS + LOGIC_OPS


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A pure intrinsic: exp, log, sqrt, rsqrt, tanh, sigmoid, erf, abs, floor, ceil, round, not, ..."""

    name: str
    args: tuple
    dtype: str


# ``if_then_else(cond, a, b)`` evaluates only the chosen branch (unlike Select), so a guarded read
# such as padding's ``if_then_else(in_bounds, A[i - 1], 0)`` never touches memory out of bounds.
LAZY_INTRINSICS = ("if_then_else",)

# Intrinsic math functions every backend must implement (for float dtypes unless noted).
MATH_INTRINSICS = (
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "floor", "ceil", "round",
    "sin", "cos", "not", "isnan", "trunc", "log2", "exp2", "sign", "exp_bounded",
)

# ``exp_bounded(x)`` is exp(x) for an x its producer knows to lie in this range (or to be NaN), where
# float32's exp is a normal number: a CPU backend then needs no clamps, no overflow or underflow handling
# and one 2**n scaling (softmax's ``x - max``, floored, is in [-87, 0]). Another x gives some number
# (never undefined behaviour: a select may discard it). Backends without a short form print exp.
EXP_BOUNDED_RANGE = (-87.3, 88.3)


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """Both branches may be evaluated; use only where both are safe (see IfThenElse for guards)."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Ramp(Expr):
    """The vector (base, base+stride, ..., base+(lanes-1)*stride)."""

    base: Expr
    stride: Expr
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(Expr):
    value: Expr
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Let(Expr):
    var: Var
    value: Expr
    body: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(Expr):
    """Read of a tensor element at multi-dimensional indices (tensor-expression level)."""

    tensor: Any  # nnvm.te.Tensor
    indices: tuple
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Load(Expr):
    """Read of a flat buffer at a (possibly vector) index (loop-program level)."""

    buffer: Any  # nnvm.tir.stmt.Buffer
    index: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class TensorIntrinCall(Expr):
    """A call of a backend's tensor intrinsic (``te.tensorize``) on regions of buffers.

    ``regions[k]`` is a ``Load`` of the first element of the intrinsic's k-th buffer (inputs, then the
    output): its *address* is passed, not its value. Keeping it a ``Load`` means every pass that looks
    for the buffers a statement uses (parallel outlining, substitution, simplification) sees them.
    ``strides[k]`` holds the element stride of each dimension of that buffer. ``intrin`` is the
    ``nnvm.te.tensorize.TensorIntrin`` (never rewritten). Used as ``Evaluate(TensorIntrinCall(...))``.
    """

    intrin: Any
    regions: tuple
    strides: tuple
    dtype: str = "int32"


@dataclass(frozen=True, eq=False)
class Range:
    """The half-open interval [min, min + extent)."""

    min: Expr
    extent: Expr

    @staticmethod
    def from_extent(extent) -> Range:
        return Range(const(0), convert(extent))

    def __repr__(self) -> str:
        return f"range(min={self.min}, ext={self.extent})"


class IterKind:
    """What kind of axis an IterVar is."""

    DATA_PAR = "data_par"
    REDUCE = "reduce"
    THREAD = "thread"
    OPAQUE = "opaque"


@dataclass(frozen=True, eq=False)
class IterVar:
    """An axis: a variable with its domain. Compute ops have spatial and reduce IterVars."""

    dom: Range | None
    var: Var
    kind: str = IterKind.DATA_PAR
    thread_tag: str = ""

    def __repr__(self) -> str:
        return f"iter_var({self.var.name}, {self.dom})"

    # IterVars are used directly in expressions (A[i, k]) as their variable.
    def _v(self):
        return self.var

    def __add__(self, o):
        return self.var + o

    def __radd__(self, o):
        return o + self.var

    def __sub__(self, o):
        return self.var - o

    def __rsub__(self, o):
        return o - self.var

    def __mul__(self, o):
        return self.var * o

    def __rmul__(self, o):
        return o * self.var

    def __floordiv__(self, o):
        return self.var // o

    def __mod__(self, o):
        return self.var % o

    def __lt__(self, o):
        return self.var < o

    def __le__(self, o):
        return self.var <= o

    def __gt__(self, o):
        return self.var > o

    def __ge__(self, o):
        return self.var >= o

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class CommReducer:
    """A commutative reduction: ``combine(x, y)`` and its identity per dtype."""

    name: str
    combine: Any  # Callable[[Expr, Expr], Expr]
    identity: Any  # Callable[[str], Expr]


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """A reduction of ``source`` over ``axis`` (IterVars of kind REDUCE), optionally masked."""

    combiner: CommReducer
    source: Expr
    axis: tuple
    condition: Expr | None
    dtype: str
    init: Expr | None = field(default=None)


# ---------------------------------------------------------------------------------------------------
# constructors


def const(value, dtype: str | None = None) -> Const:
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = INDEX_DTYPE
        else:
            dtype = "float32"
    base = split_lanes(dtype)[0]
    if base == "bool":
        value = bool(value)
    elif base in FLOAT_DTYPES:
        value = float(value)
    else:
        value = int(value)
    return Const(value, dtype)


def convert(value) -> Expr:
    """Python numbers, IterVars and symbolic dims to expressions; expressions pass through."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, bool | int | float):
        return const(value)
    to_expr = getattr(value, "__tir_expr__", None)  # a symbolic dim of the graph IR (graph.dims.Dim)
    if to_expr is not None:
        return to_expr()
    try:
        if isinstance(value, np.generic):
            return const(value.item(), str(value.dtype))
    except ImportError:  # pragma: no cover
        pass
    raise Error(f"cannot convert {value!r} of type {type(value).__name__} to an expression")


def _unify(a, b) -> tuple[Expr, Expr]:
    """Python literals take the other side's dtype, so `x * 2` stays float32 when x is."""
    a_lit = not isinstance(a, Expr | IterVar) and not hasattr(a, "__tir_expr__")
    b_lit = not isinstance(b, Expr | IterVar) and not hasattr(b, "__tir_expr__")
    if a_lit and not b_lit:
        b = convert(b)
        a = const(a, b.dtype if not isinstance(a, float) or is_float(b.dtype) else "float32")
    elif b_lit and not a_lit:
        a = convert(a)
        b = const(b, a.dtype if not isinstance(b, float) or is_float(a.dtype) else "float32")
    else:
        a, b = convert(a), convert(b)
    if a.dtype != b.dtype:
        dt = _promote(a.dtype, b.dtype)
        a = a if a.dtype == dt else Cast(dt, a)
        b = b if b.dtype == dt else Cast(dt, b)
    return a, b


def binop(op: str, a, b) -> Expr:
    a, b = _unify(a, b)
    if op in COMPARE_OPS or op in LOGIC_OPS:
        _, lanes = split_lanes(a.dtype)
        return BinOp(op, a, b, with_lanes("bool", lanes))
    return BinOp(op, a, b, a.dtype)


def cast(dtype: str, value) -> Expr:
    value = convert(value)
    if value.dtype == dtype:
        return value
    return Cast(dtype, value)


def call(name: str, *args, dtype: str | None = None) -> Expr:
    args = tuple(convert(a) for a in args)
    return Call(name, args, dtype or args[0].dtype)


def select(cond, true_value, false_value) -> Expr:
    t, f = _unify(true_value, false_value)
    return Select(convert(cond), t, f, t.dtype)


def if_then_else(cond, true_value, false_value) -> Expr:
    """``true_value`` where ``cond`` holds else ``false_value``; only the chosen side is evaluated."""
    t, f = _unify(true_value, false_value)
    return Call("if_then_else", (convert(cond), t, f), t.dtype)


def min_value(dtype: str) -> Const:
    base = split_lanes(dtype)[0]
    if base in FLOAT_DTYPES:
        return const(-math.inf, dtype)
    if base == "bool":
        return const(False, dtype)
    if base in UINT_DTYPES:
        return const(0, dtype)
    return const(-(2 ** (bits(dtype) - 1)), dtype)


def max_value(dtype: str) -> Const:
    base = split_lanes(dtype)[0]
    if base in FLOAT_DTYPES:
        return const(math.inf, dtype)
    if base == "bool":
        return const(True, dtype)
    if base in UINT_DTYPES:
        return const(2 ** bits(dtype) - 1, dtype)
    return const(2 ** (bits(dtype) - 1) - 1, dtype)
