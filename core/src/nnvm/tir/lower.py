"""Lowering: a schedule becomes a loop program over flat buffers.

The steps, each a function below:
1. ``inline_stages``: substitute compute_inline stages into their consumers.
2. ``infer_bounds``: the range of every loop, through split/fuse relations (and compute_at scopes).
3. ``make_stage_nest``: one loop nest per stage; split guards where a factor may not divide; the
   reduction's init placed above the first reduce loop.
4. attach: stages computed at a loop of another stage are nested inside it; the others follow in
   producer-before-consumer order, intermediates wrapped in ``Allocate``.
5. ``flatten_storage``: multi-dimensional tensor reads/writes become flat buffer accesses.
6. ``unroll_loops``, ``partition_loops`` (split guards out of the loops' main iterations) and
   ``simplify``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from nnvm.errors import ScheduleError
from nnvm.te.schedule import Fuse, Schedule, Split, Stage
from nnvm.te.tensor import ComputeOp, PlaceholderOp, Tensor
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import Linear, Simplifier, simplify
from nnvm.tir.visit import free_vars, rewrite, substitute, walk

# ---------------------------------------------------------------------------------------------------
# 1. inlining


def inline_stages(sch: Schedule) -> dict:
    """Bodies of every non-inlined compute stage with inlined producers substituted in."""
    bodies: dict = {}
    for stage in sch.stages:
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue
        new = tuple(_inline_into(b, bodies, sch) for b in op.body)
        bodies[op] = new
    return bodies


def _inline_into(expr, bodies: dict, sch: Schedule):
    def fn(node):
        if isinstance(node, E.TensorLoad):
            producer = node.tensor.op
            if producer in sch.stage_map and sch.stage_map[producer].attach_type == "inline":
                body = bodies[producer][node.tensor.value_index]
                vmap = {iv.var: idx for iv, idx in zip(producer.axis, node.indices)}
                return substitute(body, vmap)
        return None

    return rewrite(expr, fn)


# ---------------------------------------------------------------------------------------------------
# 2. bounds


def _const_int(e, what: str, stage: Stage) -> int:
    e = simplify(E.convert(e))
    if not isinstance(e, E.Const):
        raise ScheduleError(f"stage {stage.name}: {what} must be a constant after simplification, got {e}")
    return int(e.value)


def root_ranges(stage: Stage) -> dict:
    """Ranges (min, extent as ints) of the stage's original axes when computed at root."""
    out = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        out[iv] = (_const_int(iv.dom.min, "an axis minimum", stage),
                   _const_int(iv.dom.extent, "an axis extent", stage))
    return out


def infer_bounds(stage: Stage, roots: dict) -> dict:
    """Ranges of all iter vars of a stage, from its root ranges through its relations."""
    ranges = dict(roots)
    for rel in stage.relations:
        if isinstance(rel, Split):
            _, ext = ranges[rel.parent]
            if rel.factor is not None:
                factor = _const_int(rel.factor, "a split factor", stage)
                ranges[rel.outer] = (0, -(-ext // factor))
                ranges[rel.inner] = (0, min(factor, ext) if ext >= 1 else factor)
                if ext < factor:
                    ranges[rel.inner] = (0, ext)
            else:
                nparts = _const_int(rel.nparts, "a split nparts", stage)
                inner = -(-ext // nparts)
                ranges[rel.outer] = (0, nparts)
                ranges[rel.inner] = (0, inner)
        elif isinstance(rel, Fuse):
            ranges[rel.fused] = (0, ranges[rel.outer][1] * ranges[rel.inner][1])
    return ranges


def axis_values(stage: Stage, ranges: dict, leaf_values: dict) -> tuple[dict, list]:
    """Each original axis variable (spatial and reduce) -> its value in ``leaf_values``, the values of
    the leaf loops, offset by the axis's minimum; and the split guards, ``(axis, condition)`` pairs."""
    values, guards = _root_values(stage, ranges, leaf_values)
    vmap = {}
    for iv in list(stage.op.axis) + list(stage.op.reduce_axis):
        mn = ranges[iv][0]
        vmap[iv.var] = values[iv] if isinstance(mn, int) and mn == 0 else values[iv] + mn
    return vmap, guards


def _root_values(stage: Stage, ranges: dict, leaf_values: dict) -> tuple[dict, list]:
    """Values of all iter vars from the leaf loop variables; returns (values, guard conditions)."""
    values = dict(leaf_values)
    guards: list = []
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            inner_ext = ranges[rel.inner][1]
            values[rel.parent] = values[rel.outer] * inner_ext + values[rel.inner]
            p_min, p_ext = ranges[rel.parent]
            if ranges[rel.outer][1] * inner_ext != p_ext:
                guards.append((rel.parent, values[rel.parent] < p_ext))
        elif isinstance(rel, Fuse):
            inner_ext = ranges[rel.inner][1]
            values[rel.outer] = values[rel.fused] // inner_ext
            values[rel.inner] = values[rel.fused] % inner_ext
    return values, guards


# ---------------------------------------------------------------------------------------------------
# 3. loop nests


def _leaf_loop(stage: Stage, iv: E.IterVar, ranges: dict, var: E.Var, body: S.Stmt) -> S.Stmt:
    attrs = stage.iter_var_attrs.get(iv, {})
    kind = attrs.get("kind", S.ForKind.SERIAL)
    ext = ranges[iv][1]
    annotations = tuple(attrs.get("pragmas", ()))
    return S.For(var, E.const(0), E.const(ext), kind, body, attrs.get("thread_tag", ""), annotations)


def make_stage_nest(stage: Stage, body_exprs: tuple, out_tensors: list, ranges: dict,
                    inner_stmts: dict, limits: dict | None = None) -> S.Stmt:
    """The loop nest computing one stage into its (multi-dimensional) outputs.

    ``inner_stmts`` maps a leaf IterVar to statements (stages computed at it) that go first inside
    that loop. ``limits`` maps a spatial axis to the end of its domain where the computed region may
    overhang it (stages computed at another's loop); those axes get a guard.
    """
    op: ComputeOp = stage.op
    leaves = stage.leaf_iter_vars
    leaf_vars = {iv: iv.var for iv in leaves}
    vmap, guards = axis_values(stage, ranges, dict(leaf_vars))
    spatial_idx = tuple(vmap[iv.var] for iv in op.axis)
    for iv, end in (limits or {}).items():
        guards.append((iv, vmap[iv.var] < end))
    if stage.tensorized is not None:
        from nnvm.te.tensorize import tensorized_nest

        return tensorized_nest(stage, body_exprs, out_tensors, ranges, inner_stmts, vmap, guards)

    spatial_guards = [c for iv, c in guards if iv.kind != E.IterKind.REDUCE]
    reduce_guards = [c for iv, c in guards if iv.kind == E.IterKind.REDUCE]
    is_reduce = isinstance(body_exprs[0], E.Reduce)
    if not is_reduce:
        stores = [S.Store(t, spatial_idx, substitute(b, vmap)) for t, b in zip(out_tensors, body_exprs)]
        stmt = guarded(S.seq(*stores), spatial_guards)
        return wrap_loops(stage, leaves, leaf_vars, ranges, stmt, inner_stmts)

    if len(body_exprs) != 1:
        raise ScheduleError(f"stage {stage.name}: reductions with several outputs are not supported")
    red: E.Reduce = body_exprs[0]
    out = out_tensors[0]
    acc = E.TensorLoad(out, spatial_idx, out.dtype)
    update = S.Store(out, spatial_idx, red.combiner.combine(acc, substitute(red.source, vmap)))
    conds = list(reduce_guards)
    if red.condition is not None:
        conds.append(substitute(red.condition, vmap))
    update = guarded(update, conds + spatial_guards)
    return reduction_nest(stage, red, out, vmap, ranges, spatial_guards, update, inner_stmts)


def guarded(stmt: S.Stmt, conds: list) -> S.Stmt:
    """``stmt`` under ``if`` the conjunction of ``conds`` (``stmt`` itself when there are none)."""
    if not conds:
        return stmt
    cond = conds[0]
    for c in conds[1:]:
        cond = cond & c
    return S.IfThenElse(cond, stmt, None)


def reduction_nest(stage: Stage, red: E.Reduce, out: Tensor, vmap: dict, ranges: dict, spatial_guards: list,
                   update: S.Stmt, inner_stmts: dict, stop: int | None = None) -> S.Stmt:
    """The nest of a reduction stage around its ``update``: the leaf loops outside the first reduce
    loop; inside them the output's initialisation, over serial copies of the spatial loops further
    in; then the loops from the first reduce one to ``stop`` (default: all) around ``update``.

    ``stop`` is where a tensorized stage's call replaces the loops; the initialisation never goes
    inside it, so the call always accumulates into an initialised region.
    """
    leaves = list(stage.leaf_iter_vars)
    stop = len(leaves) if stop is None else stop
    leaf_vars = {iv: iv.var for iv in leaves}
    spatial_idx = tuple(vmap[iv.var] for iv in stage.op.axis)
    init_value = red.init if red.init is not None else red.combiner.identity(red.dtype)
    init = guarded(S.Store(out, spatial_idx, substitute(init_value, vmap)), spatial_guards)
    first_reduce = next((k for k, iv in enumerate(leaves) if iv.kind == E.IterKind.REDUCE), len(leaves))
    first_reduce = min(first_reduce, stop)
    outer, inner = leaves[:first_reduce], leaves[first_reduce:stop]
    init_leaves = [iv for iv in leaves[first_reduce:] if iv.kind != E.IterKind.REDUCE]
    init_vars = {iv: E.Var(iv.var.name + ".init", E.INDEX_DTYPE) for iv in init_leaves}
    init = substitute(init, {leaf_vars[iv]: init_vars[iv] for iv in init_leaves})
    init_nest = wrap_loops(stage, init_leaves, init_vars, ranges, init, {}, drop_kinds=True)
    update_nest = wrap_loops(stage, inner, leaf_vars, ranges, update, inner_stmts)
    return wrap_loops(stage, outer, leaf_vars, ranges, S.seq(init_nest, update_nest), inner_stmts)


def wrap_loops(stage, leaves, leaf_vars, ranges, body, inner_stmts, drop_kinds=False):
    """``body`` inside the loops of ``leaves`` (outermost first; variables from ``leaf_vars``), with
    the stages of ``inner_stmts`` computed first inside their loop. ``drop_kinds``: the loops run
    serially and bind no thread (the copies of the spatial loops that initialise a reduction)."""
    for iv in reversed(leaves):
        if iv in inner_stmts:
            nests = [nest for _, nest in inner_stmts[iv]]
            body = S.seq(*nests, body)
            for buf, _ in reversed(inner_stmts[iv]):
                for b in buf:
                    body = S.Allocate(b, body)
        loop = _leaf_loop(stage, iv, ranges, leaf_vars[iv], body)
        if drop_kinds and loop.kind in (S.ForKind.PARALLEL, S.ForKind.THREAD_BINDING):
            loop = replace(loop, kind=S.ForKind.SERIAL, thread_tag="")
        body = loop
    return body


# ---------------------------------------------------------------------------------------------------
# 4. the whole program


def lower_schedule(sch: Schedule, args: list, name: str = "main") -> S.PrimFunc:
    """Lower a schedule to a PrimFunc whose parameters are the buffers of ``args`` (in order)."""
    from nnvm.tir.bound import attach_ranges

    args = list(args)
    for a in args:
        if not isinstance(a, Tensor):
            raise ScheduleError(f"lower: arguments must be tensors, got {a!r}")
    bodies = inline_stages(sch)
    arg_ops = {a.op for a in args}
    realized = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.attach_type != "inline"]
    for stage in sch.stages:
        if stage.is_output and stage.origin_op not in arg_ops:
            raise ScheduleError(f"lower: the output {stage.name} is not among the arguments")
        if isinstance(stage.op, PlaceholderOp) and stage.op not in arg_ops:
            if any(stage.op in (t.op for t in _reads(bodies, st)) for st in realized):
                raise ScheduleError(f"lower: the input {stage.name} is read but not among the arguments")

    children: dict = {}  # consumer stage -> leaf IterVar -> [stages computed there]
    for stage in realized:
        if stage.attach_type == "scope":
            children.setdefault(stage.attach_stage, {}).setdefault(stage.attach_ivar, []).append(stage)

    # Ranges consumers-first, so a compute_at stage sees the loops of the stage it is computed in.
    stage_ranges: dict = {}
    stage_limits: dict = {}  # compute_at stages: axis -> domain end where the region may overhang
    for stage in reversed(sch.stages):
        if stage not in realized:
            continue
        if stage.attach_type == "scope":
            at = f"compute_at loop {stage.attach_ivar.var.name} of stage {stage.attach_stage.name}"
            if stage.attach_stage not in stage_ranges:
                raise ScheduleError(f"stage {stage.name}: {at}: that stage is not computed before it can be "
                                    "attached to (inlined or attached later)")
            _check_attach_dominates(stage, bodies, stage_ranges, at)
            roots, stage_limits[stage] = attach_ranges(stage, sch, bodies, stage_ranges)
        else:
            roots = root_ranges(stage)
        stage_ranges[stage] = infer_bounds(stage, roots)

    buffers: dict = {}
    params = []
    for a in args:
        buf = S.Buffer(a.name, tuple(E.convert(x) for x in a.shape), a.dtype)
        buffers[a] = buf
        params.append(buf)
    own_buffers: dict = {}
    strides: dict = {}  # tensor -> row-major strides, for storage_align'ed buffers
    for stage in realized:
        own_buffers[stage] = []
        for t in stage.op.outputs:
            if t in buffers:
                continue
            shape = [stage_ranges[stage][iv][1] for iv in stage.op.axis]
            if stage.storage_alignments:
                strides[t] = _aligned_strides(shape, stage.storage_alignments)
                shape = [strides[t][0] * shape[0]] if shape else []
            buffers[t] = S.Buffer(t.name, tuple(E.const(x) for x in shape), t.dtype, stage.scope)
            own_buffers[stage].append(buffers[t])

    built: dict = {}

    def build(stage):
        if stage not in built:
            inner = {iv: [(own_buffers[k], build(k)) for k in kids]
                     for iv, kids in children.get(stage, {}).items()}
            built[stage] = make_stage_nest(stage, bodies[stage.op], list(stage.op.outputs),
                                           stage_ranges[stage], inner, stage_limits.get(stage))
        return built[stage]

    roots = [st for st in realized if st.attach_type == "root"]
    body = S.seq(*[build(st) for st in roots])
    for stage in realized:
        if stage not in built:
            raise ScheduleError(f"stage {stage.name}: compute_at chain does not reach a root stage")
    body = flatten_storage(body, buffers, stage_ranges, strides)
    if any(st.tensorized is not None for st in realized):
        from nnvm.te.tensorize import finish_tensor_intrin_calls

        body = finish_tensor_intrin_calls(body)
    for stage in reversed(roots):
        for buf in reversed(own_buffers[stage]):
            body = S.Allocate(buf, body)
    doubled = {buf for st in realized if st.double_buffered for buf in own_buffers[st]}
    body = _mark_double_buffers(body, doubled)
    body = unroll_loops(body)
    body = partition_loops(body)
    body = simplify(body)
    return S.PrimFunc(name, tuple(params), body)


def _check_attach_dominates(stage: Stage, bodies: dict, lowered, at: str) -> None:
    """A stage computed inside a loop must be read only inside that loop, by the stage owning it."""
    from nnvm.tir.visit import tensors_read

    outs = set(stage.op.outputs)
    readers = [st for st in lowered if any(t in outs for b in bodies[st.op] for t in tensors_read(b))]
    if readers == [stage.attach_stage]:
        return
    others = [st.name for st in readers if st is not stage.attach_stage]
    why = f"{', '.join(others)} read{'s' if len(others) == 1 else ''} it outside that loop" if others else \
        "nothing reads it"
    if stage.attach_stage not in readers:
        why += f", and {stage.attach_stage.name} does not read it"
    raise ScheduleError(f"stage {stage.name}: {at} does not dominate every read of {stage.name}: {why}")


def _reads(bodies, stage):
    from nnvm.tir.visit import tensors_read

    out = []
    for b in bodies[stage.op]:
        out.extend(tensors_read(b))
    return out


def _aligned_strides(shape: list, alignments: dict) -> list:
    """Row-major strides where dimension ``d``'s stride is padded to ``stride % factor == offset``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 1, -1, -1):
        stride = 1 if d == len(shape) - 1 else strides[d + 1] * shape[d + 1]
        if d in alignments:
            factor, offset = alignments[d]
            stride += (offset - stride) % factor
        strides[d] = stride
    return strides


def _mark_double_buffers(body, bufs: set):
    """Wrap the allocation of each double-buffered buffer in ``attr double_buffer_scope = buf``."""
    if not bufs:
        return body

    def fn(node):
        if isinstance(node, S.Allocate) and node.buffer in bufs:
            return S.AttrStmt("double_buffer_scope", node.buffer.name, node)
        return None

    return rewrite(body, fn)


def flatten_storage(body, buffers: dict, stage_ranges: dict, strides: dict | None = None):
    """TensorLoad / multi-index Store -> flat Load / Store, relative to each buffer's region."""
    strides = strides or {}
    offsets: dict = {}
    for stage, ranges in stage_ranges.items():
        for t in stage.op.outputs:
            offsets[t] = [ranges[iv][0] for iv in stage.op.axis]

    def flat_index(tensor, indices):
        buf = buffers.get(tensor)
        if buf is None:
            raise ScheduleError(f"lower: tensor {tensor.name} has no storage; is it among the arguments?")
        base = offsets.get(tensor)
        idx = E.const(0)
        rel = []
        for k, i in enumerate(indices):
            if base is not None and not (isinstance(base[k], int) and base[k] == 0):
                i = i - base[k]
            rel.append(i)
        if tensor in strides:
            for i, st in zip(rel, strides[tensor]):
                idx = idx + i * st
            return buf, idx
        for i, n in zip(rel, buf.shape):
            idx = idx * n + i
        return buf, idx

    def fn(node):
        if isinstance(node, E.TensorLoad):
            buf, idx = flat_index(node.tensor, node.indices)
            return E.Load(buf, idx, node.dtype)
        if isinstance(node, S.Store) and isinstance(node.buffer, Tensor):
            buf, idx = flat_index(node.buffer, node.index)
            return S.Store(buf, idx, node.value, node.predicate)
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
            copies = [substitute(node.body, {node.var: E.const(mn.value + k)}) for k in range(ext.value)]
            return S.seq(*copies) if copies else S.Seq(())
        return None

    return rewrite(body, fn)


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
        return replace(stmt, body=_partition(stmt.body, ranges))
    lo, ext = int(stmt.min.value), int(stmt.extent.value)
    parts = _split_loop(stmt, lo, ext, ranges) if stmt.kind in _PARTITIONABLE else None
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
    if Simplifier({**ranges, loop.var: tail_range}).stmt(loop.body) is None:
        # Nothing runs in the tail: that is trimming the loop (``for i in range(4): if i < 2``), which
        # is left to the guard, so the program keeps saying where the domain ends.
        return None
    main = replace(loop, extent=E.const(main_ext), body=main_body)
    tail = replace(loop, min=E.const(lo + main_ext), extent=E.const(ext - main_ext))
    return main, tail


def _guard_limits(var: E.Var, stmt, ranges: dict) -> list:
    """For each guard below ``stmt`` with a conjunct ``c*var + rest < 0`` (``c > 0``): the largest
    value of ``var`` for which that conjunct holds for every value ``rest`` can take."""
    limits: list = []

    def visit(s, rng):
        if isinstance(s, S.Seq):
            for x in s.stmts:
                visit(x, rng)
        elif isinstance(s, S.For):
            if isinstance(s.min, E.Const) and isinstance(s.extent, E.Const):
                lo = int(s.min.value)
                rng = {**rng, s.var: (lo, lo + int(s.extent.value) - 1)}
            visit(s.body, rng)
        elif isinstance(s, (S.Allocate, S.AttrStmt, S.LetStmt)):
            visit(s.body, rng)
        elif isinstance(s, S.IfThenElse):
            for conj in _conjuncts(s.cond):
                if var in free_vars(conj):
                    limits.append(_upper_limit(var, conj, rng))
            visit(s.then_body, rng)
            if s.else_body is not None:
                visit(s.else_body, rng)

    visit(stmt, ranges)
    return limits


def _conjuncts(cond) -> list:
    if isinstance(cond, E.BinOp) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _upper_limit(var: E.Var, cond, ranges: dict) -> int | None:
    """The largest ``var`` with ``cond`` true for all values of the other variables, for ``cond``
    of the form ``a < b`` (or ``<=``, ``>``, ``>=``) linear in ``var`` with a positive coefficient."""
    if not isinstance(cond, E.BinOp) or cond.op not in ("lt", "le", "gt", "ge"):
        return None
    a, b = (cond.a, cond.b) if cond.op in ("lt", "le") else (cond.b, cond.a)
    if not (E.is_int(a.dtype) and E.is_int(b.dtype)):
        return None
    simp = Simplifier(ranges)
    diff = simp.linear(E.BinOp("sub", a, b, a.dtype))  # cond: diff < 0 (lt) or diff <= 0 (le)
    if diff is None:
        return None
    coef = diff.terms.get(var, 0)
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
