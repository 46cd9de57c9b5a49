"""Int8 ResNet-18, ResNet-50, MobileNetV2 and BERT-base against onnxruntime int8 and OpenVINO int8 (issue 40).

    uv run python bench/int8.py                     # all four, batch 1, 2 threads
    uv run python bench/int8.py --models resnet18 --rounds 5 --threads 1
    uv run python bench/int8.py --models bert       # BERT-base, dynamically quantized, 128 tokens

Each model is ``nnvm_testing.frontend_onnx.quantized.quantized_model_path(name, "qdq")``: the generated
network quantized by onnxruntime's ``quantize_static`` (uint8 activations, int8 weights per channel, 8
calibration inputs), cached under ``$NNVM_CACHE_DIR/models``. Per model, in one child process (so the
thread count holds from the start), all with ``--threads`` threads, on the same seeded input: nnvm's
int8 module, nnvm's float32 module of the float model it came from (for scale), onnxruntime on the QDQ
file (its own QDQ fusion makes it int8; default settings, spinning on), and OpenVINO on the QDQ file
(CPU plugin, ``INFERENCE_NUM_THREADS``, one stream, the latency hint, no precision hint: it runs the
quantized operators in int8; the settings read back and printed). The int8 outputs are compared with
onnxruntime's, in quantization steps of the output (the scale of the model's last DequantizeLinear).
Each runtime is timed in blocks of its own, the blocks alternated ``--rounds`` times and the steady
rounds kept as ``bench/zoo.py`` does: the machine is shared, so a slow period hits all alike.

``bert`` is Hugging Face's ``BertModel`` at its default size (seeded random weights, batch 1, 128 tokens,
``scripts/hf_export.py``) quantized by ``quantize_dynamic`` (``quantized.dynamic_quantized_model_path``:
``DynamicQuantizeLinear`` + ``MatMulInteger``); the float module is the export it came from, the input
seeded token ids. Its float output has no quantization step; next to the errors against onnxruntime
it prints onnxruntime's own with its graph optimizations off (``ort_unfused_max_rel_err``): how far
two exact integer pipelines drift apart through twelve layers once float ulps move a rounding.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import zoo  # bench/zoo.py: the timing rules are the zoo's, not a copy

RUNTIMES = ("nnvm_int8", "nnvm_f32", "ort_int8", "openvino_int8")


def openvino_model(path: str, threads: int):
    """(infer request, the settings read back) of the OpenVINO CPU plugin for ``path``."""
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    compiled = core.compile_model(path, "CPU", config)
    settings = {k: str(compiled.get_property(k)) for k in (*config, "INFERENCE_PRECISION_HINT")}
    settings["version"] = ov.get_version()
    return compiled.create_infer_request(), settings


def measure(model: str, threads: int, repeat: int, rounds: int, block_seconds: float) -> dict:
    """Everything, in the child process (see the module docstring)."""
    os.environ["NNVM_NUM_THREADS"] = str(threads)
    import numpy as np

    import nnvm
    from nnvm.bench import onnxruntime_session
    from nnvm_testing.frontend_onnx import models, quantized

    load = os.getloadavg()[0]
    if model == "bert":
        from nnvm_testing.frontend_onnx import torch_models

        qpath, fpath = quantized.dynamic_quantized_model_path("bert"), torch_models.hf_model_path("bert")
        feeds = quantized.text_inputs(qpath, seed=11)
    else:
        qpath, fpath = quantized.quantized_model_path(model, "qdq"), models.cached_model_path(model)
        feeds = quantized.calibration_inputs(qpath, count=1, seed=11)[0]
    int8 = nnvm.compile(qpath, target="llvm")
    f32 = nnvm.compile(fpath, target="llvm")
    sess, ort_version = onnxruntime_session(qpath, threads, spinning=True)
    request, ov_settings = openvino_model(qpath, threads)
    want = sess.run(None, feeds)[0]
    result = {"model": model, "ort_version": ort_version, "openvino": ov_settings, "threads": threads}
    scale = float(np.abs(want).max())
    try:  # one quantization step of the output, where a DequantizeLinear makes it
        step = quantized.output_step(qpath)
    except ValueError:
        step = None
    outs = {"nnvm_int8": int8.run(**feeds)[0], "openvino_int8": next(iter(request.infer(feeds).values()))}
    if model == "bert":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        unfused = ort.InferenceSession(qpath, opts, providers=["CPUExecutionProvider"])
        outs["ort_unfused"] = unfused.run(None, feeds)[0]
        del unfused
    for who, got in outs.items():
        result[f"{who}_max_rel_err"] = float(np.abs(got - want).max()) / scale
        result[f"{who}_max_err_steps"] = float(np.abs(got - want).max()) / step if step else None
        result[f"{who}_same_top1"] = bool(got.argmax() == want.argmax())
    fns = [lambda: int8.run(**feeds), lambda: f32.run(**feeds), lambda: sess.run(None, feeds),
           lambda: request.infer(feeds)]
    result["repeat"], result["steady_rounds"], times = zoo.steady_medians(fns, repeat, rounds, block_seconds)
    result["load"] = sorted((load, os.getloadavg()[0]))  # one-minute load averages, before and after
    for who, (median, best) in zip(RUNTIMES, times):
        result[f"{who}_ms"], result[f"{who}_best_ms"] = median, best
    result["vs_ort_int8"] = result["nnvm_int8_ms"] / result["ort_int8_ms"]
    result["vs_openvino_int8"] = result["nnvm_int8_ms"] / result["openvino_int8_ms"]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert", help="comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each runtime, alternated")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="aim of one block's length")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.models, args.threads, args.repeat, args.rounds, args.block_seconds)))
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for model in args.models.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--models", model,
               "--threads", str(args.threads), "--repeat", str(args.repeat), "--rounds", str(args.rounds),
               "--block-seconds", str(args.block_seconds)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()] or ["no output"]
            print(f"{model}: the measurement failed: {lines[-1]}", file=sys.stderr)
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps(result, indent=1), flush=True)
        results.append(result)
    print(f"\nbatch 1, {args.threads} threads; median of block medians (best run) in ms")
    print("| model | nnvm int8 | onnxruntime int8 | OpenVINO int8 | nnvm / ort | nnvm / OpenVINO "
          "| nnvm float32 | max err vs ort (steps; rel) | same top-1 | load (1-min, before/after) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        steps = r["nnvm_int8_max_err_steps"]
        print(f"| {r['model']} | {r['nnvm_int8_ms']:.2f} ({r['nnvm_int8_best_ms']:.2f}) "
              f"| {r['ort_int8_ms']:.2f} ({r['ort_int8_best_ms']:.2f}) "
              f"| {r['openvino_int8_ms']:.2f} ({r['openvino_int8_best_ms']:.2f}) "
              f"| {r['vs_ort_int8']:.2f}x ({r['nnvm_int8_best_ms'] / r['ort_int8_best_ms']:.2f}x) "
              f"| {r['vs_openvino_int8']:.2f}x ({r['nnvm_int8_best_ms'] / r['openvino_int8_best_ms']:.2f}x) "
              f"| {r['nnvm_f32_ms']:.2f} | {'-' if steps is None else f'{steps:.2f}'}; "
              f"{r['nnvm_int8_max_rel_err']:.1e} "
              f"| {r['nnvm_int8_same_top1']} | {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
