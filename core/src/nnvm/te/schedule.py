"""Schedules: how the loops of each stage run, kept apart from what the stage computes.

A ``Stage`` starts with one loop per axis of its operation (spatial axes, then reduce axes). Every
primitive rewrites that loop list and records a *relation* (split, fuse) from which lowering
recovers the original indices. Nothing here changes the computed values.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnvm.errors import ScheduleError
from nnvm.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from nnvm.tir import expr as E
from nnvm.tir.stmt import ForKind


@dataclass(eq=False)
class Split:
    parent: E.IterVar
    outer: E.IterVar
    inner: E.IterVar
    factor: E.Expr | None
    nparts: E.Expr | None


@dataclass(eq=False)
class Fuse:
    outer: E.IterVar
    inner: E.IterVar
    fused: E.IterVar


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "vthread")


class Stage:
    """The schedule of one operation."""

    def __init__(self, op: Operation, schedule: Schedule):
        self.op = op
        self.schedule = schedule
        self.origin_op = op
        if isinstance(op, ComputeOp):
            self.all_iter_vars: list = list(op.axis) + list(op.reduce_axis)
        else:
            self.all_iter_vars = []
        self.leaf_iter_vars: list = list(self.all_iter_vars)
        self.relations: list = []
        self.iter_var_attrs: dict = {}  # IterVar -> dict(kind=..., thread_tag=..., pragmas=[...])
        self.attach_type = "root"  # root | inline | scope
        self.attach_stage: Stage | None = None
        self.attach_ivar: E.IterVar | None = None
        self.scope = "global"
        self.is_output = False
        self.storage_align: dict = {}
        self.double_buffer = False

    # -- helpers ------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"stage({self.name})"

    def _ivar(self, iv) -> E.IterVar:
        if isinstance(iv, E.Var):
            for cand in self.all_iter_vars:
                if cand.var is iv:
                    return cand
        if isinstance(iv, E.IterVar) and iv in self.all_iter_vars:
            return iv
        name = iv.var.name if isinstance(iv, E.IterVar) else getattr(iv, "name", repr(iv))
        raise ScheduleError(f"stage {self.name}: axis {name} does not belong to this stage")

    def _leaf_index(self, iv: E.IterVar) -> int:
        iv = self._ivar(iv)
        for k, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return k
        raise ScheduleError(f"stage {self.name}: axis {iv.var.name} was already split or fused away; "
                            "use the axes the primitive returned")

    def _new_ivar(self, name: str, kind: str) -> E.IterVar:
        iv = E.IterVar(None, E.Var(name), kind)
        self.all_iter_vars.append(iv)
        return iv

    def _check_compute(self, primitive: str) -> None:
        if not isinstance(self.op, ComputeOp):
            raise ScheduleError(f"stage {self.name}: {primitive} applies only to compute stages")

    # -- loop structure -----------------------------------------------------------------------------
    def split(self, parent, factor=None, nparts=None):
        """Split a loop into (outer, inner): ``parent = outer * factor + inner``.

        ``for i in range(10)`` with factor 4 becomes ``for i.outer in range(3): for i.inner in
        range(4): if i.outer*4 + i.inner < 10: ...`` (the guard is dropped when 4 divides the extent).
        """
        self._check_compute("split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"stage {self.name}: split takes exactly one of factor= and nparts=")
        parent = self._ivar(parent)
        pos = self._leaf_index(parent)
        amount = factor if factor is not None else nparts
        if isinstance(amount, int) and amount <= 0:
            raise ScheduleError(f"stage {self.name}: split of {parent.var.name} needs a positive factor, "
                                f"got {amount}")
        outer = self._new_ivar(f"{parent.var.name}.outer", parent.kind)
        inner = self._new_ivar(f"{parent.var.name}.inner", parent.kind)
        self.relations.append(Split(parent, outer, inner,
                                    None if factor is None else E.convert(factor),
                                    None if nparts is None else E.convert(nparts)))
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them (x.outer, y.outer, x.inner, y.inner)."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes):
        """Fuse adjacent loops (outermost first) into one whose extent is their product."""
        self._check_compute("fuse")
        if len(axes) == 1 and isinstance(axes[0], list | tuple):
            axes = tuple(axes[0])
        if len(axes) == 0:
            raise ScheduleError(f"stage {self.name}: fuse needs at least one axis")
        axes = [self._ivar(a) for a in axes]
        fused = axes[0]
        for inner in axes[1:]:
            po, pi = self._leaf_index(fused), self._leaf_index(inner)
            if pi != po + 1:
                raise ScheduleError(f"stage {self.name}: fuse needs adjacent loops, outer first; "
                                    f"{fused.var.name} and {inner.var.name} are not")
            kind = E.IterKind.REDUCE if E.IterKind.REDUCE in (fused.kind, inner.kind) else fused.kind
            if fused.kind != inner.kind:
                raise ScheduleError(f"stage {self.name}: cannot fuse spatial and reduce axes "
                                    f"({fused.var.name}, {inner.var.name})")
            new = self._new_ivar(f"{fused.var.name}.{inner.var.name}.fused", kind)
            self.relations.append(Fuse(fused, inner, new))
            self.leaf_iter_vars[po:pi + 1] = [new]
            fused = new
        return fused

    def reorder(self, *axes):
        """Put the given loops in this order, in the positions they occupied."""
        self._check_compute("reorder")
        ivs = [self._ivar(a) for a in axes]
        if len(set(map(id, ivs))) != len(ivs):
            raise ScheduleError(f"stage {self.name}: reorder got the same axis twice")
        positions = sorted(self._leaf_index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs):
            self.leaf_iter_vars[pos] = iv

    # -- loop annotations ---------------------------------------------------------------------------
    def _annotate(self, iv, kind: str, **extra) -> None:
        self._check_compute(kind)
        iv = self._ivar(iv)
        self._leaf_index(iv)
        attrs = self.iter_var_attrs.setdefault(iv, {})
        attrs["kind"] = kind
        attrs.update(extra)

    def unroll(self, iv):
        """Unroll the loop completely (its extent must be a constant after bound inference)."""
        self._annotate(iv, ForKind.UNROLLED)

    def vectorize(self, iv):
        """Run the loop as SIMD lanes."""
        self._annotate(iv, ForKind.VECTORIZED)

    def parallel(self, iv):
        """Run the iterations of this loop on the thread pool."""
        self._annotate(iv, ForKind.PARALLEL)

    def bind(self, iv, thread_tag):
        """Bind the loop to a GPU thread or block index (``te.thread_axis`` or a tag string)."""
        tag = thread_tag.thread_tag if isinstance(thread_tag, E.IterVar) else str(thread_tag)
        if tag not in THREAD_TAGS:
            raise ScheduleError(f"stage {self.name}: unknown thread tag {tag!r}; expected one of "
                                f"{', '.join(THREAD_TAGS)}")
        iv = self._ivar(iv)
        for other, attrs in self.iter_var_attrs.items():
            if other is not iv and attrs.get("thread_tag") == tag and tag != "vthread":
                raise ScheduleError(f"stage {self.name}: {tag} is already bound to axis {other.var.name}; "
                                    f"cannot bind it to {iv.var.name} too")
        self._annotate(iv, ForKind.THREAD_BINDING, thread_tag=tag)

    def pragma(self, iv, key: str, value=None):
        """Attach a free-form pragma to a loop; backends may act on it."""
        iv = self._ivar(iv)
        self.iter_var_attrs.setdefault(iv, {}).setdefault("pragmas", []).append((key, value))

    # -- attachment ---------------------------------------------------------------------------------
    def compute_inline(self):
        """Substitute this stage's expression into its consumers; it gets no loops or storage."""
        self._check_compute("compute_inline")
        if self.op.reduce_axis:
            raise ScheduleError(f"stage {self.name}: a reduction cannot be inlined")
        if self.is_output:
            raise ScheduleError(f"stage {self.name}: an output of the schedule cannot be inlined")
        self.attach_type = "inline"

    def compute_root(self):
        """Compute this stage in its own loop nest at the top of the program (the default)."""
        self._check_compute("compute_root")
        self.attach_type = "root"
        self.attach_stage = None
        self.attach_ivar = None

    def compute_at(self, parent: Stage, ivar):
        """Compute the part of this stage that ``parent`` needs inside ``parent``'s loop ``ivar``."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"stage {self.name}: compute_at takes a stage, e.g. s[C]")
        iv = parent._ivar(ivar)
        parent._leaf_index(iv)
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = iv

    def set_scope(self, scope: str):
        if scope not in ("global", "shared", "local"):
            raise ScheduleError(f"stage {self.name}: unknown storage scope {scope!r}")
        self.scope = scope


class Schedule:
    """A stage per operation reachable from the outputs, producers before consumers."""

    def __init__(self, outputs: list[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict = {}
        for op in _post_order(self.outputs):
            stage = Stage(op, self)
            stage.is_output = op in self.outputs
            self.stages.append(stage)
            self.stage_map[op] = stage

    def __getitem__(self, key) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        try:
            return self.stage_map[op]
        except KeyError:
            raise ScheduleError(f"{getattr(op, 'name', op)} is not part of this schedule") from None

    def __contains__(self, key) -> bool:
        op = key.op if isinstance(key, Tensor) else key
        return op in self.stage_map


def _post_order(outputs: list[Operation]) -> list[Operation]:
    order: list = []
    seen: set = set()

    def visit(op):
        stack = [(op, False)]
        while stack:
            node, done = stack.pop()
            if done:
                if node not in seen:
                    seen.add(node)
                    order.append(node)
                continue
            if node in seen:
                continue
            stack.append((node, True))
            for t in reversed(node.input_tensors):
                if t.op not in seen:
                    stack.append((t.op, False))

    for op in outputs:
        visit(op)
    return order


def create_schedule(ops) -> Schedule:
    """A default schedule (one root loop nest per stage) for one or more output operations."""
    if not isinstance(ops, list | tuple):
        ops = [ops]
    ops = [o.op if isinstance(o, Tensor) else o for o in ops]
    for o in ops:
        if isinstance(o, PlaceholderOp):
            raise ScheduleError(f"{o.name} is a placeholder; schedule the compute that produces a result")
    return Schedule(ops)
