"""Schedules: how the loops of each stage run, kept apart from what the stage computes.

A ``Stage`` starts with one loop per axis of its operation (spatial axes, then reduce axes). Every
primitive rewrites that loop list and records a *relation* (split, fuse) from which lowering
recovers the original indices. Nothing here changes the computed values.
"""

from __future__ import annotations

from dataclasses import replace

from nnvm.errors import ScheduleError
from nnvm.te.relations import Fuse, Split, axis_values, infer_bounds, root_ranges
from nnvm.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor
from nnvm.te.tensorize import TensorIntrin
from nnvm.tir import expr as E
from nnvm.tir.stmt import ForKind
from nnvm.tir.visit import rewrite, substitute, tensors_read

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
        self.storage_alignments: dict = {}  # dimension -> (factor, offset)
        self.double_buffered = False
        self.tensorized: tuple | None = None  # (leaf IterVar, nnvm.te.tensorize.TensorIntrin)

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
        """Compute the part of this stage that ``parent`` needs inside ``parent``'s loop ``ivar``; or, where
        the stages reading it are computed inside that loop (a band of rows for the tiles within it),
        the part they need there."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise ScheduleError(f"stage {self.name}: compute_at takes a stage, e.g. s[C]")
        iv = parent._ivar(ivar)
        parent._leaf_index(iv)
        if parent is self:
            raise ScheduleError(f"stage {self.name}: compute_at its own loop {iv.var.name}; a stage can only "
                                "be computed inside a loop of a stage that reads it")
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = iv

    def tensorize(self, axis, intrin):
        """Replace the loops from ``axis`` inward by a call of the tensor intrinsic ``intrin``.

        ``intrin`` comes from ``te.decl_tensor_intrin`` or a backend (``te.backend_intrinsic``);
        lowering checks that the loops and the body match it (``nnvm.te.tensorize``). Matmul tiled
        4x16, reduction split by 8, tensorized at the 4-row tile with a 4x16x8 GEMM kernel::

            for k.outer in range(4):                    for k.outer in range(4):
              for i.inner in range(4):                    gemm_4x16x8(&A[...], &B[...], &C[...])
                for j.inner in range(16):         ->
                  for k.inner in range(8):
                    C[...] = C[...] + A[...]*B[...]
        """
        self._check_compute("tensorize")
        iv = self._ivar(axis)
        self._leaf_index(iv)
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"stage {self.name}: tensorize of axis {iv.var.name} needs a tensor "
                                f"intrinsic (te.decl_tensor_intrin), got {intrin!r}")
        self.tensorized = (iv, intrin)

    def set_scope(self, scope: str):
        """Where the stage's buffer lives: ``global``, ``shared`` or ``local``."""
        _check_scope(self.name, scope)
        self.scope = scope

    # -- storage ------------------------------------------------------------------------------------
    def storage_align(self, axis, factor: int, offset: int):
        """Pad the stride of dimension ``axis`` of this stage's buffer so ``stride % factor == offset``.

        TVM's semantics: only the layout of the intermediate buffer changes (to avoid bank conflicts
        or align rows), never the values. ``B: float32[8, 8]`` aligned at its first axis with
        ``factor=16, offset=1`` is stored with row stride 17::

            allocate B: float32[8, 8]        ->   allocate B: float32[136]
            B[((i * 8) + j)] = ...                B[((i * 17) + j)] = ...
        """
        self._check_compute("storage_align")
        iv = self._ivar(axis)
        if iv not in self.op.axis:
            raise ScheduleError(f"stage {self.name}: storage_align needs an original spatial axis of the "
                                f"stage, not {iv.var.name}")
        if not isinstance(factor, int) or factor <= 0 or not isinstance(offset, int) or offset < 0:
            raise ScheduleError(f"stage {self.name}: storage_align of axis {iv.var.name} needs a positive "
                                f"integer factor and a non-negative offset, got {factor!r}, {offset!r}")
        self.storage_alignments[list(self.op.axis).index(iv)] = (factor, offset % factor)

    def double_buffer(self):
        """Mark this stage's buffer for double buffering (load the next tile while using this one).

        Lowering keeps the loop program and wraps the buffer's allocation in an annotation that a
        backend may act on::

            allocate B: float32[4]      ->   attr double_buffer_scope = B
              ...                              allocate B: float32[4]
        """
        self._check_compute("double_buffer")
        if self.is_output:
            raise ScheduleError(f"stage {self.name}: an output of the schedule cannot be double buffered")
        self.double_buffered = True


class Specialised:
    """A schedule over symbolic dims with cases for given dim values (a shape bucket inside one kernel).

    ``general`` serves every binding; each ``(values, schedule)`` of ``cases`` (``values``: dim name ->
    int) serves the bindings with exactly those values, lowered with the dims replaced by them, so its
    loops are the static kernel's. Lowering puts the cases first, each under its test of the dims
    (``if seq == 1 && batch == 1``), and the general program last: one kernel, one call, no plan change.
    A packed dense over symbolic rows computes its rows in tiles of 8 (``padded_rows``); a decoding
    step's single row would compute 8, so the one-row case keeps the static kernel's tile.
    """

    def __init__(self, general: Schedule, cases: list):
        self.general = general
        self.cases = list(cases)

    @property
    def stages(self) -> list:
        return self.general.stages

    def __getitem__(self, key):
        return self.general[key]


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

    # -- primitives that add stages -----------------------------------------------------------------
    def _insert_stage(self, op: ComputeOp, before: Stage) -> Stage:
        stage = Stage(op, self)
        self.stages.insert(self.stages.index(before), stage)
        self.stage_map[op] = stage
        return stage

    def _fresh_stage(self, tensor: Tensor, primitive: str) -> Stage:
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"{primitive} takes a tensor, got {tensor!r}")
        stage = self[tensor]
        if stage.relations or stage.iter_var_attrs or stage.attach_type != "root":
            raise ScheduleError(f"stage {stage.name}: {primitive} must come before the stage is scheduled "
                                "(split, fuse, annotations or attachment)")
        return stage

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new cache stage in ``scope``; the original stage becomes a copy.

        Approach (TVM's): a new ComputeOp ``<name>.<scope>`` takes the original body with fresh axis
        and reduce IterVars; the original stage keeps its tensor and spatial axes (so ``s[C]`` and
        ``C.op.axis`` still work, and it stays the output) but its operation becomes the copy
        ``C[i, j] = C.local[i, j]``. The new stage is inserted just before it. Typical use: the
        reduction accumulates in a small local tile (``compute_at`` the copy's loop)::

            for i, j:                          for i, j:
              C[i, j] = 0                        C.local[i, j] = 0
              for k:                     ->      for k:
                C[i, j] += A[i, k]*B[k, j]         C.local[i, j] += A[i, k]*B[k, j]
                                               for i, j:
                                                 C[i, j] = C.local[i, j]

        Returns the cache tensor; schedule it through ``s[cache]``.
        """
        stage = self._fresh_stage(tensor, "cache_write")
        _check_scope(stage.name, scope)
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"stage {stage.name}: cache_write applies only to compute stages")
        if len(op.outputs) != 1:
            raise ScheduleError(f"stage {stage.name}: cache_write of an operation with several outputs "
                                "is not supported")
        vmap, axis, raxis = {}, [], []
        for iv in op.axis:
            new = E.IterVar(iv.dom, E.Var(iv.var.name + ".c"), iv.kind)
            vmap[iv.var] = new.var
            axis.append(new)
        for iv in op.reduce_axis:
            new = E.IterVar(iv.dom, E.Var(iv.var.name), iv.kind)
            vmap[iv.var] = new.var
            raxis.append(new)
        rmap = {id(old): new for old, new in zip(op.reduce_axis, raxis)}
        body = tuple(_remap_reduce(substitute(b, vmap), rmap) for b in op.body)
        cache_op = ComputeOp(f"{op.name}.{scope}", tuple(axis), tuple(raxis), body, op.tag, dict(op.attrs))
        cache_op.outputs = [Tensor(cache_op, 0, tensor.shape, tensor.dtype)]
        cache = cache_op.outputs[0]
        copy_op = ComputeOp(op.name, op.axis, (), (cache[tuple(iv.var for iv in op.axis)],), op.tag,
                            dict(op.attrs), op.outputs)
        cache_stage = self._insert_stage(cache_op, stage)
        cache_stage.scope = scope
        stage.op = copy_op
        stage.all_iter_vars = list(op.axis)
        stage.leaf_iter_vars = list(op.axis)
        self.stage_map[copy_op] = stage
        return cache

    def rfactor(self, tensor: Tensor, axis) -> Tensor:
        """Factor a reduction over the reduce loop ``axis`` into a new stage with ``axis`` as data.

        TVM's semantics (``factor_axis=0``): the new stage ``<name>.rf`` has ``axis`` as its first
        spatial dimension and reduces over the stage's other reduce loops; the original stage then
        reduces ``<name>.rf`` over ``axis`` alone. The partial sums can be computed in parallel::

            for i:                           for k.inner, i:
              B[i] = 0                         B.rf[k.inner, i] = 0
              for k.outer, k.inner:   ->       for k.outer:
                B[i] += A[i, k]                  B.rf[k.inner, i] += A[i, k.outer*4 + k.inner]
                                             for i:
                                               B[i] = 0
                                               for k.inner.v:
                                                 B[i] += B.rf[k.inner.v, i]

        ``axis`` is a reduce loop of the stage as it stands (an original reduce axis or one from a
        split); spatial splits of the stage are kept, its reduce loops are replaced.
        """
        stage = self[tensor]
        op = stage.op
        if not isinstance(op, ComputeOp) or not op.reduce_axis or len(op.body) != 1:
            raise ScheduleError(f"stage {stage.name}: rfactor needs a single-output reduction")
        iv = stage._ivar(axis)
        stage._leaf_index(iv)
        if iv.kind != E.IterKind.REDUCE:
            raise ScheduleError(f"stage {stage.name}: rfactor axis {iv.var.name} is not a reduce axis")
        red = op.body[0]
        ranges = infer_bounds(stage, root_ranges(stage))
        reduce_leaves = [lv for lv in stage.leaf_iter_vars if lv.kind == E.IterKind.REDUCE]
        new_leaf = {}
        for lv in reduce_leaves:
            kind = E.IterKind.DATA_PAR if lv is iv else E.IterKind.REDUCE
            new_leaf[lv] = E.IterVar(E.Range(E.const(0), E.convert(ranges[lv][1])), E.Var(lv.var.name), kind)
        spatial = [E.IterVar(a.dom, E.Var(a.var.name), a.kind) for a in op.axis]
        leaf_values = {lv: new_leaf[lv].var if lv in new_leaf else lv.var for lv in stage.leaf_iter_vars}
        vmap, guards = axis_values(stage, ranges, leaf_values)
        vmap.update({a.var: b.var for a, b in zip(op.axis, spatial)})
        conds = [E.convert(c) for g_iv, c in guards if g_iv.kind == E.IterKind.REDUCE]
        if red.condition is not None:
            conds.append(red.condition)
        cond = None
        for c in conds:
            c = substitute(c, vmap)
            cond = c if cond is None else cond & c
        src = substitute(red.source, vmap)
        rf_reduce = tuple(new_leaf[lv] for lv in reduce_leaves if lv is not iv)
        if rf_reduce:
            rf_body = E.Reduce(red.combiner, src, rf_reduce, cond, red.dtype)
        else:
            rf_body = src if cond is None else E.select(cond, src, red.combiner.identity(red.dtype))
        rf_op = ComputeOp(f"{op.name}.rf", (new_leaf[iv], *spatial), rf_reduce, (rf_body,), op.tag)
        rf_op.outputs = [Tensor(rf_op, 0, (E.convert(ranges[iv][1]), *tensor.shape), red.dtype)]
        rf = rf_op.outputs[0]
        rv = E.IterVar(E.Range(E.const(0), E.convert(ranges[iv][1])), E.Var(iv.var.name + ".v"),
                       E.IterKind.REDUCE)
        final = E.Reduce(red.combiner, rf[(rv.var, *[a.var for a in op.axis])], (rv,), None, red.dtype,
                         red.init)
        new_op = ComputeOp(op.name, op.axis, (rv,), (final,), op.tag, dict(op.attrs), op.outputs)
        self._insert_stage(rf_op, stage)
        stage.op = new_op
        self.stage_map[new_op] = stage
        keep = [rel for rel in stage.relations
                if (rel.parent if isinstance(rel, Split) else rel.fused).kind != E.IterKind.REDUCE]
        stage.relations = keep
        stage.leaf_iter_vars = [lv for lv in stage.leaf_iter_vars if lv.kind != E.IterKind.REDUCE] + [rv]
        stage.all_iter_vars = [a for a in stage.all_iter_vars if a.kind != E.IterKind.REDUCE] + [rv]
        stage.iter_var_attrs = {k: v for k, v in stage.iter_var_attrs.items() if k.kind != E.IterKind.REDUCE}
        return rf

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """Copy ``tensor`` into a new stage in ``scope`` and make ``readers`` read the copy.

        TVM's semantics: a stage ``<name>.<scope>`` (``A.shared[i, j] = A[i, j]``) is inserted after
        the producer of ``tensor``, and the given reader stages' bodies read it instead of
        ``tensor`` (their operations are rebuilt; their tensors and axes stay). Attach it with
        ``compute_at`` to copy only the tile a loop needs::

            for i, j:                          for i, j:
              B[i, j] = A[i, j] * 2      ->      A.local[i, j] = A[i, j]
                                               for i, j:
                                                 B[i, j] = A.local[i, j] * 2
        """
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read takes a tensor, got {tensor!r}")
        _check_scope(tensor.name, scope)
        readers = readers if isinstance(readers, list | tuple) else [readers]
        reader_stages = [r if isinstance(r, Stage) else self[r] for r in readers]
        if not reader_stages:
            raise ScheduleError(f"cache_read of {tensor.name} needs at least one reader stage")

        for st in reader_stages:
            if not isinstance(st.op, ComputeOp) or not any(
                    t is tensor for b in st.op.body for t in tensors_read(b)):
                raise ScheduleError(f"stage {st.name}: cache_read of {tensor.name} names it as a reader "
                                    "but it does not read that tensor")
        axis = tuple(E.IterVar(E.Range.from_extent(n), E.Var(f"ax{d}"), E.IterKind.DATA_PAR)
                     for d, n in enumerate(tensor.shape))
        name = f"{tensor.name}.{scope}"
        cache_op = ComputeOp(name, axis, (), (tensor[tuple(iv.var for iv in axis)],))
        cache_op.outputs = [Tensor(cache_op, 0, tensor.shape, tensor.dtype)]
        cache = cache_op.outputs[0]

        def swap(node):
            if isinstance(node, E.TensorLoad) and node.tensor is tensor:
                return E.TensorLoad(cache, node.indices, node.dtype)
            return None

        for st in reader_stages:
            old = st.op
            new_op = ComputeOp(old.name, old.axis, old.reduce_axis, tuple(rewrite(b, swap) for b in old.body),
                               old.tag, dict(old.attrs), old.outputs)
            st.op = new_op
            self.stage_map[new_op] = st
        first = min(self.stages.index(st) for st in reader_stages)
        producer = self.stage_map.get(tensor.op)
        pos = self.stages.index(producer) + 1 if producer is not None else 0
        cache_stage = self._insert_stage(cache_op, self.stages[min(max(pos, 0), first)])
        cache_stage.scope = scope
        return cache


def _check_scope(name: str, scope: str) -> None:
    if scope not in ("global", "shared", "local"):
        raise ScheduleError(f"stage {name}: unknown storage scope {scope!r}; expected global, shared "
                            "or local")


def _remap_reduce(expr, rmap: dict):
    """Point the ``axis`` of Reduce nodes at the IterVars that replace them (by identity)."""

    def fn(node):
        if isinstance(node, E.Reduce) and any(id(iv) in rmap for iv in node.axis):
            return replace(node, axis=tuple(rmap.get(id(iv), iv) for iv in node.axis))
        return None

    return rewrite(expr, fn)


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
