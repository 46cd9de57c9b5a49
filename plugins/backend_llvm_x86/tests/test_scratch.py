"""Kernels' heap buffers (``nnvm_scratch_alloc`` in ``nnvm_pool.c``), kept per thread for the next call:
never shared by two threads at once, reused by a thread's next call, right answers from several threads
calling one kernel or one model at once, and an exported module without parallel loops that carries the
pool, unloads, and loads again while a thread that used it is still alive."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm import te

_SCRATCH_CALLER = r"""
void *nnvm_scratch_alloc(size_t);
void nnvm_scratch_free(void *);
static int reused;
static void *caller(void *arg) {  /* up to 3 live buffers of random sizes, each filled with its own byte */
  unsigned seed = (unsigned)(intptr_t)arg;
  for (int r = 0; r < 3000; r++) {
    unsigned char *p[3], v[3];
    size_t n[3];
    int live = 1 + rand_r(&seed) % 3;
    for (int k = 0; k < live; k++) {
      n[k] = (size_t)(rand_r(&seed) % 4 ? rand_r(&seed) % 300000 : 3000000 + rand_r(&seed) % 100);
      p[k] = nnvm_scratch_alloc(n[k]);
      if (!p[k] || (uintptr_t)p[k] % 64) { __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED); return 0; }
      v[k] = (unsigned char)rand_r(&seed);
      memset(p[k], v[k], n[k]);
    }
    for (int k = 0; k < live; k++) {
      for (size_t i = 0; i < n[k]; i += 4093)
        if (p[k][i] != v[k]) { __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED); break; }
      nnvm_scratch_free(p[k]);
    }
  }
  void *a = nnvm_scratch_alloc(1 << 20); /* the same size again on this thread: the same buffer */
  nnvm_scratch_free(a);
  if (nnvm_scratch_alloc(1 << 20) == a) __atomic_fetch_add(&reused, 1, __ATOMIC_RELAXED);
  return 0;
}
static void report(void) { printf("bad %d reused %d\n", bad, reused); }
"""


def test_scratch_buffers_per_thread(tmp_path, c_callers):
    """4 threads, 3000 rounds of up to 3 live buffers each (some above glibc's mmap threshold), every byte
    pattern intact (no buffer handed to two owners), 64-byte aligned, and a freed buffer comes back to
    its thread's next allocation of the same size."""
    proc = c_callers(tmp_path, _SCRATCH_CALLER, 4)
    assert proc.returncode == 0 and "bad 0 reused 4" in proc.stdout, proc.stdout + proc.stderr


def _heap_intermediate(n: int, parallel: bool, name: str):
    """C = B.T + B + 1 with B = 2 A, B an intermediate of n*n floats (on the heap above 64 KiB)."""
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, n), lambda i, j: B[j, i] + B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    if parallel:
        s[C].parallel(C.op.axis[0])
    return nnvm.build(s, [A, C], target="llvm", name=name)


def test_kernels_with_heap_buffers_from_two_threads(rng):
    """Two Python threads (ctypes drops the GIL) call kernels with heap buffers of two sizes, serial and
    parallel, interleaved, 40 times each: every output equals numpy's."""
    fns = [(n, _heap_intermediate(n, par, f"heap{n}{'p' if par else 's'}"))
           for n in (160, 300) for par in (False, True)]
    serial = fns[0][1].library
    assert "nnvm_scratch_alloc" in serial.unoptimized_ir
    assert serial.uses_pool and not serial.uses_parallel, "a kernel with heap buffers needs the pool"

    def work(k):
        local = np.random.default_rng(k)
        bad = 0
        for r in range(40):
            n, f = fns[(k + r) % len(fns)]
            a = local.standard_normal((n, n)).astype("float32")
            c = np.full_like(a, np.nan)
            f(a, c)
            bad += not np.allclose(c, 2 * a.T + 2 * a + 1, rtol=1e-6, atol=1e-5)
        return bad

    with ThreadPoolExecutor(2) as pool:
        assert sum(pool.map(work, range(2))) == 0


def test_model_with_heap_buffers_from_two_threads(tmp_path):
    """A 3x3 convolution whose padded input is a heap buffer (32 x 58 x 58 floats), run by two Python
    threads at once, 10 runs each on inputs of their own: each output equals a direct numpy convolution."""
    rng = np.random.default_rng(3)
    c, hw = 32, 56
    w = (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    mod = nnvm.compile(path, target="llvm")
    assert "nnvm_scratch_alloc" in mod.library.unoptimized_ir

    def reference(x):
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((1, c, hw, hw))
        for i in range(3):
            for j in range(3):
                out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + hw, j:j + hw], w[:, :, i, j])
        return out

    def work(k):
        local = np.random.default_rng(10 + k)
        worst = 0.0
        for _ in range(10):
            x = local.standard_normal((1, c, hw, hw)).astype(np.float32)
            want = reference(x)
            got = mod.run(x)[0]
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
        return worst

    with ThreadPoolExecutor(2) as pool:
        errors = list(pool.map(work, range(2)))
    assert max(errors) < 1e-5, errors


_UNLOAD = textwrap.dedent("""
    import ctypes, _ctypes, sys, threading
    import numpy as np
    so, n = sys.argv[1], int(sys.argv[2])
    a = np.arange(n * n, dtype="float32").reshape(n, n) % 7
    want = 2 * a.T + 2 * a + 1
    def call(lib):
        c = np.zeros_like(a)
        ptrs = (ctypes.c_void_p * 2)(a.ctypes.data, c.ctypes.data)
        assert lib.heap(ctypes.cast(ptrs, ctypes.c_void_p)) == 0
        assert (c == want).all()  # small integers: exact
    for attempt in range(3):  # a thread keeps buffers of the module, which is unloaded before it exits
        lib = ctypes.CDLL(so)
        ready, go = threading.Event(), threading.Event()
        t = threading.Thread(target=lambda: (call(lib), call(lib), ready.set(), go.wait()))
        t.start()
        call(lib)
        assert ready.wait(60)
        _ctypes.dlclose(lib._handle)
        go.set()
        t.join()
    print("ok")
""")


def test_export_without_parallel_loops_carries_scratch(tmp_path):
    """A kernel with a heap buffer and no parallel loop: its export links the pool (symbols hidden), runs,
    and unloads while a thread that kept buffers of it is alive; that thread then exits cleanly."""
    f = _heap_intermediate(200, False, "heap")
    so = str(tmp_path / "k.so")
    f.library.export(so, {"graph": b"{}"})
    table = subprocess.run(["readelf", "-dW", "--dyn-syms", so], capture_output=True, text=True,
                           check=True).stdout
    assert "nnvm_scratch_alloc" not in table, "the pool's symbols must stay inside the module"
    proc = subprocess.run([sys.executable, "-c", _UNLOAD, so, "200"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, NNVM_NUM_THREADS="2"))
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
