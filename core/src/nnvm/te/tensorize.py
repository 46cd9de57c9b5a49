"""Tensor intrinsics and ``tensorize``: replace an inner loop nest by a call that a backend implements.

A backend knows instructions or hand-written micro-kernels that compute a whole small tile at once (a
vector dot product, a 4x16 GEMM block held in registers). It says *what* such a kernel computes the
way every operator does, as a ``te.compute`` over small placeholders, and declares it with
``decl_tensor_intrin``::

    A = te.placeholder((4, 8), name="a"); B = te.placeholder((8, 16), name="b")
    r = te.reduce_axis((0, 8), name="r")
    C = te.compute((4, 16), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="c")
    gemm = te.decl_tensor_intrin(C, reference=lambda a, b, c: c.__iadd__(a @ b), name="gemm_4x16x8")

``s[C].tensorize(xi, gemm)`` then asks lowering to replace the loops from ``xi`` inward by one call.
Lowering checks that the replacement is *exact*: those loops must be as many and as long as the
intrinsic's axes (paired in the order of the stage's axes they walk, spatial ones then reduce ones,
whatever the order of the loops; an intrinsic's axis of extent 1 may have no loop), and the stage's
body, with their variables renamed to the intrinsic's, must have the intrinsic's structure: the same
operations, the same reducer, the same dtypes, and reads of tensors whose indices differ from the
intrinsic's only by an offset (the enclosing loops' position) and by strides (the tensors' layout).
Anything else is an ``nnvm.ScheduleError`` naming the stage, the axis and what differed. The call
passes, per buffer of the intrinsic (inputs, then the output), the address of its first element and
the element stride of each of its dimensions (``tir.expr.TensorIntrinCall``). Annotations of the
replaced loops (unroll, vectorize) go with them.

What the call does, which every implementation follows: for a reduction it *accumulates* into the
output region (``c += a @ b``), the initialisation staying an ordinary loop nest just before the call
(or above the reduction loops outside the region), so the same intrinsic serves a reduction split
around it; otherwise it overwrites the region. ``reference`` is that behaviour in numpy,
``reference(*inputs, output)`` on strided views, updating ``output`` in place: the reference
interpreter runs it, so a tensorized program is checked on any machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from nnvm.errors import ScheduleError
from nnvm.target import parse_target
from nnvm.te.nest import reduction_nest, wrap_loops
from nnvm.te.relations import Fuse, Split
from nnvm.te.tensor import ComputeOp, PlaceholderOp, Tensor
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.lower import guarded
from nnvm.tir.simplify import Simplifier, simplify
from nnvm.tir.visit import free_vars, rewrite, substitute, tensors_read, walk


@dataclass(eq=False)
class TensorIntrin:
    """A declared tensor intrinsic: its compute (``op``), its buffers and its numpy reference.

    ``params`` is free-form data for the backend that implements it (sizes, the kernel's flavour).
    """

    name: str
    op: ComputeOp
    inputs: tuple  # placeholders, in the order of the call's buffers
    reference: Callable
    params: dict = field(default_factory=dict)

    @property
    def output(self) -> Tensor:
        return self.op.outputs[0]

    @property
    def buffers(self) -> tuple:
        """The tensors whose regions the call receives: the inputs, then the output."""
        return (*self.inputs, self.output)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.op.body[0], E.Reduce)

    def shape(self, tensor: Tensor) -> tuple:
        return tuple(int(d.value) for d in tensor.shape)

    def __repr__(self) -> str:
        return f"TensorIntrin({self.name})"


def decl_tensor_intrin(out: Tensor, reference: Callable, name: str | None = None, inputs=None,
                       params: dict | None = None) -> TensorIntrin:
    """Declare a tensor intrinsic computing ``out`` (a ``te.compute`` over placeholders).

    ``reference(*inputs, output)`` is the intrinsic's behaviour in numpy on strided views (accumulate
    into ``output`` for a reduction, overwrite otherwise). ``inputs`` orders the call's input buffers
    (default: the order the body reads them). Every read must index a placeholder by plain axis
    variables of ``out`` (``A[i, r]``), so that a matching loop nest is found up to offsets and
    strides; extents must be constants.
    """
    op = out.op
    name = name or op.name
    where = f"tensor intrinsic {name}"
    if not isinstance(op, ComputeOp) or len(op.outputs) != 1:
        raise ScheduleError(f"{where}: declare it with a single-output te.compute")
    if not callable(reference):
        raise ScheduleError(f"{where}: reference must be a function of numpy arrays (inputs, output)")
    for iv in list(op.axis) + list(op.reduce_axis):
        if not isinstance(simplify(iv.dom.extent), E.Const) or not isinstance(simplify(iv.dom.min), E.Const):
            raise ScheduleError(f"{where}: axis {iv.var.name} needs a constant range")
        if simplify(iv.dom.min).value != 0:
            raise ScheduleError(f"{where}: axis {iv.var.name} must start at 0")
    body = op.body[0]
    if isinstance(body, E.Reduce) and (body.condition is not None or body.init is not None):
        raise ScheduleError(f"{where}: a reduction with a condition or an init cannot be an intrinsic")
    read = tensors_read(body)
    inputs = tuple(read if inputs is None else inputs)
    if set(map(id, inputs)) != set(map(id, read)) or len(inputs) != len(read):
        raise ScheduleError(f"{where}: inputs must list exactly the tensors the body reads: "
                            f"{', '.join(t.name for t in read)}")
    axis_vars = {iv.var for iv in list(op.axis) + list(op.reduce_axis)}
    seen: dict = {}
    for load in _loads(body):
        t = load.tensor
        if not isinstance(t.op, PlaceholderOp):
            raise ScheduleError(f"{where}: reads {t.name}, which is not a placeholder")
        if any(not (isinstance(i, E.Var) and i in axis_vars) for i in load.indices):
            raise ScheduleError(f"{where}: {load!r} must be indexed by plain axis variables")
        if len({id(i) for i in load.indices}) != len(load.indices):
            raise ScheduleError(f"{where}: {load!r} uses an axis twice")
        if t in seen and any(a is not b for a, b in zip(seen[t], load.indices)):
            raise ScheduleError(f"{where}: {t.name} is read at two different positions")
        seen[t] = load.indices
    return TensorIntrin(name, op, inputs, reference, dict(params or {}))


def _loads(expr) -> list:
    found: list = []

    def fn(node):
        if isinstance(node, E.TensorLoad):
            found.append(node)


    walk(expr, fn)
    return found


# ---------------------------------------------------------------------------------------------------
# matching and lowering (called by nnvm.te.lower.make_stage_nest)


class _Mismatch(Exception):
    pass


def tensorized_nest(stage, body_exprs: tuple, out_tensors: list, ranges: dict, inner_stmts: dict,
                    vmap: dict, guards: list) -> S.Stmt:
    """The loop nest of a tensorized stage: the loops outside the tensorized axis, the reduction's
    initialisation, and the intrinsic's call where the inner loops were.

    ``vmap`` maps each original axis variable to its value in leaf loop variables and ``guards`` are
    the split guards (as computed by ``make_stage_nest``).
    """
    axis, intrin = stage.tensorized
    leaves = list(stage.leaf_iter_vars)
    where = f"stage {stage.name}: tensorize at axis {axis.var.name} with {intrin.name}"
    pos = next((k for k, lv in enumerate(leaves) if lv is axis), None)
    if pos is None:
        raise ScheduleError(f"{where}: the axis was split or fused after tensorize; tensorize a loop of the "
                            "final nest")
    region = leaves[pos:]
    for lv in region:
        if lv in inner_stmts:
            raise ScheduleError(f"{where}: another stage is computed at loop {lv.var.name}, inside the "
                                "region the intrinsic replaces")
    pairing = _pair_axes(_in_axis_order(stage, region), intrin, ranges, where)
    region_vars = {lv.var for lv in region}
    for g_iv, cond in guards:
        if free_vars(cond) & region_vars:
            raise ScheduleError(f"{where}: the loops of axis {g_iv.var.name} do not tile it evenly "
                                f"(guard {cond!r}), so the region is not a whole intrinsic call")
    if len(body_exprs) != 1:
        raise ScheduleError(f"{where}: the stage has several outputs; an intrinsic computes one")
    # a loop of one iteration is always at 0: reads may depend on it however they like
    rename = {lv.var: E.const(0) if ranges[lv][1] == 1 else iv.var for lv, iv in pairing.items()}
    values = {k: simplify(substitute(v, rename)) for k, v in vmap.items()}
    op = stage.op
    out = out_tensors[0]
    body = body_exprs[0]
    ibody = intrin.op.body[0]
    bindings: dict = {}
    try:
        if isinstance(body, E.Reduce) != isinstance(ibody, E.Reduce):
            what = "a reduction" if isinstance(body, E.Reduce) else "not a reduction"
            raise _Mismatch(f"the stage is {what} but the intrinsic is the opposite")
        if isinstance(body, E.Reduce):
            if body.combiner.name != ibody.combiner.name or body.dtype != ibody.dtype:
                raise _Mismatch(f"the stage reduces with {body.combiner.name} ({body.dtype}), the intrinsic "
                                f"with {ibody.combiner.name} ({ibody.dtype})")
            if body.condition is not None:
                raise _Mismatch("the stage's reduction has a condition (where=)")
            _match(substitute(body.source, values), ibody.source, bindings)
        else:
            _match(substitute(body, values), ibody, bindings)
        out_idx = tuple(values[iv.var] for iv in op.axis)
        _bind(intrin.output, out, out_idx, intrin.output[tuple(iv.var for iv in intrin.op.axis)].indices,
              bindings)
        # with the loops' ranges known, split indices (``(j.outer*32 + j) // 32``) become linear again
        var_ranges = {iv.var: (0, int(simplify(iv.dom.extent).value) - 1) for iv in pairing.values()}
        var_ranges.update({lv.var: (0, ranges[lv][1] - 1) for lv in leaves[:pos]})
        bindings = {p: (t, tuple(simplify(i, var_ranges) for i in idx), pat)
                    for p, (t, idx, pat) in bindings.items()}
        regions, strides = _regions(intrin, bindings, var_ranges)
    except _Mismatch as exc:
        raise ScheduleError(f"{where}: the loop nest does not match the intrinsic: {exc}") from None
    call = S.Evaluate(E.TensorIntrinCall(intrin, tuple(regions), tuple(strides)))
    spatial_guards = [c for iv, c in guards if iv.kind != E.IterKind.REDUCE]
    if not isinstance(body, E.Reduce):
        leaf_vars = {iv: iv.var for iv in leaves[:pos]}
        return wrap_loops(stage, leaves[:pos], leaf_vars, ranges, guarded(call, spatial_guards), inner_stmts)
    return reduction_nest(stage, body, out, vmap, ranges, spatial_guards, guarded(call, spatial_guards),
                          inner_stmts, stop=pos)


def _in_axis_order(stage, region: list) -> list:
    """The region's loops ordered by the original axis each comes from (stable within one axis): the
    region is replaced as a whole, so the order of its loops does not matter, the axes they walk do."""
    root = {iv: k for k, iv in enumerate(list(stage.op.axis) + list(stage.op.reduce_axis))}
    for rel in stage.relations:
        if isinstance(rel, Split) and rel.parent in root:
            root[rel.outer] = root[rel.inner] = root[rel.parent]
        elif isinstance(rel, Fuse) and rel.outer in root:
            root[rel.fused] = root[rel.outer]
    return sorted(region, key=lambda lv: root.get(lv, len(root)))


def _pair_axes(region: list, intrin: TensorIntrin, ranges: dict, where: str) -> dict:
    """Leaf IterVar of the region -> the intrinsic's IterVar: spatial ones in order, then reduce ones."""
    spatial = [lv for lv in region if lv.kind != E.IterKind.REDUCE]
    reduce_ = [lv for lv in region if lv.kind == E.IterKind.REDUCE]
    iop = intrin.op
    axes = list(iop.axis)
    # an intrinsic's axis of extent 1 (the rows of a 1 x n kernel) needs no loop: leading ones may go
    for iv in list(axes):
        if len(axes) > len(spatial) and int(simplify(iv.dom.extent).value) == 1:
            axes.remove(iv)
    if len(spatial) != len(axes) or len(reduce_) != len(iop.reduce_axis):
        names = ", ".join(lv.var.name for lv in region)
        raise ScheduleError(f"{where}: the loops from this axis inward ({names}) are {len(spatial)} spatial "
                            f"and {len(reduce_)} reduce, the intrinsic has {len(iop.axis)} spatial and "
                            f"{len(iop.reduce_axis)} reduce axes")
    pairing = {}
    for lv, iv in zip(spatial + reduce_, axes + list(iop.reduce_axis)):
        ext = ranges[lv][1]
        want = int(simplify(iv.dom.extent).value)
        if ext != want:
            raise ScheduleError(f"{where}: loop {lv.var.name} runs {ext} iterations but the intrinsic's axis "
                                f"{iv.var.name} has {want}")
        pairing[lv] = iv
    return pairing


_COMMUTATIVE = ("add", "mul", "min", "max", "eq", "ne", "and", "or")


def _match(a, b, bindings: dict) -> None:
    """Raise ``_Mismatch`` unless the stage's expression ``a`` has the structure of the intrinsic's ``b``.

    Reads are recorded in ``bindings`` (intrinsic placeholder -> (stage tensor, indices)) rather than
    compared: their indices may differ by offsets and strides, checked once all reads are known.
    """
    if isinstance(b, E.TensorLoad):
        if not isinstance(a, E.TensorLoad):
            raise _Mismatch(f"{a!r} where the intrinsic reads {b!r}")
        _bind(b.tensor, a.tensor, a.indices, b.indices, bindings)
        return
    if type(a) is not type(b) or a.dtype != b.dtype:
        raise _Mismatch(f"{a!r} ({a.dtype}) where the intrinsic has {b!r} ({b.dtype})")
    if isinstance(b, E.Var):
        if a is not b:
            raise _Mismatch(f"the variable {a!r} where the intrinsic has {b!r}")
    elif isinstance(b, E.Const):
        if a.value != b.value:
            raise _Mismatch(f"the constant {a!r} where the intrinsic has {b!r}")
    elif isinstance(b, E.BinOp):
        if a.op != b.op:
            raise _Mismatch(f"{a!r} where the intrinsic has {b!r}")
        try:
            trial = dict(bindings)
            _match(a.a, b.a, trial)
            _match(a.b, b.b, trial)
        except _Mismatch:
            if b.op not in _COMMUTATIVE:
                raise
            trial = dict(bindings)
            _match(a.b, b.a, trial)
            _match(a.a, b.b, trial)
        bindings.update(trial)
    elif isinstance(b, E.Call):
        if a.name != b.name or len(a.args) != len(b.args):
            raise _Mismatch(f"{a!r} where the intrinsic has {b!r}")
        for x, y in zip(a.args, b.args):
            _match(x, y, bindings)
    elif isinstance(b, E.Cast):
        _match(a.value, b.value, bindings)
    elif isinstance(b, E.Select):
        for x, y in ((a.cond, b.cond), (a.true_value, b.true_value), (a.false_value, b.false_value)):
            _match(x, y, bindings)
    else:
        raise _Mismatch(f"{a!r}: a {type(b).__name__} cannot be matched")


def _bind(placeholder: Tensor, tensor: Tensor, indices: tuple, pattern: tuple, bindings: dict) -> None:
    """Record that the intrinsic's ``placeholder[pattern]`` is the stage's ``tensor[indices]``."""
    if tensor.dtype != placeholder.dtype:
        raise _Mismatch(f"{tensor.name} is {tensor.dtype}, the intrinsic's {placeholder.name} is "
                        f"{placeholder.dtype}")
    if placeholder in bindings:
        other, other_idx, _ = bindings[placeholder]
        same = other is tensor and all(
            isinstance(d := simplify(x - y), E.Const) and d.value == 0 for x, y in zip(other_idx, indices))
        if not same:
            raise _Mismatch(f"the intrinsic reads {placeholder.name} once, the stage reads "
                            f"{other.name}[{', '.join(map(repr, other_idx))}] and "
                            f"{tensor.name}[{', '.join(map(repr, indices))}] in its place")
        return
    bindings[placeholder] = (tensor, tuple(indices), tuple(pattern))


def _regions(intrin: TensorIntrin, bindings: dict, var_ranges: dict) -> tuple[list, list]:
    """Per buffer of the intrinsic: the read of its first element and, per dimension, the read of the
    element one step along it. ``flatten_storage`` turns both into flat loads, and
    ``finish_tensor_intrin_calls`` the differences into strides: the layout is known only then."""
    ivars = [iv.var for iv in list(intrin.op.axis) + list(intrin.op.reduce_axis)]
    zero = {v: E.const(0) for v in ivars}
    regions, strides = [], []
    for placeholder in intrin.buffers:
        tensor, indices, pattern = bindings[placeholder]
        simp = Simplifier(dict(var_ranges))
        for idx in indices:
            lin = simp.linear(idx)
            for atom in (lin.terms if lin is not None else {idx: 1}):
                if atom not in ivars and free_vars(atom) & set(ivars):
                    raise _Mismatch(f"{tensor.name} is indexed by {idx!r}, not an offset plus a multiple of "
                                    "the intrinsic's axes")
        used = set().union(*[free_vars(i) for i in indices]) & set(ivars) if indices else set()
        extra = used - set(pattern)
        if extra:
            raise _Mismatch(f"{tensor.name} is indexed by {', '.join(sorted(v.name for v in extra))} but the "
                            f"intrinsic reads {placeholder.name} without it")
        base = tuple(simplify(substitute(i, zero)) for i in indices)
        regions.append(E.TensorLoad(tensor, base, tensor.dtype))
        units = []
        for v in pattern:
            unit = {**zero, v: E.const(1)}
            units.append(E.TensorLoad(tensor, tuple(simplify(substitute(i, unit)) for i in indices),
                                      tensor.dtype))
        strides.append(tuple(units))
    return regions, strides


def finish_tensor_intrin_calls(body):
    """After ``flatten_storage``: turn each call's per-dimension loads into constant element strides."""
    def fn(node):
        if not isinstance(node, E.TensorIntrinCall):
            return None
        strides = []
        for base, units in zip(node.regions, node.strides):
            row = []
            for unit in units:
                if not isinstance(unit, E.Load):
                    return None  # already finished
                step = simplify(unit.index - base.index)
                if not isinstance(step, E.Const):
                    raise ScheduleError(f"tensorize with {node.intrin.name}: the stride of "
                                        f"{base.buffer.name} is {step!r}, not a constant")
                row.append(step)
            strides.append(tuple(row))
        return E.TensorIntrinCall(node.intrin, node.regions, tuple(strides), node.dtype)

    return rewrite(body, fn)


def backend_intrinsic(target, name: str, **params) -> TensorIntrin:
    """The tensor intrinsic ``name`` that the backend of ``target`` declares, built with ``params``.

    ``backend_intrinsic("llvm", "gemm", m=4, n=16, k=8)``; the names a backend offers are the keys of
    its ``Backend.tensor_intrinsics(target)``.
    """
    tgt = parse_target(target) if isinstance(target, str) else target
    offered = tgt.backend.tensor_intrinsics(tgt)
    if name not in offered:
        known = ", ".join(sorted(offered)) or "none"
        raise ScheduleError(f"target {tgt}: no tensor intrinsic named {name!r} (offered: {known})")
    return offered[name](**params)
