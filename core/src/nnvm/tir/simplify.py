"""Arithmetic simplification: constant folding, canonical linear forms, bound-aware div/mod/min/max.

Integer index arithmetic is put into a canonical sum ``c0 + c1*a1 + c2*a2 + ...`` over atoms (variables
and non-linear terms). With the ranges of loop variables known, ``(4*io + ii) // 4`` becomes ``io``
and ``(4*io + ii) % 4`` becomes ``ii`` when ``0 <= ii < 4``, which removes split guards and keeps the
index arithmetic of the generated code small.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import replace
from functools import cache, lru_cache

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.printer import expr_str
from nnvm.tir.visit import _child_names, _replaced, pure_key, rewrite

Interval = tuple  # (lo, hi) inclusive, ints or +-inf

# Constants are immutable leaves: the simplifier hands out one node per value and dtype (building them
# was a tenth of a large kernel's lowering)
_const = lru_cache(maxsize=8192, typed=True)(E.const)
_LEAVES = frozenset({E.Var, E.Const})


def _var_identity(v) -> tuple:
    return ("var", id(v))  # kept alive by the key memo

_LINEAR_OPS = frozenset({"add", "sub", "mul"})


@cache
def _is_index(dtype: str) -> bool:
    return E.is_int(dtype) and E.split_lanes(dtype)[1] == 1


def _c(e) -> int | float | bool | None:
    return e.value if isinstance(e, E.Const) else None


# ---------------------------------------------------------------------------------------------------
# linear forms over integer atoms


class Linear:
    """``const + sum(coef * atom)``; atoms are keyed by identity of their expression node (the
    simplifier interns pure atoms, so structurally equal ones are one node: ``Simplifier.atom``)."""

    __slots__ = ("const", "terms", "dtype")

    def __init__(self, dtype: str, const: int = 0, terms: dict | None = None):
        self.dtype = dtype
        self.const = const
        self.terms = terms or {}  # atom expr -> coef

    def scaled(self, k: int) -> Linear:
        return Linear(self.dtype, self.const * k, {a: c * k for a, c in self.terms.items()})

    def plus(self, other: Linear, sign: int = 1) -> Linear:
        terms = dict(self.terms)
        for a, c in other.terms.items():
            terms[a] = terms.get(a, 0) + sign * c
        return Linear(self.dtype, self.const + sign * other.const, {a: c for a, c in terms.items() if c})

    def to_expr(self) -> E.Expr:
        out = None
        # deterministic order: bigger coefficients (outer loops) first, then by name
        items = self.terms.items()
        if len(items) > 1:
            items = sorted(items, key=lambda kv: (-abs(kv[1]), _atom_key(kv[0])))
        for atom, coef in items:
            if coef == 1:
                term = atom
            elif coef == -1 and out is not None:
                out = E.BinOp("sub", out, atom, self.dtype)
                continue
            else:
                term = E.BinOp("mul", atom, _const(coef, self.dtype), self.dtype)
            out = term if out is None else E.BinOp("add", out, term, self.dtype)
        if out is None:
            return _const(self.const, self.dtype)
        if self.const > 0:
            out = E.BinOp("add", out, _const(self.const, self.dtype), self.dtype)
        elif self.const < 0:
            out = E.BinOp("sub", out, _const(-self.const, self.dtype), self.dtype)
        return out


_ATOM_TEXT = weakref.WeakKeyDictionary()  # non-variable atom -> its text: sorting printed it again per sum


def _atom_key(e) -> str:
    if isinstance(e, E.Var):
        return e.name
    text = _ATOM_TEXT.get(e)
    if text is None:
        text = _ATOM_TEXT[e] = repr(e)
    return text


def conditional_parts(e) -> tuple | None:
    """(condition, value if true, value if false) of a ``select`` or an ``if_then_else`` call, else None:
    the two spellings of a conditional value, for the passes that pick a side of one."""
    if isinstance(e, E.Select):
        return e.cond, e.true_value, e.false_value
    if isinstance(e, E.Call) and e.name == "if_then_else":
        return tuple(e.args)
    return None


class Simplifier:
    """Simplifies expressions given integer ranges of variables (``ranges``: Var -> (lo, hi))."""

    def __init__(self, ranges: dict | None = None):
        self.ranges: dict = dict(ranges or {})
        # id(node) -> (node, Linear): linear forms do not depend on ranges, and a bottom-up rewrite
        # asks for the form of every prefix of an index sum (quadratic without this). The node is
        # kept so its id is not reused.
        self._linear: dict = {}
        # id(node) -> (node, simplified) under the current ranges (a loop body gets a memo of its own):
        # an unrolled tile shares every subexpression its copies do not change, by identity, so
        # each is simplified once instead of once per copy
        self._simplified: dict = {}
        # structural key -> the one node standing for it as an atom of linear forms, and
        # id(node) -> (node, key): see ``atom``
        self._atoms: dict = {}
        self._keys: dict = {}

    # -- intervals ----------------------------------------------------------------------------------
    def bound(self, e) -> Interval:
        if isinstance(e, E.Const):
            return (e.value, e.value)
        if isinstance(e, E.Var):
            return self.ranges.get(e, (-math.inf, math.inf))
        if isinstance(e, E.BinOp) and _is_index(e.dtype):
            a, b = self.bound(e.a), self.bound(e.b)
            if e.op == "add":
                return (a[0] + b[0], a[1] + b[1])
            if e.op == "sub":
                return (a[0] - b[1], a[1] - b[0])
            if e.op == "mul":
                # 0 x inf is 0 here (a bound, not a limit): a loop over a symbolic extent, (0, inf),
                # times a constant stays non-negative
                cands = [0 if x == 0 or y == 0 else x * y for x in a for y in b]
                return (min(cands), max(cands))
            if e.op == "floordiv" and b[0] == b[1] and b[0] > 0:
                k = b[0]
                return tuple(x if math.isinf(x) else x // k for x in a)
            if e.op == "floormod" and b[0] == b[1] and b[0] > 0:
                if a[0] >= 0 and a[1] < b[0]:
                    return a
                return (0, b[0] - 1)
            if e.op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if e.op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, E.Select) and _is_index(e.dtype):
            a, b = self.bound(e.true_value), self.bound(e.false_value)
            return (min(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, E.Cast) and _is_index(e.dtype) and _is_index(e.value.dtype):
            return self.bound(e.value)
        return (-math.inf, math.inf)

    def linear(self, e) -> Linear | None:
        """The linear form of an integer expression (atoms for everything non-linear)."""
        hit = self._linear.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        lin = self._linear_form(e)
        self._linear[id(e)] = (e, lin)
        return lin

    def _linear_form(self, e) -> Linear | None:
        if not _is_index(e.dtype):
            return None
        if isinstance(e, E.Const):
            return Linear(e.dtype, int(e.value))
        if isinstance(e, E.BinOp):
            if e.op in ("add", "sub"):
                la, lb = self.linear(e.a), self.linear(e.b)
                return la.plus(lb, 1 if e.op == "add" else -1)
            if e.op == "mul":
                la, lb = self.linear(e.a), self.linear(e.b)
                if not lb.terms:
                    return la.scaled(lb.const)
                if not la.terms:
                    return lb.scaled(la.const)
        return Linear(e.dtype, 0, {self.atom(e): 1})

    def atom(self, e):
        """The one node standing for ``e``'s structure among atoms: ``(f // 56)*256 - (f // 56)*256``
        from two substitutions of one index is two equal nodes, which cancel only as one atom (a
        compute-at scratch index, 0 once simplified, was 40 instructions a tile element). Atoms
        with loads or calls stay keyed by identity."""
        key = self._key(e)
        if key is None:
            return e
        return self._atoms.setdefault(key, e)

    def _key(self, e):
        """A hashable structural key of a pure integer expression (vars by identity), else None."""
        return pure_key(e, _var_identity, self._keys)

    # -- expressions --------------------------------------------------------------------------------
    def expr(self, e):
        """``rewrite(e, self._node, self._chosen_side)``, remembering each subexpression's result."""
        if type(e) in _LEAVES:  # a third of the nodes: nothing to simplify, nothing worth remembering
            return e
        hit = self._simplified.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if type(e) is E.BinOp and e.op in _LINEAR_OPS and _is_index(e.dtype):
            out = self._sum(e)
            self._simplified[id(e)] = (e, out)
            return out
        out = self._chosen_side(e)
        if out is None:
            changes = None
            for name in _child_names(e):
                value = getattr(e, name)
                new = self._child(value)
                if new is not value:
                    if changes is None:
                        changes = {}
                    changes[name] = new
            node = _replaced(e, changes) if changes else e
            out = self._node(node)
            if out is None:
                out = node
        self._simplified[id(e)] = (e, out)
        return out

    def _sum(self, e):
        """An index sum (products by constants included) simplified as one: its atoms simplified, its
        linear form built once and rebuilt once. Rebuilding every prefix of ``a + b + c + ...`` on the way
        up, as a bottom-up rewrite does, made lowering quadratic in a sum's length."""
        lin = self._merge_divmod(self._chain(e))
        out = lin.to_expr()
        if isinstance(out, E.BinOp):  # its parent asks for its form next: the same terms, not re-derived
            self._linear[id(out)] = (out, lin)
        return out

    def _chain(self, e) -> Linear:
        """The linear form of the sums and products by constants under ``e``, everything else an atom
        (simplified first)."""
        if type(e) is E.BinOp and e.op in _LINEAR_OPS and _is_index(e.dtype):
            la, lb = self._chain(e.a), self._chain(e.b)
            if e.op == "add":
                return la.plus(lb)
            if e.op == "sub":
                return la.plus(lb, -1)
            if not lb.terms:
                return la.scaled(lb.const)
            if not la.terms:
                return lb.scaled(la.const)
            return self.linear(E.BinOp("mul", la.to_expr(), lb.to_expr(), e.dtype))  # an atom
        return self.linear(self.expr(e))

    def _child(self, value):
        if isinstance(value, E.Expr):
            return self.expr(value)
        if isinstance(value, tuple):
            new = tuple([self._child(v) for v in value])
            return new if any(a is not b for a, b in zip(new, value)) else value
        if isinstance(value, S.Stmt):
            return _rewrite_expr(value, self._node, self._chosen_side)
        return value

    def _chosen_side(self, e):
        """The simplified side of an ``if_then_else`` or ``select`` whose condition simplifies to a
        constant, found before either side is simplified: a channel concatenation of k inputs unrolled
        over its channel blocks is k nested ones per block, and Winograd's transforms pick their
        matrix row by a chain of selects on the unrolled tile index; simplifying every side of each
        cost seconds a kernel (ResNet-18's eight Winograd kernels: 7 of its 11 s to compile)."""
        parts = conditional_parts(e)
        if parts is None:
            return None
        c = self.expr(parts[0])
        if isinstance(c, E.Const):
            return self.expr(parts[1] if c.value else parts[2])
        return None

    def _node(self, e):
        if isinstance(e, E.BinOp):
            return self._binop(e)
        if isinstance(e, E.Cast):
            v = e.value
            if isinstance(v, E.Const):
                return _const(v.value, e.dtype) if E.split_lanes(e.dtype)[1] == 1 else None
            if v.dtype == e.dtype:
                return v
            if E.is_float(e.dtype) and E.is_int(v.dtype):
                return _float_of_int(v, e.dtype)
        if isinstance(e, E.Select):
            c = _c(e.cond)
            if c is not None:
                return e.true_value if c else e.false_value
            if e.true_value is e.false_value:
                return e.true_value
        if isinstance(e, E.Call) and e.name == "if_then_else" and isinstance(e.args[0], E.Const):
            return e.args[1] if e.args[0].value else e.args[2]
        if isinstance(e, E.Call) and e.name == "not" and isinstance(e.args[0], E.Const):
            return _const(not e.args[0].value, e.dtype)
        return None

    def _binop(self, e: E.BinOp):
        a, b, op, dt = e.a, e.b, e.op, e.dtype
        ca, cb = _c(a), _c(b)
        if ca is not None and cb is not None and E.split_lanes(dt)[1] == 1:
            folded = _fold(op, ca, cb, a.dtype)
            if folded is not None:
                return _const(folded, dt)
        if op in ("and", "or"):
            for x, y in ((a, b), (b, a)):
                cx = _c(x)
                if cx is not None:
                    if op == "and":
                        return y if cx else _const(False, dt)
                    return _const(True, dt) if cx else y
            return None
        if not _is_index(a.dtype):
            return self._float_identities(e, ca, cb)
        if op in ("add", "sub", "mul"):
            lin = self._merge_divmod(self.linear(e))
            out = lin.to_expr()
            if isinstance(out, E.BinOp):  # its parent asks for its form next: the same terms, not re-derived
                self._linear[id(out)] = (out, lin)
            return out
        if op in ("floordiv", "floormod") and cb is not None and cb > 0:
            return self._divmod(op, a, int(cb), dt)
        if op in ("min", "max"):
            diff = self.linear(E.BinOp("sub", a, b, a.dtype))
            if diff is not None and not diff.terms:  # a and b differ by a constant (min(x, x) from a union)
                return a if (diff.const <= 0) == (op == "min") else b
            ba, bb = self.bound(a), self.bound(b)
            if op == "min":
                if ba[1] <= bb[0]:
                    return a
                if bb[1] <= ba[0]:
                    return b
            else:
                if ba[0] >= bb[1]:
                    return a
                if bb[0] >= ba[1]:
                    return b
            return None
        if op in E.COMPARE_OPS:
            diff = self.linear(E.BinOp("sub", a, b, a.dtype))
            lo, hi = self.bound(diff.to_expr())
            truth = {
                "lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[op]
            if truth[0]:
                return _const(True, dt)
            if truth[1]:
                return _const(False, dt)
        return None

    def _merge_divmod(self, lin: Linear) -> Linear:
        """c*k*(x // k) + c*(x % k) -> c*x: what lowering a fused loop produces; again while a merge
        exposes another (``x`` itself a pair of a fused loop's divisions). A symbolic ``k`` (a dim) too:
        c*((x // S) * S) + c*(x % S) -> c*x."""
        while True:
            merged = self._merge_divmod_once(lin)
            if merged is lin:
                return lin
            lin = merged

    def _merge_divmod_once(self, lin: Linear) -> Linear:
        divs = {}
        for atom, coef in lin.terms.items():
            if isinstance(atom, E.BinOp) and atom.op == "floordiv" and isinstance(atom.b, E.Const):
                divs[(self._dividend_key(atom.a), atom.b.value)] = (atom, coef)
            elif isinstance(atom, E.BinOp) and atom.op == "mul":  # (x // S) * S, S symbolic (a dim)
                for q, d in ((atom.a, atom.b), (atom.b, atom.a)):
                    if (isinstance(q, E.BinOp) and q.op == "floordiv" and not isinstance(q.b, E.Const)
                            and self._dividend_key(q.b) == self._dividend_key(d)):
                        divs[(self._dividend_key(q.a), self._dividend_key(d))] = (atom, coef)
        if not divs:
            return lin
        for atom, coef in list(lin.terms.items()):
            if isinstance(atom, E.BinOp) and atom.op == "floormod":
                k = atom.b.value if isinstance(atom.b, E.Const) else None
                key = (self._dividend_key(atom.a), k if k is not None else self._dividend_key(atom.b))
                match = divs.get(key)
                inner = atom.a
                if (match is None and k is not None and isinstance(inner, E.BinOp) and inner.op == "floordiv"
                        and isinstance(inner.b, E.Const) and inner.b.value > 0 and k > 0):
                    # (x // m) % k beside (x // (m * k)) * k: the simplifier has already written
                    # (x // m) // k as x // (m * k) (three fused axes, ConvNeXt's [1, 56, 56] rows)
                    match = divs.get((self._dividend_key(inner.a), inner.b.value * k))
                if match and match[0] in lin.terms and lin.terms[match[0]] == coef * (k or 1):
                    terms = {a: c for a, c in lin.terms.items() if a is not atom and a is not match[0]}
                    lin = Linear(lin.dtype, lin.const, terms).plus(self.linear(atom.a).scaled(coef))
        return lin

    def _dividend_key(self, e):
        """What makes two dividends the same for ``_merge_divmod``: the structure, or the text of an
        impure one (printing every dividend was a tenth of NASNet's lowering)."""
        key = self._key(e)
        if key is not None:
            return key
        return expr_str(e)

    def _divmod(self, op: str, a, k: int, dt: str):
        if k == 1:
            return a if op == "floordiv" else _const(0, dt)
        lin = self.linear(a)
        # Pull out the part divisible by k; the rest decides whether the result is exact.
        whole = Linear(dt, (lin.const // k) * k, {t: c for t, c in lin.terms.items() if c % k == 0})
        rest = lin.plus(whole, -1)
        rest_expr = rest.to_expr()
        lo, hi = self.bound(rest_expr)
        if 0 <= lo and hi < k:
            if op == "floordiv":
                return Linear(dt, whole.const // k, {t: c // k for t, c in whole.terms.items()}).to_expr()
            return rest_expr
        factored = self._factored_divmod(op, lin, k, dt)
        if factored is not None:
            return factored
        if whole.terms or whole.const:
            # (k*w + r) // k == w + r // k and (k*w + r) % k == r % k for floor semantics
            if op == "floormod":
                return E.BinOp("floormod", rest_expr, _const(k, dt), dt)
            quotient = Linear(dt, whole.const // k, {t: c // k for t, c in whole.terms.items()})
            return quotient.plus(self.linear(E.BinOp("floordiv", rest_expr, _const(k, dt), dt))).to_expr()
        la = self.bound(a)
        if op == "floordiv" and la[0] >= 0 and la[1] < k:
            return _const(0, dt)
        if op == "floormod" and la[0] >= 0 and la[1] < k:
            return a
        return None

    def _factored_divmod(self, op: str, lin: Linear, k: int, dt: str):
        """(c*x + r) // k == x // (k/c) and (c*x + r) % k == c*(x % (k/c)) + r when c divides k and
        0 <= r < c. A slice of a flattened tensor read through a reshape: ViT's query is rows of 64
        at a stride of 12608 inside [3 x 8 x 3 x 197 x 64], so its copy's index divided
        ``(12608*f + 64*i + j) // 37824`` with the vectorized ``j`` inside: a gather, not a vector load."""
        for c in sorted({v for v in lin.terms.values() if 1 < v < k and k % v == 0}, reverse=True):
            rest = Linear(dt, lin.const % c, {t: v for t, v in lin.terms.items() if v % c})
            lo, hi = self.bound(rest.to_expr())
            if not (0 <= lo and hi < c):
                continue
            x = Linear(dt, lin.const // c, {t: v // c for t, v in lin.terms.items() if v % c == 0}).to_expr()
            m = k // c
            q = self._divmod(op, x, m, dt)
            if q is None:
                q = E.BinOp(op, x, _const(m, dt), dt)
            return q if op == "floordiv" else self.linear(q).scaled(c).plus(rest).to_expr()
        return None

    def _float_identities(self, e, ca, cb):
        op, a, b = e.op, e.a, e.b
        if op == "add":
            if cb == 0:
                return a
            if ca == 0:
                return b
        if op == "sub" and cb == 0:
            return a
        if op == "mul":
            if cb == 1:
                return a
            if ca == 1:
                return b
        if op == "div" and cb == 1:
            return a
        return None

    # -- statements ---------------------------------------------------------------------------------
    def _in_loop(self, s, visit):
        """(min, extent, ``visit(body)``) of loop ``s``, simplified, with its variable's range set while
        ``visit`` runs; the visit is None for a loop of no iterations."""
        mn, ext = self.expr(s.min), self.expr(s.extent)
        if isinstance(ext, E.Const) and ext.value <= 0:
            return mn, ext, None
        lo, hi = self.bound(mn), self.bound(ext)
        saved = self.ranges.get(s.var)
        self.ranges[s.var] = (lo[0], lo[1] + hi[1] - 1)
        outer_memo, self._simplified = self._simplified, {}
        try:
            return mn, ext, visit(s.body)
        finally:
            self._simplified = outer_memo
            if saved is None:
                self.ranges.pop(s.var, None)
            else:
                self.ranges[s.var] = saved

    def stmt(self, s):
        if isinstance(s, S.For):
            mn, ext, body = self._in_loop(s, self.stmt)
            if body is None:
                return None
            return replace(s, min=mn, extent=ext, body=body)
        if isinstance(s, S.Seq):
            parts = [self.stmt(x) for x in s.stmts]
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
            return S.seq(*parts)
        if isinstance(s, S.IfThenElse):
            cond = self.expr(s.cond)
            c = _c(cond)
            if c is True:
                return self.stmt(s.then_body)
            if c is False:
                return self.stmt(s.else_body) if s.else_body is not None else None
            then = self.stmt(s.then_body)
            other = self.stmt(s.else_body) if s.else_body is not None else None
            if then is None and other is None:
                return None
            if then is None:
                return S.IfThenElse(E.Call("not", (cond,), "bool"), other, None)
            return S.IfThenElse(cond, then, other)
        if isinstance(s, S.Store):
            pred = self.expr(s.predicate) if s.predicate is not None else None
            return S.Store(s.buffer, self.expr(s.index), self.expr(s.value), pred)
        if isinstance(s, S.Allocate):
            body = self.stmt(s.body)
            return None if body is None else replace(s, body=body)
        if isinstance(s, S.LetStmt):
            body = self.stmt(s.body)
            return None if body is None else S.LetStmt(s.var, self.expr(s.value), body)
        if isinstance(s, S.AttrStmt):
            body = self.stmt(s.body)
            return None if body is None else replace(s, body=body)
        if isinstance(s, S.Evaluate):
            return S.Evaluate(self.expr(s.value))
        return s

    def does_nothing(self, s) -> bool:
        """Whether ``stmt(s)`` would be None (nothing runs), found by simplifying only loop bounds and
        guard conditions: loop partitioning asks it of a whole unrolled tile body per split loop."""
        if isinstance(s, S.For):
            _, _, runs = self._in_loop(s, lambda body: not self.does_nothing(body))
            return not runs  # None: no iterations
        if isinstance(s, S.Seq):
            return all(self.does_nothing(x) for x in s.stmts)
        if isinstance(s, S.IfThenElse):
            c = _c(self.expr(s.cond))
            if c is True:
                return self.does_nothing(s.then_body)
            other = s.else_body is None or self.does_nothing(s.else_body)
            return other if c is False else other and self.does_nothing(s.then_body)
        if isinstance(s, (S.Allocate, S.LetStmt, S.AttrStmt)):
            return self.does_nothing(s.body)
        return False


# ---------------------------------------------------------------------------------------------------
# integers that came from floats: a quantize -> dequantize round trip inside one kernel

EXACT_FLOAT_INT = 2 ** 24  # float32 holds every integer up to this magnitude exactly


def _float_range(e) -> Interval:
    """Bounds of float ``e`` from its clamps by constants (``min``/``max`` with a constant)."""
    if isinstance(e, E.Const):
        return (e.value, e.value)
    if isinstance(e, E.BinOp) and e.op in ("min", "max"):
        a, b = _float_range(e.a), _float_range(e.b)
        pick = min if e.op == "min" else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    return (-math.inf, math.inf)


def _int_range(e) -> Interval:
    """Bounds of integer ``e`` from its type and the integers it came from, else its dtype's range."""
    lo, hi = E.min_value(e.dtype).value, E.max_value(e.dtype).value
    if isinstance(e, E.Cast) and E.is_int(e.value.dtype):
        inner = _int_range(e.value)
        if lo <= inner[0] and inner[1] <= hi:  # a widening: the value is unchanged
            return inner
    if isinstance(e, E.Cast) and E.is_float(e.value.dtype):
        inner = _integral_range(e.value)
        if inner is not None and lo <= inner[0] and inner[1] <= hi:
            return inner
    return (lo, hi)


def _integral_range(e) -> Interval | None:
    """(lo, hi) where float ``e`` is known to hold an integer in [lo, hi], within ``EXACT_FLOAT_INT``
    (so float32 holds each exactly): a rounding of a value clamped by constants, an integer constant, an
    integer cast to float, or sums of them. None: not known."""
    if isinstance(e, E.Const):
        r = (e.value, e.value) if float(e.value).is_integer() else None
    elif isinstance(e, E.Call) and e.name in ("round", "floor", "ceil", "trunc"):
        lo, hi = _float_range(e.args[0])
        r = (math.floor(lo), math.ceil(hi)) if not (math.isinf(lo) or math.isinf(hi)) else None
    elif isinstance(e, E.BinOp) and e.op in ("add", "sub"):
        a, b = _integral_range(e.a), _integral_range(e.b)
        if a is None or b is None:
            return None
        r = (a[0] + b[0], a[1] + b[1]) if e.op == "add" else (a[0] - b[1], a[1] - b[0])
    elif isinstance(e, E.Cast) and E.is_int(e.value.dtype):
        r = _int_range(e.value)
    else:
        return None
    return r if r is not None and -EXACT_FLOAT_INT <= r[0] and r[1] <= EXACT_FLOAT_INT else None


def _holds(dtype: str, r: Interval) -> bool:
    return E.min_value(dtype).value <= r[0] and r[1] <= E.max_value(dtype).value


def _float_of_int(i, dtype: str):
    """``dtype(i)`` without the conversions, where integer ``i`` is a float cast to an integer type that
    holds it, widened and shifted by constants: ``float32(int32(uint8(round(clamp(v)) + 143.0)) - 143)``
    (a requantize to uint8 read back by a dequantize in the same kernel) is ``round(clamp(v))``, exactly:
    every value on the way is an integer float32 holds. LLVM keeps the four vector instructions an
    element (add, truncating convert, integer add, convert back). None: not such a value. (A NaN, or a
    value outside the integer type, made the cast undefined; a NaN stays NaN here.)"""
    if dtype not in ("float32", "float64"):
        return None
    steps = []  # (the add's dtype, its constant), outermost first
    while isinstance(i, E.BinOp) and i.op in ("add", "sub") and isinstance(i.b, E.Const):
        steps.append((i.dtype, i.b.value if i.op == "add" else -i.b.value))
        i = i.a
    while isinstance(i, E.Cast) and E.is_int(i.value.dtype) and _holds(i.dtype, _int_range(i.value)):
        i = i.value  # a widening: the value is unchanged
    if not (isinstance(i, E.Cast) and i.value.dtype == dtype):
        return None
    f = i.value
    r = _integral_range(f)
    if r is None or not _holds(i.dtype, r):
        return None
    lo, hi = r
    for op_dtype, c in reversed(steps):  # no add may wrap around, every sum stays exact in float
        lo, hi = lo + c, hi + c
        if not _holds(op_dtype, (lo, hi)) or max(-lo, hi) > EXACT_FLOAT_INT:
            return None
    shift = sum(c for _, c in steps)
    if isinstance(f, E.BinOp) and f.op == "add" and isinstance(f.b, E.Const) \
            and _integral_range(f.a) is not None:  # the zero point the requantize added, taken off again
        shift += f.b.value
        f = f.a
    return f if shift == 0 else E.BinOp("add", f, _const(float(shift), dtype), dtype)


def _rewrite_expr(e, fn, pre=None):
    return rewrite(e, fn, pre)


def _fold(op: str, a, b, dtype: str):
    try:
        if op == "add":
            r = a + b
        elif op == "sub":
            r = a - b
        elif op == "mul":
            r = a * b
        elif op == "div":
            if E.is_float(dtype):
                r = a / b if b != 0 else None
            else:
                # C semantics: truncation toward zero, in exact integer arithmetic
                r = None if b == 0 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1)
        elif op == "floordiv":
            r = None if b == 0 else (a // b if not E.is_float(dtype) else math.floor(a / b))
        elif op == "floormod":
            r = None if b == 0 else a % b
        elif op == "min":
            r = min(a, b)
        elif op == "max":
            r = max(a, b)
        elif op == "eq":
            r = a == b
        elif op == "ne":
            r = a != b
        elif op == "lt":
            r = a < b
        elif op == "le":
            r = a <= b
        elif op == "gt":
            r = a > b
        elif op == "ge":
            r = a >= b
        elif op == "and":
            r = bool(a) and bool(b)
        elif op == "or":
            r = bool(a) or bool(b)
        else:
            return None
    except (OverflowError, ZeroDivisionError, ValueError):
        return None
    if r is not None and E.is_int(dtype) and not isinstance(r, bool):
        lo, hi = E.min_value(dtype).value, E.max_value(dtype).value
        if not lo <= r <= hi:
            return None  # leave overflow to the target's wrap-around semantics
    return r


def simplify(node, ranges: dict | None = None):
    """Simplify an expression or a statement (loop variables get their ranges from the loops)."""
    simp = Simplifier(ranges)
    if isinstance(node, E.Expr):
        return simp.expr(node)
    out = simp.stmt(node)
    return out if out is not None else S.Seq(())
