"""ResNet-18 and MobileNetV2: nnvm against onnxruntime on this CPU, written to ``bench/RESULTS.md``.

    uv run python bench/models.py --threads 2 --repeat 20

The models are the seeded-random-weight ONNX builds of ``nnvm_frontend_onnx.testing.models`` (cached
under ``$NNVM_CACHE_DIR/models``). Each row is ``nnvm bench --compare onnxruntime``: the same seeded
input, the same thread count, runs alternated, median of ``--repeat`` after a warm-up. With
``--ab`` each model is also compiled with ``NNVM_X86_CONV_SCHEDULE=0`` (the generic schedule for conv2d
groups) in a child process, to show what the x86 conv2d schedule is worth.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

MODELS = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}
HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bench_in_child(path: str, threads: int, repeat: int, env_extra: dict) -> dict:
    """``nnvm bench --json`` in a fresh process, so the thread count and switches hold from the start."""
    env = dict(os.environ, **env_extra)
    cmd = [sys.executable, "-m", "nnvm.cli", "bench", path, "--target", "llvm", "--compare", "onnxruntime",
           "--repeat", str(repeat), "--threads", str(threads), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise SystemExit(f"bench of {path} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--ab", action="store_true", help="also time the generic conv2d schedule")
    parser.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"))
    args = parser.parse_args(argv)

    from nnvm_frontend_onnx.testing.models import cached_model_path

    rows = []
    for key, title in MODELS.items():
        path = cached_model_path(key)
        result = bench_in_child(path, args.threads, args.repeat, {})
        generic = bench_in_child(path, args.threads, args.repeat, {"NNVM_X86_CONV_SCHEDULE": "0"}) \
            if args.ab else None
        rows.append((title, result, generic))
        print(f"{title}: nnvm {result['nnvm_ms']:.1f} ms, onnxruntime {result['onnxruntime_ms']:.1f} ms",
              file=sys.stderr)

    lines = ["# Benchmarks", "",
             f"Written by `bench/models.py` on {datetime.date.today().isoformat()}. CPU: {cpu_name()} "
             f"({os.cpu_count()} logical CPUs); {args.threads} threads for both runtimes; median of "
             f"{args.repeat} alternated runs after a warm-up; batch 1, float32, seeded random weights.",
             "", "| model | nnvm (ms) | onnxruntime (ms) | nnvm / ort | outputs |" +
             (" nnvm, generic conv schedule (ms) |" if args.ab else ""),
             "| --- | ---: | ---: | ---: | --- |" + (" ---: |" if args.ab else "")]
    for title, r, g in rows:
        verdict = f"match ({r['max_rel_err']:.1e})" if r["match"] else f"MISMATCH ({r['max_rel_err']:.1e})"
        line = (f"| {title} | {r['nnvm_ms']:.1f} | {r['onnxruntime_ms']:.1f} | {r['ratio']:.2f} | "
                f"{verdict} |")
        if g is not None:
            line += f" {g['nnvm_ms']:.1f} |"
        lines.append(line)
    lines += ["", f"onnxruntime {rows[0][1]['compare_version']}. The machine may have been shared with other "
              "work while measuring; rerun for numbers of your own.", ""]
    with open(args.output, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
