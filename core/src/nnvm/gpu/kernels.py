"""Target-neutral lowering of thread binding and shared memory: what every GPU-style backend prints.

A lowered schedule binds loops to ``blockIdx.*`` / ``threadIdx.*`` anywhere in its loop nests, places
``shared`` buffers inside them and reads them from other thread loops. A GPU runs something else: a
grid of blocks of threads, every thread running the whole kernel body with its own indices. This
module turns the first into the second, so the OpenCL, CUDA and Metal backends only print code:

1. ``split_kernels``: every top-level loop nest of a function becomes its own kernel (a launch);
   ``global`` intermediates allocated between them become temporaries the runtime provides.
2. ``insert_barriers``: a ``barrier`` after statements that write shared memory and before the
   statements that read it, and at the top of a loop body whose previous iteration read what the
   next one overwrites (write-after-read across iterations).
3. ``bind_threads``: each bound loop becomes its thread variable (one ``Var`` per tag, shared by all
   loops bound to it); the launch extent of a tag is the largest of its loops, loops with a smaller
   extent get a guard ``if threadIdx.x < extent`` (pushed below barriers, which every thread must
   reach, and below loops that bind the same tag again, such as a cooperative copy by all threads);
   stores outside every ``threadIdx`` loop run once per block (guarded by ``threadIdx == 0``);
   ``vthread`` loops run serially in each thread; ``shared`` allocations move to the top of the block.

The result keeps the form of a loop program, ``for blockIdx`` loops outermost, shared allocations,
then ``for threadIdx`` loops around the body::

    for i.outer in range(4):  # blockIdx.x          for blockIdx.x in range(4):  # blockIdx.x
      A.shared = allocate(...)                          A.shared = allocate(float32[64], shared)
      for ax in range(64):  # threadIdx.x     ->        for threadIdx.x in range(64):  # threadIdx.x
        A.shared[ax] = A[...]                             A.shared[threadIdx.x] = A[...]
      for i.inner in range(64):  # threadIdx.x            barrier()
        B[...] = A.shared[63 - i.inner]                   B[...] = A.shared[(63 - threadIdx.x)]

so the reference interpreter runs it as it is (threads of a barrier-holding loop in lockstep) and a
printer replaces the thread loops by ``get_group_id(0)`` / ``get_local_id(0)``. The launch extents
are in ``PrimFunc.attrs["launch"]`` (``{"blockIdx.x": 4, "threadIdx.x": 64}``); over symbolic dims a
``blockIdx`` extent may be an expression of them (threads per block stay constants), and the function
takes the dims' values in one more buffer (``lower_for_gpu``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nnvm.errors import ScheduleError
from nnvm.gpu.library import DIMS_BUFFER
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import substitute, walk

BLOCK_TAGS = ("blockIdx.z", "blockIdx.y", "blockIdx.x")
THREAD_TAGS = ("threadIdx.z", "threadIdx.y", "threadIdx.x")


def barrier() -> S.Stmt:
    """The block-wide barrier: every thread of the block waits here, shared memory writes are visible."""
    return S.Evaluate(E.Call("barrier", (), "int32"))


def is_barrier(s) -> bool:
    return isinstance(s, S.Evaluate) and isinstance(s.value, E.Call) and s.value.name == "barrier"


@dataclass
class GPUProgram:
    """A function lowered for a GPU: kernels launched in order over the function's parameters plus
    ``temporaries`` (global buffers the runtime allocates for one call)."""

    name: str
    params: tuple
    temporaries: tuple
    kernels: list  # of PrimFunc, params = params + temporaries, attrs["launch"]


def lower_for_gpu(func: S.PrimFunc) -> GPUProgram:
    """The whole pipeline of this module for one function.

    A function over symbolic dims (``func.dims``) takes them as one more parameter, an int64 buffer of
    their values in ``func.dims`` order, read into the dims' variables at the top of every kernel: one
    buffer serves every language (WGSL binds no scalars, CUDA's argument arrays stay pointers only). Its
    grids may then be expressions of the dims (``launch``), evaluated per binding by the runtime."""
    dims = tuple(func.dims)
    params = tuple(func.params)
    if dims:
        params += (S.Buffer(DIMS_BUFFER, (E.const(len(dims), E.INDEX_DTYPE),), "int64"),)
    temps, nests = split_kernels(func.body)
    kernels = []
    for k, nest in enumerate(nests):
        name = f"{func.name}_k{k}"  # a kernel name, never a reserved one such as main
        body = insert_barriers(nest)
        body, launch = bind_threads(body, f"{func.name} (kernel {k})")
        for i, d in reversed(list(enumerate(dims))):
            body = S.LetStmt(d, E.Load(params[-1], E.const(i, E.INDEX_DTYPE), "int64"), body)
        kernels.append(S.PrimFunc(name, params + tuple(temps), body, {"launch": launch}))
    return GPUProgram(func.name, params, tuple(temps), kernels)


# ---------------------------------------------------------------------------------------------------
# 1. one kernel per top-level nest


def split_kernels(body: S.Stmt) -> tuple[list, list]:
    """(global temporaries, top-level statements): global ``Allocate``s around or between the root
    nests are lifted out, since a buffer shared by two launches must live in device memory."""
    temps: list = []

    def strip(s):
        while isinstance(s, (S.Allocate, S.AttrStmt)) and (
                not isinstance(s, S.Allocate) or s.buffer.scope == "global"):
            if isinstance(s, S.Allocate):
                temps.append(s.buffer)
            s = s.body
        return s

    body = strip(body)
    parts = body.stmts if isinstance(body, S.Seq) else (body,)
    nests = []
    for p in parts:
        p = strip(p)
        nests.extend(p.stmts if isinstance(p, S.Seq) else (p,))
    return temps, [n for n in nests if not (isinstance(n, S.Seq) and not n.stmts)]


# ---------------------------------------------------------------------------------------------------
# 2. barriers


def _shared_access(stmt) -> tuple[set, set]:
    """(shared buffers read, shared buffers written) anywhere below ``stmt``."""
    reads: set = set()
    writes: set = set()

    def fn(n):
        if isinstance(n, E.Load) and n.buffer.scope == "shared":
            reads.add(n.buffer)
        elif isinstance(n, S.Store) and n.buffer.scope == "shared":
            writes.add(n.buffer)

    walk(stmt, fn)
    return reads, writes


def insert_barriers(stmt: S.Stmt, in_loop: bool = False) -> S.Stmt:
    """Barriers between the statements of each sequence where one writes shared memory another reads.

    Inside a loop body the previous iteration's reads count as pending, so the first write of a buffer
    the body also reads gets a barrier before it (``for k: barrier; load tile; barrier; use tile``).
    Barriers never go inside a ``threadIdx`` loop's guarded parts or conditionals: the statements of
    a sequence are executed by every thread of the block alike.
    """
    if isinstance(stmt, S.For):
        loop = stmt.kind != S.ForKind.THREAD_BINDING or stmt.thread_tag == "vthread"
        loop = loop and not (isinstance(stmt.extent, E.Const) and stmt.extent.value == 1)  # no next round
        return replace(stmt, body=insert_barriers(stmt.body, in_loop or loop))
    if isinstance(stmt, (S.Allocate, S.AttrStmt, S.LetStmt)):
        return replace(stmt, body=insert_barriers(stmt.body, in_loop))
    if isinstance(stmt, S.IfThenElse):
        return stmt
    items = list(stmt.stmts) if isinstance(stmt, S.Seq) else [stmt]
    items = [insert_barriers(s, in_loop) if isinstance(s, (S.For, S.Allocate, S.AttrStmt, S.LetStmt))
             else s for s in items]
    access = [_shared_access(s) for s in items]
    if not any(w for _, w in access):
        return S.seq(*items) if len(items) > 1 else items[0]
    pending_reads: set = set().union(*(r for r, _ in access)) if in_loop else set()
    pending_writes: set = set()
    out: list = []
    for s, (reads, writes) in zip(items, access):
        if (reads & pending_writes) or (writes & pending_reads):
            out.append(barrier())
            pending_reads, pending_writes = set(), set()
        pending_reads |= reads
        pending_writes |= writes
        out.append(s)
    return S.seq(*out)


# ---------------------------------------------------------------------------------------------------
# 3. thread variables and launch extents


def thread_var(tag: str) -> E.Var:
    """The variable standing for ``tag`` in lowered kernels (printers map it to the thread index)."""
    return _THREAD_VARS[tag]


_THREAD_VARS = {tag: E.Var(tag, E.INDEX_DTYPE) for tag in BLOCK_TAGS + THREAD_TAGS}


def _has_barrier(s) -> bool:
    found = []
    walk(s, lambda n: found.append(n) if isinstance(n, E.Call) and n.name == "barrier" else None)
    return bool(found)


def _binds(s, tags) -> bool:
    """Whether a loop below ``s`` is bound to one of ``tags`` (it then decides that tag's guard)."""
    found = []
    walk(s, lambda n: found.append(n) if isinstance(n, S.For) and n.thread_tag in tags else None)
    return bool(found)


def bind_threads(body: S.Stmt, where: str) -> tuple[S.Stmt, dict]:
    """Thread-bound loops -> thread variables under one grid of loops; returns (body, launch)."""
    launch: dict = {}

    def collect(n):
        if isinstance(n, S.For) and n.kind == S.ForKind.THREAD_BINDING and n.thread_tag != "vthread":
            ext = simplify(n.extent)
            if isinstance(ext, E.Const):
                ext = int(ext.value)
            elif n.thread_tag in THREAD_TAGS:
                raise ScheduleError(f"{where}: the loop {n.var.name} bound to {n.thread_tag} needs a "
                                    f"constant extent, got {ext}")
            launch[n.thread_tag] = _larger(launch.get(n.thread_tag, 1), ext)

    walk(body, collect)
    shared: list = []
    threads = [t for t in THREAD_TAGS if t in launch]

    def lower(s, in_thread: bool, guards: dict):
        """``guards``: tag -> ``threadIdx < extent`` of the enclosing loops bound with a smaller extent
        than the launch; applied to the largest subtrees without barriers or re-bindings of the tag."""
        if guards and not _has_barrier(s) and not _binds(s, guards):
            cond = None
            for c in guards.values():
                cond = c if cond is None else cond & c
            return S.IfThenElse(cond, lower(s, in_thread, {}), None)
        if isinstance(s, S.For):
            if s.kind == S.ForKind.THREAD_BINDING and s.thread_tag != "vthread":
                tv = thread_var(s.thread_tag)
                ext = simplify(s.extent)
                ext = int(ext.value) if isinstance(ext, E.Const) else ext
                inner_guards = {t: c for t, c in guards.items() if t != s.thread_tag}
                if not _same(ext, launch[s.thread_tag]):
                    inner_guards[s.thread_tag] = tv < ext
                body = substitute(s.body, {s.var: tv + s.min} if _nonzero(s.min) else {s.var: tv})
                return lower(body, in_thread or s.thread_tag in THREAD_TAGS, inner_guards)
            kind = s.kind if s.kind in (S.ForKind.SERIAL, S.ForKind.VECTORIZED) else S.ForKind.SERIAL
            return replace(s, kind=kind, thread_tag="", body=lower(s.body, in_thread, guards))
        if isinstance(s, S.Allocate):
            if s.buffer.scope == "shared":
                if s.buffer not in shared:  # loop partitioning may have copied the allocation
                    shared.append(s.buffer)
                return lower(s.body, in_thread, guards)
            return replace(s, body=lower(s.body, in_thread, guards))
        if isinstance(s, (S.AttrStmt, S.LetStmt)):
            return replace(s, body=lower(s.body, in_thread, guards))
        if isinstance(s, S.Seq):
            return S.seq(*[lower(x, in_thread, guards) for x in s.stmts])
        if isinstance(s, S.IfThenElse):
            other = lower(s.else_body, in_thread, guards) if s.else_body is not None else None
            return replace(s, then_body=lower(s.then_body, in_thread, guards), else_body=other)
        if isinstance(s, S.Store) and not in_thread and threads and s.buffer.scope != "local":
            return _once_per_block(s)
        return s

    def _once_per_block(s):
        cond = None
        for t in threads:
            c = thread_var(t) == 0
            cond = c if cond is None else cond & c
        return S.IfThenElse(cond, s, None)

    body = lower(body, False, {})
    body = _grid(body, THREAD_TAGS, launch)
    for buf in reversed(shared):
        body = S.Allocate(buf, body)
    body = _grid(body, BLOCK_TAGS, launch)
    return simplify(body), launch


def _grid(body, tags, launch):
    for tag in reversed(tags):
        if tag in launch:
            ext = launch[tag]
            body = S.For(thread_var(tag), E.const(0), E.const(ext) if isinstance(ext, int) else ext,
                         S.ForKind.THREAD_BINDING, body, tag)
    return body


def _same(a, b) -> bool:
    """Whether two launch extents (ints, or expressions of symbolic dims) are provably equal."""
    if isinstance(a, int) or isinstance(b, int):
        return a == b
    return str(simplify(a)) == str(simplify(b))


def _larger(a, b):
    """The launch extent covering loops of extents ``a`` and ``b``: the larger int, one of two equal
    expressions, else their ``max`` (a block count of the dims, evaluated per binding)."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if _same(a, b) or (isinstance(a, int) and a <= 1):
        return b
    if isinstance(b, int) and b <= 1:
        return a
    return simplify(E.binop("max", E.convert(a), E.convert(b)))


def _nonzero(e) -> bool:
    e = simplify(e)
    return not (isinstance(e, E.Const) and e.value == 0)

