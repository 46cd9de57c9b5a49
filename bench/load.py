"""Slowdown under load: nnvm and onnxruntime alone, then with one busy process on the machine (issue 19).

    uv run python bench/load.py [--models resnet18,mobilenet_v2] [--threads 2] [--rounds 3] [--repeat 20]
                                [--chunks N] [--spin-us N]

Per model (the ONNX builds of ``nnvm_testing.frontend_onnx.models``, cached): nnvm (compiled for this
CPU, ``NNVM_NUM_THREADS=threads``) and onnxruntime (default settings, spinning on, ``threads``
intra-op threads), each timed in a block of its own (median of ``repeat`` runs), first alone and then
while this script runs ``python -c 'while True: pass'``; rounds repeat that pair, so a drift in the
machine (other work on it) shows as spread. Prints each round and, per runtime, the median slowdown
(loaded / alone) with its range over the rounds. The goal: nnvm's slowdown <= onnxruntime's.

``--chunks`` and ``--spin-us`` rebuild the thread pool (``nnvm_pool.c``) with another chunk count per
thread or spin time, to pick the defaults by measurement. The script also runs in a checkout from
before the pool (libgomp), without those two options.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BUSY = "while True: pass"


def block_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def measure(name: str, threads: int, rounds: int, repeat: int) -> dict:
    import nnvm
    from nnvm.bench import onnxruntime_session, seeded_inputs
    from nnvm_testing.frontend_onnx.models import cached_model_path

    path = cached_model_path(name)
    mod = nnvm.compile(path, target="llvm")
    session, _ = onnxruntime_session(path, threads, spinning=True)  # onnxruntime's defaults
    feeds = seeded_inputs(mod)
    ort_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
    fns = {"nnvm": lambda: mod.run(**feeds), "onnxruntime": lambda: session.run(None, ort_feeds)}
    rows = []
    for r in range(rounds):
        row = {}
        for state in ("alone", "loaded"):
            busy = subprocess.Popen([sys.executable, "-c", BUSY]) if state == "loaded" else None
            try:
                time.sleep(0.3)
                for runtime, fn in fns.items():
                    time.sleep(0.2)  # the other runtime's idle threads go to sleep
                    row[runtime, state] = block_ms(fn, repeat)
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
        rows.append(row)
        print(f"  {name} round {r + 1}: " + "  ".join(
            f"{rt} {row[rt, 'alone']:.1f} -> {row[rt, 'loaded']:.1f} ms "
            f"({row[rt, 'loaded'] / row[rt, 'alone']:.2f}x)" for rt in fns), flush=True)
    out = {}
    for rt in fns:
        slow = [row[rt, "loaded"] / row[rt, "alone"] for row in rows]
        out[rt] = {"alone_ms": statistics.median(row[rt, "alone"] for row in rows),
                   "loaded_ms": statistics.median(row[rt, "loaded"] for row in rows),
                   "slowdown": statistics.median(slow), "min": min(slow), "max": max(slow)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--chunks", type=int, help="chunks per thread the pool is rebuilt with")
    ap.add_argument("--spin-us", type=int, help="microseconds the pool's threads spin before sleeping")
    args = ap.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    if args.chunks or args.spin_us is not None:
        from nnvm_backend_llvm import library

        extra = [f"-DCHUNKS_PER_THREAD={args.chunks}"] if args.chunks else []
        extra += [f"-DSPIN_NS={args.spin_us * 1000}"] if args.spin_us is not None else []
        library.POOL_CFLAGS = (*library.POOL_CFLAGS, *extra)
    print(f"{args.threads} threads, {args.rounds} rounds of {args.repeat} runs per block"
          f"{f', {args.chunks} chunks per thread' if args.chunks else ''}"
          f"{f', spin {args.spin_us} us' if args.spin_us is not None else ''}", flush=True)
    results = {name: measure(name, args.threads, args.rounds, args.repeat) for name in args.models.split(",")}
    print(f"{'model':14} {'runtime':12} {'alone ms':>9} {'loaded ms':>10} {'slowdown':>9}  range")
    for name, res in results.items():
        for rt, v in res.items():
            print(f"{name:14} {rt:12} {v['alone_ms']:9.1f} {v['loaded_ms']:10.1f} {v['slowdown']:8.2f}x  "
                  f"{v['min']:.2f}-{v['max']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
