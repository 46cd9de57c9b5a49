"""Loop programs (``PrimFunc``) to LLVM IR, written once for every CPU the LLVM backends target.

Nothing here is specific to x86: the triple and data layout come from the caller, so the Arm plugin
builds the same IR with its own target (``CodeGenLLVM(triple="aarch64-linux-gnu", ...)``).

The shape of the generated module, per kernel ``f`` of the calling convention ``int32_t f(void **args)``:

- ``f(args)`` loads ``args[k]`` and calls ``f.compute(p0, p1, ...)``, an internal function whose
  buffer parameters are ``noalias`` (buffers never overlap), which is what lets LLVM vectorize without
  runtime alias checks. O3 inlines it back and keeps the no-alias facts as scoped metadata.
- ``vectorized`` loops: straight-line bodies become vector code right away (the core's
  ``nnvm.tir.vectorize`` with its ``LLVM`` target: Ramp/Broadcast, contiguous accesses as plain vector
  loads and stores); other ones stay loops tagged
  ``llvm.loop.vectorize.enable`` for LLVM's loop vectorizer. ``unrolled`` loops left by lowering (a
  non-constant extent) carry ``llvm.loop.unroll.enable``.
- ``parallel`` loops (the outermost one of a nest; inner ones run serially) are outlined into
  ``f.parN(closure, lo, hi)`` which unpacks a struct of captured values (buffers, variables, the loop's
  start) and runs iterations ``[lo, hi)``. The caller hands it to ``nnvm_pool_run`` (``nnvm_pool.c``,
  our own thread pool: the range cut into several chunks per thread, each thread's own run first,
  then the others' leftovers, so a descheduled worker never holds up the loop). The team size is
  ``nnvm_llvm_num_threads()``: ``NNVM_NUM_THREADS`` read once per library at run time, else
  ``OMP_NUM_THREADS``, else the CPUs this process may use (``nnvm_pool_team``). The Python runtime
  sets ``NNVM_NUM_THREADS`` to the number of physical cores before it hands out the first kernel
  unless the user set either variable (``nnvm.runtime.threads``), so in practice the CPU count only
  applies to exported libraries loaded outside nnvm.
- ``Allocate``: constant sizes up to 64 KiB are ``alloca`` in the entry block of the function they are
  used in (so inside a parallel body each thread has its own); larger or dynamic ones come from
  ``nnvm_scratch_alloc`` and go back with ``nnvm_scratch_free`` after their body (``nnvm_pool.c``:
  64-byte aligned, kept per thread for the next call, so a big pad or Winograd buffer is not mapped
  and faulted in again on every call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from nnvm.errors import Error
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import simplify
from nnvm.tir.vectorize import LLVM, vectorize_loops
from nnvm.tir.visit import free_vars, walk
from nnvm_backend_llvm.codegen_expr import (
    I1,
    I8,
    I32,
    I64,
    PTR,
    ExprEmitter,
    byte_size,
    scalar_type,
    value_type,
)

MAX_STACK_BUFFER = 64 * 1024  # bytes; larger buffers go to the heap
MAX_STACK_TOTAL = 256 * 1024  # per function, so worker threads' stacks stay small
NUM_THREADS_FN = "nnvm_llvm_num_threads"
POOL_RUN_FN = "nnvm_pool_run"  # nnvm_pool.c
POOL_TEAM_FN = "nnvm_pool_team"
SCRATCH_ALLOC_FN = "nnvm_scratch_alloc"  # nnvm_pool.c: heap buffers, kept per thread for the next call
SCRATCH_FREE_FN = "nnvm_scratch_free"
# C and thread pool functions the generated code calls: a kernel may not take these names.
RESERVED_NAMES = frozenset({
    NUM_THREADS_FN, POOL_RUN_FN, POOL_TEAM_FN, SCRATCH_ALLOC_FN, SCRATCH_FREE_FN, "aligned_alloc", "free",
    "tanhf", "tanh", "erff", "erf",
})


class Bindings(dict):
    """Var -> ir.Value, counting its changes: the structural keys of index expressions name the values
    their variables are bound to, so they are remembered only while the bindings hold
    (``ExprEmitter.index_key``)."""

    version = 0

    def __setitem__(self, key, value):
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        self.version += 1
        super().__delitem__(key)


@dataclass
class Frame:
    """What is bound while emitting one LLVM function."""

    name: str
    fn: ir.Function
    entry: ir.Block
    vars: Bindings = field(default_factory=Bindings)  # Var -> ir.Value
    nonneg: set = field(default_factory=set)  # loop variables that start at a constant >= 0
    buffers: dict = field(default_factory=dict)  # Buffer -> ptr
    in_parallel: bool = False
    stack_bytes: int = 0
    mask: object = None  # lanes a vector if_then_else branch is evaluated for
    parallel_count: int = 0


class CodeGenLLVM(ExprEmitter):
    """Builds one LLVM module holding many kernels; ``ir_text()`` is what ``llvm.parse_assembly`` reads."""

    def __init__(self, triple: str, data_layout: str = "", module_name: str = "nnvm"):
        self.module = ir.Module(name=module_name)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.builder: ir.IRBuilder | None = None
        self.frame: Frame | None = None
        self.uses_parallel = False
        self.uses_scratch = False  # heap Allocates: the library needs nnvm_pool.c even without parallel loops
        self.kernel_names: list[str] = []
        # C's size_t (nnvm_scratch_alloc's argument): 32 bits where the data layout says pointers are (armv7)
        self.size_t = ir.IntType(32) if "-p:32" in f"-{data_layout}" else I64

    def ir_text(self) -> str:
        return str(self.module)

    # -- functions --------------------------------------------------------------------------------
    def add_function(self, func: S.PrimFunc) -> None:
        """Emit the kernel ``func.name`` (the ``int32_t f(void **args)`` convention)."""
        name = func.name
        if name in self.kernel_names:
            raise Error(f"two kernels are named {name!r} in one build")
        if name in RESERVED_NAMES or name.startswith("llvm.") or name in self.module.globals:
            raise Error(f"the kernel name {name!r} is taken by a runtime function; rename the kernel")
        self.kernel_names.append(name)
        self._index_keys = self._index_memo = None
        body = vectorize_loops(func.body, LLVM)
        nparams, dims = len(func.params), func.dims
        fnty = ir.FunctionType(I32, [PTR] * nparams + [value_type(d.dtype) for d in dims])
        compute = ir.Function(self.module, fnty, name=f"{name}.compute")
        compute.linkage = "internal"
        compute.attributes.add("nounwind")
        for arg in compute.args[:nparams]:
            arg.add_attribute("noalias")
        outer = self.frame, self.builder
        try:
            self.begin_function(name, compute)
            for buf, arg in zip(func.params, compute.args):
                self.frame.buffers[buf] = arg
            for dim, arg in zip(dims, compute.args[nparams:]):  # symbolic dims: at least 1
                self.frame.vars[dim] = arg
                self.frame.nonneg.add(dim)
            self.stmt(body)
            self.builder.ret(ir.Constant(I32, 0))
        finally:
            self.frame, self.builder = outer

        entry = ir.Function(self.module, ir.FunctionType(I32, [PTR]), name=name)
        entry.attributes.add("nounwind")
        bld = ir.IRBuilder(entry.append_basic_block("entry"))
        ptrs = []
        for k in range(nparams + len(dims)):
            slot = bld.gep(entry.args[0], [ir.Constant(I64, k)], inbounds=True, source_etype=PTR)
            ptrs.append(bld.load(slot, typ=PTR))
        for j, dim in enumerate(dims):  # a dim's slot points at its int64 value
            value = bld.load(ptrs[nparams + j], typ=I64)
            ptrs[nparams + j] = value if dim.dtype == "int64" else bld.trunc(value, value_type(dim.dtype))
        bld.ret(bld.call(compute, ptrs))

    def begin_function(self, name: str, fn: ir.Function, in_parallel: bool = False) -> None:
        entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self.frame = Frame(name, fn, entry, in_parallel=in_parallel)
        ir.IRBuilder(entry).branch(start)
        self.builder = ir.IRBuilder(start)

    def entry_alloca(self, ty: ir.Type, align: int):
        """Stack storage in the entry block: allocated once per call, whatever loop uses it."""
        bld = ir.IRBuilder(self.frame.entry)
        bld.position_before(self.frame.entry.terminator)
        slot = bld.alloca(ty)
        slot.align = align
        slot.type = PTR  # llvmlite types allocas as typed pointers; the rest of the code uses opaque ones
        return slot

    # -- statements -------------------------------------------------------------------------------
    def stmt(self, s: S.Stmt) -> None:
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise Error(f"kernel {self.frame.name}: the llvm backend cannot compile {type(s).__name__}")
        method(s)

    def stmt_Seq(self, s: S.Seq) -> None:
        for x in s.stmts:
            self.stmt(x)

    def stmt_AttrStmt(self, s: S.AttrStmt) -> None:
        self.stmt(s.body)

    def stmt_Evaluate(self, s: S.Evaluate) -> None:
        self.expr(s.value)

    def stmt_LetStmt(self, s: S.LetStmt) -> None:
        self.frame.vars[s.var] = self.expr(s.value)
        try:
            self.stmt(s.body)
        finally:
            del self.frame.vars[s.var]

    def stmt_IfThenElse(self, s: S.IfThenElse) -> None:
        if E.split_lanes(s.cond.dtype)[1] > 1:
            raise Error(f"kernel {self.frame.name}: an if statement needs a scalar condition, got {s.cond!r}")
        cond = self.expr(s.cond)
        if s.else_body is None:
            with self.builder.if_then(cond):
                self.stmt(s.then_body)
            return
        with self.builder.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then_body)
            with otherwise:
                self.stmt(s.else_body)

    def stmt_Store(self, s: S.Store) -> None:
        if s.predicate is not None and E.split_lanes(s.predicate.dtype)[1] == 1:
            with self.builder.if_then(self.expr(s.predicate)):
                self.store(s, None)
            return
        self.store(s, None if s.predicate is None else self.expr(s.predicate))

    def store(self, s: S.Store, mask) -> None:
        buf = s.buffer
        base = E.split_lanes(buf.dtype)[0]
        align = byte_size(base)
        lanes = E.split_lanes(s.index.dtype)[1]
        value = self.expr(s.value)
        if lanes == 1:
            if isinstance(value.type, ir.VectorType):
                raise Error(f"kernel {self.frame.name}: a vector value stored at the scalar index "
                            f"{s.index!r} of {buf.name}")
            ptr = self.element_ptr(buf, self.index(s.index))
            self.builder.store(self.to_memory(value, base), ptr, align=align)
            return
        value = self.to_memory(self.splat(value, lanes), base)
        start = self.contiguous_base(s.index)
        if start is not None:
            ptr = self.element_ptr(buf, self.index(start))
            if mask is None:
                self.builder.store(value, ptr, align=align)
            else:
                fn = self.intrinsic("masked.store", ir.VoidType(), [value.type, PTR, I32, mask.type],
                                    [value.type, PTR])
                self.builder.call(fn, [value, ptr, ir.Constant(I32, align), mask])
            return
        for k, idx in enumerate(self.lane_indices(s.index, lanes)):
            lane = ir.Constant(I32, k)
            elem = self.builder.extract_element(value, lane)
            if mask is None:
                self.builder.store(elem, self.element_ptr(buf, idx), align=align)
            else:
                with self.builder.if_then(self.builder.extract_element(mask, lane)):
                    self.builder.store(elem, self.element_ptr(buf, idx), align=align)

    def stmt_Allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        esize = byte_size(buf.dtype)
        count = simplify(_product(buf.shape))
        nbytes = int(count.value) * esize if isinstance(count, E.Const) else None
        on_stack = nbytes is not None and nbytes <= MAX_STACK_BUFFER
        if on_stack and self.frame.stack_bytes + nbytes <= MAX_STACK_TOTAL:
            self.frame.stack_bytes += nbytes
            ptr = self.entry_alloca(ir.ArrayType(I8, max(nbytes, 1)), 64)
            self.frame.buffers[buf] = ptr
            try:
                self.stmt(s.body)
            finally:
                del self.frame.buffers[buf]
            return
        bld = self.builder
        self.uses_scratch = True
        if nbytes is not None:
            size = ir.Constant(I64, nbytes)
        else:
            size = bld.mul(self.index(count), ir.Constant(I64, esize))
        alloc = self.declare(SCRATCH_ALLOC_FN, PTR, [self.size_t])
        if "noalias" not in alloc.return_value.attributes:
            alloc.return_value.add_attribute("noalias")  # a fresh block, as malloc's: LLVM may vectorize
        if self.size_t is not I64:
            size = bld.trunc(size, self.size_t)
        ptr = bld.call(alloc, [size])
        if not self.frame.in_parallel:
            with bld.if_then(bld.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False):
                bld.ret(ir.Constant(I32, -1))  # out of memory: the caller raises an error
        self.frame.buffers[buf] = ptr
        try:
            self.stmt(s.body)
        finally:
            del self.frame.buffers[buf]
        bld.call(self.declare(SCRATCH_FREE_FN, ir.VoidType(), [PTR]), [ptr])

    # -- loops ------------------------------------------------------------------------------------
    def stmt_For(self, s: S.For) -> None:
        if s.kind == S.ForKind.THREAD_BINDING:
            raise Error(f"kernel {self.frame.name}: loop {s.var.name} is bound to the GPU thread axis "
                        f"{s.thread_tag or '?'}, which a CPU target cannot run; schedule it without bind()")
        if s.kind == S.ForKind.PARALLEL and not self.frame.in_parallel and not _is_const(s.extent, 1):
            self.parallel_for(s)
            return
        props = []
        if s.kind == S.ForKind.VECTORIZED and _lanewise(s):
            props.append(("llvm.loop.vectorize.enable", True))
        elif s.kind == S.ForKind.UNROLLED:
            props.append(("llvm.loop.unroll.enable", None))
        props += _pragma_props(s)
        ty = value_type(s.var.dtype)
        start = self.cast(self.expr(s.min), s.min.dtype, s.var.dtype)
        extent = self.cast(self.expr(s.extent), s.extent.dtype, s.var.dtype)
        stop = self.builder.add(start, extent)
        if self.nonnegative(s.min):
            self.frame.nonneg.add(s.var)
        self.loop(s.var, ty, start, stop, lambda: self.stmt(s.body), props)

    def loop(self, var: E.Var, ty: ir.Type, start, stop, emit_body, props=()) -> None:
        bld = self.builder
        pre = bld.block
        header = bld.append_basic_block(f"for.{var.name}")
        body = bld.append_basic_block(f"for.{var.name}.body")
        done = bld.append_basic_block(f"for.{var.name}.end")
        bld.branch(header)
        bld.position_at_end(header)
        i = bld.phi(ty, name=var.name)
        i.add_incoming(start, pre)
        unsigned = E.is_uint(var.dtype)
        cmp = bld.icmp_unsigned if unsigned else bld.icmp_signed
        bld.cbranch(cmp("<", i, stop), body, done)
        bld.position_at_end(body)
        self.frame.vars[var] = i
        try:
            emit_body()
        finally:
            del self.frame.vars[var]
        nxt = bld.add(i, ir.Constant(ty, 1), flags=() if unsigned else ("nsw",))
        back = bld.branch(header)
        if props:
            back.set_metadata("llvm.loop", self.loop_metadata(props))
        i.add_incoming(nxt, bld.block)
        bld.position_at_end(done)

    def loop_metadata(self, props) -> ir.MDValue:
        """A distinct (self-referencing) loop ID node carrying ``props`` (name, value-or-None)."""
        m = self.module
        items = []
        for key, value in props:
            ops = [ir.MetaDataString(m, key)]
            if value is not None:
                ty = I1 if isinstance(value, bool) else I32
                ops.append(ir.Constant(ty, int(value)))
            items.append(m.add_metadata(ops))
        node = m.add_metadata([ir.MetaDataString(m, f"nnvm.loop.{len(m.metadata)}")])
        node.operands = (node, *items)
        return node

    # -- parallel loops ---------------------------------------------------------------------------
    def parallel_for(self, s: S.For) -> None:
        """Outline the loop body and run it on the thread pool (``nnvm_pool_run``), in chunks."""
        self.uses_parallel = True
        frame, bld = self.frame, self.builder
        var_list, buf_list = _captures(s)
        for v in var_list:
            if v not in frame.vars:
                raise Error(f"kernel {frame.name}: the variable {v.name} is used but never defined")
        start = self.to_index(self.cast(self.expr(s.min), s.min.dtype, "int64"), "int64")
        extent = self.to_index(self.cast(self.expr(s.extent), s.extent.dtype, "int64"), "int64")
        values = [self.buffer_ptr(b) for b in buf_list] + [frame.vars[v] for v in var_list] + [start]
        closure_ty = ir.LiteralStructType([v.type for v in values])

        frame.parallel_count += 1
        name = f"{frame.name}.par{frame.parallel_count}"
        body_ty = ir.FunctionType(ir.VoidType(), [v.type for v in values] + [I64, I64])
        body_fn = ir.Function(self.module, body_ty, name=f"{name}.body")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        for arg in body_fn.args[:len(buf_list)]:
            arg.add_attribute("noalias")
        self._emit_parallel_body(s, body_fn, buf_list, var_list, frame.name)

        tramp = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), name=name)
        tramp.linkage = "internal"
        tramp.attributes.add("nounwind")
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        args = []
        for k, v in enumerate(values):
            slot = tb.gep(tramp.args[0], [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                          source_etype=closure_ty)
            args.append(tb.load(slot, typ=v.type))
        tb.call(body_fn, [*args, tramp.args[1], tramp.args[2]])
        tb.ret_void()

        self.frame, self.builder = frame, bld
        closure = self.entry_alloca(closure_ty, 8)
        for k, v in enumerate(values):
            slot = bld.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True,
                           source_etype=closure_ty)
            bld.store(v, slot)
        team = bld.call(self.num_threads_fn(), [])
        run = self.declare(POOL_RUN_FN, ir.VoidType(), [PTR, PTR, I64, I32])
        bld.call(run, [tramp, closure, extent, team])  # one thread or one iteration: tramp on this thread

    def _emit_parallel_body(self, s: S.For, fn: ir.Function, buf_list, var_list, kernel: str) -> None:
        """``fn(buffers..., variables..., start, lo, hi)``: iterations ``start + [lo, hi)`` of ``s``."""
        self.begin_function(kernel, fn, in_parallel=True)
        nb, nv = len(buf_list), len(var_list)
        for b, arg in zip(buf_list, fn.args[:nb]):
            self.frame.buffers[b] = arg
        for v, arg in zip(var_list, fn.args[nb:nb + nv]):
            self.frame.vars[v] = arg
        start, lo, hi = fn.args[nb + nv:nb + nv + 3]
        bld = self.builder
        ty = value_type(s.var.dtype)
        begin = self.cast(bld.add(start, lo), "int64", s.var.dtype)
        end = self.cast(bld.add(start, hi), "int64", s.var.dtype)
        if self.nonnegative(s.min):  # lo >= 0: the pool hands out chunks of [0, extent)
            self.frame.nonneg.add(s.var)
        self.loop(s.var, ty, begin, end, lambda: self.stmt(s.body))
        self.builder.ret_void()

    def num_threads_fn(self) -> ir.Function:
        """``int32_t nnvm_llvm_num_threads()``: the team size of this library's parallel loops.

        Computed once per library by the pool (``nnvm_pool_team``: ``NNVM_NUM_THREADS``, else
        ``OMP_NUM_THREADS``, else the CPUs this process may use) into a global of its own, so libraries
        built after the variable changed get the new size; 1 in a child forked after the pool started
        (its workers did not come along).
        """
        fn = self.module.globals.get(NUM_THREADS_FN)
        if fn is not None:
            return fn
        cache = ir.GlobalVariable(self.module, I32, name="nnvm_llvm_num_threads.cache")
        cache.linkage = "internal"
        cache.initializer = ir.Constant(I32, 0)
        fn = ir.Function(self.module, ir.FunctionType(I32, []), name=NUM_THREADS_FN)
        fn.attributes.add("nounwind")
        bld = ir.IRBuilder(fn.append_basic_block("entry"))
        bld.ret(bld.call(self.declare(POOL_TEAM_FN, I32, [PTR]), [cache]))
        return fn


UNROLL_PRAGMA = "unroll"  # stage.pragma(axis, "unroll", False): LLVM must not unroll the loop


def _pragma_props(loop: S.For) -> list:
    """Loop metadata asked for by a schedule's pragmas: ``("unroll", False)`` keeps a loop rolled (a
    channel concatenation unrolled over its channel blocks holds one short loop per block, which LLVM
    would otherwise unroll and re-vectorize: seconds of compile time per kernel, no speed)."""
    if (UNROLL_PRAGMA, False) in tuple(loop.annotations):
        return [("llvm.loop.unroll.disable", None), ("llvm.loop.vectorize.enable", False)]
    return []


def _is_const(e: E.Expr, value) -> bool:
    e = simplify(e)
    return isinstance(e, E.Const) and e.value == value


def _lanewise(loop: S.For) -> bool:
    """An innermost loop whose every store depends on its variable: what LLVM's loop vectorizer takes.

    Asking it to vectorize anything else (an outer loop, a reduction into one element) only makes LLVM
    print a "loop not vectorized" warning.
    """
    ok = True

    def fn(node):
        nonlocal ok
        if isinstance(node, S.For) or (isinstance(node, S.Store) and loop.var not in free_vars(node.index)):
            ok = False

    walk(loop.body, fn)
    return ok


def _product(shape) -> E.Expr:
    out: E.Expr = E.const(1)
    for d in shape:
        out = out * E.convert(d)
    return out


def _captures(loop: S.For) -> tuple[list, list]:
    """Variables and buffers a loop body uses but does not define (what its closure must carry)."""
    used_vars: dict = {}
    defined_vars = {loop.var}
    used_bufs: dict = {}
    defined_bufs: set = set()

    def fn(node):
        if isinstance(node, E.Var):
            used_vars.setdefault(node, None)
        elif isinstance(node, (S.For, S.LetStmt, E.Let)):
            defined_vars.add(node.var)
        elif isinstance(node, (E.Load, S.Store)):
            used_bufs.setdefault(node.buffer, None)
        elif isinstance(node, S.Allocate):
            defined_bufs.add(node.buffer)
            for d in node.buffer.shape:
                walk(E.convert(d), fn)

    walk(loop.body, fn)
    return ([v for v in used_vars if v not in defined_vars],
            [b for b in used_bufs if b not in defined_bufs])


__all__ = ["CodeGenLLVM", "Frame", "scalar_type", "value_type"]
