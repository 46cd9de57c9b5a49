"""Bound inference for stages computed inside another stage's loop (``compute_at``).

The attached stage computes only the region its consumer reads during one iteration of the attach
loop: loops of the consumer outside (and at) the attach point stay symbolic, loops inside it are
relaxed over their ranges. Each dimension's region is ``[lo, lo + extent)`` with ``lo`` an expression
of the outer loop variables and ``extent`` a constant (an upper bound when it varies), so storage is
a fixed-size buffer; where the region may overhang the stage's domain, lowering adds a guard.
"""

from __future__ import annotations

import math

from nnvm.errors import ScheduleError
from nnvm.te.relations import root_values
from nnvm.tir import expr as E
from nnvm.tir.simplify import Simplifier, simplify
from nnvm.tir.visit import free_vars, rewrite, substitute, walk


class _Unbounded(Exception):
    pass


def _sym_bound(e, relax: dict, simp: Simplifier):
    """(lo, hi) expressions of ``e`` with the variables in ``relax`` ranging over (lo, hi) ints."""
    if isinstance(e, E.Const) or not any(v in relax for v in free_vars(e)):
        # Exact: the same node for both ends, so the simplifier (which keys atoms by identity) cancels
        # it in ``hi - lo``, as for a fused loop's ``(f // 7) % 14`` bound to one thread.
        return e, e
    if isinstance(e, E.Var):
        if e in relax:
            lo, hi = relax[e]
            return E.const(lo), E.const(hi)
        return e, e
    if isinstance(e, E.Cast) and E.is_int(e.dtype):
        return _sym_bound(e.value, relax, simp)
    if isinstance(e, E.BinOp):
        if e.op in ("add", "sub"):
            alo, ahi = _sym_bound(e.a, relax, simp)
            blo, bhi = _sym_bound(e.b, relax, simp)
            return (alo + blo, ahi + bhi) if e.op == "add" else (alo - bhi, ahi - blo)
        if e.op == "mul":
            for x, c in ((e.a, e.b), (e.b, e.a)):
                cs = simplify(c)
                if isinstance(cs, E.Const):
                    lo, hi = _sym_bound(x, relax, simp)
                    return (lo * cs, hi * cs) if cs.value >= 0 else (hi * cs, lo * cs)
            raise _Unbounded
        if e.op == "floordiv":
            k = simplify(e.b)
            if isinstance(k, E.Const) and k.value > 0:
                lo, hi = _sym_bound(e.a, relax, simp)
                return E.binop("floordiv", lo, k), E.binop("floordiv", hi, k)
            raise _Unbounded
        if e.op == "floormod":
            k = simplify(e.b)
            if isinstance(k, E.Const) and k.value > 0:
                lo, hi = _sym_bound(e.a, relax, simp)
                if simp.expr(hi - lo) is not None:
                    d = simp.expr(hi - lo)
                    if isinstance(d, E.Const) and d.value == 0:
                        return E.binop("floormod", lo, k), E.binop("floormod", lo, k)
                return E.const(0), E.const(k.value - 1)
            raise _Unbounded
        if e.op in ("min", "max"):
            alo, ahi = _sym_bound(e.a, relax, simp)
            blo, bhi = _sym_bound(e.b, relax, simp)
            return E.binop(e.op, alo, blo), E.binop(e.op, ahi, bhi)
    raise _Unbounded


def _same(a, b) -> bool:
    if a is b:
        return True
    diff = simplify(a - b)
    return isinstance(diff, E.Const) and diff.value == 0


def _merged(e, simp):
    """``e`` simplified where it holds a remainder of a quotient: the row of three fused axes read back as
    ``((f // 3136) * 56 + (f // 56) % 56) * 56 + f % 56`` is ``f`` (``Simplifier._merge_divmod``), whose
    bounds over a tile are the tile's; term by term they were a whole 56-row image row (ConvNeXt's
    flattened ``[1, 56, 56, C]`` rows computed 7 times over)."""
    found = []
    walk(e, lambda n: found.append(n) if isinstance(n, E.BinOp) and n.op == "floormod"
         and isinstance(n.a, E.BinOp) and n.a.op == "floordiv" else None)
    return simp.expr(e) if found else e


def _fold_divmod(e):
    """``e`` with each ``(x // d) * d + x % d`` written ``x``: the row of a fused loop over a symbolic
    batch and sequence (``f // seq``, ``f % seq``) read back as ``b * seq + s`` (a packed dense's flat
    rows), whose bounds are then those of ``f``; the simplifier does not know the identity for a
    symbolic ``d``."""
    def div_times(m):  # (x, d) of ``(x // d) * d``, else None
        if isinstance(m, E.BinOp) and m.op == "mul":
            for q, d in ((m.a, m.b), (m.b, m.a)):
                if isinstance(q, E.BinOp) and q.op == "floordiv" and _same(q.b, d):
                    return q.a, d
        return None

    def fn(node):
        if isinstance(node, E.BinOp) and node.op == "add":
            for m, r in ((node.a, node.b), (node.b, node.a)):
                found = div_times(m)
                if (found and isinstance(r, E.BinOp) and r.op == "floormod" and _same(r.a, found[0])
                        and _same(r.b, found[1])):
                    return found[0]
        return None

    return rewrite(e, fn)


def _increasing(e) -> bool:
    """Whether ``e`` never decreases as any loop variable in it grows: sums, products by non-negative
    constants and floor divisions by positive ones of variables, dims and constants."""
    if isinstance(e, (E.Const, E.Var)):
        return True
    if isinstance(e, E.Cast):
        return _increasing(e.value)
    if isinstance(e, E.BinOp):
        if e.op == "add":
            return _increasing(e.a) and _increasing(e.b)
        if e.op in ("mul", "floordiv"):
            c = simplify(e.b)
            return isinstance(c, E.Const) and c.value >= (0 if e.op == "mul" else 1) and _increasing(e.a)
    return False


def _fits(lo, extent: int, end, outer_last: dict) -> bool:
    """Whether a region ``[lo, lo + extent)`` ends by the symbolic domain end ``end`` at every iteration
    of the outer loops: ``lo`` grows with them, so at their last iterations (``outer_last``, expressions
    of the dims for split dims) it is largest. The padded rows of a symbolic dense are whole tiles: the
    region ``[8 * it, 8 * it + 8)`` of ``8 * ((seq + 7) // 8)`` rows with ``it < (seq + 7) // 8`` needs no
    guard, which would otherwise sit in the reduction."""
    if not _increasing(lo):
        return False
    last = simplify(substitute(lo, outer_last) + extent)
    slack = simplify(end - last)
    return isinstance(slack, E.Const) and slack.value >= 0


def _reads_of(expr, tensor) -> list:
    found = []

    def fn(n):
        if isinstance(n, E.TensorLoad) and n.tensor.op is tensor.op:
            found.append(n.indices)

    walk(expr, fn)
    return found


def _thread_loops(stage, stage_ranges) -> dict:
    """``threadIdx`` loops of ``stage`` and of the stages it is computed in, with their ranges: a shared
    buffer is filled by all threads of a block together, so its region covers every thread's needs."""
    out: dict = {}
    while stage is not None:
        for iv in stage.leaf_iter_vars:
            if stage.iter_var_attrs.get(iv, {}).get("thread_tag", "").startswith("threadIdx"):
                out[iv.var] = (0, stage_ranges[stage][iv][1] - 1)
        stage = stage.attach_stage if stage.attach_type == "scope" else None
    return out


def nested_in(reader, consumer, pos: int) -> bool:
    """Whether ``reader`` is computed inside loop ``pos`` (or a loop within it) of ``consumer``: attached
    there directly, or to a stage that is."""
    while reader.attach_type == "scope":
        if reader.attach_stage is consumer:
            return consumer.leaf_iter_vars.index(reader.attach_ivar) >= pos
        reader = reader.attach_stage
    return False


def _axis_values(stage, ranges) -> dict:
    """Each axis variable of ``stage`` as an expression of its leaf loop variables, offset by its region's
    start (which names the loops of the stages it is computed in)."""
    leaves = stage.leaf_iter_vars
    values, _ = root_values(stage, ranges, {iv: iv.var for iv in leaves})
    vmap = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        mn = ranges[iv][0]
        vmap[iv.var] = values[iv] + mn if not (isinstance(mn, int) and mn == 0) else values[iv]
    return vmap


def attach_ranges(stage, sch, bodies, stage_ranges, stage_limits: dict | None = None) -> tuple[dict, dict]:
    """Root ranges of ``stage`` when computed at ``stage.attach_ivar`` of ``stage.attach_stage``, and
    the domain end of each axis whose region may overhang the domain (lowering guards those).

    Its readers are the stage it is computed in, or stages computed inside that loop (a band of an
    intermediate tensor filled once for the register tiles of a band that read it): their loops, and
    those of the stages between, range over their whole extent within one iteration. ``stage_limits``:
    the axes of each stage computed so far whose region may overhang its domain (the consumer's)."""
    consumer = stage.attach_stage
    leaves = consumer.leaf_iter_vars
    pos = leaves.index(stage.attach_ivar)
    readers = [st for st in stage_ranges
               if any(_reads_of(b, t) for b in bodies[st.op] for t in stage.op.outputs)]
    if not readers or any(st is not consumer and not nested_in(st, consumer, pos + 1) for st in readers):
        names = ", ".join(st.name for st in readers) or "none"
        raise ScheduleError(f"stage {stage.name}: compute_at needs every stage reading it to be "
                            f"{consumer.name} or computed inside that loop (readers: {names})")
    c_ranges = stage_ranges[consumer]
    relax = {iv.var: (0, c_ranges[iv][1] - 1) for iv in leaves[pos + 1:]}
    if stage.scope == "shared":
        relax.update(_thread_loops(consumer, stage_ranges))
    # Outer loop variables, for bounding extents that depend on them; a symbolic loop extent (a split
    # of a dim) is unbounded for the simplifier, and its last iteration an expression (``_fits``)
    outer_ranges, outer_last = {}, {}
    for iv in leaves[:pos + 1]:
        ext = c_ranges[iv][1]
        outer_ranges[iv.var] = (0, ext - 1) if isinstance(ext, int) else (0, math.inf)
        outer_last[iv.var] = E.const(ext - 1) if isinstance(ext, int) else simplify(ext - 1)
    simp = Simplifier(outer_ranges)
    # and the loops inside, where their extents are known: a remainder of a value below its divisor goes
    known = {v: r for v, r in relax.items() if all(isinstance(x, int) for x in r)}
    within = Simplifier({**outer_ranges, **known})

    accesses = []
    exact: dict = {}  # id of a consumer axis's value -> (value, its extent): a loop value within it
    for reader in readers:
        vmap = _axis_values(reader, stage_ranges[reader])
        if reader is consumer:
            # an axis the consumer's loops cover exactly (fused, or split without a guard) takes only
            # values inside its domain: a stage computed at a fused loop over a symbolic batch and
            # sequence (softmax's row statistic) reads one of them, and needs no guard
            _, guards = root_values(consumer, c_ranges, {iv: iv.var for iv in leaves})
            overhang = {g for g, _ in guards} | set((stage_limits or {}).get(consumer, {}))
            for a in consumer.op.axis:
                if a not in overhang and _same(a.dom.min, E.const(0)):
                    exact[id(vmap[a.var])] = (vmap[a.var], a.dom.extent)
        inner = reader
        while inner is not consumer:  # every loop of a reader inside the attach loop ranges fully
            relax.update({iv.var: (0, stage_ranges[inner][iv][1] - 1) for iv in inner.leaf_iter_vars})
            inner = inner.attach_stage
        for body in bodies[reader.op]:
            for t in stage.op.outputs:
                accesses.extend([_fold_divmod(_merged(substitute(i, vmap), within)) for i in idx]
                                for idx in _reads_of(body, t))
    out: dict = {}
    limits: dict = {}
    for d, iv in enumerate(stage.op.axis):
        dom_min = int(simplify(iv.dom.min).value)
        dom_ext = simplify(iv.dom.extent)
        dom_ext = int(dom_ext.value) if isinstance(dom_ext, E.Const) else dom_ext
        los, his, raw = [], [], []
        try:
            for idx in accesses:
                lo, hi = _sym_bound(idx[d], relax, simp)
                raw.append((lo, hi))
                los.append(simp.expr(lo))
                his.append(simp.expr(hi))
        except _Unbounded:
            out[iv] = (dom_min, dom_ext)
            continue
        lo = los[0]
        for x in los[1:]:
            lo = simp.expr(E.binop("min", lo, x))
        hi = his[0]
        for x in his[1:]:
            hi = simp.expr(E.binop("max", hi, x))
        width = simp.expr(hi - lo + 1)
        if len(raw) == 1 and not isinstance(width, E.Const):
            # the unsimplified ends still share their exact parts (same nodes), which cancel
            lin = simp.linear(raw[0][1] - raw[0][0] + 1)
            width = E.const(lin.const) if lin is not None and not lin.terms else width
        if isinstance(width, E.Const):
            extent = int(width.value)
        else:
            wlo, whi = simp.bound(width)
            if math.isinf(whi):
                out[iv] = (dom_min, dom_ext)
                continue
            extent = int(whi)
        if dom_min == 0 and all(id(idx[d]) in exact and not (free_vars(idx[d]) & relax.keys())
                                and _same(E.convert(exact[id(idx[d])][1]), E.convert(dom_ext))
                                for idx in accesses):
            out[iv] = (lo, extent)  # one of the consumer's own axis values, inside the same domain
            continue
        lo_bounds = simp.bound(lo)
        if lo_bounds[0] < dom_min:
            lo = simp.expr(E.binop("max", lo, E.const(dom_min)))
        if isinstance(dom_ext, int):
            extent = min(extent, dom_ext)
            if lo_bounds[1] + extent > dom_min + dom_ext:
                limits[iv] = dom_min + dom_ext
        elif not _fits(lo, extent, dom_min + dom_ext, outer_last):
            limits[iv] = simplify(dom_ext + dom_min)
        out[iv] = (lo, extent)
    for iv in stage.op.reduce_axis:
        ext = simplify(iv.dom.extent)  # a reduction over a symbolic dim (attention's keys) runs whole
        out[iv] = (int(simplify(iv.dom.min).value), int(ext.value) if isinstance(ext, E.Const) else ext)
    return out, limits
