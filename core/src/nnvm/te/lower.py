"""Lowering: a schedule becomes a loop program over flat buffers.

The steps, each a function below or in the module named:
1. ``inline_stages``: substitute compute_inline stages into their consumers.
2. ``nnvm.te.relations.infer_bounds``: the range of every loop, through split/fuse relations (and
   ``nnvm.te.bound`` for compute_at scopes).
3. ``make_stage_nest``: one loop nest per stage (``nnvm.te.nest``); split guards where a factor may not
   divide; the reduction's init placed above the first reduce loop.
4. attach: stages computed at a loop of another stage are nested inside it; the others follow in
   producer-before-consumer order, intermediates wrapped in ``Allocate``.
5. ``flatten_storage``: multi-dimensional tensor reads/writes become flat buffer accesses.
6. ``nnvm.tir.lower``: ``unroll_loops``, ``partition_loops`` (split guards out of the loops' main
   iterations), then ``simplify``.
"""

from __future__ import annotations

from dataclasses import replace

from nnvm.errors import ScheduleError
from nnvm.te.bound import attach_ranges, nested_in
from nnvm.te.nest import reduction_nest, wrap_loops
from nnvm.te.relations import axis_values, infer_bounds, root_ranges
from nnvm.te.schedule import Schedule, Specialised, Stage
from nnvm.te.tensor import ComputeOp, PlaceholderOp, Tensor
from nnvm.te.tensorize import finish_tensor_intrin_calls, tensorized_nest
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.lower import guarded, mark_double_buffers, partition_loops, unroll_loops
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import rewrite, shape_dims, substitute, tensors_read, unbound_vars

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


# ---------------------------------------------------------------------------------------------------
# 4. the whole program


def lower_schedule(sch: Schedule | Specialised, args: list, name: str = "main") -> S.PrimFunc:
    """Lower a schedule to a PrimFunc whose parameters are the buffers of ``args`` (in order)."""
    if isinstance(sch, Specialised):
        return _lower_specialised(sch, args, name)
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
            roots, stage_limits[stage] = attach_ranges(stage, sch, bodies, stage_ranges, stage_limits)
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
            buffers[t] = S.Buffer(t.name, tuple(E.convert(x) for x in shape), t.dtype, stage.scope)
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
        body = finish_tensor_intrin_calls(body)
    for stage in reversed(roots):
        for buf in reversed(own_buffers[stage]):
            body = S.Allocate(buf, body)
    doubled = {buf for st in realized if st.double_buffered for buf in own_buffers[st]}
    body = mark_double_buffers(body, doubled)
    body = unroll_loops(body)
    body = partition_loops(body)
    body = simplify(body)
    dims = shape_dims(params)
    # dims the program reads beyond its parameters' shapes (a tensor of dims' values), by name
    dims += tuple(sorted((v for v in unbound_vars(body) if v not in dims), key=lambda v: v.name))
    return S.PrimFunc(name, tuple(params), body, {"dims": dims} if dims else {})


def _lower_specialised(sch: Specialised, args: list, name: str) -> S.PrimFunc:
    """``Specialised``: the general program, after each case under its test of the dims."""
    func = lower_schedule(sch.general, args, name)
    dims = {v.name: v for v in func.attrs.get("dims", ())}
    body = func.body
    for values, case in reversed(sch.cases):
        unknown = sorted(set(values) - set(dims))
        if unknown:
            raise ScheduleError(f"lower: a case of {name} gives values to {', '.join(unknown)}, which are "
                                f"no dims of it (dims: {', '.join(dims) or 'none'})")
        vmap = {dims[d]: E.const(v, dims[d].dtype) for d, v in values.items()}
        own = lower_schedule(case, args, name)
        buffers = dict(zip(own.params, func.params))

        def fn(node, buffers=buffers, vmap=vmap):  # children first: a load's index is already rewritten
            if isinstance(node, (E.Load, S.Store)) and node.buffer in buffers:
                return replace(node, buffer=buffers[node.buffer])
            return vmap.get(node) if isinstance(node, E.Var) else None

        cased = simplify(partition_loops(simplify(rewrite(own.body, fn))))
        test = None
        for d, v in values.items():
            eq = E.binop("eq", dims[d], E.const(v, dims[d].dtype))
            test = eq if test is None else test & eq
        body = S.IfThenElse(test, cased, body)
    return replace(func, body=body)


def _check_attach_dominates(stage: Stage, bodies: dict, lowered, at: str) -> None:
    """A stage computed inside a loop must be read only inside that loop: by the stage owning it, or by
    stages computed inside that loop."""
    outs = set(stage.op.outputs)
    readers = [st for st in lowered if any(t in outs for b in bodies[st.op] for t in tensors_read(b))]
    owner = stage.attach_stage
    pos = owner.leaf_iter_vars.index(stage.attach_ivar)
    outside = [st.name for st in readers if st is not owner and not nested_in(st, owner, pos + 1)]
    if readers and not outside:
        return
    why = f"{', '.join(outside)} read{'s' if len(outside) == 1 else ''} it outside that loop" if outside \
        else "nothing reads it"
    if outside and owner not in readers:
        why += f", and {owner.name} does not read it"
    raise ScheduleError(f"stage {stage.name}: {at} does not dominate every read of {stage.name}: {why}")


def _reads(bodies, stage):
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
