"""The thread pool of parallel loops (``nnvm_pool.c``): right answers from many callers at once, exports
that need no libgomp and keep the pool's symbols to themselves, unloading with workers alive, and one
sentence when no C compiler can build it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.errors import Error
from nnvm_backend_llvm import pool_build


@contextlib.contextmanager
def _busy_process():
    """One other process spinning on a core while the block runs, so workers get descheduled."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        busy.kill()
        busy.wait()


def _parallel_affine(rows: int, name: str = "affine"):
    """B = A * 3 + 1 over a (rows, 33) array, rows in parallel: an odd extent, uneven chunks."""
    A = te.placeholder((rows, 33), name="A")
    B = te.compute((rows, 33), lambda i, j: A[i, j] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    return nnvm.build(s, [A, B], target="llvm", name=name)


def test_many_callers_at_once(monkeypatch):
    """4 Python threads (ctypes drops the GIL) call parallel kernels of 3-thread teams 150 times each:
    one caller gets the pool, the others run alone; every output equals numpy's."""
    monkeypatch.setenv("NNVM_NUM_THREADS", "3")
    fns = [(rows, _parallel_affine(rows, f"affine{rows}")) for rows in (1, 2, 7, 37)]
    assert fns[-1][1].library.num_threads() == 3

    def work(k):
        rng = np.random.default_rng(k)
        bad = 0
        for n in range(150):
            rows, f = fns[(k + n) % len(fns)]
            a = rng.standard_normal((rows, 33)).astype("float32")
            b = np.full_like(a, np.nan)
            f(a, b)
            # an FMA rounds once: within an ulp of numpy's two roundings; NaN left where no chunk wrote
            bad += not np.allclose(b, a.astype("float64") * 3 + 1, rtol=1e-6, atol=1e-6)
        return bad

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(work, range(4))) == 0


def _dynamic(path: str) -> str:
    return subprocess.run(["readelf", "-dW", "--dyn-syms", path], capture_output=True, text=True,
                          check=True).stdout


def test_export_carries_its_own_pool(tmp_path):
    f = _parallel_affine(37)
    so = str(tmp_path / "k.so")
    f.library.export(so, {"graph": b"{}"})
    table = _dynamic(so)
    assert "libgomp" not in table and "GOMP_" not in table, table
    assert "nnvm_pool_run" not in table, "the pool's symbols must stay inside the module"
    assert "nnvm_llvm_num_threads" in table


_UNLOAD = textwrap.dedent("""
    import ctypes, _ctypes, sys
    import numpy as np
    so = sys.argv[1]
    a = np.arange(37 * 33, dtype="float32").reshape(37, 33)
    for attempt in range(3):  # load, run on the module's pool, unload while its workers idle, again
        lib = ctypes.CDLL(so)
        b = np.zeros_like(a)
        ptrs = (ctypes.c_void_p * 2)(a.ctypes.data, b.ctypes.data)
        for _ in range(20):
            assert lib.affine(ctypes.cast(ptrs, ctypes.c_void_p)) == 0
        assert (b == a * 3 + 1).all()  # small integers: exact
        _ctypes.dlclose(lib._handle)
    print("ok")
""")


def test_unload_with_workers_alive(tmp_path):
    """dlclose of an exported module stops and joins its pool's workers (their code goes away)."""
    f = _parallel_affine(37)
    so = str(tmp_path / "k.so")
    f.library.export(so, {"graph": b"{}"})
    proc = subprocess.run([sys.executable, "-c", _UNLOAD, so], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, NNVM_NUM_THREADS="2"))
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


_POOL_CALLER = r"""
void nnvm_pool_run(void (*)(void *, int64_t, int64_t), void *, int64_t, int32_t);
static void body(void *hits, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) __atomic_fetch_add(&((int *)hits)[i], 1, __ATOMIC_RELAXED);
}
static void *caller(void *arg) {  /* random extents and teams; every index run exactly once */
  unsigned seed = (unsigned)(intptr_t)arg;
  int hits[200];
  for (int r = 0; r < 20000; r++) {
    int n = 1 + rand_r(&seed) % 200, team = 1 + rand_r(&seed) % 4;
    memset(hits, 0, sizeof hits);
    nnvm_pool_run(body, hits, n, team);
    for (int i = 0; i < 200; i++)
      if (hits[i] != (i < n)) { __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED); break; }
  }
  return 0;
}
static void report(void) { printf("bad %d\n", bad); }
"""


@pytest.mark.parametrize("callers", [1, 3])
def test_every_chunk_runs_once(callers, tmp_path, c_callers):
    """The pool in C, 20000 regions per calling thread with random extents and team sizes, run next to a
    busy process: every iteration runs exactly once (no chunk lost to, or taken twice by, a late worker)."""
    with _busy_process():
        proc = c_callers(tmp_path, _POOL_CALLER, callers)
    assert proc.returncode == 0 and "bad 0" in proc.stdout, proc.stdout + proc.stderr


_CHUNK_SIZES = r"""
void nnvm_pool_run(void (*)(void *, int64_t, int64_t), void *, int64_t, int32_t);
static void widest(void *most, int64_t lo, int64_t hi) {
  int64_t w = hi - lo, seen = __atomic_load_n((int64_t *)most, __ATOMIC_RELAXED);
  while (w > seen && !__atomic_compare_exchange_n((int64_t *)most, &seen, w, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED)) {}
}
static int64_t widest_chunk(int64_t extent) {
  int64_t most = 0;
  for (int r = 0; r < 50; r++) nnvm_pool_run(widest, &most, extent, 2);
  return most;
}
static void *caller(void *arg) {
  (void)arg;
  printf("%ld %ld %ld %ld %ld %ld\n", (long)widest_chunk(10), (long)widest_chunk(18), (long)widest_chunk(40),
         (long)widest_chunk(42), (long)widest_chunk(66), (long)widest_chunk(678));
  return 0;
}
static void report(void) {}
"""


def test_chunks_are_the_same_size_where_a_few_more_make_it_so(tmp_path, c_callers):
    """Two threads cut a loop into 8 chunks where 8 divide it (40: chunks of 5); otherwise into the fewest
    even count up to 32 that divides it (42 rows: 14 chunks of 3; 66: 22 of 3), so neither thread is left
    a whole iteration's work; a short loop no such count divides runs one iteration a chunk (10 and 18:
    MobileNetV2's 7x7 channel-block groups), a long one keeps 8 (678: chunks of 84-85)."""
    proc = c_callers(tmp_path, _CHUNK_SIZES, 1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["1", "1", "5", "3", "3", "85"], proc.stdout


_OWN_CHUNKS_FIRST = r"""
void nnvm_pool_run(void (*)(void *, int64_t, int64_t), void *, int64_t, int32_t);
struct seen { pthread_t caller; int order[2][64], count[2]; };
static void record(void *arg, int64_t lo, int64_t hi) {  /* a chunk: who ran it, in that thread's order */
  struct seen *s = arg;
  int who = pthread_equal(pthread_self(), s->caller) ? 0 : 1;
  s->order[who][s->count[who]++] = (int)lo;  /* one thread appends to each list */
  for (volatile int spin = 0; spin < 20000; spin++) {}
  (void)hi;
}
static void *caller(void *arg) {
  (void)arg;
  for (int r = 0; r < 300; r++) {
    struct seen s = {.caller = pthread_self()};
    nnvm_pool_run(record, &s, 16, 2);  /* 8 chunks of 2: the caller owns 0-6, the worker 8-14 */
    for (int who = 0; who < 2; who++) {
      int own = 1;  /* a thread's own chunks, then the other's: never back to its own */
      for (int k = 0; k < s.count[who]; k++) {
        int mine = (s.order[who][k] < 8) == (who == 0);
        if (mine && !own) { __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED); break; }
        if (!mine) own = 0;
        int before = k > 0 && (s.order[who][k - 1] < 8) == (who == 0);
        if (k > 0 && mine == before && s.order[who][k] <= s.order[who][k - 1]) {
          __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);  /* each run front first */
          break;
        }
      }
    }
    if (s.count[0] + s.count[1] != 8) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
  }
  return 0;
}
static void report(void) { printf("bad %d\n", bad); }
"""


def test_each_thread_runs_its_own_chunks_first(tmp_path, c_callers):
    """Two threads: the caller owns the first half of a loop's chunks and the worker the second; each
    runs its own front first and only then what is left of the other's (so consecutive kernels keep a
    thread on the same part of the data), whatever the timing: 300 regions next to a busy process."""
    with _busy_process():
        proc = c_callers(tmp_path, _OWN_CHUNKS_FIRST, 1)
    assert proc.returncode == 0 and "bad 0" in proc.stdout, proc.stdout + proc.stderr


def test_no_c_compiler_is_one_sentence():
    with pytest.raises(Error, match=r"running parallel kernels needs a C compiler .*'no-such-cc' was not"):
        pool_build("no-such-cc", "so", "running parallel kernels")


def test_pool_build_is_cached():
    first = pool_build("cc", "o", "test")
    assert os.path.exists(first) and pool_build("cc", "o", "test") == first


def test_cost_model_counts_the_pools_chunks():
    """The CPU layer's cost model plans parallel loops for ``POOL_CHUNKS_PER_THREAD`` chunks a thread: the
    number the pool's C source cuts loops by (a change to one must reach the other)."""
    import re
    from pathlib import Path

    import nnvm_backend_llvm
    from nnvm.cpu.cost_model import POOL_CHUNKS_PER_THREAD

    source = (Path(nnvm_backend_llvm.__file__).parent / "nnvm_pool.c").read_text()
    (chunks,) = re.findall(r"#define CHUNKS_PER_THREAD (\d+)", source)
    assert int(chunks) == POOL_CHUNKS_PER_THREAD


def test_one_foreign_call_runs_every_kernel_in_order(tmp_path, conv_model):
    """``nnvm_run_kernels`` (the library's sequence runner): kernels in order, each with its own argument
    array, stopping at the first nonzero status with its index; a compiled module's runs go through it
    and give the same numbers as calling each kernel."""
    import ctypes

    from nnvm.runtime.kernel import SEQUENCE_TYPE
    from nnvm_backend_llvm import LLVMKernelLibrary

    seen = []
    kernel_type = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
    kernels = [kernel_type(lambda arg, k=k: seen.append((k, arg)) or (7 if k == 2 else 0)) for k in range(4)]
    table = (ctypes.c_void_p * 4)(*[ctypes.cast(fn, ctypes.c_void_p).value for fn in kernels])
    args = (ctypes.c_void_p * 4)(11, 12, 13, 14)
    library = LLVMKernelLibrary.__new__(LLVMKernelLibrary)
    library._engine = object()  # runs in process: the runner comes from the pool's shared library
    run = SEQUENCE_TYPE(library.sequence_runner())
    failed = ctypes.c_int64(-1)
    assert run(4, table, args, ctypes.byref(failed)) == 7
    assert seen == [(0, 11), (1, 12), (2, 13)] and failed.value == 2
    seen.clear()
    assert run(2, table, args, ctypes.byref(failed)) == 0 and seen == [(0, 11), (1, 12)]

    mod = nnvm.compile(conv_model(str(tmp_path / "c.onnx"), 8, 12), target="llvm", tuning_log=False)
    workspace = mod._free[0]
    assert workspace.sequence is not None
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    got = mod.run(x)[0]
    workspace.sequence = None  # each kernel through ctypes
    np.testing.assert_array_equal(mod.run(x)[0], got)


def test_affinity_switch_takes_0_or_1(monkeypatch, conv_model, tmp_path):
    """``NNVM_POOL_AFFINITY`` is read by the C pool, which would take ``off`` as on: the runtime refuses
    anything but 0 and 1 in one sentence before a kernel runs."""
    path = conv_model(str(tmp_path / "c.onnx"), 8, 6)
    monkeypatch.setenv("NNVM_POOL_AFFINITY", "off")
    with pytest.raises(Error, match=r"NNVM_POOL_AFFINITY='off': must be 0 .* or 1"):
        nnvm.compile(path, target="llvm", tuning_log=False)
    for value in ("0", "1"):
        monkeypatch.setenv("NNVM_POOL_AFFINITY", value)
        assert nnvm.compile(path, target="llvm", tuning_log=False) is not None
