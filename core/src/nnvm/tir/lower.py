"""Loop-program passes that finish lowering (``nnvm.te.lower.lower_schedule`` runs them last), on the
loop program alone: ``guarded`` (a statement under a conjunction of conditions), double-buffer marks,
``unroll_loops`` and ``partition_loops`` (split guards out of the loops' main iterations).
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import Linear, Simplifier, conditional_parts, simplify
from nnvm.tir.visit import free_vars, nodes_using, rewrite, substitute, walk


def guarded(stmt: S.Stmt, conds: list) -> S.Stmt:
    """``stmt`` under ``if`` the conjunction of ``conds`` (``stmt`` itself when there are none)."""
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = cond & c
    return S.IfThenElse(cond, stmt, None)


def mark_double_buffers(body, bufs: set):
    """Wrap the allocation of each double-buffered buffer in ``attr double_buffer_scope = buf``."""
    if not bufs:
        return body

    def fn(node):
        if isinstance(node, S.Allocate) and node.buffer in bufs:
            return S.AttrStmt("double_buffer_scope", node.buffer.name, node)
        return None

    return rewrite(body, fn)


def unroll_loops(body):
    """Replace loops marked unrolled (with a constant extent) by copies of their body."""

    def fn(node):
        if isinstance(node, S.For) and node.kind == S.ForKind.UNROLLED:
            ext = simplify(node.extent)
            mn = simplify(node.min)
            if not isinstance(ext, E.Const) or not isinstance(mn, E.Const):
                return replace(node, kind=S.ForKind.SERIAL)
            using = nodes_using(node.body, node.var)
            copies = [unrolled_copy(node.body, node.var, mn.value + k, using) for k in range(ext.value)]
            return S.seq(*copies) if copies else S.Seq(())
        return None

    return rewrite(body, fn)


def unrolled_copy(body, var: E.Var, value: int, using: set | None = None):
    """``body`` with ``var`` replaced by ``value``, leaving out the sides of selects and
    ``if_then_else`` calls whose condition becomes constant: Winograd's transforms pick their matrix
    rows by select chains on the unrolled tile index, and copying every side of each made most of the
    copy thrown away by the simplifier right after. Subtrees without ``var`` (``using``: from
    ``nodes_using``, shared by every copy) come back as they are, unvisited: the copies share them,
    and an unrolled tile's weights, bases and inner copies were rebuilt once per element before."""
    vmap = {var: E.const(value)}
    folder = Simplifier()
    if using is None:
        using = nodes_using(body, var)

    def var_fn(n):
        return vmap.get(n) if isinstance(n, E.Var) else None

    def pre(n):
        if id(n) not in using:
            return n
        parts = conditional_parts(n)
        if parts is None or id(parts[0]) not in using:
            return None
        c = folder.expr(substitute(parts[0], vmap))
        if not isinstance(c, E.Const):
            return None
        return rewrite(parts[1] if c.value else parts[2], var_fn, pre)

    return rewrite(body, var_fn, pre)


# Loops that may be cut in two: serial ones. A vectorized loop stays one vector, a thread binding one
# launch, and a parallel loop one fork-join with its iterations balanced (its guards are still lifted
# from the serial loops inside it whose variables they share).
_PARTITIONABLE = (S.ForKind.SERIAL,)


def partition_loops(body):
    """Cut the guarded tail off loops: ``for o in range(E)`` whose body holds a guard such as
    ``if o*4 + i < 10`` (a non-divisible split) becomes a main loop over the iterations where every
    such guard provably holds, with the guards removed, followed by the tail loop with them kept.

    Before (``i`` split by 4 over 10 elements)::

        for i.outer in range(3):
          for i.inner in range(4):
            if (((i.outer * 4) + i.inner) < 10):
              B[...] = ...

    After::

        for i.outer in range(2):
          for i.inner in range(4):
            B[...] = ...
        for i.outer in range(2, 2 + 1):   # min 2, extent 1
          for i.inner in range(4):
            if (((i.outer * 4) + i.inner) < 10):
              B[...] = ...

    Only serial loops with constant bounds are cut, only at a point found from guards
    linear in the loop variable (``c*o + rest < n`` with ``c > 0`` and ``rest`` bounded by the
    ranges of the enclosing and inner loops), and only when the simplifier, given the main part's
    range, removes at least one guard: correctness never depends on the analysis, since the main
    body is the original one simplified under its own range. A loop whose tail would do nothing
    (``for i in range(4): if i < 2``: trimming, not partitioning) is left alone. Both parts are
    partitioned further, so a tiled nest with several guarded axes becomes one unguarded main
    nest plus guarded tails.
    """
    out = _partition(body, {})
    return out if out is not None else S.Seq(())


def _partition(stmt, ranges: dict):
    if isinstance(stmt, S.Seq):
        return S.seq(*[_partition(s, ranges) for s in stmt.stmts])
    if isinstance(stmt, S.IfThenElse):
        other = _partition(stmt.else_body, ranges) if stmt.else_body is not None else None
        return replace(stmt, then_body=_partition(stmt.then_body, ranges), else_body=other)
    if isinstance(stmt, (S.Allocate, S.AttrStmt, S.LetStmt)):
        return replace(stmt, body=_partition(stmt.body, ranges))
    if not isinstance(stmt, S.For):
        return stmt
    if not (isinstance(stmt.min, E.Const) and isinstance(stmt.extent, E.Const)):
        parts = _split_symbolic_loop(stmt, ranges) if stmt.kind in _PARTITIONABLE else None
        if parts is not None:
            main, tail = parts
            main = replace(main, body=_partition(main.body, {**ranges, stmt.var: (0, math.inf)}))
            return main if tail is None else S.seq(main, tail)
        return replace(stmt, body=_partition(stmt.body, ranges))
    lo, ext = int(stmt.min.value), int(stmt.extent.value)
    parts = _split_loop(stmt, lo, ext, ranges) if stmt.kind in _PARTITIONABLE else None
    if parts is None and stmt.kind in _PARTITIONABLE:
        # a guard whose limit is a dim's expression (the last chunk of a symbolic row count): a main
        # loop of a symbolic extent up to it, the guarded tail
        cut = _split_symbolic_loop(stmt, ranges)
        if cut is not None and (cut[1] is not None or not _same_expr(cut[0].extent, stmt.extent)):
            inside = {**ranges, stmt.var: (lo, lo + ext - 1)}
            return S.seq(*[replace(part, body=_partition(part.body, inside)) for part in cut])
    if parts is None:
        return replace(stmt, body=_partition(stmt.body, {**ranges, stmt.var: (lo, lo + ext - 1)}))
    out = []
    for part in parts:
        p_lo, p_ext = int(part.min.value), int(part.extent.value)
        out.append(replace(part, body=_partition(part.body, {**ranges, stmt.var: (p_lo, p_lo + p_ext - 1)})))
    return S.seq(*out)


def _split_loop(loop: S.For, lo: int, ext: int, ranges: dict):
    """(main, tail) loops cut from ``loop``, or None when no guard on its variable can be lifted."""
    bounds = [b for b in _guard_limits(loop.var, loop.body, ranges) if b is not None]
    if not bounds or ext < 2:
        return None
    main_ext = min(bounds) - lo + 1  # iterations lo .. min(bounds) satisfy every guard
    if not 0 < main_ext < ext:
        return None
    main_body = Simplifier({**ranges, loop.var: (lo, lo + main_ext - 1)}).stmt(loop.body)
    if main_body is None or _count_guards_on(loop.var, main_body) >= _count_guards_on(loop.var, loop.body):
        return None
    tail_range = (lo + main_ext, lo + ext - 1)
    if Simplifier({**ranges, loop.var: tail_range}).does_nothing(loop.body):
        # Nothing runs in the tail: that is trimming the loop (``for i in range(4): if i < 2``), which
        # is left to the guard, so the program keeps saying where the domain ends.
        return None
    main = replace(loop, extent=E.const(main_ext), body=main_body)
    tail = replace(loop, min=E.const(lo + main_ext), extent=E.const(ext - main_ext))
    return main, tail


def _split_symbolic_loop(loop: S.For, ranges: dict):
    """(main, tail) cut from a loop over a symbolic extent (a constant split of a dim), or None.

    Before (``j`` split by 16 over ``n`` columns)::

        for j.outer in range((n + 15) // 16):
          for j.inner in range(16):  # vectorized
            if (j.outer * 16 + j.inner) < n:
              B[...] = ...

    After::

        for j.outer in range(max(min(n // 16, (n + 15) // 16), 0)):    # main: no guard, one vector
          for j.inner in range(16):  # vectorized
            B[...] = ...
        for j.outer in range(main, (n + 15) // 16):                   # tail: guarded
          ...

    Each guard linear in the loop's variable whose other terms are loops of known range (their worst
    case taken) and dims or outer loops (kept as an expression) gives a limit; the main loop runs to the
    least of them and drops those guards, which hold in all of its iterations. Its extent is clipped to
    the loop's own, so the cut is correct whatever the dims' values; where it is the loop's own, there
    is no tail."""
    if not isinstance(loop.min, E.Const):
        return None
    lo = int(loop.min.value)
    limits, conds, found, unknown = [], [], [], set()
    # an inner loop over a symbolic extent: no worst case (``_symbolic_limit``)
    for conj, rng in _guards(loop.body, {**ranges, loop.var: (lo, math.inf)}, symbolic=(0, math.inf)):
        if loop.var in free_vars(conj):
            got = _symbolic_limit(loop.var, conj, rng)
            fails = _symbolic_limit(loop.var, conj, rng, best=True)
            if got is None or fails is None:
                unknown.add(id(conj))
            else:
                conds.append(conj)
                found.append((got, fails))
                if not any(_same_expr(got, x) for x in limits):
                    limits.append(got)
    if not limits:
        return None
    zero = E.const(0, loop.extent.dtype)
    if len(limits) > 1:
        per_guard: dict = {}
        for c, pair in zip(conds, found):
            if id(c) not in unknown:
                per_guard.setdefault(id(c), []).append(pair)
        for limit in dict.fromkeys(f for _, f in found):
            # guards that fail past the limit / hold up to it, wherever they stand (one condition object
            # may guard stores in several nests, each with its own limits)
            ends = {i for i, got in per_guard.items() if all(_at_most(f, limit) for _, f in got)}
            kept = {i for i, got in per_guard.items() if all(_at_most(limit, h) for h, _ in got)}
            if kept and _only_guarded_effects(loop.body, ends):
                # past this limit every effect's guard fails: the loop ends there, those guards dropped,
                # and the others cut as usual. A chunk of row tiles (guard: a tile inside the padded
                # rows) whose crop stores are guarded by the true row count: cut at the rows' limit,
                # a tile past the last full one put its whole reduction under the chunk's guards
                # (GPT-2's head at 7 tokens 1.5x the bound kernel)
                end = simplify(E.binop("max", E.binop("min", limit - lo + 1, loop.extent), zero))
                trimmed = replace(loop, extent=end, body=rewrite(loop.body, _dropping(kept)))
                return _split_symbolic_loop(trimmed, ranges) or (trimmed, None)
    holds = {id(c) for c in conds}
    drop = _dropping(holds)
    last = limits[0]
    for x in limits[1:]:
        last = E.binop("min", last, x)
    main_ext = simplify(E.binop("max", E.binop("min", last - lo + 1, loop.extent), zero))
    main = replace(loop, extent=main_ext, body=rewrite(loop.body, drop))
    if _same_expr(main_ext, loop.extent):  # every guard holds in every iteration: no tail
        return main, None
    end = loop.extent
    if len(limits) > 1 and _only_guarded_effects(loop.body, holds):
        # past the loosest limit every guard fails and the body does nothing: the tail stops there (the
        # empty row tiles of a chunk past a symbolic row count would each run the reduction's guards).
        # A guard's own limit is where it stops holding for every inner value; it fails for all of them
        # only past its best case
        first = found[0][1]
        for _, x in found[1:]:
            first = E.binop("max", first, x)
        end = simplify(E.binop("max", E.binop("min", first - lo + 1, loop.extent), main_ext))
    tail = replace(loop, min=simplify(main_ext + lo), extent=simplify(end - main_ext))
    return main, tail


def _at_most(a, b) -> bool:
    """Whether ``a <= b`` for every value of the dims (integers) they are built of: ``b - a`` read as a
    sum of linear terms where each floor division ``y // m`` is ``y / m`` less a fraction in ``[0, (m -
    1) / m]``; when every term cancels, the fractions bound the difference. ``(s + 3) // 4 <= 2 * ((s +
    7) // 8)``: tiles of 4 rows never pass rows padded to 8."""
    simp = Simplifier({})
    terms: dict = {}
    lo = hi = Fraction(0)

    def add(e, scale: Fraction) -> bool:
        nonlocal lo, hi
        lin = simp.linear(e)
        if lin is None:
            return False
        lo += scale * lin.const
        hi += scale * lin.const
        for atom, coef in lin.terms.items():
            c = scale * coef
            if (isinstance(atom, E.BinOp) and atom.op == "floordiv" and isinstance(atom.b, E.Const)
                    and int(atom.b.value) > 0):
                m = int(atom.b.value)
                slack = c * Fraction(m - 1, m)
                lo, hi = (lo - slack, hi) if c > 0 else (lo, hi - slack)
                if not add(atom.a, c / m):
                    return False
            else:
                terms[atom] = terms.get(atom, 0) + c
        return True

    if not add(simplify(b - a), Fraction(1)):
        return False
    return all(c == 0 for c in terms.values()) and lo > -1


def _dropping(holds: set):
    """A ``rewrite`` function removing the guard conjuncts ``holds`` (ids) from every ``if``."""

    def drop(node):
        if isinstance(node, S.IfThenElse):
            kept = [c for c in _conjuncts(node.cond) if id(c) not in holds]
            if len(kept) == len(_conjuncts(node.cond)):
                return None
            if not kept:
                return node.then_body
            cond = kept[0]
            for c in kept[1:]:
                cond = cond & c
            return replace(node, cond=cond)
        return None

    return drop


def _only_guarded_effects(body, holds: set) -> bool:
    """Whether every store of ``body`` to a buffer it does not allocate itself sits under a guard with one
    of the conjuncts ``holds`` (ids), and ``body`` calls nothing: then an iteration failing all of them
    has no effect."""
    own: set = set()

    def ok(st, guarded_now: bool) -> bool:
        if isinstance(st, S.Seq):
            return all(ok(x, guarded_now) for x in st.stmts)
        if isinstance(st, S.Allocate):
            own.add(st.buffer)
            return ok(st.body, guarded_now)
        if isinstance(st, (S.For, S.AttrStmt, S.LetStmt)):
            return ok(st.body, guarded_now)
        if isinstance(st, S.IfThenElse):
            inner = guarded_now or any(id(c) in holds for c in _conjuncts(st.cond))
            return ok(st.then_body, inner) and (st.else_body is None or ok(st.else_body, guarded_now))
        if isinstance(st, S.Store):
            return guarded_now or st.buffer in own
        return False  # a call, or a statement not known here

    return ok(body, False)


def _same_expr(a, b) -> bool:
    diff = simplify(a - b)
    return isinstance(diff, E.Const) and diff.value == 0


def _symbolic_limit(var: E.Var, cond, ranges: dict, best: bool = False):
    """The largest ``var`` (an expression of dims) for which ``cond`` (``a < b`` or ``<=``, ``>``,
    ``>=``, linear in ``var`` with a positive coefficient) holds whatever the other loops' values, or
    None; ``_upper_limit`` for a bound that is a dim. ``best``: the largest for which it holds for some
    of their values (past it, the condition fails for all)."""
    found = _guard_linear(var, cond, ranges)
    if found is None:
        return None
    simp, diff, coef = found
    if coef <= 0:
        return None
    worst, dims = diff.const + (1 if cond.op in ("lt", "gt") else 0), []
    for atom, c in diff.terms.items():
        if atom is var:
            continue
        if var in free_vars(atom):
            return None
        if not any(v in ranges for v in free_vars(atom)):
            # dims alone: kept as they are, even where bounded. ``8 * ((n + 7) // 8)`` is ``n + 7 -
            # (n + 7) % 8`` to the simplifier; the remainder's worst case alone (7) would give a limit 7
            # rows short, and a chunk of row tiles at n = 7 all its tiles in the guarded tail (GPT-2's
            # head at 7 tokens 1.5x the bound kernel)
            dims.append((atom, c))
            continue
        lo_b, hi_b = simp.bound(atom)
        if math.isinf(lo_b) or math.isinf(hi_b):
            return None  # a loop of unknown range: no worst case
        worst += c * ((hi_b if c > 0 else lo_b) if not best else (lo_b if c > 0 else hi_b))
    if not dims:
        return None  # a constant limit: the loop over a symbolic extent runs past it only by its tail
    rest = E.const(worst, diff.dtype)
    for atom, c in dims:
        rest = rest + atom * c
    return simplify(E.binop("floordiv", E.const(0, diff.dtype) - rest, E.const(coef, diff.dtype)))


def _guard_limits(var: E.Var, stmt, ranges: dict) -> list:
    """For each guard below ``stmt`` with a conjunct ``c*var + rest < 0`` (``c > 0``): the largest
    value of ``var`` for which that conjunct holds for every value ``rest`` can take."""
    return [_upper_limit(var, conj, rng) for conj, rng in _guards(stmt, ranges) if var in free_vars(conj)]


def _guards(stmt, ranges: dict, symbolic: tuple | None = None) -> list:
    """``(conjunct, loop ranges there)`` for each conjunct of each guard below ``stmt``: ``ranges`` plus
    every enclosing loop of constant bounds, and ``symbolic`` (when given) for those over symbolic extents."""
    found: list = []

    def visit(s, rng):
        if isinstance(s, S.Seq):
            for x in s.stmts:
                visit(x, rng)
        elif isinstance(s, S.For):
            if isinstance(s.min, E.Const) and isinstance(s.extent, E.Const):
                lo = int(s.min.value)
                rng = {**rng, s.var: (lo, lo + int(s.extent.value) - 1)}
            elif symbolic is not None:
                rng = {**rng, s.var: symbolic}
            visit(s.body, rng)
        elif isinstance(s, S.LetStmt):  # bound inside the loop: never part of a limit
            visit(s.body, {**rng, s.var: (-math.inf, math.inf)})
        elif isinstance(s, (S.Allocate, S.AttrStmt)):
            visit(s.body, rng)
        elif isinstance(s, S.IfThenElse):
            found.extend((conj, rng) for conj in _conjuncts(s.cond))
            visit(s.then_body, rng)
            if s.else_body is not None:
                visit(s.else_body, rng)

    visit(stmt, ranges)
    return found


def _conjuncts(cond) -> list:
    if isinstance(cond, E.BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _guard_linear(var: E.Var, cond, ranges: dict):
    """``(simplifier over ranges, diff, var's coefficient in diff)`` for an integer comparison ``cond``
    read as ``diff < 0`` (``lt``, ``gt``) or ``diff <= 0`` (``le``, ``ge``), ``diff`` linear; else None."""
    if not isinstance(cond, E.BinOp) or cond.op not in ("lt", "le", "gt", "ge"):
        return None
    a, b = (cond.a, cond.b) if cond.op in ("lt", "le") else (cond.b, cond.a)
    if not (E.is_int(a.dtype) and E.is_int(b.dtype)):
        return None
    simp = Simplifier(ranges)
    diff = simp.linear(E.BinOp("sub", a, b, a.dtype))
    return None if diff is None else (simp, diff, diff.terms.get(var, 0))


def _upper_limit(var: E.Var, cond, ranges: dict) -> int | None:
    """The largest ``var`` with ``cond`` true for all values of the other variables, for ``cond``
    of the form ``a < b`` (or ``<=``, ``>``, ``>=``) linear in ``var`` with a positive coefficient."""
    found = _guard_linear(var, cond, ranges)
    if found is None:
        return None
    simp, diff, coef = found
    rest = diff.plus(Linear(diff.dtype, 0, {var: coef}), -1)
    if coef <= 0 or any(var in free_vars(t) for t in rest.terms):
        return None
    hi = simp.bound(rest.to_expr())[1]
    if math.isinf(hi):
        return None
    strict_hi = hi + (1 if cond.op in ("lt", "gt") else 0)  # coef*var + strict_hi <= 0
    return (-strict_hi) // coef


def _count_guards_on(var: E.Var, stmt) -> int:
    count = 0

    def fn(node):
        nonlocal count
        if isinstance(node, S.IfThenElse) and var in free_vars(node.cond):
            count += 1

    walk(stmt, fn)
    return count


def batch_loop(func: S.PrimFunc, params: tuple, dim: E.Var, strides: tuple = (),
               name: str | None = None) -> S.PrimFunc:
    """``func``, lowered for one image, run for every image of a batch of ``dim``.

    ``params`` are ``func``'s parameters at their full shapes: one leading with ``dim`` is ``dim`` images
    of ``func``'s (its batch-1 buffer), read and written at the loop index times an image's elements; the
    others are the same buffers (weights). Storage ``func`` allocates at its top is allocated once, outside
    the loop, and reused by every image. ``strides``: per parameter, the elements from one image to the
    next where that is not an image's own size (a value inside an in-place concatenation's output), else
    None. Before: ``body``; after: ``for b in [0, dim): body[b]``.
    """
    images: dict = {}
    image = E.Var(f"{dim.name}_image", dim.dtype)
    strides = tuple(strides) or (None,) * len(params)
    for one, full, stride in zip(func.params, params, strides):
        if full.shape and full.shape[0] is dim:
            step = stride or math.prod(int(s.value) for s in one.shape[1:])
            images[one] = (full, image * step if step != 1 else image)
        else:
            images[one] = (full, None)

    def fn(node):
        if isinstance(node, E.Load | S.Store) and node.buffer in images:
            full, offset = images[node.buffer]
            index = node.index if offset is None else node.index + offset
            return replace(node, buffer=full, index=index)
        return None

    allocs = []
    body = func.body
    while isinstance(body, S.Allocate):
        allocs.append(body.buffer)
        body = body.body
    body = S.For(image, E.const(0, dim.dtype), dim, S.ForKind.SERIAL, rewrite(body, fn))
    for buf in reversed(allocs):
        body = S.Allocate(buf, body)
    dims = tuple(dict.fromkeys((dim, *func.attrs.get("dims", ()))))
    return S.PrimFunc(name or func.name, tuple(params), body, {**func.attrs, "dims": dims})
