"""One MobileNetV2 module run from 4 threads x 20 runs against 80 runs in a row (issue 20).

    uv run python bench/threads.py [--rounds 5] [--model mobilenet_v2]

Prints, per round (alternated), the seconds each takes and how many threaded results differ from the
same input run alone. The goal (issue 20): no wrong result, and the threaded rounds no slower than the
serial ones. Timing is a benchmark, not a test (the host's speed drifts); ``tests/test_concurrency.py``
checks the results on a small network.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import nnvm
from nnvm_frontend_onnx.testing.models import cached_model_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    mod = nnvm.compile(cached_model_path(args.model), target="llvm")
    rng = np.random.default_rng(0)
    _, shape, dtype, _ = mod._inputs[0]
    xs = [rng.standard_normal(shape).astype(dtype) for _ in range(args.threads)]
    alone = [mod.run(x)[0] for x in xs]
    total = args.threads * args.runs

    def work(k):
        return sum(not np.array_equal(mod.run(xs[k])[0], alone[k]) for _ in range(args.runs))

    for r in range(args.rounds):
        start = time.perf_counter()
        with ThreadPoolExecutor(args.threads) as pool:
            wrong = sum(pool.map(work, range(args.threads)))
        threaded = time.perf_counter() - start
        start = time.perf_counter()
        for k in range(total):
            mod.run(xs[k % args.threads])
        serial = time.perf_counter() - start
        print(f"round {r}: {args.threads} threads x {args.runs} runs {threaded:.3f} s ({wrong} wrong), "
              f"{total} runs in a row {serial:.3f} s")


if __name__ == "__main__":
    main()
