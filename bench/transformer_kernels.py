"""The zoo's transformers kernel by kernel against onnxruntime's own per-node profile, and the packed
GEMM's rate per matmul shape: views that stay readable on a shared host, where whole-model times swing.

    uv run python bench/transformer_kernels.py --models gpt2,vit,bert      # per-kernel sums
    uv run python bench/transformer_kernels.py --models gpt2 --batch 1,8
    uv run python bench/transformer_kernels.py --hf-models gpt2 --threads 2   # transformers' own GPT-2
    uv run python bench/transformer_kernels.py --hf-models gpt2,bert --seq 512 --cpu-time
    uv run python bench/transformer_kernels.py --gemm 128x768x3072,197x192x576 --rounds 25
    uv run python bench/transformer_kernels.py --gemm 128x768x768 --tiles 2x4,6x2,4x2 --rounds 7

Both runtimes use ``--threads`` threads (1 by default). Per model: nnvm compiled untuned, every kernel
timed on the module's own arena (``nnvm.bench.profile``) ``--rounds`` times and its **minimum** kept; one
onnxruntime run with profiling on between rounds, each node's minimum kept (its first run dropped). The
sums are printed by kind of kernel (nnvm: by the ops of each fused group; onnxruntime: by op type). Per
GEMM shape ``MxKxN`` or ``BxMxKxN``: ``MatMul`` by a constant [K, N] weight plus a bias ``Add`` on
[B, M, K] data, the nnvm kernel and the onnxruntime session timed alternately, minimums in ms and
GFLOP/s; with ``--tiles``
(``JBxMB``: weight blocks x rows) one nnvm build per tile forced on ``cpu.dense.packed`` (``fallback``:
the untuned tile; ``NAME=VALUE``: untuned with a switch set, ``dense_wide_tiles=0``), all
alternated in the same rounds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

KINDS = ("dense_packed", "softmax", "layer_norm", "batched_weight_pack", "transpose", "reshape")


def _session(path, threads, profile_prefix=None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def per_kernel(name: str, threads: int, rounds: int, batch: int = 1, hf: bool = False,
               seq: int = 128, cpu: bool = False) -> None:
    import nnvm
    from nnvm.bench import profile, seeded_inputs
    from nnvm.lowering import group_flops
    from nnvm_testing.frontend_onnx import torch_models

    # cached; exported by the torch venv on first use
    path = torch_models.hf_model_path(name, batch, seq) if hf else torch_models.zoo_model_path(name, batch)
    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    feeds = seeded_inputs(mod)
    if "attention_mask" in feeds:
        feeds["attention_mask"][...] = 1  # a real mask: every token attended
    ops = {n.name: n.op for n in mod.graph.nodes}
    sess = _session(path, threads, os.path.join(tempfile.gettempdir(), f"nnvm_ort_{name}"))
    best: dict = {}
    for _ in range(rounds):
        for row in profile(mod, feeds, 1, time.process_time if cpu else time.perf_counter):
            key = (tuple(row["group"]), row["kernel"])
            best[key] = min(best.get(key, float("inf")), row["ms"])
        sess.run(None, feeds)
        time.sleep(0.05)  # its spinning workers let go of the cores before nnvm's next round
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    nodes = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            nodes[(e["name"], e["args"].get("op_name"))].append(e["dur"] / 1e3)
    ort_kinds = collections.Counter()
    for (_, op), durs in nodes.items():
        ort_kinds[op] += min(durs[1:] or durs)
    kinds = collections.Counter()
    for (group, _), ms in best.items():
        group_ops = {ops.get(g, "?") for g in group}
        kind = next((k for k in KINDS if any(o.startswith(k) for o in group_ops)), "other")
        kinds[kind] += ms
    total, ort_total = sum(kinds.values()), sum(ort_kinds.values())
    print(f"{name} b{batch}: nnvm {total:.2f} ms, onnxruntime {ort_total:.2f} ms (sums of per-kernel "
          f"minimums, {threads} thread(s)): {total / ort_total:.2f}")
    print("  nnvm:        " + ", ".join(f"{k} {v:.2f}" for k, v in kinds.most_common()))
    print("  onnxruntime: " + ", ".join(f"{k} {v:.2f}" for k, v in ort_kinds.most_common()))
    if cpu:  # onnxruntime's profile is wall time: its whole runs in CPU time beside nnvm's
        runs = {"nnvm": lambda: mod.run(**feeds), "onnxruntime": lambda: sess.run(None, feeds)}
        least = {}
        for who, fn in runs.items():
            for _ in range(rounds):
                fn()
                start = time.process_time()
                fn()
                least[who] = min(least.get(who, float("inf")), 1e3 * (time.process_time() - start))
        print(f"  CPU ms a run (least of {rounds}): nnvm {least['nnvm']:.2f}, onnxruntime "
              f"{least['onnxruntime']:.2f}: {least['nnvm'] / least['onnxruntime']:.2f}")
    groups = collections.defaultdict(lambda: [0.0, 0.0, 0])  # per kind of group and work: ms, flops, count
    for (group, _), ms in best.items():
        key = ("+".join(sorted({ops.get(g, "?") for g in group})), group_flops(mod.graph, list(group)))
        groups[key][0] += ms
        groups[key][2] += 1
    for (kind, flops), (ms, _, count) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:8]:
        rate = f"{flops * count / ms / 1e6:4.0f} GFLOP/s" if flops else ""
        print(f"    {ms:8.2f} ms x{count:3d} {rate:>13} {kind} ({(flops or 0) / 1e6:.0f} MFLOP each)")


def _compile_with_tile(path, tile: str):
    """``path`` compiled untuned, with ``cpu.dense.packed``'s fallback tile replaced by ``tile``
    (``JBxMB``), or as it is for ``fallback``; ``NAME=VALUE``: as it is with the switch ``NAME`` set."""
    import nnvm
    from nnvm.cpu import schedule_dense

    if tile == "fallback":
        return nnvm.compile(path, target="llvm", tuning_log=False)
    if "=" in tile:
        name, value = tile.split("=")
        options = nnvm.Options(tuning_log=False, cpu_switches={name: value})
        return nnvm.compile(path, target="llvm", options=options)
    jb, mb = (int(v) for v in tile.split("x"))
    chosen = schedule_dense.packed_tile
    schedule_dense.packed_tile = lambda machine, blocks, rows: (jb, mb)
    try:
        return nnvm.compile(path, target="llvm", tuning_log=False)
    finally:
        schedule_dense.packed_tile = chosen


def gemm(shape: str, threads: int, rounds: int, tiles: tuple = ("fallback",)) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from nnvm.bench import onnxruntime_session, profile

    *lead, k, n = (int(v) for v in shape.split("x"))
    batch, m = lead if len(lead) == 2 else (1, lead[0])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.05 * rng.standard_normal((k, n))).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    graph = helper.make_graph(nodes, "gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, m, n])], inits)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gemm.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
        mods = {tile: _compile_with_tile(path, tile) for tile in tiles}
        # not spinning: its workers would hold the other cores while the nnvm kernel timed next runs
        # (2-thread GEMMs read 1.8x slower)
        sess, _ = onnxruntime_session(path, threads)
        x = rng.standard_normal((batch, m, k)).astype(np.float32)
        ours, theirs = {tile: [] for tile in tiles}, []
        for _ in range(rounds):
            start = time.perf_counter()
            sess.run(None, {"x": x})
            theirs.append(time.perf_counter() - start)
            for tile, mod in mods.items():
                ours[tile].append(sum(r["ms"] for r in profile(mod, {"x": x}, 1)) / 1e3)
    flops, theirs = 2.0 * batch * m * k * n, min(theirs)
    for tile, times in ours.items():
        t = min(times)
        name = "" if tiles == ("fallback",) else f" {tile}"
        print(f"{shape}{name}: nnvm {t * 1e3:.3f} ms ({flops / t / 1e9:.0f} GFLOP/s), onnxruntime "
              f"{theirs * 1e3:.3f} ms ({flops / theirs / 1e9:.0f} GFLOP/s): {t / theirs:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated zoo transformers (gpt2, vit, bert)")
    parser.add_argument("--hf-models", default="",
                        help="comma-separated Hugging Face models at default size (gpt2, bert, ...)")
    parser.add_argument("--gemm", default="", help="comma-separated MxKxN shapes")
    parser.add_argument("--tiles", default="fallback",
                        help="comma-separated cpu.dense.packed tiles JBxMB for --gemm (fallback: untuned)")
    parser.add_argument("--batch", default="1", help="comma-separated batch sizes for --models")
    parser.add_argument("--seq", type=int, default=128, help="sequence length of --hf-models")
    parser.add_argument("--cpu-time", action="store_true",
                        help="nnvm's kernels in CPU time (time.process_time), and both runtimes' whole runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7, help="rounds whose minimum is kept")
    args = parser.parse_args()
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)  # before any kernel runs
    print(f"load average {os.getloadavg()[0]:.2f}")
    for name in filter(None, args.models.split(",")):
        for batch in args.batch.split(","):
            per_kernel(name, args.threads, args.rounds, int(batch))
    for name in filter(None, args.hf_models.split(",")):
        per_kernel(name, args.threads, args.rounds, 1, hf=True, seq=args.seq, cpu=args.cpu_time)
    for shape in filter(None, args.gemm.split(",")):
        gemm(shape, args.threads, args.rounds, tuple(args.tiles.split(",")))
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
