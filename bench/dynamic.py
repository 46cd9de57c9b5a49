"""One unbound module against one module per exact shape (issue 39: symbolic kernels at bound speed).

    uv run python bench/dynamic.py                                   # BERT-base and DistilBERT-base
    uv run python bench/dynamic.py --models bert --shapes 1x1,1x128 --threads 1 --cpu-time
    uv run python bench/dynamic.py --target "opencl -device=cpu" --small --shapes 1x1,1x7,4x33

Models: Hugging Face BERT-base and DistilBERT-base at their default configs, seeded random weights,
exported with dynamic ``batch`` and ``seq`` axes (``nnvm_testing.frontend_onnx.torch_models.hf_model_path``
with ``dynamic=True``; ``--exporter`` picks torch's exporter). Per model, in one child process (so the
thread count holds from the start): the model compiled once unbound (``nnvm.compile`` keeps its dim_params:
a ``SymbolicModule`` whose kernels take the dims) and once per shape with every dim bound. At each
(batch, seq) the unbound module's output is compared with onnxruntime's on the same file (token ids, a
mask with the rows after the first padded from the middle), then the two modules are timed in blocks of
their own, alternated ``--rounds`` times (``nnvm.bench.blocks_times``), and the ratio unbound / bound of
the medians printed. ``--cpu-time`` times each run by the process's CPU time instead of the wall clock:
with ``--threads 1`` on a shared machine it counts only the time the run itself was on a core.
``--target`` compiles both for another target (a GPU one: its symbolic kernels against its bound ones);
``--small`` takes the tests' 2-layer, width-64 configs instead of the default sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = {"bert": "BERT-base", "distilbert": "DistilBERT-base"}
SHAPES = "1x1,1x7,1x128,4x33,8x512"  # the (batch, seq)


def _feeds(names: list, batch: int, seq: int):
    import numpy as np

    rng = np.random.default_rng(batch * 1000 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    feeds = {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask}
    return {k: v for k, v in feeds.items() if k in names}


def _timed(fn, cpu: bool):
    clock = time.process_time if cpu else time.perf_counter

    def run():
        start = clock()
        fn()
        return clock() - start

    return run


def measure(path: str, shapes: list, threads: int, repeat: int, rounds: int, cpu: bool,
            target: str = "llvm") -> dict:
    """Everything for one model (in the child process; see the module docstring)."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np

    import nnvm
    from nnvm.bench import onnxruntime_session

    t0 = time.perf_counter()
    unbound = nnvm.compile(path, target=target, tuning_log=False)
    result = {"compile_s": time.perf_counter() - t0, "mode": unbound.stats()["symbolic"]["mode"],
              "why": unbound.stats()["symbolic"]["why_per_binding"], "threads": threads, "shapes": {}}
    sess, _ = onnxruntime_session(path, threads)
    names = [i.name for i in sess.get_inputs()]
    for batch, seq in shapes:
        feeds = _feeds(names, batch, seq)
        bound = nnvm.compile(path, target=target, tuning_log=False,
                             shapes={k: v.shape for k, v in feeds.items()})
        want = sess.run(None, feeds)[0]
        got = unbound.run(**feeds)[0]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        one = unbound.specialised(unbound.bind_dims(feeds))  # the binding's plan, made once
        fns = [lambda m=one, f=feeds: m.run(**f), lambda m=bound, f=feeds: m.run(**f)]
        start = time.perf_counter()
        fns[1]()
        n = max(3, min(repeat, round(0.5 / max(time.perf_counter() - start, 1e-4))))
        load = os.getloadavg()[0]
        per = [[], []]
        for _ in range(rounds):
            for k, fn in enumerate(fns):
                run = _timed(fn, cpu)
                for _ in range(2):
                    run()
                per[k].append(statistics.median(run() for _ in range(n)))
        ms = [1e3 * statistics.median(p) for p in per]
        result["shapes"][f"{batch}x{seq}"] = {
            "unbound_ms": ms[0], "bound_ms": ms[1], "ratio": ms[0] / ms[1], "max_rel_err": err,
            "repeat": n, "load": sorted((load, os.getloadavg()[0]))}
        del bound
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {','.join(MODELS)}")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated BATCHxSEQ")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each module, alternated")
    parser.add_argument("--cpu-time", action="store_true", help="time runs by the process's CPU time")
    parser.add_argument("--exporter", default="torchscript", choices=("dynamo", "torchscript"))
    parser.add_argument("--target", default="llvm", help="the target both modules are compiled for")
    parser.add_argument("--small", action="store_true", help="2 layers, width 64, 2 heads (the tests')")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
        assert all(len(s) == 2 and min(s) >= 1 for s in shapes)
    except (ValueError, AssertionError):
        print(f"--shapes {args.shapes!r}: expected comma-separated BATCHxSEQ, such as 1x128,4x33",
              file=sys.stderr)
        return 1
    if args.child:
        print(json.dumps(measure(args.child, shapes, args.threads, args.repeat, args.rounds, args.cpu_time,
                                 args.target)))
        return 0
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 1
    from nnvm_testing.frontend_onnx import torch_models

    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    lines = ["| model | (batch, seq) | unbound ms | bound ms | unbound / bound | max rel err vs onnxruntime "
             "| load |", "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for name in names:
        small = {"layers": 2, "width": 64, "heads": 2} if args.small else {}
        path = torch_models.hf_model_path(name, 1, 16 if args.small else 128, dynamic=True,
                                          exporter=args.exporter, **small)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--shapes", args.shapes,
               "--threads", str(args.threads), "--repeat", str(args.repeat), "--rounds", str(args.rounds),
               "--target", args.target]
        if args.cpu_time:
            cmd.append("--cpu-time")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
            print(f"{name}: {err[-1]}", flush=True)
            lines.append(f"| {MODELS[name]} | {err[-1]} |")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps({name: r}), flush=True)
        for shape, s in r["shapes"].items():
            label = f"{name} (2 layers, width 64)" if args.small else MODELS[name]
            lines.append(f"| {label} | ({shape.replace('x', ', ')}) | {s['unbound_ms']:.2f} | "
                         f"{s['bound_ms']:.2f} | {s['ratio']:.2f} | {s['max_rel_err']:.1e} | "
                         f"{s['load'][0]:.1f}-{s['load'][1]:.1f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
