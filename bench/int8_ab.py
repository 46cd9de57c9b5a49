"""A/B of two builds of one int8 model in one process, for a shared, loaded machine (issue 40).

    uv run python bench/int8_ab.py export DIR/new --models resnet50,resnet18   # this checkout's builds
    (in another checkout: the same with DIR/old)
    uv run python bench/int8_ab.py compare DIR/old DIR/new --models resnet50 [--threads 1] [--rounds 40]
    uv run python bench/int8_ab.py ort DIR/new --models resnet50        # against onnxruntime's nodes

``export`` compiles each model's QDQ file (``bench/int8.py``'s: ``quantized_model_path(name, "qdq")``) and
exports it as ``PREFIX_<model>.so``; a module exported by one checkout's code loads in another's (the core
alone runs it), so two commits meet in one process. ``compare`` loads both, checks that their outputs are
identical on the seeded input, then alternates them ``rounds`` times, kernel by kernel (each kernel of A,
then the same kernel of B, the order swapped every round, each on its own arena) and whole run by whole
run, with ``--threads`` threads. It prints the sum of per-kernel minima per layer kind (from the group's
node names: ResNet's ``downsample``/``conv1``/``conv2``/``conv3``, the rest as ``other``), whole-run
minima and medians, and the CPU time other processes took meanwhile (``/proc/stat``, in CPUs): with
another process on the cores, medians measure it; per-kernel minima at one thread are the steadier guide.
``ort`` sets one build's per-kernel minima beside onnxruntime's per-node minima (``enable_profiling``,
the QDQ file, spinning off), the runs interleaved, by the same layer kinds (onnxruntime runs the residual
add as a node of its own, ``QLinearAdd``: nnvm's is in the ``conv3`` kernel, ResNet-18's in ``conv2``'s).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def layer_kind(group: list) -> str:
    """ResNet's layer kinds from a kernel's (or onnxruntime node's) names: ``layer2.0.conv3`` (with the
    residual add nnvm runs in its kernel), ``add`` (onnxruntime's separate ``QLinearAdd``), the ``stem``."""
    names = " ".join(group)
    for kind in ("downsample", "conv3", "conv2", "conv1"):
        if re.search(rf"\.{kind}(?!\d)", names):
            return kind
    if re.search(r"\.add(?!\w)", names):
        return "add"
    return "stem" if re.search(r"(^|\s)conv1(?!\d)", names) else "other"


def busy_seconds() -> float:
    """CPU time every process has used (steal included), from the first line of /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def export(prefix: str, models: list) -> None:
    import nnvm
    from nnvm_testing.frontend_onnx import quantized

    for model in models:
        mod = nnvm.compile(quantized.quantized_model_path(model, "qdq"), target="llvm")
        mod.export(f"{prefix}_{model}.so")
        print(f"{prefix}_{model}.so")


def compare(a: str, b: str, model: str, rounds: int) -> None:
    import nnvm
    from nnvm_testing.frontend_onnx import quantized

    feeds = quantized.calibration_inputs(quantized.quantized_model_path(model, "qdq"), count=1, seed=11)[0]
    mods = {"A": nnvm.load(f"{a}_{model}.so"), "B": nnvm.load(f"{b}_{model}.so")}
    outs = {k: m.run(**feeds)[0] for k, m in mods.items()}
    same = bool(np.array_equal(outs["A"], outs["B"]))
    for m in mods.values():
        for _ in range(10):
            m.run(**feeds)
    kernels = {k: [] for k in mods}
    whole = {k: [] for k in mods}
    start, mine, wall = busy_seconds(), sum(os.times()[:2]), time.time()
    for rnd in range(rounds):
        order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
        times = {k: [] for k in mods}
        for calls in zip(*(mods[k]._calls for k in order)):
            for k, (fn, arg, _keep, _name) in zip(order, calls):
                t = time.perf_counter()
                fn(arg)
                times[k].append(time.perf_counter() - t)
        for k in order:
            kernels[k].append(times[k])
            for _ in range(3):
                t = time.perf_counter()
                mods[k].run(**feeds)
                whole[k].append(1e3 * (time.perf_counter() - t))
    foreign = ((busy_seconds() - start) - (sum(os.times()[:2]) - mine)) / (time.time() - wall)
    print(f"{model}: A {a}, B {b}; identical outputs: {same}; {os.environ['NNVM_NUM_THREADS']} thread(s), "
          f"{rounds} rounds; other processes {foreign:.2f} CPUs, load average {os.getloadavg()[0]:.1f}")
    sums = {}
    for k, m in mods.items():
        minima = 1e3 * np.array(kernels[k]).min(axis=0)
        by_kind: dict = {}
        for call, ms in zip(m.plan["calls"], minima):
            kind = layer_kind(call["group"])
            by_kind[kind] = by_kind.get(kind, 0.0) + ms
        sums[k] = by_kind
    print("| layers | A ms | B ms | B / A |")
    print("|---|---:|---:|---:|")
    for kind in sorted(sums["A"], key=lambda s: -sums["A"][s]):
        ms_a, ms_b = sums["A"][kind], sums["B"][kind]
        print(f"| {kind} | {ms_a:.3f} | {ms_b:.3f} | {ms_b / ms_a:.3f} |")
    ta, tb = sum(sums["A"].values()), sum(sums["B"].values())
    print(f"| **sum of kernel minima** | {ta:.3f} | {tb:.3f} | {tb / ta:.3f} |")
    for what, fn in (("whole-run minimum", min), ("whole-run median", statistics.median)):
        va, vb = fn(whole["A"]), fn(whole["B"])
        print(f"| {what} | {va:.3f} | {vb:.3f} | {vb / va:.3f} |")


def against_onnxruntime(prefix: str, model: str, rounds: int) -> None:
    import onnxruntime as ort

    import nnvm
    from nnvm_testing.frontend_onnx import quantized

    path = quantized.quantized_model_path(model, "qdq")
    feeds = quantized.calibration_inputs(path, count=1, seed=11)[0]
    mod = nnvm.load(f"{prefix}_{model}.so")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(os.environ["NNVM_NUM_THREADS"])
    opts.enable_profiling = True
    scratch = tempfile.mkdtemp(prefix="int8_ab_")  # onnxruntime writes its profile in the working directory
    opts.profile_file_prefix = os.path.join(scratch, "ort")
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    warmup = 5
    for _ in range(warmup):
        session.run(None, feeds)
        mod.run(**feeds)
    kernels = []
    for _ in range(rounds):
        session.run(None, feeds)
        times = []
        for fn, arg, _keep, _name in mod._calls:
            t = time.perf_counter()
            fn(arg)
            times.append(time.perf_counter() - t)
        kernels.append(times)
    profile = session.end_profiling()
    with open(profile) as f:
        events = json.load(f)
    shutil.rmtree(scratch, ignore_errors=True)
    nodes = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[e["name"][:-len("_kernel_time")]].append(e["dur"] / 1e3)
    theirs: dict = collections.defaultdict(float)
    for name, durations in nodes.items():
        theirs[layer_kind([name])] += min(durations[warmup:] or durations)
    ours: dict = collections.defaultdict(float)
    for call, ms in zip(mod.plan["calls"], 1e3 * np.array(kernels).min(axis=0)):
        ours[layer_kind(call["group"])] += ms
    threads = os.environ["NNVM_NUM_THREADS"]
    print(f"{model}: {prefix} against onnxruntime {ort.__version__}, {threads} thread(s), {rounds} rounds "
          f"interleaved, minima; load average {os.getloadavg()[0]:.1f}")
    print("| layers | nnvm ms | onnxruntime ms | nnvm / onnxruntime |")
    print("|---|---:|---:|---:|")
    for kind in sorted(set(ours) | set(theirs), key=lambda k: -ours.get(k, 0.0)):
        a, b = ours.get(kind, 0.0), theirs.get(kind, 0.0)
        print(f"| {kind} | {a:.3f} | {b:.3f} | {f'{a / b:.2f}' if b else '-'} |")
    a, b = sum(ours.values()), sum(theirs.values())
    print(f"| **sum** | {a:.3f} | {b:.3f} | {a / b:.2f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("export", "compare", "ort"))
    parser.add_argument("prefixes", nargs="+", help="export, ort: one PREFIX; compare: PREFIX_A PREFIX_B")
    parser.add_argument("--models", default="resnet50,resnet18,mobilenet_v2", help="comma-separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    models = args.models.split(",")
    if args.action == "export":
        export(args.prefixes[0], models)
        return 0
    if args.action == "ort":
        for model in models:
            against_onnxruntime(args.prefixes[0], model, args.rounds)
        return 0
    if len(args.prefixes) != 2:
        print("compare needs two prefixes: the A and B builds", file=sys.stderr)
        return 1
    for model in models:
        compare(args.prefixes[0], args.prefixes[1], model, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
