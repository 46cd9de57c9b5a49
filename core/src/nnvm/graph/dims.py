"""Symbolic dims: a named integer unknown until run time, in the graph IR's shapes (docs/dynamic-shapes.md).

A ``Dim`` wraps a ``tir`` integer expression over dim variables (``seq``, ``batch * seq``, ``past + seq``),
kept simplified by the ``tir`` simplifier, so shape arithmetic is the loop program's arithmetic and a
kernel receives a dim as the very variable its loops run to. Unlike a ``tir`` expression, a ``Dim``
compares and hashes by structure (``==`` is a bool), so shapes holding dims compare as tuples of ints do.

A dim never pretends to be a number: ``int(d)``, ``range(d)`` or ``d < 5`` on a symbolic dim raise
``SymbolicDimError``, one sentence naming the dim, which the caller puts after the node it was working
on. That is how a pass or an operator that cannot handle a symbolic shape yet says so instead of
guessing a value. Arithmetic that simplifies to a constant gives a plain int.
"""

from __future__ import annotations

import ast
from functools import cache

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir.visit import walk


class SymbolicDimError(Error):
    """A symbolic dim reached something that needs its value at compile time."""


@cache
def dim_var(name: str) -> E.Var:
    """The one ``tir`` variable of the dim called ``name`` (int64): every shape and kernel using the
    dim ``seq`` shares it, and the run binds it once."""
    return E.Var(name, "int64")


# A dim's normal form: a polynomial with integer coefficients over atoms, a monomial being a sorted tuple
# of atom keys. An atom is a dim variable ("var", name) or a division the polynomial does not absorb
# ("floordiv"/"floormod", dividend's key, divisor's key), kept with its expression in ``atoms``. Two dims
# are equal exactly when their polynomials are, whatever order their arithmetic was written in.


def _poly(e: E.Expr, atoms: dict) -> dict:
    t = type(e)
    if t is E.Const:
        return {(): int(e.value)} if e.value else {}
    if t is E.Var:
        key = ("var", e.name)
        atoms[key] = e
        return {(key,): 1}
    if t is E.BinOp and e.op in ("add", "sub"):
        out = dict(_poly(e.a, atoms))
        sign = 1 if e.op == "add" else -1
        for mono, c in _poly(e.b, atoms).items():
            out[mono] = out.get(mono, 0) + sign * c
        return {m: c for m, c in out.items() if c}
    if t is E.BinOp and e.op == "mul":
        return _times(_poly(e.a, atoms), _poly(e.b, atoms))
    if t is E.BinOp and e.op in ("floordiv", "floormod"):
        a, b = _poly(e.a, atoms), _poly(e.b, atoms)
        if list(b) == [()] and b[()] > 0:
            c = b[()]
            if all(v % c == 0 for v in a.values()):  # exact: (64 * seq) // 16 is 4 * seq
                return {m: v // c for m, v in a.items()} if e.op == "floordiv" else {}
            if not a or list(a) == [()]:
                v = a.get((), 0)
                return {(): v // c if e.op == "floordiv" else v % c}
        if len(b) == 1:  # by one monomial c * m: exact when every term holds it
            (mb, c), = b.items()
            if c > 0 and all(v % c == 0 and _holds(ma, mb) for ma, v in a.items()):
                return {_without(ma, mb): v // c for ma, v in a.items()} if e.op == "floordiv" else {}
        if len(b) > 1:  # (64 * past + 64 * seq) // (32 * past + 32 * seq) is 2, and % is 0
            try:
                q = _exact_quotient(a, b)
            except TypeError:  # atoms of different kinds that do not order: no quotient found
                q = None
            if q is not None:
                return q if e.op == "floordiv" else {}
        key = (e.op, _poly_key(a), _poly_key(b))
        atoms[key] = E.binop(e.op, _expr(a, atoms), _expr(b, atoms))
        return {(key,): 1}
    raise Error(f"a dim must be built of dim names, integers and + - * // %, not {e}")


def _times(a: dict, b: dict) -> dict:
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            mono = tuple(sorted(ma + mb))
            out[mono] = out.get(mono, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def _exact_quotient(a: dict, b: dict) -> dict | None:
    """``a / b`` when polynomial ``b`` divides ``a`` exactly with integer coefficients, else None: long
    division by leading terms (degree, then atoms), the result checked by multiplying back."""
    def lead(p):
        return max(p, key=lambda m: (len(m), m))

    rest, q, lb = dict(a), {}, lead(b)
    for _ in range(64):
        if not rest:
            return q if _times(q, b) == {m: c for m, c in a.items() if c} else None
        la = lead(rest)
        if rest[la] % b[lb] or not _holds(la, lb):
            return None
        term = {_without(la, lb): rest[la] // b[lb]}
        q[_without(la, lb)] = q.get(_without(la, lb), 0) + rest[la] // b[lb]
        for m, c in _times(term, b).items():
            rest[m] = rest.get(m, 0) - c
        rest = {m: c for m, c in rest.items() if c}
    return None


def _holds(mono: tuple, factor: tuple) -> bool:
    rest = list(mono)
    for atom in factor:
        if atom not in rest:
            return False
        rest.remove(atom)
    return True


def _without(mono: tuple, factor: tuple) -> tuple:
    rest = list(mono)
    for atom in factor:
        rest.remove(atom)
    return tuple(rest)


def _poly_key(p: dict) -> tuple:
    return tuple(sorted(p.items()))


def _expr(p: dict, atoms: dict) -> E.Expr:
    """The polynomial as one canonical expression: monomials in key order, constant last."""
    out = None
    for mono, c in sorted(p.items(), key=lambda item: (item[0] == (), item[0])):
        term = None
        for atom in mono:
            term = atoms[atom] if term is None else term * atoms[atom]
        term = E.const(c, "int64") if term is None else term if c == 1 else term * c
        out = term if out is None else out + term
    return E.const(0, "int64") if out is None else out


class Dim:
    """A symbolic dim: see the module docstring. Build one with ``Dim.named("seq")`` or by arithmetic."""

    __slots__ = ("expr", "_key", "_names")

    def __init__(self, expr: E.Expr):
        atoms: dict = {}
        poly = _poly(expr, atoms)
        self.expr = _expr(poly, atoms)
        self._key = _poly_key(poly)

    def __tir_expr__(self) -> E.Expr:
        return self.expr

    @staticmethod
    def named(name: str) -> Dim:
        return Dim(dim_var(name))

    @property
    def names(self) -> tuple:
        """The dim variables' names, in order of first appearance (found once: plans evaluate dims often)."""
        try:
            return self._names
        except AttributeError:
            found: dict = {}
            walk(self.expr, lambda n: found.setdefault(n.name, None) if isinstance(n, E.Var) else None)
            self._names = tuple(found)
            return self._names

    def evaluate(self, values: dict) -> int:
        """The dim's value when each name has the value ``values[name]``."""
        missing = [n for n in self.names if n not in values]
        if missing:
            raise SymbolicDimError(f"the dim {self} needs {', '.join(missing)}, which nothing binds")
        return _evaluate(self.expr, values)

    # -- arithmetic: results simplified; a constant result is an int --------------------------------
    def _op(self, op: str, other, swap: bool = False):
        if isinstance(other, Dim):
            o = other.expr
        elif isinstance(other, int) and not isinstance(other, bool):
            o = E.const(int(other), "int64")
        else:
            try:
                o = E.const(int(other.__index__()), "int64")  # numpy integers
            except AttributeError:
                return NotImplemented
        a, b = (o, self.expr) if swap else (self.expr, o)
        return as_dim(E.binop(op, a, b))

    def __add__(self, o):
        return self._op("add", o)

    def __radd__(self, o):
        return self._op("add", o, True)

    def __sub__(self, o):
        return self._op("sub", o)

    def __rsub__(self, o):
        return self._op("sub", o, True)

    def __mul__(self, o):
        return self._op("mul", o)

    def __rmul__(self, o):
        return self._op("mul", o, True)

    def __floordiv__(self, o):
        return self._op("floordiv", o)

    def __rfloordiv__(self, o):
        return self._op("floordiv", o, True)

    def __mod__(self, o):
        return self._op("floormod", o)

    def __rmod__(self, o):
        return self._op("floormod", o, True)

    # -- comparison: structural; never a guess ------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Dim) and self._key == other._key

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def _no_value(self, what: str):
        raise SymbolicDimError(f"the symbolic dim {self} has no value at compile time ({what})")

    def __int__(self):
        self._no_value("int")

    def __index__(self):
        self._no_value("used as a number")

    def __bool__(self) -> bool:
        return True  # a dim is at least 1

    def __lt__(self, other):
        self._no_value(f"compared with {other}")

    __le__ = __gt__ = __ge__ = __lt__

    def __str__(self) -> str:
        return _text(self.expr)

    __repr__ = __str__  # in messages and attribute listings a dim reads as its text: (batch, seq, 64)


_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b}


def _evaluate(e, values: dict) -> int:
    if isinstance(e, E.Var):
        return int(values[e.name])
    if isinstance(e, E.Const):
        return int(e.value)
    return _EVAL[e.op](_evaluate(e.a, values), _evaluate(e.b, values))


def as_dim(e):
    """An expression over dim variables as an int (when it is a constant) or a ``Dim``."""
    d = Dim(e)
    return int(d.expr.value) if isinstance(d.expr, E.Const) else d


def is_symbolic(shape) -> bool:
    """Whether a shape holds a symbolic dim."""
    return any(isinstance(d, Dim) for d in shape)


def shape_exprs(shape) -> tuple:
    """A shape as ``tir`` extents (what ``te.placeholder`` takes): ints stay ints, dims their expressions."""
    return tuple(d.expr if isinstance(d, Dim) else int(d) for d in shape)


def from_extent(e):
    """A ``te`` tensor's extent back as a graph dim: an int, or a ``Dim``."""
    return as_dim(E.convert(e))


_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "floormod": "%"}
_PY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv", ast.Mod: "floormod"}


def _text(e) -> str:
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Const):
        return str(int(e.value))
    if isinstance(e, E.BinOp) and e.op in _OPS:
        return f"({_text(e.a)} {_OPS[e.op]} {_text(e.b)})"
    if isinstance(e, E.BinOp) and e.op in ("min", "max"):
        return f"{e.op}({_text(e.a)}, {_text(e.b)})"
    return str(e)


def parse_dim(text: str):
    """A dim from its text (``Dim.__str__``: names, integers, ``+ - * // %``), for reading a graph back."""
    def build(node):
        if isinstance(node, ast.Name):
            return Dim.named(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _PY:
            a, b = build(node.left), build(node.right)
            a = a if isinstance(a, Dim) else Dim(E.const(a, "int64"))
            return a._op(_PY[type(node.op)], b)
        raise Error(f"cannot read the dim {text!r}")

    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise Error(f"cannot read the dim {text!r}") from None
    return build(tree)


def dim_expression(dim: str) -> Dim | None:
    """The dim a name such as ``past + seq`` (an ONNX ``dim_param`` written as arithmetic of other dims,
    as exporters write an attention mask's length) stands for, or None for a plain name."""
    if dim.isidentifier() or not any(op in dim for op in "+-*/%"):
        return None
    try:
        expr = parse_dim(dim)
    except Error:
        return None
    return expr if isinstance(expr, Dim) and expr.names else None
