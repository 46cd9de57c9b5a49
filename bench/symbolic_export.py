"""An exported symbolic module: its memory cost and its speed at each binding (issue 39, export stage).

    uv run --no-sync python bench/symbolic_export.py                      # BERT-base, bounds 8x512
    uv run --no-sync python bench/symbolic_export.py --model bert --small --bounds 4x64 --shapes 1x1,1x7,4x33

The exported file has one memory plan, made for every dim at its upper bound (``SymbolicModule.export``),
which every smaller binding reuses at the same offsets. Per (batch, seq) this prints that arena against
the plan made for exactly that binding (what the compiled module would plan with no buckets) and the
bucket plan the in-process module uses (``nnvm.dynamic.bucket``), with the exact plan's lower bound (the
most bytes live at once). Then, in one child process (so the thread count holds from the start), it
times four runners on the same inputs, each in blocks of its own alternated ``--rounds`` times: the
exported file loaded by ``nnvm.load`` (Python, ``run_shaped``), the compiled symbolic module itself, the
same file run by ``nnvm-run`` of the C runtime (its own median over ``-r`` runs, a process per block,
inputs from .npy), and onnxruntime on the ONNX file; outputs are checked against onnxruntime first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = "1x1,1x7,1x128,4x33,8x512"  # the (batch, seq)
MB = 1 << 20


def _feeds(names: list, batch: int, seq: int):
    import numpy as np

    rng = np.random.default_rng(batch * 1000 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0
    feeds = {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask}
    return {k: v for k, v in feeds.items() if k in names}


def measure(path: str, bounds: tuple, shapes: list, threads: int, repeat: int, rounds: int) -> dict:
    """Everything for one model, in the child process (see the module docstring)."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np

    import nnvm
    from nnvm.bench import blocks_times, onnxruntime_session
    from nnvm.dynamic import bucket
    from nnvm.runtime.crt import build_runtime, runtime_target
    from nnvm.runtime.plan import bind_types, make_plan

    t0 = time.perf_counter()
    mod = nnvm.compile(path, target="llvm", tuning_log=False,
                       bounds={"batch": (1, bounds[0]), "seq": (1, bounds[1])})
    compile_s = time.perf_counter() - t0
    tmp = tempfile.mkdtemp(prefix="nnvm-bench-export-")
    module = os.path.join(tmp, "model.so")
    t0 = time.perf_counter()
    mod.export(module)
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = nnvm.load(module)
    load_s = time.perf_counter() - t0
    run_c = build_runtime(runtime_target("llvm"))["nnvm-run"]
    sess, _ = onnxruntime_session(path, threads)
    names = [i.name for i in sess.get_inputs()]
    exported_arena = loaded.plan["arena_bytes"]
    result = {"compile_s": compile_s, "export_s": export_s, "load_s": load_s, "threads": threads,
              "file_mb": os.path.getsize(module) / MB, "exported_arena_mb": exported_arena / MB, "shapes": {}}
    whole = mod._whole
    for batch, seq in shapes:
        feeds = _feeds(names, batch, seq)
        values = {"batch": batch, "seq": seq}
        exact = make_plan(bind_types(whole.graph, values), mod._calls, pairs=mod._pairs, bindable=True)
        buckets = {d: bucket(v, mod.bounds[d][1]) for d, v in values.items()}
        bucketed = make_plan(bind_types(whole.graph, buckets), mod._calls, pairs=mod._pairs, bindable=True)
        want = sess.run(None, feeds)[0]
        errs = [float(np.abs(got - want).max() / np.abs(want).max())
                for got in (loaded.run(**feeds)[0], mod.run(**feeds)[0])]
        ins = []
        for k, name in enumerate(names):
            ins.append(os.path.join(tmp, f"in{k}.npy"))
            np.save(ins[-1], feeds[name])
        out = os.path.join(tmp, "out.npy")
        proc = subprocess.run([run_c, module, *ins, "-o", out], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        errs.append(float(np.abs(np.load(out) - want).max() / np.abs(want).max()))
        start = time.perf_counter()
        sess.run(None, feeds)
        n = max(3, min(repeat, round(0.5 / max(time.perf_counter() - start, 1e-4))))
        c_ms: list = []

        def c_block(n=n, ins=ins, c_ms=c_ms, out=out):  # a process, its own median of n runs after one
            p = subprocess.run([run_c, module, *ins, "-o", out, "-r", str(n)], capture_output=True, text=True)
            c_ms.append(float(p.stdout.split()[1]))

        fns = [lambda f=feeds: loaded.run(**f), lambda f=feeds: mod.run(**f),
               lambda f=feeds: sess.run(None, f)]
        load = os.getloadavg()[0]
        per = [[], [], []]
        for _ in range(rounds):
            for k, blocks in enumerate(blocks_times(fns, n, 1)):
                per[k] += blocks
            c_block()
        ms = [statistics.median(statistics.median(b) for b in blocks) for blocks in per]
        ms.append(statistics.median(c_ms))
        result["shapes"][f"{batch}x{seq}"] = {
            "exact_mb": exact["arena_bytes"] / MB, "lower_bound_mb": exact["lower_bound_bytes"] / MB,
            "bucket_mb": bucketed["arena_bytes"] / MB, "loaded_ms": ms[0], "compiled_ms": ms[1],
            "ort_ms": ms[2], "c_ms": ms[3], "max_rel_err": max(errs), "repeat": n,
            "load": sorted((load, os.getloadavg()[0]))}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert", choices=("bert", "distilbert"))
    parser.add_argument("--small", action="store_true", help="the tests' 2-layer, width-64 config")
    parser.add_argument("--bounds", default="8x512", help="BATCHxSEQ: the upper bounds of the dims")
    parser.add_argument("--shapes", default=SHAPES, help="comma-separated BATCHxSEQ")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each runner, alternated")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
        bounds = tuple(int(x) for x in args.bounds.split("x"))
        assert all(len(s) == 2 and min(s) >= 1 for s in [*shapes, bounds])
        assert all(b <= bounds[0] and s <= bounds[1] for b, s in shapes)
    except (ValueError, AssertionError):
        print(f"--shapes {args.shapes!r} / --bounds {args.bounds!r}: expected BATCHxSEQ, each shape within "
              "the bounds", file=sys.stderr)
        return 1
    if args.child:
        print(json.dumps(measure(args.child, bounds, shapes, args.threads, args.repeat, args.rounds)))
        return 0
    from nnvm_testing.frontend_onnx import torch_models

    small = {"layers": 2, "width": 64, "heads": 2} if args.small else {}
    path = torch_models.hf_model_path(args.model, 1, 16 if args.small else 128, dynamic=True,
                                      exporter="torchscript", **small)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--bounds", args.bounds, "--shapes",
           args.shapes, "--threads", str(args.threads), "--repeat", str(args.repeat),
           "--rounds", str(args.rounds)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        print(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output", file=sys.stderr)
        return 1
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(r), flush=True)
    print(f"compile {r['compile_s']:.1f} s, export {r['export_s']:.1f} s, load {r['load_s'] * 1e3:.0f} ms, "
          f"file {r['file_mb']:.1f} MB, exported arena {r['exported_arena_mb']:.2f} MB "
          f"(bounds {args.bounds})")
    columns = ["(batch, seq)", "exact plan MB", "lower bound MB", "bucket plan MB", "exported / exact",
               "loaded ms", "compiled ms", "nnvm-run ms", "onnxruntime ms", "loaded / compiled",
               "loaded / ORT", "nnvm-run / ORT", "max rel err", "load"]
    lines = ["| " + " | ".join(columns) + " |", "| --- |" + " ---: |" * 11 + " --- | --- |"]
    for shape, s in r["shapes"].items():
        lines.append(f"| ({shape.replace('x', ', ')}) | {s['exact_mb']:.3f} | {s['lower_bound_mb']:.3f} | "
                     f"{s['bucket_mb']:.3f} | {r['exported_arena_mb'] / s['exact_mb']:.1f}x | "
                     f"{s['loaded_ms']:.2f} | {s['compiled_ms']:.2f} | {s['c_ms']:.2f} | {s['ort_ms']:.2f} | "
                     f"{s['loaded_ms'] / s['compiled_ms']:.2f} | {s['loaded_ms'] / s['ort_ms']:.2f} | "
                     f"{s['c_ms'] / s['ort_ms']:.2f} | {s['max_rel_err']:.1e} | "
                     f"{s['load'][0]:.1f}-{s['load'][1]:.1f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
