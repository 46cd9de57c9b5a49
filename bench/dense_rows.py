"""Packed dense by a constant weight at few rows: a module bound to each row count against one unbound one.

    uv run --no-sync python bench/dense_rows.py --ab dense_few_rows=0    # BERT/GPT-2 layers, rows 1-128
    uv run --no-sync python bench/dense_rows.py --shapes 768x3072 --rows 5,7,8 --target "llvm -mcpu=haswell"
    uv run --no-sync python bench/dense_rows.py --shapes "" --models bert,gpt2 --ab dense_few_rows=0

Per shape ``KxN`` (``[batch, seq, K]`` data by a constant ``[K, N]`` weight plus a bias: an ONNX MatMul +
Add, seeded weights): one module compiled with ``batch`` and ``seq`` symbolic, as transformers are exported
(its rows flattened and padded to whole tiles), and one per row count bound to ``(1, rows)``. The modules'
outputs are checked against numpy, then each is run in blocks of its own (``--repeat`` runs, timed by the
process's CPU time: one thread on a shared machine counts only the time the run was on a core), the blocks
alternated ``--rounds`` times; the medians in microseconds and the ratio bound / unbound are printed (under
1: the bound module is faster), with the load average. ``--models gpt2,bert`` does the same for whole
transformers (``bench/dynamic.py``'s exports) at batch 1 and each of ``--seqs``, checked against
onnxruntime, in milliseconds. ``--switch NAME=VALUE`` compiles every module with a ``cpu_switches`` entry;
``--ab NAME=VALUE`` also times a third module, bound with that entry (A/B of a decision in the same rounds:
``dense_few_rows=0``, the tiles of few rows before session 24), and prints its ratio to the bound one's.
One thread.
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


def _medians(mods: dict, feeds: dict, args) -> list:
    """Median CPU microseconds a run of each module, in blocks of ``args.repeat`` runs (0: about 20 ms)
    alternated ``args.rounds`` times."""
    fns = [lambda m=mod: m.run(**feeds) for mod in mods.values()]
    repeat = args.repeat or max(3, int(0.02 / max(_cpu_us(fns[0], 2) * 1e-6, 1e-6)))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(args.rounds):
        for t, fn in zip(times, fns):
            fn()
            t.append(_cpu_us(fn, repeat))
    return [statistics.median(t) for t in times]


def _line(head: str, medians: list, scale: float) -> str:
    ours, theirs, *other = (m * scale for m in medians)
    line = f"{head} {ours:10.1f} {theirs:10.1f} {ours / theirs:13.2f}"
    return line + (f" {other[0]:10.1f} {other[0] / ours:9.2f}" if other else "")


def _models_ab(name: str, args, options, ab_options) -> None:
    """``--models``: a transformer (``bench/dynamic.py``'s export, dynamic batch and seq) at batch 1 and each
    of ``--seqs``, the same three modules, checked against onnxruntime; milliseconds."""
    from dynamic import _feeds

    from nnvm.bench import onnxruntime_session
    from nnvm_testing.frontend_onnx import torch_models

    path = torch_models.hf_model_path(name, 1, 128, dynamic=True, exporter="torchscript")
    sess, _ = onnxruntime_session(path, 1)
    names = [i.name for i in sess.get_inputs()]
    unbound = nnvm.compile(path, target=args.target, options=options)
    for seq in (int(s) for s in args.seqs.split(",")):
        feeds = _feeds(names, 1, seq)
        shapes = {k: v.shape for k, v in feeds.items()}
        mods = {"bound": nnvm.compile(path, target=args.target, shapes=shapes, options=options),
                "unbound": unbound}
        if ab_options is not None:
            mods["A/B"] = nnvm.compile(path, target=args.target, shapes=shapes, options=ab_options)
        want = sess.run(None, feeds)[0]
        for which, mod in mods.items():
            err = float(np.abs(mod.run(**feeds)[0] - want).max() / np.abs(want).max())
            if err > 1e-4:
                raise SystemExit(f"{name} at (1, {seq}): the {which} module is off by {err:.1e} (relative)")
        print(_line(f"{name:>10} {seq:>4}", _medians(mods, feeds, args), 1e-3) + "  (ms)", flush=True)
        del mods


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated KxN")
    parser.add_argument("--rows", default=ROWS, help="comma-separated row counts (seq at batch 1)")
    parser.add_argument("--rounds", type=int, default=7, help="blocks of each module, alternated")
    parser.add_argument("--repeat", type=int, default=0, help="runs a block (0: about 20 ms of work)")
    parser.add_argument("--switch", default="", help="NAME=VALUE: a cpu_switches entry for both compiles")
    parser.add_argument("--ab", default="", help="NAME=VALUE: a third module, bound, with this switch")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--models", default="", help="comma-separated transformers of bench/dynamic.py")
    parser.add_argument("--seqs", default="5,7,8", help="comma-separated seq lengths of --models at batch 1")
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
        for shape in filter(None, args.shapes.split(",")):
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
                print(_line(f"{shape:>10} {rows:>4}", _medians(mods, {"x": x}, args), 1.0), flush=True)
                del mods
        for name in filter(None, args.models.split(",")):
            _models_ab(name, args, options, ab_options if ab else None)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
