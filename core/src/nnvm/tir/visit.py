"""Generic traversal of expressions and statements: one rewrite engine for every pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from nnvm.tir.expr import BinOp, Cast, Const, Expr, TensorLoad, Var
from nnvm.tir.stmt import Stmt

# Fields that hold references rather than children: never descended into.
_OPAQUE_FIELDS = {"buffer", "tensor", "combiner", "axis"}
# Fields declared as these types hold no children (dtype, op, name, lanes, kind, ...).
_SCALAR_TYPES = {"str", "int", "bool", str, int, bool}


_CHILD_NAMES: dict = {}  # node class -> names of its child fields (dataclasses.fields is slow per node)


def _child_names(node) -> tuple:
    names = _CHILD_NAMES.get(type(node))
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node)
                      if f.name not in _OPAQUE_FIELDS and f.type not in _SCALAR_TYPES)
        _CHILD_NAMES[type(node)] = names
    return names


_NODE_TYPES = (Expr, Stmt)  # a tuple: ``Expr | Stmt`` in isinstance builds a union object every call


def _rewrite_value(value, fn, pre=None):
    if isinstance(value, _NODE_TYPES):
        return rewrite(value, fn, pre)
    if isinstance(value, tuple):
        new = tuple([_rewrite_value(v, fn, pre) for v in value])
        for a, b in zip(new, value):
            if a is not b:
                return new
    return value


def rewrite(node, fn: Callable, pre: Callable | None = None):
    """Post-order rewrite: children first, then ``fn(node)``; ``fn`` returns a replacement or None.

    ``pre(node)``, when given, is asked first: a result other than None replaces the whole subtree
    without visiting it (the simplifier picks the side of an ``if_then_else`` whose condition is
    constant before simplifying both). Unchanged subtrees keep their identity, so callers can detect
    "nothing happened" by ``is``.
    """
    if pre is not None:
        early = pre(node)
        if early is not None:
            return early
    changes = None
    for name in _child_names(node):
        value = getattr(node, name)
        new = _rewrite_value(value, fn, pre)
        if new is not value:
            if changes is None:
                changes = {}
            changes[name] = new
    if changes:
        node = _replaced(node, changes)
    out = fn(node)
    return node if out is None else out


def _replaced(node, changes: dict):
    """``dataclasses.replace(node, **changes)`` without running ``__init__`` again: the node classes are
    plain frozen dataclasses (no ``__post_init__``, no ``init=False`` fields), and ``replace`` was a
    tenth of a model's lowering time."""
    new = object.__new__(type(node))
    fields = new.__dict__
    fields.update(node.__dict__)
    fields.update(changes)
    return new


def walk(node, fn: Callable) -> None:
    """Call ``fn`` on every expression and statement below ``node`` (pre-order)."""
    fn(node)
    for name in _child_names(node):
        _walk_value(getattr(node, name), fn)


def _walk_value(value, fn):
    if isinstance(value, _NODE_TYPES):
        walk(value, fn)
    elif isinstance(value, tuple):
        for v in value:
            _walk_value(v, fn)


def substitute(node, vmap: dict):
    """Replace variables by expressions (``vmap`` maps Var -> Expr)."""
    if not vmap:
        return node

    def fn(n):
        if isinstance(n, Var):
            return vmap.get(n)
        return None

    return rewrite(node, fn)


def pure_key(e, var_key: Callable, memo: dict, dtypes=None):
    """A hashable structural key of ``e`` if it is built of variables, constants, binary operations and
    casts only (``dtypes``, when given, limits the operations' and casts' dtypes), else None. Variables
    are keyed by ``var_key(var)`` (None: not pure); a Var itself never goes in a key, since its ``==``
    builds a node. ``memo`` (id -> (node, key)) remembers each node's key and keeps the node alive."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    t = type(e)
    key = None
    if t is Var:
        key = var_key(e)
    elif t is Const:
        key = (e.value, e.dtype)
    elif t is BinOp and (dtypes is None or e.dtype in dtypes):
        a = pure_key(e.a, var_key, memo, dtypes)
        b = pure_key(e.b, var_key, memo, dtypes) if a is not None else None
        key = None if b is None else (e.op, a, b, e.dtype)
    elif t is Cast and (dtypes is None or e.dtype in dtypes):
        v = pure_key(e.value, var_key, memo, dtypes)
        key = None if v is None else ("cast", v, e.dtype)
    memo[id(e)] = (e, key)
    return key


def nodes_using(node, var: Var) -> set:
    """The ids of the nodes of ``node`` (itself included) whose subtree mentions ``var``: a rewrite
    substituting ``var`` may return every other node as it is, without visiting it."""
    seen: dict = {}  # id -> uses; shared subtrees are visited once

    def visit(n) -> bool:
        hit = seen.get(id(n))
        if hit is not None:
            return hit
        uses = n is var
        for name in _child_names(n):
            if visit_value(getattr(n, name)):
                uses = True
        seen[id(n)] = uses
        return uses

    def visit_value(v) -> bool:
        if isinstance(v, _NODE_TYPES):
            return visit(v)
        if isinstance(v, tuple):
            uses = False
            for x in v:
                if visit_value(x):
                    uses = True
            return uses
        return False

    visit(node)
    return {k for k, uses in seen.items() if uses}


def free_vars(node) -> set:
    found: set = set()

    def fn(n):
        if isinstance(n, Var):
            found.add(n)

    walk(node, fn)
    return found


def tensors_read(node) -> list:
    """Tensors read by TensorLoad nodes, in first-use order, without duplicates."""
    seen: dict = {}

    def fn(n):
        if isinstance(n, TensorLoad):
            seen.setdefault(n.tensor, None)

    walk(node, fn)
    return list(seen)


def shape_dims(buffers) -> tuple:
    """The symbolic dims (variables) in the shapes of ``buffers``, in order of first appearance: the
    scalar parameters of a function over symbolic shapes (``PrimFunc.dims``)."""
    found: dict = {}

    def fn(node):
        if isinstance(node, Var):
            found.setdefault(node, None)

    for buf in buffers:
        for d in buf.shape:
            if isinstance(d, Expr):
                walk(d, fn)
    return tuple(found)


def unbound_vars(body) -> list:
    """The variables ``body`` reads that no loop, let or reduction in it defines, in order of first use:
    the dims a function over symbolic shapes uses beyond its parameters' shapes."""
    used: dict = {}
    defined: set = set()

    def fn(node):
        if isinstance(node, Var):
            used.setdefault(node, None)
        elif hasattr(node, "var") and isinstance(node.var, Var):  # For, LetStmt, Let, IterVar
            defined.add(node.var)

    walk(body, fn)
    return [v for v in used if v not in defined]
