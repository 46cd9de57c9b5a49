"""Compile time of every CNN of the zoo and every Keras application: cold (empty kernel cache) and warm
(the same model again, in a new process, with the cache the cold compile filled), phases included.

    uv run python bench/compile_time.py                        # every model, cold and warm
    uv run python bench/compile_time.py --models resnet18,NASNetMobile --jobs 1
    uv run python bench/compile_time.py --no-cache             # cold only, nothing read or written
    uv run python bench/compile_time.py --python /other/checkout/.venv/bin/python   # another version

Each compile runs in a child process of its own (``--child``), untuned (``tuning_log=False``), for the
host (``llvm``), with a kernel cache in a fresh temporary directory per model (the user's cache is never
touched). The seconds are those of ``nnvm.compile`` in the child (the interpreter's start and nnvm's
import are shown apart, as ``py``). Columns: distinct kernels / kernel calls, then per compile the total
and its phases (``compile_seconds``: import, passes, schedule, kernels, link, plan), and how many kernels
were compiled and read from the cache. The load average is printed before each model: a busy machine
makes the cold column slower and says nothing about the code. Goals (issue 34): cold <= 5 s, warm <= 1 s.

Models: ``nnvm_testing.frontend_onnx.torch_models.ZOO_CNNS`` (exported by PyTorch, cached under
``$NNVM_CACHE_DIR/models``) and the Keras applications of ``nnvm_testing.frontend_keras`` (``.keras``
files written by Keras itself, small inputs). A model whose files cannot be made here is reported as
skipped with the reason.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

# keras.applications nets keras_tool.py builds (its APPS; that module imports keras, so not from here)
KERAS_APPS = ("MobileNetV2", "ResNet50", "DenseNet121", "EfficientNetB0", "InceptionV3", "Xception", "VGG16",
              "NASNetMobile", "ConvNeXtTiny")
PHASES = ("import", "passes", "schedule", "kernels", "link", "lower", "codegen", "plan")  # last two: before
GOAL_COLD, GOAL_WARM = 5.0, 1.0


def child(path: str, cache: str | None, jobs: int | None) -> dict:
    """One compile in this process; what the parent prints."""
    start = time.perf_counter()
    import nnvm

    imported = time.perf_counter()
    kwargs = {"kernel_cache": cache if cache else False, "jobs": jobs}
    if "kernel_cache" not in inspect.signature(nnvm.compile).parameters:  # nnvm before the kernel cache
        kwargs = {}
    mod = nnvm.compile(path, target="llvm", tuning_log=False, **kwargs)
    done = time.perf_counter()
    stats = mod.stats()
    seconds = {k: v for k, v in stats["compile_seconds"].items() if isinstance(v, float)}
    return {"py": imported - start, "compile": done - imported, "phases": seconds,
            "kernels": stats["kernels"], "distinct": stats.get("distinct_kernels"),
            "cache": stats.get("kernel_cache", {})}


def run_child(python: str, path: str, cache: str | None, jobs: int | None) -> dict:
    cmd = [python, os.path.abspath(__file__), "--child", path]
    if cache:
        cmd += ["--cache", cache]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    # as a user's install runs: with the bytecode Python caches (this machine's environment sets
    # PYTHONDONTWRITEBYTECODE, which makes every process compile nnvm's source again: ~0.4 s), kept
    # under the temporary directory rather than beside the sources
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "nnvm-compile-time-pycache")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_paths(names: list[str]) -> tuple[dict, dict]:
    """``(name -> path, name -> why it is missing)``."""
    from nnvm_testing.frontend_keras import keras_models
    from nnvm_testing.frontend_onnx.torch_models import ZOO_CNNS, zoo_model_path

    paths, missing = {}, {}
    for name in names:
        if name in ZOO_CNNS:
            try:
                paths[name] = zoo_model_path(name)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                missing[name] = str(exc).splitlines()[0]
    keras = [n for n in names if n not in ZOO_CNNS]
    if keras:
        try:
            built = keras_models(keras)
            for name in keras:
                paths[name] = str(built[name].keras)
        except Exception as exc:  # noqa: BLE001
            for name in keras:
                missing[name] = str(exc).splitlines()[0]
    return paths, missing


def phase_text(r: dict) -> str:
    p = r["phases"]
    return " ".join(f"{name} {p[name]:.2f}" for name in PHASES if name in p)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated (default: every zoo CNN and Keras application)")
    parser.add_argument("--jobs", type=int, help="worker processes per compile (default: nnvm's choice)")
    parser.add_argument("--no-cache", action="store_true", help="cold compiles only, no cache at all")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (and so nnvm) to time")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.cache, args.jobs)))
        return 0

    from nnvm_testing.frontend_onnx.torch_models import ZOO_CNNS

    names = args.models.split(",") if args.models else [*ZOO_CNNS, *KERAS_APPS]
    paths, missing = model_paths(names)
    rows = []
    print(f"{'model':<16} {'kernels':>8} {'cold s':>7} {'warm s':>7}  cold phases | warm phases   (load)")
    for name in names:
        if name not in paths:
            print(f"{name:<16} skipped: {missing.get(name)}")
            continue
        load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="nnvm-compile-time-") as cache:
            cold = run_child(args.python, paths[name], None if args.no_cache else cache, args.jobs)
            warm = None if args.no_cache or "error" in cold else \
                run_child(args.python, paths[name], cache, args.jobs)
        row = {"model": name, "load": load, "cold": cold, "warm": warm}
        rows.append(row)
        if "error" in cold:
            print(f"{name:<16} failed: {cold['error']}")
            continue
        kernels = f"{cold['distinct']}/{cold['kernels']}"
        warm_s = f"{warm['compile']:7.2f}" if warm and "error" not in warm else "      -"
        warm_p = phase_text(warm) if warm and "error" not in warm else ""
        print(f"{name:<16} {kernels:>8} {cold['compile']:7.2f} {warm_s}  {phase_text(cold)} | {warm_p}"
              f"   ({load:.1f})", flush=True)
    done = [r for r in rows if "error" not in r["cold"]]
    if done:
        cold_ok = sum(r["cold"]["compile"] <= GOAL_COLD for r in done)
        print(f"cold <= {GOAL_COLD:g} s: {cold_ok} of {len(done)}; slowest "
              f"{max(r['cold']['compile'] for r in done):.2f} s")
        warm_rows = [r for r in done if r["warm"] and "error" not in r["warm"]]
        if warm_rows:
            warm_ok = sum(r["warm"]["compile"] <= GOAL_WARM for r in warm_rows)
            print(f"warm <= {GOAL_WARM:g} s: {warm_ok} of {len(warm_rows)}; slowest "
                  f"{max(r['warm']['compile'] for r in warm_rows):.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
