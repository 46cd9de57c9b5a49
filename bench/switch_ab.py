"""A/B of one CPU switch (``Options.cpu_switches``) on zoo models: per-kernel minima and whole runs
alternated.

    uv run python bench/switch_ab.py --switch depthwise_tiles [--models mobilenet_v2]
                                     [--batch 1] [--threads 1] [--rounds 8] [--runs 100]
    uv run python bench/switch_ab.py --int8 --switch qconv_rows_outer --models resnet50,resnet18 \
                                     --threads 2 --op qconv2d_nchwc --no-depthwise

Both builds (the switch at ``0``: "before", at ``1``: "after"; untuned, ``tuning_log=False``) live in one
process. On a host shared with other work, whole-run times swing with the load, so two measurements:

- per kernel: each build's kernels profiled (``nnvm.bench.profile``) in alternation ``rounds`` times, the
  minimum over rounds of each kernel's median: the sum over all kernels and over one operator's kernels
  (``--op``, with ``--depthwise`` counting only depthwise convolutions);
- whole runs: before, after and onnxruntime (spinning off) run by run, ``runs`` rounds, medians.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time


def _is_op(mod, group, op: str, depthwise: bool) -> bool:
    nodes = {n.name: n for n in mod.graph.nodes}
    for name in group:
        node = nodes.get(name)
        if node is not None and node.op == op:
            if not depthwise:
                return True
            weight = mod.graph.types[node.inputs[1]].shape
            return node.attrs.get("groups", 1) > 1 and weight[1] == 1
    return False


def compare(model: str, batch: int, args) -> None:
    import nnvm
    from nnvm.bench import onnxruntime_session, profile, seeded_inputs
    from nnvm_testing.frontend_onnx.torch_models import zoo_model_path

    if args.int8:
        from nnvm_testing.frontend_onnx import quantized

        path = quantized.quantized_model_path(model, "qdq")
    else:
        path = zoo_model_path(model, batch)
    mods = {}
    for value in ("0", "1"):
        start = time.perf_counter()
        options = nnvm.Options(tuning_log=False, cpu_switches={args.switch: value})
        mods[value] = nnvm.compile(path, target="llvm", options=options)
        print(f"{model} b{batch}: compiled with {args.switch}={value} in {time.perf_counter() - start:.1f} s")
    feeds = seeded_inputs(mods["0"])
    best = {v: collections.defaultdict(lambda: float("inf")) for v in mods}
    for _ in range(args.rounds):
        for value, mod in mods.items():
            for row in profile(mod, feeds, 10):
                key = tuple(row["group"])
                best[value][key] = min(best[value][key], row["ms"])
    for value, mod in mods.items():
        part = sum(ms for g, ms in best[value].items() if _is_op(mod, g, args.op, args.depthwise))
        what = f"{args.op}{' (depthwise)' if args.depthwise else ''}"
        print(f"  {args.switch}={value}: {what} kernels {part:.3f} ms, all kernels "
              f"{sum(best[value].values()):.3f} ms (minima over {args.rounds} rounds)")
    session, _ = onnxruntime_session(path, args.threads)
    ort_feeds = {i.name: feeds[i.name] for i in session.get_inputs()}
    fns = {"before": lambda: mods["0"].run(**feeds), "after": lambda: mods["1"].run(**feeds),
           "ort": lambda: session.run(None, ort_feeds)}
    for fn in fns.values():
        fn()
    times: dict = {k: [] for k in fns}
    for _ in range(args.runs):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(1e3 * (time.perf_counter() - start))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"  whole runs, {args.runs} rounds alternated: before {med['before']:.3f} ms, "
          f"after {med['after']:.3f} ms, onnxruntime {med['ort']:.3f} ms; "
          f"nnvm/ort {med['before'] / med['ort']:.3f} -> {med['after'] / med['ort']:.3f}; "
          f"load average {os.getloadavg()[0]:.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switch", default="depthwise_tiles")
    parser.add_argument("--models", default="mobilenet_v2")
    parser.add_argument("--batch", default="1", help="comma-separated batch sizes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8, help="per-kernel profiles of each build")
    parser.add_argument("--runs", type=int, default=100, help="whole runs of each, alternated")
    parser.add_argument("--op", default="conv2d_nchwc", help="the operator whose kernels are summed")
    parser.add_argument("--depthwise", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--int8", action="store_true", help="the models' QDQ files (bench/int8.py's)")
    args = parser.parse_args(argv)
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    print(f"load average {os.getloadavg()[0]:.2f}, {args.threads} thread(s)")
    for batch in (int(b) for b in args.batch.split(",")):
        for model in args.models.split(","):
            compare(model, batch, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
