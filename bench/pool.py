"""The thread pool (``nnvm_pool.c``) alone, in C: microseconds per parallel region, by chunks per thread
and spin time, on an idle machine and with one busy process (issue 19; picks the pool's defaults).

    uv run python bench/pool.py [--threads 2] [--chunks 1,2,4,8,16] [--spin-us 0,50,500] [--reps 5]
    uv run python bench/pool.py --stalls [--work 2,10,40]   # how long regions wait for descheduled workers

A C driver calls ``nnvm_pool_run`` on ``REGIONS`` regions of ``EXTENT`` iterations (``WORK`` units of
a dependent multiply-add chain each), with ``GAP_US`` units of serial work on the calling thread
between regions (Python's hand-over between two kernels), for each variant of the pool compiled with
``-DCHUNKS_PER_THREAD`` and ``-DSPIN_NS``; variants and the busy/idle states alternate, and each
cell is the median of ``reps``. The "one thread" row is the same regions run by the caller alone (no pool).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POOL = Path(__file__).resolve().parents[1] / "plugins/backend_llvm/src/nnvm_backend_llvm/nnvm_pool.c"
DRIVER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void nnvm_pool_run(void (*)(void *, int64_t, int64_t), void *, int64_t, int32_t);
int32_t nnvm_pool_team(int32_t *);
void nnvm_pool_stats(uint64_t out[4]);
static volatile float sink;
#ifndef WORK
#define WORK 1.0
#endif
static void spin_us(double us) {  /* about `us` microseconds of arithmetic */
  float x = 1.0f;
  for (long k = 0; k < (long)(us * 1000); k++) x = x * 0.999f + 0.001f;
  sink = x;
}
static void body(void *closure, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) spin_us(WORK);
}
int main(int argc, char **argv) {
  int regions = atoi(argv[1]), extent = atoi(argv[2]);
  double gap = atof(argv[3]);
  int32_t cache = 0, team = nnvm_pool_team(&cache);
  struct timespec a, b;
  for (int r = 0; r < 50; r++) nnvm_pool_run(body, 0, extent, team);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int r = 0; r < regions; r++) { nnvm_pool_run(body, 0, extent, team); spin_us(gap); }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double par = ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3) / regions;
  clock_gettime(CLOCK_MONOTONIC, &a);  /* the same regions on this thread alone */
  for (int r = 0; r < regions / 4; r++) { body(0, 0, extent); spin_us(gap); }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double one = ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3) / (regions / 4);
  printf("%.2f %.2f", par, one);
#ifdef NNVM_POOL_STATS
  uint64_t st[4];
  nnvm_pool_stats(st);
  printf(" %llu %llu %.2f %.2f", (unsigned long long)st[0], (unsigned long long)st[1],
         st[2] / 1e3 / (st[0] ? st[0] : 1), st[3] / 1e3);
#endif
  printf("\n");
  return 0;
}
"""
REGIONS, EXTENT, GAP_US = 300, 64, 10
BUSY = "while True: pass"
WORK = 20  # units per iteration


def build(tmp: str, chunks: int, spin_us: int, work: float = WORK, stats: bool = False) -> str:
    exe = os.path.join(tmp, f"pool-c{chunks}-s{spin_us}-w{work}{'-stats' if stats else ''}")
    driver = os.path.join(tmp, "driver.c")
    Path(driver).write_text(DRIVER)
    counters = ["-DNNVM_POOL_STATS"] if stats else []
    subprocess.run(["cc", "-O1", "-std=c11", f"-DWORK={work}", f"-DCHUNKS_PER_THREAD={chunks}",
                    f"-DSPIN_NS={spin_us * 1000}", "-DNNVM_POOL_API=", *counters, "-o", exe, driver,
                    str(POOL), "-lpthread"], check=True)
    return exe


def stalls(args, env) -> int:
    """The pool as built (default chunks and spin) with its wait counters (``-DNNVM_POOL_STATS``): per
    region size, idle and next to a busy process, how long the caller waits after its last chunk for the
    chunks still on workers; a wait over 100 us is a worker descheduled while it held a chunk."""
    works = [float(w) for w in args.work.split(",")]
    rows: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        exes = {w: build(tmp, 4, 50, w, stats=True) for w in works}
        for _ in range(args.reps):
            for state in ("idle", "busy"):
                busy = None if state == "idle" else subprocess.Popen([sys.executable, "-c", BUSY])
                try:
                    time.sleep(0.2)
                    for w, exe in exes.items():
                        out = subprocess.run([exe, str(REGIONS), str(EXTENT), str(GAP_US)], env=env,
                                             capture_output=True, text=True, check=True).stdout.split()
                        rows.setdefault((w, state), []).append([float(v) for v in out])
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
    print(f"{args.threads} threads, {EXTENT} iterations per region, {REGIONS} regions a run, median of "
          f"{args.reps} runs; wait: the caller's, after its last chunk, for the workers' last chunks")
    print(f"{'work':>6} {'state':>5} {'one thread us':>14} {'region us':>10} {'waits >100us':>13} "
          f"{'mean wait us':>13} {'max wait us':>12}")
    for (w, state), runs in rows.items():
        med = [statistics.median(r[k] for r in runs) for k in range(6)]
        print(f"{w:6g} {state:>5} {med[1]:14.1f} {med[0]:10.1f} {f'{med[3]:.0f} / {med[2]:.0f}':>13} "
              f"{med[4]:13.1f} {med[5]:12.1f}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunks", default="1,2,4,8,16")
    ap.add_argument("--spin-us", default="0,50,500")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stalls", action="store_true", help="the waits for descheduled workers, by region size")
    ap.add_argument("--work", default="2,10,40", help="--stalls: units of work per iteration")
    args = ap.parse_args(argv)
    env = dict(os.environ, NNVM_NUM_THREADS=str(args.threads))
    if args.stalls:
        return stalls(args, env)
    variants = list(itertools.product([int(c) for c in args.chunks.split(",")],
                                      [int(s) for s in args.spin_us.split(",")]))
    times: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        exes = {v: build(tmp, *v) for v in variants}
        for _ in range(args.reps):
            for state in ("idle", "busy"):
                busy = None if state == "idle" else subprocess.Popen([sys.executable, "-c", BUSY])
                try:
                    time.sleep(0.2)
                    for v, exe in exes.items():
                        out = subprocess.run([exe, str(REGIONS), str(EXTENT), str(GAP_US)], env=env,
                                             capture_output=True, text=True, check=True).stdout
                        par, one = map(float, out.split())
                        times.setdefault((v, state), []).append(par)
                        times.setdefault(("serial", state), []).append(one)
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
    print(f"{args.threads} threads, {EXTENT} iterations per region + a serial gap; us per region, "
          f"median of {args.reps} (range)")
    print(f"{'chunks/thread':>13} {'spin us':>8} {'idle':>20} {'one busy process':>20}")
    serial = [f"{statistics.median(times['serial', s]):7.1f}" for s in ("idle", "busy")]
    print(f"{'one thread':>13} {'':8} {serial[0]:>20} {serial[1]:>20}")
    for v in variants:
        cells = []
        for state in ("idle", "busy"):
            t = times[v, state]
            cells.append(f"{statistics.median(t):7.1f} ({min(t):.0f}-{max(t):.0f})")
        print(f"{v[0]:13d} {v[1]:8d} {cells[0]:>20} {cells[1]:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
