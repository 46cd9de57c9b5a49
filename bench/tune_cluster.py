"""Tuning throughput on a local Ray cluster: trials per minute with 1 and with 2 device workers (issue 36).

    uv run python bench/tune_cluster.py [--trials 24] [--tasks 2] [--devices 1,2] [--repeat 10]
                                        [--min-repeat-ms 40] [--build-cpus 2] [--json]

For each device count it starts a real cluster on this machine (a head with ``--build-cpus`` CPUs and no
device, plus that many single-CPU device nodes, each declaring ``nnvm:llvm:<cpu>`` and measuring with
one thread), warms every node's workers up on another task, then tunes ResNet-18's ``--tasks``
cheapest tasks with ``--trials`` configs each (random search, seed 0: the same configs every run;
each measured in ``--repeat`` rounds of ``--min-repeat-ms``, so that measuring, not building, is the
bottleneck, as on a farm of devices), and prints trials per minute, the ratio to one device (the
goal: at least 1.7 with two) and a timeline per node: ``B`` a build running, ``M`` a measurement,
``.`` idle. Builds on one node while another measures is the overlap the timeline shows; its total is
printed as seconds with at least one build and one measurement running at once.

Each batch holds 8 configs per device (as ``nnvm tune --cluster`` sends), so the devices' share of a
batch's first builds and last measurement stays the same. A cluster of one machine's processes shares
that machine's cores: time it on a quiet machine with at least ``--build-cpus`` + the largest device
count cores (4 for the defaults; the numbers are noise on a loaded one).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import ray.cluster_utils

from nnvm.autotune import extract_tasks, tune
from nnvm.autotune import log as logmod
from nnvm.autotune.cluster import ClusterMeasurer, device_resource
from nnvm_testing.frontend_onnx.models import cached_model_path

WIDTH = 96


def run(devices: int, tasks: list, warm_up, trials: int, build_cpus: int, repeat: int,
        min_repeat_ms: float) -> dict:
    cluster = ray.cluster_utils.Cluster(initialize_head=True,
                                        head_node_args={"num_cpus": build_cpus, "include_dashboard": False})
    try:
        for _ in range(devices):
            cluster.add_node(num_cpus=1, resources={device_resource("llvm"): 1})
        cluster.wait_for_nodes()
        log = os.path.join(tempfile.mkdtemp(prefix="nnvm-bench-cluster-"), "tune.jsonl")
        with ClusterMeasurer(cluster.address, repeat=repeat, min_repeat_ms=min_repeat_ms,
                             noise_limit=100.0) as m:
            # worker processes start (and import nnvm) on first use: not what is measured
            tune([warm_up], 2 * (devices + build_cpus), log + ".warm", tuner="random", measurer=m,
                 progress=False, batch_size=2 * (devices + build_cpus))
            m.timeline.clear()
            start = time.time()
            tune(tasks, trials, log, tuner="random", measurer=m, progress=False, seed=0,
                 batch_size=8 * devices)
            seconds = time.time() - start
            events = list(m.timeline)
        records = logmod.read(log)
        return {"devices": devices, "trials": len(records), "errors": sum(1 for r in records if not r.ok),
                "seconds": seconds, "trials_per_minute": 60 * len(records) / seconds,
                "overlap_seconds": overlap(events), "timeline": timeline(events, start, start + seconds)}
    finally:
        cluster.shutdown()


def overlap(events: list) -> float:
    """Seconds during which at least one build and one measurement ran at the same time."""
    edges = sorted([(e["start"], e["kind"], 1) for e in events] + [(e["end"], e["kind"], -1) for e in events])
    running = {"build": 0, "measure": 0}
    total, last = 0.0, None
    for t, kind, step in edges:
        if last is not None and running["build"] and running["measure"]:
            total += t - last
        running[kind] += step
        last = t
    return total


def timeline(events: list, start: float, end: float) -> list[str]:
    """One row per node: B (build), M (measure) or . (idle) in each of WIDTH time slots."""
    span = max(end - start, 1e-9)
    rows: dict = {}
    for e in events:
        row = rows.setdefault(e["node"], ["."] * WIDTH)
        a = int((e["start"] - start) / span * WIDTH)
        b = max(a + 1, int((e["end"] - start) / span * WIDTH))
        for k in range(max(a, 0), min(b, WIDTH)):
            row[k] = "M" if e["kind"] == "measure" or row[k] == "M" else "B"
    return [f"{node:>20s} |{''.join(row)}|" for node, row in sorted(rows.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=24, help="configs per task")
    ap.add_argument("--tasks", type=int, default=2, help="ResNet-18's cheapest tasks to tune")
    ap.add_argument("--devices", default="1,2", help="device counts to compare")
    ap.add_argument("--build-cpus", type=int, default=2,
                    help="CPUs of the head node (builds only; two devices need about two builders)")
    ap.add_argument("--repeat", type=int, default=10, help="timed rounds per config")
    ap.add_argument("--min-repeat-ms", type=float, default=40.0,
                    help="length of a round (default 40: a measurement outlasts a build, as on a farm)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ["NNVM_NUM_THREADS"] = "1"  # single-thread devices: every node's workers inherit it
    tasks = sorted(extract_tasks(cached_model_path("resnet18"), target="llvm"), key=lambda t: t.flops)
    warm_up, tasks = tasks[args.tasks], tasks[:args.tasks]
    results = [run(int(n), tasks, warm_up, args.trials, args.build_cpus, args.repeat, args.min_repeat_ms)
               for n in args.devices.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    base = results[0]["trials_per_minute"]
    for r in results:
        print(f"{r['devices']} device(s): {r['trials']} trials ({r['errors']} errors) in "
              f"{r['seconds']:.1f} s = {r['trials_per_minute']:.1f} trials/min, "
              f"{r['trials_per_minute'] / base:.2f}x "
              f"{results[0]['devices']} device(s); builds overlapping measurements "
              f"{r['overlap_seconds']:.1f} s")
        print("\n".join(r["timeline"]))


if __name__ == "__main__":
    main()
