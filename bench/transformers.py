"""Hugging Face transformers at the sizes people deploy, against onnxruntime and OpenVINO (issue 39).

    uv run python bench/transformers.py                              # the issue's eight, seq 128
    uv run python bench/transformers.py --models bert,gpt2 --seq 512
    uv run python bench/transformers.py --models gpt2 --rounds 5 --markdown out.md
    uv run python bench/transformers.py --models gpt2,bert --seq 512 --cpu-time    # a loaded host's view

Models (``nnvm_testing.frontend_onnx.torch_models.hf_model_path``: the ``transformers`` library's own
modules at their default configs, seeded random weights, exported by PyTorch's default exporter with fixed
shapes and cached under ``$NNVM_CACHE_DIR/models``): GPT-2 small with its LM head (logits), BERT-base and
DistilBERT-base (``last_hidden_state``, token ids and an attention mask of ones), ViT-B/16, Swin-T, ConvNeXt-T
and CLIP ViT-B/32's vision tower (224x224 images: ``--seq`` does not apply), T5-small's encoder.

Per model, in one child process (so the thread count holds from the start), all with ``--threads``
threads, float32, on the same seeded input: nnvm untuned (``tuning_log=False``) and as a user gets it
(``tuning_log=None``: the shipped logs, docs/tuning.md), onnxruntime with its default settings (spinning
on), and OpenVINO (CPU plugin, ``INFERENCE_NUM_THREADS``, one stream, the latency hint, f32 inference
precision; each read back from the compiled model and printed). Outputs are compared with onnxruntime's
(max absolute and relative error; GPT-2: the greedy token at every position). Then each runtime is timed
in blocks of its own, the blocks alternated ``--rounds`` times, and the steady rounds kept as
``bench/zoo.py`` does (its ``steady_rounds``): the machine is shared, so a slow period hits all alike.

On a loaded host (more runnable threads than cores) a run's wall time is mostly the time its threads
waited for a core, and a team of threads waits for its slowest member. ``--cpu-time`` adds what each
runtime's runs cost the process in CPU time (``time.process_time``, every thread's), the least per run
over ``--rounds`` alternated blocks: a loaded host's view of the work done (time spent waiting on
memory counts, time spent off a core does not; a team's spin waits count). onnxruntime is timed there
in a session of its own without spinning, whose workers would otherwise burn CPU time after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import zoo  # bench/zoo.py: the timing rules are the zoo's, not a copy

TITLES = {"gpt2": "GPT-2 small (LM head)", "bert": "BERT-base", "distilbert": "DistilBERT-base",
          "vit": "ViT-B/16", "swin": "Swin-T", "convnext": "ConvNeXt-T", "t5-encoder": "T5-small encoder",
          "clip-vision": "CLIP ViT-B/32 (vision)"}  # issue 39's default-size set
RUNTIMES = ("nnvm_untuned", "nnvm", "ort", "openvino")


def openvino_model(path: str, threads: int):
    """(infer function, the settings read back) of the OpenVINO CPU plugin for ``path``."""
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
              "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(path, "CPU", config)
    request = compiled.create_infer_request()
    settings = {k: str(compiled.get_property(k)) for k in config}
    settings["version"] = ov.get_version()
    return request, settings


def cpu_times(fns: list, rounds: int, block_seconds: float) -> list[float]:
    """The least CPU milliseconds per run (``time.process_time``) of each callable over ``rounds``
    blocks, alternated, each of about ``block_seconds`` of CPU time after one untimed run."""
    import time

    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            fn()
            start, runs = time.process_time(), 0
            while True:
                fn()
                runs += 1
                spent = time.process_time() - start
                if spent >= block_seconds or runs >= 50:
                    break
            best[k] = min(best[k], 1e3 * spent / runs)
    return best


def measure(name: str, path: str, threads: int, repeat: int, rounds: int, block_seconds: float,
            kernels: int, cpu: bool = False) -> dict:
    """Everything for one model (in the child process; see the module docstring)."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np

    import nnvm
    from nnvm.bench import onnxruntime_session, profile

    load = os.getloadavg()[0]
    untuned = nnvm.compile(path, target="llvm", tuning_log=False)
    shipped = nnvm.compile(path, target="llvm")
    sess, ort_version = onnxruntime_session(path, threads, spinning=True)
    request, ov_settings = openvino_model(path, threads)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 1000, shape).astype(np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones(shape, np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    want = sess.run(None, feeds)[0]
    outs = {"nnvm_untuned": untuned.run(**feeds)[0], "nnvm": shipped.run(**feeds)[0],
            "openvino": next(iter(request.infer(feeds).values()))}
    result = {"ort_version": ort_version, "openvino": ov_settings, "threads": threads}
    scale = float(np.abs(want).max())
    for who, got in outs.items():
        err = float(np.abs(got - want).max())
        result[f"{who}_max_abs_err"], result[f"{who}_max_rel_err"] = err, err / scale
        if name == "gpt2":
            result[f"{who}_same_tokens"] = bool((got.argmax(-1) == want.argmax(-1)).all())

    fns = [lambda: untuned.run(**feeds), lambda: shipped.run(**feeds), lambda: sess.run(None, feeds),
           lambda: request.infer(feeds)]
    result["repeat"], result["steady_rounds"], times = zoo.steady_medians(fns, repeat, rounds, block_seconds)
    result["load"] = sorted((load, os.getloadavg()[0]))  # one-minute load averages, before and after
    for who, (median, best) in zip(RUNTIMES, times):
        result[f"{who}_ms"], result[f"{who}_best_ms"] = median, best
    if cpu:
        quiet, _ = onnxruntime_session(path, threads)  # not spinning: see the module docstring
        fns[2] = lambda: quiet.run(None, feeds)
        for who, ms in zip(RUNTIMES, cpu_times(fns, rounds, block_seconds)):
            result[f"{who}_cpu_ms"] = ms
    if kernels:
        rows = profile(untuned, feeds, 3)
        result["slowest_kernels"] = [{k: r[k] for k in ("group", "ms", "share", "gflops")}
                                     for r in rows[:kernels]]
    return result


def markdown(rows: dict, seq: int, threads: int) -> list[str]:
    """The table: medians of the steady blocks, their ratios, and the ratios of each runtime's best run
    (on a loaded host the medians say more about the load than about the code)."""
    lines = [f"| model (seq {seq}, batch 1, {threads} threads) | nnvm untuned ms | nnvm ms | onnxruntime ms "
             "| OpenVINO ms | untuned / ORT | nnvm / ORT | nnvm / OpenVINO | best runs: untuned / ORT, "
             "nnvm / ORT, nnvm / OpenVINO | max rel err (nnvm, OpenVINO) | load |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {TITLES[name]} | {r['error']} |")
            continue
        tokens = " (same greedy tokens)" if r.get("nnvm_same_tokens") else ""
        ms = [r[f"{who}_ms"] for who in RUNTIMES]
        best = [r[f"{who}_best_ms"] for who in RUNTIMES]
        lines.append(f"| {TITLES[name]} | " + " | ".join(f"{v:.1f}" for v in ms) + " | "
                     f"{ms[0] / ms[2]:.2f} | {ms[1] / ms[2]:.2f} | {ms[1] / ms[3]:.2f} | "
                     f"{best[0] / best[2]:.2f}, {best[1] / best[2]:.2f}, {best[1] / best[3]:.2f} | "
                     f"{r['nnvm_max_rel_err']:.1e}, {r['openvino_max_rel_err']:.1e}{tokens} | "
                     f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    ok = [r for r in rows.values() if "error" not in r]
    if ok:
        def mean(who, peer):
            return zoo.geomean([r[f"{who}_ms"] / r[f"{peer}_ms"] for r in ok])

        lines += ["", f"Geomean nnvm / onnxruntime {mean('nnvm', 'ort'):.2f} (untuned "
                      f"{mean('nnvm_untuned', 'ort'):.2f}), nnvm / OpenVINO {mean('nnvm', 'openvino'):.2f}."]
    cpu = [(name, r) for name, r in rows.items() if "nnvm_cpu_ms" in r]
    if cpu:
        lines += ["", f"| model (seq {seq}), CPU ms per run (`--cpu-time`) | nnvm untuned | nnvm "
                      "| onnxruntime | OpenVINO | nnvm / ORT | nnvm / OpenVINO |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, r in cpu:
            ms = [r[f"{who}_cpu_ms"] for who in RUNTIMES]
            lines.append(f"| {TITLES[name]} | " + " | ".join(f"{v:.1f}" for v in ms)
                         + f" | {ms[1] / ms[2]:.2f} | {ms[1] / ms[3]:.2f} |")
        ort = zoo.geomean([r["nnvm_cpu_ms"] / r["ort_cpu_ms"] for _, r in cpu])
        ov = zoo.geomean([r["nnvm_cpu_ms"] / r["openvino_cpu_ms"] for _, r in cpu])
        lines += ["", f"Geomean of the CPU times: nnvm / onnxruntime {ort:.2f}, nnvm / OpenVINO {ov:.2f}."]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(TITLES), help=f"comma-separated, of {','.join(TITLES)}")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=10, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each runtime, alternated")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="aim of one block's length")
    parser.add_argument("--kernels", type=int, default=5, help="slowest nnvm kernels listed per model")
    parser.add_argument("--cpu-time", action="store_true", help="also the CPU time per run of each runtime")
    parser.add_argument("--markdown", help="also write the table to this Markdown file")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, path = args.child
        print(json.dumps(measure(name, path, args.threads, args.repeat, args.rounds, args.block_seconds,
                                 args.kernels, args.cpu_time)))
        return 0
    from nnvm_testing.frontend_onnx import torch_models

    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in TITLES]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join(TITLES)}", file=sys.stderr)
        return 1
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = {}
    for name in names:
        path = torch_models.hf_model_path(name, 1, args.seq)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name, path,
               "--threads", str(args.threads), "--repeat", str(args.repeat), "--rounds", str(args.rounds),
               "--block-seconds", str(args.block_seconds), "--kernels", str(args.kernels),
               *(["--cpu-time"] if args.cpu_time else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
            rows[name] = {"error": lines[-1]}
        else:
            rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = rows[name]
        print(json.dumps({name: {k: v for k, v in r.items() if k != "slowest_kernels"}}), flush=True)
        for k in r.get("slowest_kernels", []):
            print(f"  {k['ms']:7.2f} ms {100 * k['share']:4.1f}% {k['gflops'] or 0:6.1f} GFLOP/s "
                  f"{','.join(k['group'][:3])}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    table = markdown(rows, args.seq, args.threads)
    print("\n".join(table))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
