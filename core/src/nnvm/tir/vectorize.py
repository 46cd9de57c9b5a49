"""One vectorizer for every backend: a ``vectorized`` loop becomes one statement over vector values.

A loop ``for v in range(n): # vectorized`` with a constant extent whose body is straight-line stores
(no inner loops, no allocations, no branches but guards that are the same for every lane, such as a
pooling window's border test) becomes one statement over ``n`` lanes::

    for j in range(4):  # vectorized         B[ramp((i * 4), 1, 4)] = (A[ramp((i * 4), 1, 4)]
      B[((i * 4) + j)] = (A[((i * 4) + j)]  ->                           * x4(s[0]))
                          * s[0])

Index arithmetic stays a ``Ramp`` where it is affine in ``v`` (so loads and stores are contiguous or
strided); everything else is computed lane-wise, lane-invariant values broadcast. Loops the rewrite
declines (guards on the loop variable, inner loops, reductions into one element, a buffer read at
another index than it is written) are left as loops: vectorization is an optimization, never a
requirement for correctness.

What a backend can take is a ``VectorTarget``: the lane counts it has vector types for, the element
types of vector values, the math calls it has on vectors, whether a vector may be loaded or stored with
a stride other than 1 (a gather), and what a declined loop becomes. ``LLVM`` (every width, every type,
gathers; declined loops keep their mark for LLVM's loop vectorizer) serves the x86 and Arm code
generator; ``C_FAMILY`` (``float2``...``float16`` of float and double, contiguous accesses, the builtins
OpenCL, CUDA and Metal share; declined loops run serially) the GPU printers. A rewritten loop that uses
anything its target lacks is declined as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.printer import expr_str
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import free_vars, rewrite, walk


@dataclass(frozen=True)
class VectorTarget:
    """What one backend's vectors can be (``None``: anything)."""

    lanes: tuple | None = None  # lane counts with a vector type; None: 2 ... max_lanes
    max_lanes: int = 64
    dtypes: tuple | None = None  # element types of vector values
    calls: tuple | None = None  # intrinsics callable on vectors
    binops: tuple | None = None  # BinOp operators on vector values (index ramps aside)
    strided: bool = True  # loads and stores whose index is a ramp with a stride other than 1
    selects: bool = True  # select / if_then_else and lets over vectors
    declined: str = S.ForKind.VECTORIZED  # the loop kind of a loop left as a loop

    def allows_lanes(self, n: int) -> bool:
        return n in self.lanes if self.lanes is not None else 2 <= n <= self.max_lanes


LLVM = VectorTarget()
C_FAMILY = VectorTarget(
    lanes=(2, 3, 4, 8, 16),
    dtypes=("float32", "float64"),  # half vectors need extensions many drivers lack
    calls=("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "floor", "ceil", "round", "sin", "cos",
           "trunc", "log2", "exp2", "erf", "exp_bounded"),
    binops=("add", "sub", "mul", "div", "min", "max"),
    strided=False,
    selects=False,
    declined=S.ForKind.SERIAL,
)


class _Decline(Exception):
    """This loop is not straight-line vector code (for this target); keep it as a loop."""


def vectorize_loops(body: S.Stmt, target: VectorTarget = C_FAMILY) -> S.Stmt:
    """Rewrite every vectorizable ``vectorized`` loop of ``body`` (innermost first); the others become
    loops of ``target.declined`` kind. The default target is the C-family printers'."""

    def fn(node):
        if isinstance(node, S.For) and node.kind == S.ForKind.VECTORIZED:
            found = vectorize_loop(node, target)
            if found is not None:
                return found
            return replace(node, kind=target.declined) if target.declined != node.kind else None
        return None

    return rewrite(body, fn)


def vectorize_loop(loop: S.For, target: VectorTarget = C_FAMILY) -> S.Stmt | None:
    """The vector form of one loop, or None when it must stay a loop."""
    ext = simplify(loop.extent)
    if not isinstance(ext, E.Const) or not target.allows_lanes(int(ext.value)):
        return None
    try:
        _check_body(loop.var, loop.body)
        out = _Vectorizer(loop.var, simplify(loop.min), int(ext.value)).stmt(loop.body)
        if target is not LLVM:
            _check_target(out, target)
        return out
    except _Decline:
        return None


def _check_target(stmt: S.Stmt, target: VectorTarget) -> None:
    """Decline a rewritten loop that uses a vector form ``target`` lacks."""

    def index_ok(index) -> bool:
        if _lanes(index) == 1:
            return True
        return isinstance(index, E.Ramp) and (target.strided or (isinstance(index.stride, E.Const)
                                                                and index.stride.value == 1))

    def value(e) -> None:
        """A value expression (not an index): vectors of allowed types, through allowed operations."""
        if _lanes(e) == 1:
            return
        if target.dtypes is not None and E.split_lanes(e.dtype)[0] not in target.dtypes:
            raise _Decline
        if isinstance(e, E.Broadcast):
            return
        if isinstance(e, E.Load):
            if not index_ok(e.index):
                raise _Decline
            return
        if isinstance(e, E.BinOp):
            if target.binops is not None and e.op not in target.binops:
                raise _Decline
            value(e.a)
            value(e.b)
            return
        if isinstance(e, E.Call):
            if target.calls is not None and e.name not in target.calls:
                raise _Decline
            for a in e.args:
                value(a)
            return
        if isinstance(e, E.Cast):
            if not (E.is_float(e.dtype) and E.is_float(e.value.dtype)):
                raise _Decline
            value(e.value)
            return
        if isinstance(e, E.Select | E.Let | E.Var) and target.selects:
            return
        raise _Decline  # a ramp as a value, a select, a vector variable: no spelling on this target

    def fn(node):
        if isinstance(node, S.Store):
            if not index_ok(node.index) or (node.predicate is not None and _lanes(node.predicate) > 1):
                raise _Decline
            value(node.value)
        elif isinstance(node, S.LetStmt) and _lanes(node.value) > 1 and not target.selects:
            raise _Decline

    walk(stmt, fn)


def _check_body(var: E.Var, body: S.Stmt) -> None:
    """Straight-line stores only (under guards that do not read ``var``: the same for every lane, as
    a pooling window's border test), and a buffer both read and written only at one index."""
    indices: dict = {}
    stored: set = set()

    def fn(node):
        if isinstance(node, S.IfThenElse):
            if node.else_body is not None or var in free_vars(node.cond):
                raise _Decline
            return
        if isinstance(node, (S.For, S.Allocate, E.Ramp, E.Broadcast, E.Reduce, E.TensorLoad)):
            raise _Decline
        if isinstance(node, S.Evaluate):
            raise _Decline
        if isinstance(node, E.Call) and node.name in E.LAZY_INTRINSICS:
            for branch in node.args[1:]:
                walk(branch, _no_loads)
        if isinstance(node, S.Store):
            stored.add(node.buffer)
            indices.setdefault(node.buffer, set()).add(expr_str(node.index))
        if isinstance(node, E.Load):
            indices.setdefault(node.buffer, set()).add(expr_str(node.index))

    walk(body, fn)
    for buf in stored:
        if len(indices[buf]) != 1:
            raise _Decline


def _no_loads(node):
    if isinstance(node, E.Load):
        raise _Decline


def _lanes(e: E.Expr) -> int:
    return E.split_lanes(e.dtype)[1]


def _folded(op: str, a: E.Expr, b: E.Expr) -> E.Expr:
    """``a op b`` for a Ramp's base or stride, with the identities a lifted loop variable leaves (its
    start 0, its stride 1, another term's stride 0) folded away at once."""
    ca = a.value if isinstance(a, E.Const) else None
    cb = b.value if isinstance(b, E.Const) else None
    if ca is not None and cb is not None:
        return E.const({"add": ca + cb, "sub": ca - cb, "mul": ca * cb}[op], a.dtype)
    if op == "mul":
        if ca == 0 or cb == 0:
            return E.const(0, a.dtype)
        if ca == 1:
            return b
        if cb == 1:
            return a
    elif cb == 0:
        return a
    elif ca == 0 and op == "add":
        return b
    return E.BinOp(op, a, b, a.dtype)


class _Vectorizer:
    """Lifts the body of a loop over ``var`` (from ``start``, ``lanes`` iterations) to vectors."""

    def __init__(self, var: E.Var, start: E.Expr, lanes: int):
        self.var = var
        self.start = start
        self.lanes = lanes
        self.remap: dict = {}

    # -- statements -----------------------------------------------------------------------------
    def stmt(self, s: S.Stmt) -> S.Stmt:
        if isinstance(s, S.Seq):
            return S.seq(*(self.stmt(x) for x in s.stmts))
        if isinstance(s, S.AttrStmt):
            return replace(s, body=self.stmt(s.body))
        if isinstance(s, S.IfThenElse):  # a lane-invariant guard (``_check_body``): it stays scalar
            return replace(s, then_body=self.stmt(s.then_body))
        if isinstance(s, S.LetStmt):
            value = self.expr(s.value)
            return S.LetStmt(self.bind(s.var, value), value, self.stmt(s.body))
        if isinstance(s, S.Store):
            index = self.expr(s.index)
            if _lanes(index) == 1:
                raise _Decline  # every lane would write the same element (a reduction)
            value = self.broadcast(self.expr(s.value))
            pred = None if s.predicate is None else self.broadcast(self.expr(s.predicate))
            return S.Store(s.buffer, index, value, pred)
        raise _Decline

    def bind(self, var: E.Var, value: E.Expr) -> E.Var:
        """The variable a let binds ``value`` to: a vector-typed copy (used for every later read) when
        the value became a vector."""
        if _lanes(value) == 1:
            return var
        self.remap[var] = E.Var(var.name, value.dtype)
        return self.remap[var]

    # -- expressions ----------------------------------------------------------------------------
    def broadcast(self, e: E.Expr) -> E.Expr:
        if _lanes(e) > 1:
            return e
        if isinstance(e, E.Ramp):
            return e
        return E.Broadcast(e, self.lanes, E.with_lanes(e.dtype, self.lanes))

    def ramp(self, base: E.Expr, stride: E.Expr) -> E.Ramp:
        """A Ramp with its stride simplified (contiguity is read from it: a few terms, mostly constants
        ``_folded`` already). The base is left as built from the already simplified body (``_folded``
        drops the lifted variable's terms): simplifying it at every level of an index as it grew
        simplified the same terms again and again (two thirds of the vectorizer's time on five CNNs, for
        programs that came out the same)."""
        return E.Ramp(base, simplify(stride), self.lanes, E.with_lanes(base.dtype, self.lanes))

    def expr(self, e: E.Expr) -> E.Expr:
        if e is self.var:
            return self.ramp(self.start, E.const(1, e.dtype))
        if isinstance(e, E.Var):
            return self.remap.get(e, e)
        if isinstance(e, E.Const):
            return e
        if isinstance(e, E.BinOp):
            return self.binop(e)
        if isinstance(e, E.Load):
            index = self.expr(e.index)
            if index is e.index:
                return e
            return E.Load(e.buffer, index, E.with_lanes(e.dtype, self.lanes))
        if isinstance(e, E.Cast):
            value = self.expr(e.value)
            if value is e.value:
                return e
            return E.Cast(E.with_lanes(e.dtype, self.lanes), self.materialize(value))
        if isinstance(e, E.Call):
            args = tuple(self.expr(a) for a in e.args)
            if all(a is b for a, b in zip(args, e.args)):
                return e
            if e.name in E.LAZY_INTRINSICS:  # branches hold no loads (checked): a select is safe
                cond, t, f = (self.broadcast(a) for a in args)
                return E.Select(cond, t, f, E.with_lanes(e.dtype, self.lanes))
            args = tuple(self.broadcast(a) for a in args)
            return E.Call(e.name, args, E.with_lanes(e.dtype, self.lanes))
        if isinstance(e, E.Select):
            parts = [self.expr(x) for x in (e.cond, e.true_value, e.false_value)]
            if all(a is b for a, b in zip(parts, (e.cond, e.true_value, e.false_value))):
                return e
            cond, t, f = (self.broadcast(p) for p in parts)
            return E.Select(cond, t, f, E.with_lanes(e.dtype, self.lanes))
        if isinstance(e, E.Let):
            value = self.expr(e.value)
            var = self.bind(e.var, value)
            body = self.expr(e.body)
            if value is e.value and body is e.body:
                return e
            return E.Let(var, value, body, body.dtype)
        raise _Decline

    def materialize(self, e: E.Expr) -> E.Expr:
        """A Ramp is fine as an index; elsewhere it is just a vector value (the codegen builds it)."""
        return self.broadcast(e)

    def binop(self, e: E.BinOp) -> E.Expr:
        a, b = self.expr(e.a), self.expr(e.b)
        if a is e.a and b is e.b:
            return e
        ra, rb = isinstance(a, E.Ramp), isinstance(b, E.Ramp)
        sa, sb = _lanes(a) == 1, _lanes(b) == 1
        # Keep affine index arithmetic as a Ramp: that is what makes loads contiguous.
        if e.op in ("add", "sub") and (ra or sa) and (rb or sb) and E.is_int(e.dtype):
            base_a, stride_a = (a.base, a.stride) if ra else (a, E.const(0, a.dtype))
            base_b, stride_b = (b.base, b.stride) if rb else (b, E.const(0, b.dtype))
            return self.ramp(_folded(e.op, base_a, base_b), _folded(e.op, stride_a, stride_b))
        if e.op == "mul" and E.is_int(e.dtype) and ((ra and sb) or (sa and rb)):
            ramp, k = (a, b) if ra else (b, a)
            return self.ramp(_folded("mul", ramp.base, k), _folded("mul", ramp.stride, k))
        return E.BinOp(e.op, self.broadcast(a), self.broadcast(b), E.with_lanes(e.dtype, self.lanes))
