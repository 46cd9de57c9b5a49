"""nnvm's ``cuda`` target against PyTorch eager (cuDNN) and ``torch.compile``, same weights, batch 1 and 32.

    python bench/cuda_vs_torch.py --torch-python PY [--models resnet18,mobilenet_v2] [--batches 1,32]
                                  [--repeat 30] [--json PATH] [--no-compile] [--allow-cpu]

PyTorch's side (``scripts/torch_bench.py``, in ``--torch-python``: torch is not in nnvm's environment)
exports each seeded network of ``scripts/torch_zoo.py`` to ONNX, saves its output on a seeded input and
times eager float32 (cuDNN TF32 off), eager with PyTorch's TF32 default, and ``torch.compile``. nnvm
compiles that very ONNX file for ``cuda -arch=<the GPU's>``, checks its output against PyTorch's (max
relative error) and times ``mod.run`` from the host array in to the host array out, as PyTorch's times
are. Median of ``--repeat`` runs after a warm-up; float32 (nnvm has no TF32 or fp16 path yet).

Needs an NVIDIA GPU; without one it says so and exits 0, unless ``--allow-cpu`` (the rehearsal of
``make gpu-check``: the CUDA kernels on the CPU runner, PyTorch on the CPU). ``bench/cuda_static.py`` is
the report that needs no GPU.

Not named ``cuda.py``: ``python bench/cuda.py`` puts ``bench/`` first on ``sys.path``, where the script
itself shadowed the ``cuda`` namespace of ``cuda-bindings``, so ``open_device`` found "no GPU" on a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import nnvm
from nnvm.bench import alternate_ms
from nnvm_backend_cuda.compiler import DEFAULT_ARCH
from nnvm_backend_cuda.native import open_device

TORCH_SIDE = Path(__file__).resolve().parents[1] / "scripts" / "torch_bench.py"


def _rel_err(got, want) -> float:
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch-python", required=True, help="an interpreter with torch (CUDA-enabled on a GPU)")
    p.add_argument("--models", default="resnet18,mobilenet_v2")
    p.add_argument("--batches", default="1,32")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (the CPU runner; a rehearsal)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--torch-timeout", type=float, help="seconds for PyTorch's side (then nnvm's runs on "
                   "what it measured)")
    args = p.parse_args(argv)
    dev = open_device()
    if dev is None and not args.allow_cpu:
        print("no NVIDIA GPU and driver here: nothing to time (bench/cuda_static.py needs none)")
        return 0
    arch = dev.arch if dev is not None else DEFAULT_ARCH
    work = Path(tempfile.mkdtemp(prefix="nnvm-cuda-vs-torch-"))
    cmd = [args.torch_python, str(TORCH_SIDE), args.models, args.batches, str(work), "--repeat",
           str(args.repeat), "--warmup", str(args.warmup)] + (["--no-compile"] if args.no_compile else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.torch_timeout)
        failed = proc.returncode != 0 and f"exit {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}"
    except subprocess.TimeoutExpired:
        failed = f"stopped after {args.torch_timeout:.0f} s (--torch-timeout)"
    if failed:  # what it measured before is still compared and timed
        print(f"PyTorch's side failed ({failed})", file=sys.stderr)
        if not (work / "torch.json").exists():
            return 1
    theirs = json.loads((work / "torch.json").read_text())
    rows = []
    for model, batches in theirs["models"].items():
        for batch, t in batches.items():
            mod = nnvm.compile(t["onnx"], target=f"cuda -arch={arch}")
            x = np.load(t["input"])
            err = _rel_err(mod.run(x)[0], np.load(t["output"]))
            ours = alternate_ms([lambda mod=mod, x=x: mod.run(x)], args.repeat, warmup=args.warmup)[0]
            row = {"model": model, "batch": int(batch), "nnvm_ms": ours, "max_rel_err": err,
                   **{k: t.get(k) for k in ("eager_ms", "eager_tf32_ms", "compile_ms", "compile_s")}}
            for k in ("eager", "eager_tf32", "compile"):
                if row.get(f"{k}_ms"):
                    row[f"{k}_speedup"] = row[f"{k}_ms"] / ours
            rows.append(row)
    print(f"{dev.arch if dev else 'no GPU (CPU runner)'}; torch {theirs['torch']} on {theirs['device']}; "
          f"median of {args.repeat}, float32, ms, host array in to host array out")
    head = ("model", "batch", "nnvm", "eager", "eager tf32", "compiled", "eager/nnvm", "compiled/nnvm",
            "rel err")
    print("".join(f"{h:>14}" for h in head))
    for r in rows:
        cells = [r["model"], r["batch"], r["nnvm_ms"], r.get("eager_ms"), r.get("eager_tf32_ms"),
                 r.get("compile_ms"), r.get("eager_speedup"), r.get("compile_speedup")]
        text = ["-" if c is None else f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells]
        print("".join(f"{c:>14}" for c in text) + f"{r['max_rel_err']:>14.1e}")
    report = {"arch": arch, "torch": theirs["torch"], "torch_device": theirs["device"], "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    bad = [r for r in rows if not r["max_rel_err"] < 1e-4]
    if failed:
        return 1
    if bad:
        names = ", ".join(f"{r['model']} b{r['batch']}" for r in bad)
        print(f"nnvm differs from PyTorch beyond 1e-4: {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
