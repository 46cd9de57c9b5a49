"""Four CNNs on this CPU: nnvm untuned and tuned, onnxruntime, MXNet 1.9.1; writes ``bench/RESULTS.md``.

    uv run python bench/models.py --threads 2 --repeat 20

Models: ResNet-18, MobileNetV2, ResNet-50 and SqueezeNet 1.1, the seeded-random-weight ONNX builds of
``nnvm_testing.frontend_onnx.models`` (cached under ``$NNVM_CACHE_DIR/models``); batch 1, float32.

- nnvm and onnxruntime: one child process per model (so the thread count holds from the start)
  compiles the model twice, untuned (every schedule template's fallback config, no log at all) and
  tuned (the logs the backend ships for this CPU, plus any ``--tuning-log``), and times both with
  onnxruntime alternated run by run on the same seeded input, median of ``--repeat`` after a warm-up.
  The machine's speed drifts by a third from minute to minute here (a shared host), so only numbers
  taken in one alternation compare. onnxruntime runs with intra-op spinning off, as ``nnvm bench``
  does; its default (spinning) is timed as well, in blocks of its own alternated with blocks of ours
  tuned, where neither shares the cores or the cache with the other.
- MXNet 1.9.1 needs numpy<1.24, so it runs in its own virtual environment, made once with uv under
  ``~/.cache/nnvm/venvs/mxnet-1.9.1``: its own gluon model zoo network of the same architecture
  (random weights, hybridized with static allocation, same input shape and threads), timed the same
  way but not alternated with the others. ``--no-mxnet`` leaves the column out.

Next to the table, ``bench/results.png`` (matplotlib; not committed: it is in ``.gitignore``) plots it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

from nnvm.bench import cpu_name

HERE = os.path.dirname(os.path.abspath(__file__))
# key in nnvm_testing.frontend_onnx.models -> (title, MXNet gluon model zoo name)
MODELS = {
    "resnet18": ("ResNet-18", "resnet18_v1"),
    "mobilenet_v2": ("MobileNetV2", "mobilenetv2_1.0"),
    "resnet50": ("ResNet-50", "resnet50_v1"),
    "squeezenet1_1": ("SqueezeNet 1.1", "squeezenet1.1"),
}
MXNET_VERSION = "1.9.1"
KEEP_MARKER = "<!-- written by hand: bench/models.py keeps everything from here on -->"

# Runs inside the MXNet environment: argv = gluon name, threads, repeat; prints one JSON line.
MXNET_SCRIPT = r"""
import json, statistics, sys, time
import mxnet as mx
from mxnet.gluon.model_zoo import vision
name, repeat = sys.argv[1], int(sys.argv[3])
mx.random.seed(0)
net = vision.get_model(name, pretrained=False)
net.initialize(mx.init.Xavier())
net.hybridize(static_alloc=True, static_shape=True)
x = mx.nd.random.normal(shape=(1, 3, 224, 224))
for _ in range(3):
    net(x).wait_to_read()
times = []
for _ in range(repeat):
    start = time.perf_counter()
    net(x).wait_to_read()
    times.append(time.perf_counter() - start)
features = mx.runtime.Features()
print(json.dumps({"ms": 1e3 * statistics.median(times), "version": mx.__version__,
                  "onednn": features.is_enabled("MKLDNN")}))
"""




def bench_in_child(path: str, threads: int, repeat: int, tuning_logs: list, profile: bool) -> dict:
    """``measure_model`` in a fresh process (``--child``), so the thread count holds from the start."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--threads", str(threads),
           "--repeat", str(repeat), *[a for log in tuning_logs for a in ("--tuning-log", log)],
           *(["--profile", "1"] if profile else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SystemExit(f"bench of {path} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_model(path: str, threads: int, repeat: int, tuning_logs: list, profile: bool) -> dict:
    """nnvm untuned, nnvm tuned and onnxruntime (spinning off) on one seeded input, alternated run by
    run after a warm-up, so all three see the same machine; then nnvm tuned and onnxruntime with its
    default spinning each in blocks of their own (nothing else runs between its calls: its spinning
    threads steal nothing, and its weights stay in cache), the blocks alternated, so the 'alone'
    columns compare with each other as the alternated ones do."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import nnvm
    from nnvm.bench import (
        TOLERANCE,
        alternate_ms,
        blocks_ms,
        onnxruntime_session,
        relative_error,
        seeded_inputs,
    )
    from nnvm.bench import profile as profile_kernels

    untuned = nnvm.compile(path, target="llvm", tuning_log=False)
    tuned = nnvm.compile(path, target="llvm", tuning_log=tuning_logs or None)
    session, _ = onnxruntime_session(path, threads)
    spinning, _ = onnxruntime_session(path, threads, spinning=True)
    feeds = seeded_inputs(tuned)
    ort_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
    want = session.run(None, ort_feeds)
    error = max(relative_error(m.run(**feeds), want) for m in (untuned, tuned))
    untuned_ms, tuned_ms, ort_ms = alternate_ms(
        [lambda: untuned.run(**feeds), lambda: tuned.run(**feeds), lambda: session.run(None, ort_feeds)],
        repeat)
    # four blocks each, alternated, so a drift in the machine's speed hits both
    tuned_alone, spinning_alone = blocks_ms(
        [lambda: tuned.run(**feeds), lambda: spinning.run(None, ort_feeds)], max(repeat // 4, 3), 4)
    result = {"untuned_ms": untuned_ms, "tuned_ms": tuned_ms, "onnxruntime_ms": ort_ms,
              "onnxruntime_spinning_ms": spinning_alone, "tuned_alone_ms": tuned_alone,
              "ratio": tuned_ms / ort_ms, "max_rel_err": error,
              "match": bool(error < TOLERANCE), "kernels": len(tuned.plan["calls"]),
              "distinct_kernels": tuned.stats().get("distinct_kernels"),
              "tuned_kernels": tuned.stats().get("tuned_kernels", 0)}
    if profile:
        result["profile"] = profile_kernels(tuned, feeds, repeat)
    return result


def mxnet_python() -> str:
    """The Python of the cached MXNet environment, the one the MXNet frontend's tests use
    (``nnvm_testing.frontend_mxnet``), made with uv on first use (raises RuntimeError)."""
    from nnvm_testing import frontend_mxnet as testing
    from nnvm_testing.venvs import VenvBuildError, VenvUnavailable

    try:
        return str(testing.mxnet_python())
    except (VenvUnavailable, VenvBuildError) as exc:
        raise RuntimeError(str(exc)) from None


def bench_mxnet(gluon_name: str, threads: int, repeat: int) -> dict:
    """MXNet's own model of the same architecture, timed in its environment; {"error": ...} on failure."""
    try:
        python = mxnet_python()
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        return {"error": str(exc)}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    for var in ("VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(var, None)
    proc = subprocess.run([python, "-c", MXNET_SCRIPT, gluon_name, str(threads), str(repeat)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_path(key: str) -> str | None:
    from nnvm_testing.frontend_onnx import models

    if key not in getattr(models, "BUILDERS", {}):
        return None
    return models.cached_model_path(key)


def plot(rows: list, path: str, threads: int) -> None:
    """A grouped bar chart of the table (milliseconds, log scale: the runtimes differ by 100x)."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [("nnvm untuned", "untuned"), ("nnvm tuned", "tuned"), ("onnxruntime", "ort"),
              ("MXNet", "mxnet")]
    titles = [r["title"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.2
    for k, (label, key) in enumerate(series):
        values = [r.get(key) or 0 for r in rows]
        xs = [i + (k - 1.5) * width for i in range(len(rows))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, labels=[f"{v:.0f}" if v else "" for v in values], fontsize=7)
    ax.set_xticks(range(len(rows)), titles)
    ax.set_yscale("log")
    ax.set_ylabel("latency, ms (lower is better)")
    ax.set_title(f"{cpu_name()}, {threads} threads, batch 1, float32")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", file=sys.stderr)


def ms(v) -> str:
    return f"{v:.1f}" if isinstance(v, int | float) else "-"


def write_table(rows: list, args, ort_version: str, mx_info: dict) -> None:
    mx_head = f"MXNet {MXNET_VERSION} (ms)"
    lines = ["# Benchmarks", "",
             f"Written by `bench/models.py` on {datetime.date.today().isoformat()}. CPU: {cpu_name()} "
             f"({os.cpu_count()} logical CPUs); {args.threads} threads for every runtime; median of "
             f"{args.repeat} runs after a warm-up; batch 1, float32, seeded random weights. nnvm untuned, "
             f"nnvm tuned and onnxruntime ran alternated, run by run, in one process per row, onnxruntime "
             f"with intra-op spinning off (its idle threads otherwise spin on the cores our next run needs); "
             f"the 'alone' columns are nnvm tuned and onnxruntime's default settings (spinning on) each "
             f"timed in blocks of their own right after, the blocks alternated, in the same process (alone, "
             f"a runtime's weights stay in cache between runs). MXNet ran on its own. Load average "
             f"(1 min) at the start and the end: {args.load_start:.1f}, {os.getloadavg()[0]:.1f}"
             + (" (above the CPU count: other programs shared the cores and every number is inflated)."
                if max(args.load_start, os.getloadavg()[0]) > (os.cpu_count() or 1) else "."), "",
             "| model | nnvm untuned (ms) | nnvm tuned (ms) | onnxruntime (ms) | tuned / ort | untuned / ort "
             f"| nnvm tuned, alone (ms) | onnxruntime, spinning, alone (ms) | alone: tuned / ort "
             f"| {mx_head} | tuned kernels | outputs |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if r.get("missing"):
            lines.append(f"| {r['title']} | {r['missing']} | | | | | | | | | | |")
            continue
        t = r["tuned_result"]
        verdict = f"{'match' if t['match'] else 'MISMATCH'} ({t['max_rel_err']:.1e})"
        lines.append(f"| {r['title']} | {ms(r['untuned'])} | {ms(r['tuned'])} | {ms(r['ort'])} | "
                     f"{r['tuned'] / r['ort']:.2f} | {r['untuned'] / r['ort']:.2f} | "
                     f"{ms(r['tuned_alone'])} | {ms(r['ort_spinning'])} | "
                     f"{r['tuned_alone'] / r['ort_spinning']:.2f} | "
                     f"{ms(r.get('mxnet'))} | {t.get('tuned_kernels', 0)} / {r['distinct']} | {verdict} |")
    notes = ["", f"onnxruntime {ort_version}."]
    if mx_info.get("version"):
        onednn = "on" if mx_info.get("onednn") else "off"
        notes.append(f"MXNet {mx_info['version']} from PyPI (oneDNN {onednn}), its gluon model zoo networks "
                     "(ResNet-50 is its v1, stride on the first 1x1 conv; ours is torchvision's v1.5); "
                     "OMP_NUM_THREADS = threads.")
    errors = {r.get("mxnet_error") for r in rows if r.get("mxnet_error")}
    for e in sorted(errors):
        notes.append(f"MXNet not measured: {e}")
    for r in rows:
        prof = (r.get("tuned_result") or {}).get("profile")
        if args.profile and prof:
            head = f"{r['title']}, tuned: the {args.profile} slowest kernel calls (of {len(prof)})"
            notes += ["", head, "",
                      "| ms | share | GFLOP/s | fused group |", "| ---: | ---: | ---: | --- |"]
            for p in prof[:args.profile]:
                group = ", ".join(p["group"])
                group = group if len(group) <= 80 else group[:77] + "..."
                gf = f"{p['gflops']:.1f}" if p.get("gflops") else "-"
                notes.append(f"| {p['ms']:.2f} | {100 * p['share']:.1f}% | {gf} | {group} |")
    notes.append("")
    notes.append("'nnvm tuned' uses the tuning logs shipped for this CPU (and any `--tuning-log`); 'tuned "
                 "kernels' counts distinct kernels scheduled from a log. The machine may have been shared "
                 "with other work while measuring; rerun for numbers of your own.")
    kept = ""  # the hand-written analysis under KEEP_MARKER survives a rerun
    if os.path.exists(args.output):
        with open(args.output) as f:
            old = f.read()
        if KEEP_MARKER in old:
            kept = "\n" + old[old.index(KEEP_MARKER):]
    with open(args.output, "w") as f:
        f.write("\n".join(lines + notes) + "\n" + kept)
    print(f"wrote {args.output}", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--tuning-log", action="append", default=[], help="extra log for the tuned column")
    parser.add_argument("--no-mxnet", action="store_true", help="leave out the MXNet column")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="also list each model's K slowest kernels (tuned run) under the table")
    parser.add_argument("--output", default=os.path.join(HERE, "RESULTS.md"))
    parser.add_argument("--plot", default=os.path.join(HERE, "results.png"))
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)  # one model, JSON on stdout
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_model(args.child, args.threads, args.repeat, args.tuning_log,
                                       bool(args.profile))))
        return 0

    import onnxruntime

    args.load_start = os.getloadavg()[0]
    rows = []
    mx_info: dict = {}
    for key in args.models.split(","):
        if key not in MODELS:
            raise SystemExit(f"unknown model {key!r}; choose from {', '.join(MODELS)}")
        title, gluon_name = MODELS[key]
        path = model_path(key)
        if path is None:
            rows.append({"title": title, "missing": "model builder missing"})
            continue
        tuned = bench_in_child(path, args.threads, args.repeat, args.tuning_log, bool(args.profile))
        row = {"title": title, "untuned": tuned["untuned_ms"], "tuned": tuned["tuned_ms"],
               "ort": tuned["onnxruntime_ms"], "ort_spinning": tuned["onnxruntime_spinning_ms"],
               "tuned_alone": tuned["tuned_alone_ms"],
               "tuned_result": tuned, "distinct": tuned.get("distinct_kernels", tuned["kernels"])}
        if not args.no_mxnet:
            mx = bench_mxnet(gluon_name, args.threads, args.repeat)
            if "error" in mx:
                row["mxnet_error"] = mx["error"]
            else:
                row["mxnet"] = mx["ms"]
                mx_info = mx
        rows.append(row)
        print(f"{title}: nnvm untuned {tuned['untuned_ms']:.1f} ms, tuned {tuned['tuned_ms']:.1f} ms, "
              f"onnxruntime {tuned['onnxruntime_ms']:.1f} ms, MXNet {ms(row.get('mxnet'))} ms",
              file=sys.stderr)
    write_table(rows, args, onnxruntime.__version__, mx_info)
    measured = [r for r in rows if not r.get("missing")]
    if measured and args.plot:
        plot(measured, args.plot, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
