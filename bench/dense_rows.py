"""Packed dense by a constant weight at few rows: a module bound to each row count against one unbound one.

    uv run --no-sync python bench/dense_rows.py                      # BERT/GPT-2 layers, rows 1-9,16,33,128
    uv run --no-sync python bench/dense_rows.py --shapes 768x3072 --rows 5,7,8 --rounds 9
    uv run --no-sync python bench/dense_rows.py --shapes 768x50257 --rows 7,8 --switch dense_odd_rows=0

Per shape ``KxN`` (``[batch, seq, K]`` data by a constant ``[K, N]`` weight plus a bias: an ONNX MatMul + Add,
seeded weights): one module compiled with ``batch`` and ``seq`` symbolic, as
transformers are exported (its rows flattened and padded to whole tiles), and one per row count bound to
``(1, rows)``. Both modules' outputs are checked against numpy, then each is run in blocks of
its own (``--repeat`` runs, timed by the process's CPU time: one thread on a shared machine counts only
the time the run was on a core), the blocks alternated ``--rounds`` times; the medians in microseconds
and the ratio bound / unbound are printed (under 1: the bound module is faster), with the load average.
``--switch NAME=VALUE`` compiles both with a ``cpu_switches`` entry; ``--ab NAME=VALUE`` also times a third
module, bound with that entry (A/B of a decision in the same rounds: ``dense_few_rows=0``, the tiles of few
rows before session 24), and prints its ratio to the bound module's. One thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["NNVM_NUM_THREADS"] = "1"  # before any kernel runs: the pool reads it once
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import nnvm  # noqa: E402

ROWS = "1,2,3,4,5,6,7,8,9,16,33,128"
SHAPES = "768x768,768x3072,3072x768,768x50257"  # BERT/GPT-2's layers and GPT-2's head


def _model(path: str, k: int, n: int) -> tuple:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(k * 7 + n)
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])
    graph = helper.make_graph(nodes, "dense", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return w, b


def _cpu_us(fn, repeat: int) -> float:
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return 1e6 * (time.process_time() - start) / repeat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated KxN")
    parser.add_argument("--rows", default=ROWS, help="comma-separated row counts (seq at batch 1)")
    parser.add_argument("--rounds", type=int, default=7, help="blocks of each module, alternated")
    parser.add_argument("--repeat", type=int, default=0, help="runs a block (0: about 20 ms of work)")
    parser.add_argument("--switch", default="", help="NAME=VALUE: a cpu_switches entry for both compiles")
    parser.add_argument("--ab", default="", help="NAME=VALUE: a third module, bound, with this switch")
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    switches = dict([args.switch.split("=")]) if args.switch else {}
    options = nnvm.Options(tuning_log=False, cpu_switches=switches)
    print(f"load average {os.getloadavg()[0]:.2f}; one thread, CPU time, switches {switches or 'none'}")
    ab = dict([args.ab.split("=")]) if args.ab else {}
    ab_options = nnvm.Options(tuning_log=False, cpu_switches={**switches, **ab})
    print(f"target {args.target}; A/B module: switches {ab or 'none'}")
    print(f"{'shape':>10} {'rows':>4} {'bound us':>10} {'unbound us':>10} {'bound/unbound':>13}"
          + (f" {'A/B us':>10} {'A/B/bound':>9}" if ab else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            k, n = (int(v) for v in shape.split("x"))
            path = os.path.join(tmp, f"dense_{k}x{n}.onnx")
            w, b = _model(path, k, n)
            unbound = nnvm.compile(path, target=args.target, options=options)
            for rows in (int(r) for r in args.rows.split(",")):
                mods = {"bound": nnvm.compile(path, target=args.target, shapes={"x": (1, rows, k)},
                                              options=options), "unbound": unbound}
                if ab:
                    mods["A/B"] = nnvm.compile(path, target=args.target, shapes={"x": (1, rows, k)},
                                               options=ab_options)
                x = np.random.default_rng(rows).standard_normal((1, rows, k)).astype(np.float32)
                want = x @ w + b
                for name, mod in mods.items():
                    err = float(np.abs(mod.run(x=x)[0] - want).max())
                    if err > 1e-3 * float(np.abs(want).max()):
                        raise SystemExit(f"{shape} at {rows} rows: the {name} module is off by {err}")
                fns = [lambda m=mod, x=x: m.run(x=x) for mod in mods.values()]
                repeat = args.repeat or max(3, int(0.02 / max(_cpu_us(fns[0], 2) * 1e-6, 1e-6)))
                times: list[list[float]] = [[] for _ in fns]
                for _ in range(args.rounds):
                    for t, fn in zip(times, fns):
                        fn()
                        t.append(_cpu_us(fn, repeat))
                ours, theirs, *other = (statistics.median(t) for t in times)
                line = f"{shape:>10} {rows:>4} {ours:10.1f} {theirs:10.1f} {ours / theirs:13.2f}"
                if other:
                    line += f" {other[0]:10.1f} {other[0] / ours:9.2f}"
                print(line, flush=True)
                del mods
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
