"""Vectorization in the loop program: a ``vectorized`` loop becomes one statement over vector values.

For backends that print source (OpenCL's ``float4``, CUDA's ``float4``, Metal's ``float4``) the
vector has to be in the program; the LLVM backend keeps its own vectorizer. The loop variable
becomes the vector ``ramp(min, 1, lanes)``; a load at an index with coefficient 1 in the variable
becomes a contiguous vector load, a load not depending on it a scalar broadcast to every lane, and
arithmetic and math on vectors stay element-wise::

    for j in range(4):  # vectorized         B[ramp((i * 4), 1, 4)] = (A[ramp((i * 4), 1, 4)]
      B[((i * 4) + j)] = (A[((i * 4) + j)]  ->                           * x4(s[0]))
                          * s[0])

A loop whose body is not a plain sequence of such stores (a nested loop, a condition on the
variable, a gather, a reduction into one element, a lane count no vector type has) stays a serial
loop with the same body: vectorization is an optimization, never a requirement for correctness.
"""

from __future__ import annotations

from dataclasses import replace

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import Simplifier, simplify
from nnvm.tir.visit import free_vars, rewrite, substitute

VECTOR_LANES = (2, 3, 4, 8, 16)  # the vector widths C-family languages have types for
VECTOR_DTYPES = ("float32", "float64")  # half vectors need extensions many drivers lack
VECTOR_CALLS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "floor", "ceil", "round",
                "sin", "cos", "trunc", "log2", "exp2", "erf")

_VECTOR_BINOPS = ("add", "sub", "mul", "div", "min", "max")


class _NotVectorizable(Exception):
    pass


def vectorize_loops(body: S.Stmt, lanes: tuple = VECTOR_LANES) -> S.Stmt:
    """Every ``vectorized`` loop of ``body`` as vector statements, or as a serial loop where it cannot be."""

    def fn(node):
        if isinstance(node, S.For) and node.kind == S.ForKind.VECTORIZED:
            return vectorize_loop(node, lanes) or replace(node, kind=S.ForKind.SERIAL)
        return None

    return rewrite(body, fn)


def vectorize_loop(loop: S.For, lanes: tuple = VECTOR_LANES) -> S.Stmt | None:
    """The loop as vector statements, or None when its body is not vectorizable."""
    ext, lo = simplify(loop.extent), simplify(loop.min)
    if not isinstance(ext, E.Const) or int(ext.value) not in lanes:
        return None
    try:
        return _Vectorizer(loop.var, lo, int(ext.value)).stmt(loop.body)
    except _NotVectorizable:
        return None


class _Vectorizer:
    def __init__(self, var: E.Var, lo, lanes: int):
        self.var, self.lo, self.lanes = var, lo, lanes
        self.simp = Simplifier()

    def stmt(self, s):
        if isinstance(s, S.Seq):
            return S.seq(*[self.stmt(x) for x in s.stmts])
        if isinstance(s, S.IfThenElse) and s.else_body is None and self.var not in free_vars(s.cond):
            return S.IfThenElse(s.cond, self.stmt(s.then_body), None)  # the same for every lane
        if isinstance(s, S.Store) and s.predicate is None:
            if self.var not in free_vars(s.index):
                raise _NotVectorizable  # every lane would write one element: a reduction
            base = self._contiguous_base(s.index)
            value = self.vec(s.value)
            return S.Store(s.buffer, self._ramp(base), value)
        raise _NotVectorizable

    def _contiguous_base(self, index):
        lin = self.simp.linear(index)
        if lin is None or lin.terms.get(self.var, 0) != 1:
            raise _NotVectorizable
        rest = [t for t, c in lin.terms.items() if t is not self.var and c != 0]
        if any(self.var in free_vars(t) for t in rest):
            raise _NotVectorizable
        return simplify(substitute(index, {self.var: self.lo}))

    def _ramp(self, base):
        return E.Ramp(base, E.const(1), self.lanes, E.with_lanes(E.INDEX_DTYPE, self.lanes))

    def _broadcast(self, e):
        return E.Broadcast(e, self.lanes, E.with_lanes(e.dtype, self.lanes))

    def vec(self, e):
        """``e`` as a vector of ``lanes`` values (scalars that do not vary are broadcast)."""
        if E.split_lanes(e.dtype)[0] not in VECTOR_DTYPES:
            raise _NotVectorizable
        if self.var not in free_vars(e):
            return self._broadcast(e)
        dt = E.with_lanes(e.dtype, self.lanes)
        if isinstance(e, E.Load):
            if E.split_lanes(e.dtype)[1] != 1:
                raise _NotVectorizable
            base = self._contiguous_base(e.index)
            return E.Load(e.buffer, self._ramp(base), dt)
        if isinstance(e, E.BinOp) and e.op in _VECTOR_BINOPS and E.is_float(e.dtype):
            return E.BinOp(e.op, self.vec(e.a), self.vec(e.b), dt)
        if isinstance(e, E.Call) and e.name in VECTOR_CALLS and E.is_float(e.dtype) and len(e.args) == 1:
            return E.Call(e.name, (self.vec(e.args[0]),), dt)
        if isinstance(e, E.Cast) and E.is_float(e.dtype) and E.is_float(e.value.dtype):
            return E.Cast(dt, self.vec(e.value))
        raise _NotVectorizable

