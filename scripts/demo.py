"""ResNet-18 end to end: compile it for this CPU, check it against onnxruntime, time both.

    make demo                                   (runs: uv run python scripts/demo.py)
    uv run python scripts/demo.py --threads 4 --repeat 50

The model is torchvision's ResNet-18 layout with seeded random weights, built with ``onnx.helper`` by
``nnvm_testing.frontend_onnx.models.resnet18`` and cached on disk (``$NNVM_CACHE_DIR/models``). Both
runtimes get the same input and the same number of threads. Exits 1 if the largest difference from
onnxruntime, relative to the largest output of onnxruntime, exceeds 1e-4.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

TOLERANCE = 1e-4


def median_ms(fn, repeat: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in milliseconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=int(os.environ.get("NNVM_NUM_THREADS", "2")),
                        help="threads for both runtimes (default: $NNVM_NUM_THREADS or 2)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of each runtime (default 20)")
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args(argv)
    # Read by nnvm's runtime; set before nnvm is imported so it holds from the first run.
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)

    import numpy as np
    import onnxruntime as ort

    import nnvm
    from nnvm_testing.frontend_onnx.models import cached_model_path

    path = cached_model_path("resnet18")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    x = np.random.default_rng(0).standard_normal(inp.shape).astype(np.float32)
    print(f"model        ResNet-18 (ONNX, seeded random weights), input {inp.name} "
          f"float32{list(inp.shape)}\n             {path}")

    try:
        start = time.perf_counter()
        mod = nnvm.compile(path, target=args.target)
        compile_s = time.perf_counter() - start
        (ours,) = mod.run(x)
    except nnvm.Error as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 1
    (want,) = session.run(None, {inp.name: x})
    print(f"compile      {compile_s:.2f} s for target {args.target!r}")

    if ours.shape != want.shape:
        print(f"demo: output shape {ours.shape} differs from onnxruntime's {want.shape}", file=sys.stderr)
        return 1
    error = float(np.abs(ours - want).max() / max(float(np.abs(want).max()), 1e-30))
    print(f"max rel err  {error:.2e} vs onnxruntime {ort.__version__} (max |ours - ort| / max |ort|; "
          f"limit {TOLERANCE:.0e})")

    ours_ms = median_ms(lambda: mod.run(x), args.repeat)
    ort_ms = median_ms(lambda: session.run(None, {inp.name: x}), args.repeat)
    print(f"latency      nnvm {ours_ms:.2f} ms, onnxruntime {ort_ms:.2f} ms (median of {args.repeat}, "
          f"{args.threads} threads)")
    print(f"ratio        nnvm / onnxruntime = {ours_ms / ort_ms:.2f}")

    if not error <= TOLERANCE:  # written so that NaN fails too
        print(f"demo: max relative error {error:.2e} exceeds {TOLERANCE:.0e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
