"""Issue 19's model zoo: nnvm untuned against onnxruntime, in blocks, alternated and under load.

    uv run python bench/zoo.py                       # every model, batch 1 and 8
    uv run python bench/zoo.py --quick               # batch 1, few repeats
    uv run python bench/zoo.py --models resnet18,bert --batch 8 --repeat 20

Models (``nnvm_testing.frontend_onnx.torch_models``: written in plain torch by ``scripts/torch_zoo.py``,
seeded random weights, exported by PyTorch's default exporter with a fixed batch, cached under
``$NNVM_CACHE_DIR/models``): the eleven CNNs of the issue (alexnet, densenet121, googlenet = inception
v1, inception_v2 = BN-Inception, resnet50, shufflenet = ShuffleNet v1 with grouped 1x1 convolutions,
squeezenet 1.0, vgg19, zfnet512, resnet18, mobilenet_v2) and three transformers (bert: BERT-base-like
encoder, gpt2: GPT-2-small-like causal decoder, both at sequence 128; vit: ViT-tiny).

Per model and batch size, in one child process (so the thread count holds from the start): nnvm compiled
untuned (``tuning_log=False``: fallback configs only, no log at all; with ``--shipped-logs`` as a user gets
it out of the box: the logs the backend ships, for another CPU, by nearest match and nearest batch size, see
docs/tuning.md) and onnxruntime, both with ``--threads`` threads, float32, the same seeded input; the
outputs compared (max relative error). Then (a) **blocks**: each runtime timed in blocks of its own,
onnxruntime with its default settings (spinning on), the blocks alternated ``--rounds`` times, and the same
in **steady rounds** only: the rounds in which each runtime's fastest run is within 15% of its fastest
overall, rounds measured again until ``--rounds`` are (at most as many again; ``steady_rounds``; the count
in parentheses); (b) **alternated** run by run, against onnxruntime with spinning off and against its
default (spinning on); (c) **under load**: the blocks again while one busy process
(``python -c 'while True: pass'``) runs, each runtime's slowdown against its own unloaded blocks. A block is
``--repeat`` runs at most, fewer for slow models (about ``--block-seconds`` of work, at least 3 runs).
Prints the ratios nnvm / onnxruntime, their geometric means over the CNNs and the transformers, the models
above 1.2x, the slowdowns under load, ResNet-18's compile time and each model's slowest kernels; writes
everything to ``bench/zoo.json``, a Markdown table to ``--markdown`` (with a Mermaid bar chart per batch
size: the plot kept in RESULTS.md) and a plot to ``bench/zoo.png`` (both json and png are not committed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TITLES = {"alexnet": "AlexNet", "densenet121": "DenseNet-121", "googlenet": "Inception v1 (GoogLeNet)",
          "inception_v2": "Inception v2 (BN-Inception)", "resnet50": "ResNet-50",
          "shufflenet": "ShuffleNet v1 (g=4)", "squeezenet": "SqueezeNet 1.0", "vgg19": "VGG-19",
          "zfnet512": "ZFNet-512", "resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2",
          "bert": "BERT-base-like encoder", "gpt2": "GPT-2-small-like decoder", "vit": "ViT-tiny"}
SLOW = 1.2  # the bound for any single model


@contextlib.contextmanager
def busy_process():
    """One process spinning on a core (the issue's 'one other busy process'), killed on exit."""
    # Spins until its parent is gone, so a killed benchmark leaves no busy process behind.
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    proc = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)  # let the scheduler see it
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def measure(path: str, threads: int, repeat: int, rounds: int, block_seconds: float, load: bool,
            kernels: int, shipped_logs: bool = False) -> dict:
    """Everything for one model file (runs in the child process; see the module docstring)."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np

    import nnvm
    from nnvm.bench import (
        alternate_times,
        blocks_times,
        onnxruntime_session,
        profile,
        relative_error,
        seeded_inputs,
    )

    start = time.perf_counter()
    # no kernel cache: the compile column stays a cold compile, comparable across sessions
    # (bench/compile_time.py measures cold and warm)
    mod = nnvm.compile(path, target="llvm", tuning_log=None if shipped_logs else False, kernel_cache=False)
    compile_s = time.perf_counter() - start
    quiet, _ = onnxruntime_session(path, threads)  # intra-op spinning off
    spinning, version = onnxruntime_session(path, threads, spinning=True)  # onnxruntime's default
    feeds = seeded_inputs(mod)
    rng = np.random.default_rng(0)
    for name, value in feeds.items():
        if value.dtype.kind == "i":  # token ids: seeded ones rather than all zeros
            feeds[name] = rng.integers(0, 1000, value.shape).astype(value.dtype)
    ort_feeds = {i.name: feeds[i.name] for i in spinning.get_inputs()}
    error = relative_error(mod.run(**feeds), spinning.run(None, ort_feeds))

    def ours():
        mod.run(**feeds)

    def ort_default():
        spinning.run(None, ort_feeds)

    def ort_quiet():
        quiet.run(None, ort_feeds)

    # ms of one run of the slower runtime, warm: the faster of two, so one stalled run does not count
    one = max(min(t) for t in alternate_times([ours, ort_default], 2, warmup=1))
    n = max(3, min(repeat, round(1e3 * block_seconds / max(one, 1e-3))))
    warm = 1 if one > 300 else 3  # a slow model is warm after one run; its runs are what costs time
    stats = mod.stats()
    result = {"onnxruntime_version": version, "compile_s": compile_s, "max_rel_err": error,
              "kernels": len(mod.plan["calls"]), "repeat": n, "rounds": rounds,
              "tuned_kernels": stats["tuned_kernels"], "distinct_kernels": stats["distinct_kernels"]}

    def keep(kind: str, nnvm_runs: list, ort_runs: list) -> None:
        """Median (blocks: of the blocks' medians) and best run of each runtime, in milliseconds."""
        for who, runs in (("nnvm", nnvm_runs), ("ort", ort_runs)):
            blocks = runs if isinstance(runs[0], list) else [runs]
            result[f"{who}_{kind}_ms"] = statistics.median(statistics.median(b) for b in blocks)
            result[f"{who}_{kind}_best_ms"] = min(min(b) for b in blocks)
            result[f"{who}_{kind}_runs"] = [[round(t, 3) for t in b] for b in blocks]

    blocks = blocks_times([ours, ort_default], n, rounds, warmup=warm)
    keep("block", *blocks)
    steady = steady_rounds(blocks, lambda: blocks_times([ours, ort_default], n, 1, warmup=warm), rounds)
    keep("steady", *steady)
    result["steady_rounds"] = len(steady[0])
    keep("alt_quiet", *alternate_times([ours, ort_quiet], n, warm))
    keep("alt_spin", *alternate_times([ours, ort_default], n, warm))
    if load:
        with busy_process():
            loaded = blocks_times([ours, ort_default], n, max(1, rounds - 1), warmup=warm)
        keep("load", *loaded)
    if kernels:
        rows = profile(mod, feeds, 3)
        keep = ("group", "ms", "share", "gflops")
        result["slowest_kernels"] = [{k: r[k] for k in keep} for r in rows[:kernels]]
    return result


STEADY = 1.15  # a round is steady where each runtime's fastest run is within this of its fastest overall


def steady_rounds(blocks: list, one_more, rounds: int) -> list:
    """The rounds of ``blocks`` (per runtime, per round, its runs) in which the machine was steady: every
    runtime's fastest run within ``STEADY`` of its fastest over all rounds. Where fewer than ``rounds`` are,
    rounds are measured again (``one_more()``: one round, as ``blocks_times`` gives it), at most ``rounds``
    more. Both runtimes' rounds are kept or dropped together, so a period in which the host ran slow (this
    2-vCPU host: one runtime's blocks 1.5-3x its best for minutes, ShuffleNet b1 read 1.34 in blocks with
    its best runs 0.97) does not decide the median; all rounds where none is steady. ``blocks`` is left as
    it was."""
    blocks = [list(per) for per in blocks]

    def steady() -> list:
        best = [min(min(b) for b in per) for per in blocks]
        return [r for r in range(len(blocks[0]))
                if all(min(per[r]) <= STEADY * fastest for per, fastest in zip(blocks, best))]

    for _ in range(rounds):
        if len(steady()) >= rounds:
            break
        for per, new in zip(blocks, one_more()):
            per.extend(new)
    kept = steady() or list(range(len(blocks[0])))
    return [[per[r] for r in kept] for per in blocks]



def steady_medians(fns: list, repeat: int, rounds: int, block_seconds: float) -> tuple[int, int, list]:
    """``(runs a block, steady rounds, [(median ms, best ms) per runtime])``: ``fns`` timed in blocks of
    their own, about ``block_seconds`` long (at most ``repeat`` runs), alternated ``rounds`` times, medians
    of the blocks' medians over the ``steady_rounds`` only. What bench/transformers.py and bench/int8.py
    measure."""
    from nnvm.bench import alternate_times, blocks_times

    one = max(min(t) for t in alternate_times(fns, 2, warmup=1))
    n = max(3, min(repeat, round(1e3 * block_seconds / max(one, 1e-3))))
    blocks = blocks_times(fns, n, rounds, warmup=2)
    steady = steady_rounds(blocks, lambda: blocks_times(fns, n, 1, warmup=2), rounds)
    medians = [statistics.median(statistics.median(b) for b in per) for per in steady]
    return n, len(steady[0]), [(m, min(min(b) for b in per)) for m, per in zip(medians, steady)]


def measure_in_child(path: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", path, "--threads", str(args.threads),
           "--repeat", str(args.repeat), "--rounds", str(args.rounds), "--block-seconds",
           str(args.block_seconds), "--kernels", str(args.kernels), *(["--no-load"] if args.no_load else []),
           *(["--shipped-logs"] if args.shipped_logs else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
        return {"error": lines[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratios(r: dict) -> dict:
    """nnvm / onnxruntime per measurement, and each runtime's slowdown under load."""
    out = {"blocks": r["nnvm_block_ms"] / r["ort_block_ms"],
           "blocks_best": r["nnvm_block_best_ms"] / r["ort_block_best_ms"],
           "steady": r["nnvm_steady_ms"] / r["ort_steady_ms"],
           "alt_quiet": r["nnvm_alt_quiet_ms"] / r["ort_alt_quiet_ms"],
           "alt_spin": r["nnvm_alt_spin_ms"] / r["ort_alt_spin_ms"]}
    if "nnvm_load_ms" in r:
        out["nnvm_slowdown"] = r["nnvm_load_ms"] / r["nnvm_block_ms"]
        out["ort_slowdown"] = r["ort_load_ms"] / r["ort_block_ms"]
    return out


def geomean(values: list) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def summarize(rows: list, cnns: tuple, transformers: tuple) -> list[str]:
    """The summary lines: geomeans per family and batch, models above 1.2x, load slowdowns."""
    lines = []
    for batch in sorted({r["batch"] for r in rows}):
        done = [r for r in rows if r["batch"] == batch and "error" not in r]
        for family, names in (("CNNs", cnns), ("transformers", transformers)):
            fam = [r for r in done if r["model"] in names]
            if not fam:
                continue
            kinds = ("blocks", "blocks_best", "steady", "alt_quiet", "alt_spin")
            g = {k: geomean([r["ratios"][k] for r in fam]) for k in kinds}
            lines.append(f"batch {batch}, {len(fam)} {family}: geomean nnvm/ort {g['blocks']:.2f} in "
                         f"blocks (best runs {g['blocks_best']:.2f}, steady rounds {g['steady']:.2f}), "
                         f"{g['alt_quiet']:.2f} alternated (ort spinning off), {g['alt_spin']:.2f} "
                         f"alternated (ort spinning on)")
        for kind, what in (("blocks", "in blocks"), ("steady", "in steady rounds")):
            slow = [f"{r['model']} {r['ratios'][kind]:.2f}" for r in done if r["ratios"][kind] > SLOW]
            lines.append(f"batch {batch}: above {SLOW}x {what}: {', '.join(slow) or 'none'}")
        loaded = [r for r in done if "nnvm_slowdown" in r["ratios"]]
        if loaded:
            worse = [r["model"] for r in loaded if r["ratios"]["nnvm_slowdown"] > r["ratios"]["ort_slowdown"]]
            lines.append(f"batch {batch}, under one busy process: slowdown geomean nnvm "
                         f"{geomean([r['ratios']['nnvm_slowdown'] for r in loaded]):.2f}x, onnxruntime "
                         f"{geomean([r['ratios']['ort_slowdown'] for r in loaded]):.2f}x; nnvm slows more on "
                         f"{len(worse)} of {len(loaded)}: {', '.join(worse) or 'none'}")
    for r in rows:
        if r["model"] == "resnet18" and r["batch"] == 1 and "compile_s" in r:
            how = "with the shipped logs" if r.get("tuned_kernels") else "untuned"
            lines.append(f"ResNet-18 {how} compile time {r['compile_s']:.1f} s (goal <= 10 s)")
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']} batch {r['batch']}: FAILED: {r['error']}")
    return lines


def markdown(rows: list) -> list[str]:
    """The results table as Markdown (for bench/RESULTS.md)."""
    out = ["| model | batch | nnvm (ms) | ort (ms) | blocks | blocks, best runs | blocks, steady rounds "
           "| alt., ort quiet | alt., ort spinning | nnvm slowdown, loaded | ort slowdown, loaded "
           "| compile (s) | max rel err |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {TITLES.get(r['model'], r['model'])} | {r['batch']} | failed: {r['error']} "
                       f"| | | | | | | | | | |")
            continue
        q = r["ratios"]
        load = (f"{q['nnvm_slowdown']:.2f} | {q['ort_slowdown']:.2f}" if "nnvm_slowdown" in q else "- | -")
        mark = "**" if q["blocks"] > SLOW else ""
        out.append(f"| {TITLES.get(r['model'], r['model'])} | {r['batch']} | {r['nnvm_block_ms']:.1f} | "
                   f"{r['ort_block_ms']:.1f} | {mark}{q['blocks']:.2f}{mark} | {q['blocks_best']:.2f} | "
                   f"{q['steady']:.2f} ({r['steady_rounds']}) | {q['alt_quiet']:.2f} | "
                   f"{q['alt_spin']:.2f} | {load} | {r['compile_s']:.1f} | {r['max_rel_err']:.1e} |")
    return out


SHORT = {"alexnet": "AlexNet", "densenet121": "DenseNet", "googlenet": "GoogLeNet", "inception_v2": "IncV2",
         "resnet50": "RN50", "shufflenet": "Shuffle", "squeezenet": "Squeeze", "vgg19": "VGG19",
         "zfnet512": "ZFNet", "resnet18": "RN18", "mobilenet_v2": "MNv2", "bert": "BERT", "gpt2": "GPT-2",
         "vit": "ViT"}


def mermaid_chart(rows: list, batch: int) -> list[str]:
    """The blocks ratios of one batch size as a Mermaid bar chart: a plot that lives in RESULTS.md as
    text (GitHub draws it), where the PNG of ``plot`` is not committed. The line is the 0.9 goal."""
    done = [r for r in rows if "error" not in r and r["batch"] == batch]
    if not done:
        return []
    names = ", ".join(f'"{SHORT.get(r["model"], r["model"])}"' for r in done)
    values = ", ".join(f"{r['ratios']['blocks']:.2f}" for r in done)
    top = max(1.2, max(r["ratios"]["blocks"] for r in done) + 0.05)
    return ["```mermaid", "xychart-beta",
            f'    title "nnvm / onnxruntime, batch {batch} (blocks; lower is better; line: goal 0.9)"',
            f"    x-axis [{names}]", f'    y-axis "ratio" 0 --> {top:.1f}', f"    bar [{values}]",
            f"    line [{', '.join(['0.9'] * len(done))}]", "```"]


def plot(rows: list, path: str, threads: int, shipped_logs: bool = False) -> None:
    """Bars of nnvm / onnxruntime (blocks) per model and batch size, with the 1.0 and 0.9 lines."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nnvm.bench import cpu_name

    done = [r for r in rows if "error" not in r]
    models = list(dict.fromkeys(r["model"] for r in done))
    batches = sorted({r["batch"] for r in done})
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / max(len(batches), 1)
    for k, batch in enumerate(batches):
        by_model = {r["model"]: r["ratios"]["blocks"] for r in done if r["batch"] == batch}
        xs = [i + (k - (len(batches) - 1) / 2) * width for i in range(len(models))]
        bars = ax.bar(xs, [by_model.get(m, 0) for m in models], width, label=f"batch {batch}")
        ax.bar_label(bars, fmt="%.2f", fontsize=6)
    ax.set_yscale("log")  # ratios from 0.4 to 12
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.axhline(0.9, color="green", lw=0.8, ls="--", label="goal 0.9")
    ax.set_xticks(range(len(models)), [TITLES.get(m, m) for m in models], rotation=30, ha="right", fontsize=7)
    how = "with the shipped logs" if shipped_logs else "untuned"
    ax.set_ylabel(f"nnvm {how} / onnxruntime (lower is better)")
    ax.set_title(f"{cpu_name()}, {threads} threads, float32, each runtime in its own blocks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", file=sys.stderr)


def main(argv=None) -> int:
    from nnvm_testing.frontend_onnx.torch_models import ZOO_CNNS, ZOO_TRANSFORMERS

    everything = (*ZOO_CNNS, *ZOO_TRANSFORMERS)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(everything), help=f"comma-separated, of {everything}")
    parser.add_argument("--batch", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each runtime, alternated")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="aim of one block's length")
    parser.add_argument("--kernels", type=int, default=5, help="slowest nnvm kernels listed per model")
    parser.add_argument("--no-load", action="store_true", help="skip the run under one busy process")
    parser.add_argument("--quick", action="store_true", help="batch 1, 3 runs a block, 2 rounds")
    parser.add_argument("--shipped-logs", action="store_true",
                        help="compile with the logs the backend ships (out of the box) instead of none")
    parser.add_argument("--json", default=os.path.join(HERE, "zoo.json"))
    parser.add_argument("--markdown", help="also write the table (and summary) to this Markdown file")
    parser.add_argument("--plot", default=os.path.join(HERE, "zoo.png"))
    parser.add_argument("--child", metavar="MODEL", help=argparse.SUPPRESS)  # one file, JSON on stdout
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.repeat, args.rounds, args.block_seconds = "1", 3, 2, 0.3
    if args.child:
        print(json.dumps(measure(args.child, args.threads, args.repeat, args.rounds, args.block_seconds,
                                 not args.no_load, args.kernels, args.shipped_logs)))
        return 0

    from nnvm.bench import cpu_name
    from nnvm_testing.frontend_onnx.torch_models import zoo_model_path

    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in everything]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(everything)}")
    batches = [int(b) for b in args.batch.split(",")]
    meta = {"cpu": cpu_name(), "cpus": os.cpu_count(), "threads": args.threads, "date":
            datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "load_start": os.getloadavg()[0], "args": vars(args)}
    print(f"{meta['cpu']}, {meta['cpus']} logical CPUs, {args.threads} threads, load average "
          f"{meta['load_start']:.2f}", file=sys.stderr)
    rows = []
    for batch in batches:
        for model in models:
            path = zoo_model_path(model, batch)  # exported once, outside any timing
            r = {"model": model, "batch": batch, **measure_in_child(path, args)}
            if "error" not in r:
                r["ratios"] = ratios(r)
                q = r["ratios"]
                load = (f", loaded: nnvm x{q['nnvm_slowdown']:.2f} ort x{q['ort_slowdown']:.2f}"
                        if "nnvm_slowdown" in q else "")
                print(f"{model} b{batch}: nnvm {r['nnvm_block_ms']:.1f} ms, ort {r['ort_block_ms']:.1f} ms: "
                      f"blocks {q['blocks']:.2f}, alternated {q['alt_quiet']:.2f} (quiet) "
                      f"{q['alt_spin']:.2f} (spinning){load}; compile {r['compile_s']:.1f} s, "
                      f"err {r['max_rel_err']:.1e}, {r['repeat']} runs/block, "
                      f"{r['tuned_kernels']}/{r['distinct_kernels']} kernels from logs", file=sys.stderr)
            else:
                print(f"{model} b{batch}: FAILED: {r['error']}", file=sys.stderr)
            rows.append(r)
            meta["load_end"] = os.getloadavg()[0]
            with open(args.json, "w") as f:  # kept after every model: a cut-short run keeps its rows
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
    summary = summarize(rows, ZOO_CNNS, ZOO_TRANSFORMERS)
    summary.insert(0, "nnvm compiled with the logs the backend ships (nearest CPU, nearest batch)"
                   if args.shipped_logs else "nnvm compiled untuned (tuning_log=False: fallback configs)")
    summary.append(f"load average at start {meta['load_start']:.2f}, at end {meta['load_end']:.2f}")
    print("\n".join(summary))
    table = markdown(rows)
    print("\n".join(table))
    if args.markdown:
        charts = [line for b in batches for line in ["", *mermaid_chart(rows, b)]]
        with open(args.markdown, "w") as f:
            f.write("\n".join(table + [""] + [f"- {s}" for s in summary] + charts) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        plot(rows, args.plot, args.threads, args.shipped_logs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
