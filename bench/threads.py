"""One module run from 4 threads x 20 runs against 80 runs in a row (issue 20).

    uv run python bench/threads.py [--model mobilenet_v2] [--target llvm|opencl] [--loaded] [--rounds 5]

Prints, per round (threaded and serial alternated), the seconds each takes and how many threaded
results differ from the same input run alone, then the best round of each and their ratio. The goal
(issue 20): no wrong result, and the threaded rounds no slower than the serial ones. ``--loaded`` runs
the module exported and read back with ``nnvm.load``; ``--target opencl`` runs it on the OpenCL device.
Timing is a benchmark, not a test (the host's speed drifts); ``tests/test_concurrency.py`` checks the
results on a small network.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import nnvm
from nnvm_testing.frontend_onnx.models import cached_model_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--loaded", action="store_true", help="run the module exported and read back")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    mod = nnvm.compile(cached_model_path(args.model), target=args.target)
    if args.loaded:
        path = os.path.join(tempfile.mkdtemp(prefix="nnvm-bench-"), "module.so")
        mod.export(path)
        mod = nnvm.load(path)
    rng = np.random.default_rng(0)
    spec = mod.plan["inputs"][0]
    xs = [rng.standard_normal(spec["shape"]).astype(spec["dtype"]) for _ in range(args.threads)]
    alone = [mod.run(x)[0] for x in xs]
    total = args.threads * args.runs

    def work(k):
        return sum(not np.array_equal(mod.run(xs[k])[0], alone[k]) for _ in range(args.runs))

    best_threaded = best_serial = float("inf")
    wrong_total = 0
    for r in range(args.rounds):
        start = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            wrong = sum(pool.map(work, range(args.threads)))
        threaded = time.perf_counter() - start
        start = time.perf_counter()
        for k in range(total):
            mod.run(xs[k % args.threads])
        serial = time.perf_counter() - start
        wrong_total += wrong
        best_threaded, best_serial = min(best_threaded, threaded), min(best_serial, serial)
        print(f"round {r}: {args.threads} threads x {args.runs} runs {threaded:.3f} s ({wrong} wrong), "
              f"{total} runs in a row {serial:.3f} s")
    how = "loaded with nnvm.load" if args.loaded else "compiled in process"
    print(f"{args.model} for {args.target} ({how}): best {args.threads}x{args.runs} threaded "
          f"{best_threaded:.3f} s, best {total} in a row {best_serial:.3f} s, threaded/serial "
          f"{best_threaded / best_serial:.2f}, {wrong_total} wrong of {args.rounds * total}")


if __name__ == "__main__":
    main()
