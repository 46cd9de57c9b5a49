"""Matmul 1024x1024 float32 on ``llvm``: API.md's schedule (and better hand-written ones) vs numpy.

Run: ``.venv/bin/python bench/matmul.py [--n 1024] [--threads 2] [--repeat 10]``. Prints GFLOP/s of
each schedule and the ratio to numpy's ``a @ b`` (OpenBLAS) measured in the same run, with the same
thread count for both (``NNVM_NUM_THREADS`` and the OpenMP/OpenBLAS variables).

Alternated runs are fair only if neither side's idle threads keep a core busy into the other's run.
OpenBLAS's workers spin for about 2**28 cycles (0.1 s) after each call unless
``OPENBLAS_THREAD_TIMEOUT`` says otherwise, so right after ``a @ b`` our second thread found its
core taken, and 2 threads ran no faster than one (ratio 0.45 here). This script sets the timeout to
its minimum (2**4 cycles) unless you set it yourself, and also times each side in a block of its
own, after a pause, where spinning cannot matter.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _set_threads(argv) -> int:
    # Thread pools read these at import, so they are set before numpy and nnvm load.
    threads = 2
    for k, a in enumerate(argv):
        if a == "--threads" and k + 1 < len(argv):
            threads = int(argv[k + 1])
        elif a.startswith("--threads="):
            threads = int(a.split("=", 1)[1])
    for var in ("NNVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    return threads


THREADS = _set_threads(sys.argv)

import numpy as np  # noqa: E402

import nnvm  # noqa: E402
from nnvm import te  # noqa: E402
from nnvm.bench import alternate_ms  # noqa: E402
from nnvm.te.examples import matmul, matmul_api_schedule  # noqa: E402

PANEL = 32  # columns of B per packed panel (and per register tile): --n must be a multiple of it


def _block_accumulator(s, C, CC, at, kb):
    """The register tile: ``CC`` (C's cache_write) computed at C's loop ``at``, k outside the tile,
    its rows unrolled and its columns vectorized; C's own columns vectorized."""
    s[CC].compute_at(s[C], at)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=kb)
    s[CC].reorder(ko, ki, ci, cj)
    s[CC].unroll(ki)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    s[C].vectorize(s[C].leaf_iter_vars[-1])


def blocked_schedule(n, bn=32, bi=4, kb=4):
    """Register blocking: a ``bi x bn`` block of C accumulated in a local buffer over k (inner loop),
    B read along rows (contiguous), j vectorized, rows of blocks in parallel."""
    A, B, C, _ = matmul(n)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bi, bn)
    _block_accumulator(s, C, CC, jo, kb)
    s[C].parallel(io)
    return s, [A, B, C]


def _packed_matmul(n, bn):
    """(schedule, A, B, C) of ``C = A @ B`` read through a packed copy of B, ``packedB[j // bn, k,
    j % bn]`` (so the k loop walks contiguous memory), the packing vectorized and parallel."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // bn, n, bn), lambda jo, kk, ji: B[kk, jo * bn + ji], name="packedB")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[packed].vectorize(s[packed].op.axis[2])
    s[packed].parallel(s[packed].op.axis[0])
    return s, A, B, C


def packed_schedule(n, bn=PANEL, bi=4, kb=4):
    """``blocked_schedule`` over a packed copy of B, ``packedB[j // bn, k, j % bn]``, so the k loop
    walks contiguous memory (one 4 KiB page per 32 rows of k instead of one per row)."""
    s, A, B, C = _packed_matmul(n, bn)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bi, bn)
    # Column panel outside: one panel of packedB (n * bn floats) stays in L2 across all row blocks.
    s[C].reorder(jo, io, ii, ji)
    _block_accumulator(s, C, CC, io, kb)
    s[C].parallel(jo)
    return s, [A, B, C]


def tensorized_schedule(n, bn=PANEL, bi=8, kc=None):
    """``packed_schedule``'s layout with the register tile written by the llvm backend's GEMM
    micro-kernel (``tensorize`` with ``te.backend_intrinsic("llvm", "gemm")``): a ``bi x bn`` tile of C
    in ``bi`` vector registers of ``bn`` lanes across ``kc`` steps of k (all of k by default), added
    into C once per call."""
    s, A, B, C = _packed_matmul(n, bn)
    kc = kc or n
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bi, bn)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=kc)
    s[C].reorder(jo, io, ko, ii, ji, ki)
    s[C].tensorize(ii, te.backend_intrinsic("llvm", "gemm", m=bi, n=bn, k=kc))
    s[C].parallel(jo)
    return s, [A, B, C]


def _time_alone(fn, repeat: int, pause: float = 0.3) -> float:
    """Median seconds of ``fn`` timed in a block of its own, after a pause that lets the other
    side's threads go to sleep."""
    time.sleep(pause)
    return alternate_ms([fn], repeat)[0] / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    n = args.n
    if n <= 0 or n % PANEL:  # packedB has n // PANEL panels: a partial one would be read past its end
        p.error(f"--n {n}: the packed schedules need a positive multiple of {PANEL}")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    flops = 2.0 * n ** 3
    print(f"matmul {n}x{n}x{n} float32, target llvm, threads {THREADS}, median of {args.repeat}")
    best = 0.0
    for name, make in (("api.md schedule", matmul_api_schedule), ("register-blocked", blocked_schedule),
                       ("packed B", packed_schedule), ("packed B + gemm", tensorized_schedule)):
        s, tensors = make(n)
        f = nnvm.build(s, tensors, target="llvm")
        c = np.zeros((n, n), dtype=np.float32)
        f(a, b, c)
        err = float(np.max(np.abs(c - ref)))
        if err > 1e-2 * np.sqrt(n):
            raise SystemExit(f"{name}: wrong result, max abs error {err:.3g} vs numpy")
        ours = lambda f=f, c=c: f(a, b, c)  # noqa: E731
        # Alternated, numpy first, so a busy machine slows both alike and the ratio stays meaningful.
        t_np, t = (ms / 1e3 for ms in alternate_ms([lambda: a @ b, ours], args.repeat))
        t_alone, t_np_alone = _time_alone(ours, args.repeat), _time_alone(lambda: a @ b, args.repeat)
        gflops = [flops / x / 1e9 for x in (t, t_np, t_alone, t_np_alone)]
        print(f"  {name:17s} {t * 1e3:8.2f} ms {gflops[0]:7.2f} GFLOP/s | numpy {t_np * 1e3:7.2f} ms "
              f"{gflops[1]:7.2f} GFLOP/s | ratio {t_np / t:5.2f} | each alone: {gflops[2]:7.2f} vs "
              f"{gflops[3]:7.2f} GFLOP/s, ratio {t_np_alone / t_alone:5.2f} | max abs err {err:.2g}")
        if make is not matmul_api_schedule:
            best = max(best, t_np / t)
    print(f"best hand-written schedule, alternated: {best:.2f}x numpy "
          "(goals: >= 0.5x, issue 3; >= 1.0x, issue 5)")


if __name__ == "__main__":
    main()
