"""Scheduled loop nests: tiling, vectorization, parallel loops, intermediate buffers, thread counts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnvm
from nnvm import te


def test_matmul_api_schedule(api_matmul, rng):
    f = api_matmul(256, rng, rtol=1e-4, atol=1e-3)
    # the inner loop became vector code, in LLVM IR and in machine code
    assert re.search(r"<(8|16|32) x float>", f.source()), "no float vectors in the optimized IR"
    if "avx" in f.library.target.features:
        asm = f.library.assembly()
        assert re.search(r"vfmadd\w*ps\s+.*%[yz]mm", asm), "no vector FMA in the matmul machine code"


def _affine(A):
    return lambda i: A[i] * 2.0 + 1.0


def test_non_divisible_split_vectorized(build_all, close, rng):
    items = []
    for n, factor in ((10, 4), (1000, 16), (3, 8)):
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), _affine(A), name="B")
        s = te.create_schedule(B.op)
        _, inner = s[B].split(B.op.axis[0], factor=factor)
        s[B].vectorize(inner)
        items.append((f"split_{n}_{factor}", s, [A, B]))
    funcs = build_all(items)
    for n, factor in ((10, 4), (1000, 16), (3, 8)):
        a = rng.standard_normal(n + 8).astype("float32")
        b = np.full(n + 8, -5.0, "float32")
        funcs[f"split_{n}_{factor}"](a[:n], b[:n])
        close(f"split {n} by {factor}", b[:n], a[:n] * 2 + 1)
        assert (b[n:] == -5.0).all(), f"split {n} by {factor}: wrote past the end of the output"


def test_vector_types_in_optimized_code(build, build_all):
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    _, inner = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(inner)
    f = nnvm.build(s, [A, B, C], target="llvm")
    assert re.search(r"<(4|8|16) x float>", f.source())
    # a guarded (non-divisible) vectorized loop is left to LLVM's loop vectorizer, which still vectorizes it
    m = 1000
    X = te.placeholder((m,), name="X")
    Y = te.compute((m,), lambda i: X[i] * 3.0, name="Y")
    s2 = te.create_schedule(Y.op)
    _, inner2 = s2[Y].split(Y.op.axis[0], factor=16)
    s2[Y].vectorize(inner2)
    g = nnvm.build(s2, [X, Y], target="llvm")
    assert re.search(r"<(4|8|16) x float>", g.source())


def test_fuse_parallel(build_all, close, rng):
    A = te.placeholder((6, 7, 40), name="A")
    B = te.compute((6, 7, 40), lambda i, j, k: te.exp(A[i, j, k]) * 0.5 + A[i, j, k], name="B")
    s = te.create_schedule(B.op)
    fused = s[B].fuse(B.op.axis[0], B.op.axis[1])
    s[B].parallel(fused)
    _, ki = s[B].split(B.op.axis[2], factor=8)
    s[B].vectorize(ki)
    # a reduction whose outer loop is parallel and whose per-thread results land in separate rows
    R = te.placeholder((50, 33), name="R")
    r = te.reduce_axis((0, 33), name="r")
    T = te.compute((50,), lambda i: te.sum(R[i, r] * 2.0, axis=r), name="T")
    s2 = te.create_schedule(T.op)
    s2[T].parallel(T.op.axis[0])
    funcs = build_all([("fused", s, [A, B]), ("rowsum", s2, [R, T])])
    a = rng.standard_normal((6, 7, 40)).astype("float32")
    b = np.zeros_like(a)
    funcs["fused"](a, b)
    close("fuse+parallel", b, np.exp(a) * 0.5 + a, rtol=1e-6)
    x = rng.standard_normal((50, 33)).astype("float32")
    t = np.zeros(50, "float32")
    for _ in range(3):  # the thread pool is reused across calls
        funcs["rowsum"](x, t)
        close("parallel row sums", t, (x * 2).sum(axis=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [64, 256], ids=["stack", "heap"])
def test_intermediate_stage(n, close, rng):
    """An intermediate tensor is an Allocate: 16 KiB goes on the stack, 256 KiB on the heap (the pool's
    per-thread scratch buffers)."""
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, n), lambda i, j: B[j, i] + B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    _, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    f = nnvm.build(s, [A, C], target="llvm")
    ir = f.library.unoptimized_ir
    if n * n * 4 > 64 * 1024:
        assert "nnvm_scratch_alloc" in ir and re.search(r"call void @\"?nnvm_scratch_free", ir)
    else:
        assert "nnvm_scratch_alloc" not in ir and "aligned_alloc" not in ir
    a = rng.standard_normal((n, n)).astype("float32")
    c = np.zeros_like(a)
    for _ in range(2):
        f(a, c)
        close(f"intermediate {n}x{n}", c, 2 * a.T + 2 * a + 1)


def test_compute_at_and_inline(close, rng):
    n = 48
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] * 3.0, name="C")
    D = te.compute((n, n), lambda i, j: te.sqrt(te.abs(C[i, j])), name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    s[C].compute_at(s[D], D.op.axis[0])
    s[D].parallel(D.op.axis[0])
    f = nnvm.build(s, [A, D], target="llvm")
    a = rng.standard_normal((n, n)).astype("float32")
    d = np.zeros_like(a)
    f(a, d)
    close("compute_at", d, np.sqrt(np.abs((a + 1) * 3)))


def test_thread_binding_is_an_error():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, "blockIdx.x")
    s[B].bind(tx, "threadIdx.x")
    with pytest.raises(nnvm.Error, match="blockIdx.x|threadIdx.x"):
        nnvm.build(s, [A, B], target="llvm")


def _parallel_double():
    A = te.placeholder((64, 100), name="A")
    B = te.compute((64, 100), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    return nnvm.build(s, [A, B], target="llvm")


@pytest.mark.parametrize("threads", ["3", "1", None])
def test_num_threads_from_environment(threads, monkeypatch):
    """NNVM_NUM_THREADS is read by the generated code at its first parallel call (once per library)."""
    if threads is None:
        monkeypatch.delenv("NNVM_NUM_THREADS", raising=False)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("NNVM_NUM_THREADS", threads)
    f = _parallel_double()
    a = np.arange(6400, dtype="float32").reshape(64, 100)
    b = np.zeros_like(a)
    f(a, b)
    assert (b == 2 * a).all()
    if threads is None:  # the pool's default: every CPU this process may use
        assert f.library.num_threads() >= 1
    else:
        assert f.library.num_threads() == int(threads)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(n=st.integers(1, 24), m=st.integers(1, 24), r=st.integers(1, 12),
       fj=st.sampled_from([1, 2, 3, 4, 8, 16]), fi=st.sampled_from([None, 2, 3, 8]),
       fk=st.sampled_from([None, 2, 3]), vectorize=st.booleans(), parallel=st.booleans(), fuse=st.booleans())
def test_random_matmul_schedules(n, m, r, fj, fi, fk, vectorize, parallel, fuse):
    """Whatever the split factors (dividing or not), loop order and annotations: the same numbers."""
    A = te.placeholder((n, r), name="A")
    B = te.placeholder((r, m), name="B")
    k = te.reduce_axis((0, r), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=fj)
    outer = i
    if fi is not None:
        io, ii = s[C].split(i, factor=fi)
        if fk is not None:
            ko, ki = s[C].split(k, factor=fk)
            s[C].reorder(io, jo, ko, ii, ki, ji)
        else:
            s[C].reorder(io, jo, ii, ji)
        outer = s[C].fuse(io, jo) if fuse else io
    if vectorize:
        s[C].vectorize(ji)
    if parallel:
        s[C].parallel(outer)
    f = nnvm.build(s, [A, B, C], target="llvm")
    rng = np.random.default_rng(n * 1000 + m * 10 + r)
    a = rng.standard_normal((n, r)).astype("float32")
    b = rng.standard_normal((r, m)).astype("float32")
    c = np.full((n, m), np.nan, "float32")
    f(a, b, c)
    want = a.astype("float64") @ b.astype("float64")
    assert np.allclose(c, want, rtol=1e-4, atol=1e-4), (
        f"schedule fj={fj} fi={fi} fk={fk} vec={vectorize} par={parallel} fuse={fuse} on {n}x{r}x{m}: "
        f"max error {np.nanmax(np.abs(c - want))}, {int(np.isnan(c).sum())} elements unwritten")


_FORK_SCRIPT = textwrap.dedent("""
    import ctypes, os, sys, tempfile
    import numpy as np
    import nnvm
    from nnvm import te

    def parallel_double(name):
        A = te.placeholder((64, 100), name="A")
        B = te.compute((64, 100), lambda i, j: A[i, j] * 2.0, name="B")
        s = te.create_schedule(B.op)
        s[B].parallel(B.op.axis[0])
        return nnvm.build(s, [A, B], target="llvm", name=name)

    def check(f):
        a = np.arange(6400, dtype="float32").reshape(64, 100)
        b = np.zeros_like(a)
        f(a, b)
        assert (b == 2 * a).all()

    def exported(a, b):  # the same kernel from an exported library, called through ctypes alone
        ptrs = (ctypes.c_void_p * 2)(a.ctypes.data, b.ctypes.data)
        assert lib.first(ctypes.cast(ptrs, ctypes.c_void_p)) == 0

    use_pool = sys.argv[1] == "used"
    first, second = parallel_double("first"), parallel_double("second")
    so = os.path.join(tempfile.mkdtemp(), "k.so")
    first.library.export(so, {"graph": b"{}"})
    lib = ctypes.CDLL(so)
    if use_pool:
        check(first)  # starts the thread pool in this process
        check(exported)
    pid = os.fork()
    if pid == 0:
        check(exported)
        check(first)
        check(second)  # never called before the fork
        check(parallel_double("third"))  # built after the fork
        print("child threads", second.library.num_threads(), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    check(first)
    print("parent threads", first.library.num_threads(), flush=True)
""")


@pytest.mark.parametrize("pool", ["used", "unused"])
def test_fork_after_parallel_kernels(pool):
    """A thread pool's workers do not survive fork: children of a process that used it run single-threaded
    instead of hanging; children of one that did not keep their threads."""
    env = dict(os.environ, NNVM_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", _FORK_SCRIPT, pool], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"child threads {1 if pool == 'used' else 2}" in proc.stdout, proc.stdout
    assert "parent threads 2" in proc.stdout, proc.stdout
