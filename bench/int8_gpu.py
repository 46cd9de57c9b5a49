"""QDQ int8 models on the GPU targets that run here (``opencl`` on PoCL, ``webgpu`` on lavapipe), issue 40.

    uv run python bench/int8_gpu.py                                  # resnet18, mobilenet_v2 on both
    uv run python bench/int8_gpu.py --models resnet18 --targets opencl --rounds 2

Per model and target, in one process, on the same seeded input: nnvm's int8 module of the QDQ file
(``quantized_model_path(name, "qdq")``, onnxruntime's quantizer's output) with the GPU block schedules
as they are (qconv2d/qdense tiled through shared memory like conv2d/dense), the same with qconv2d/qdense
left to the generic GPU schedule (an A/B switch here, not in the library: what main did before), and
nnvm's float32 module of the float model on the same target. The int8 outputs are compared with
onnxruntime's int8 output in quantization steps of the output (``int8.output_step``). Timing follows
``bench/zoo.py``: blocks alternated ``--rounds`` times, the steady rounds kept, median of block medians.
These devices are CPUs pretending to be GPUs: the numbers say whether int8 costs or saves work in the
generated kernels, not what a GPU would do.
"""

from __future__ import annotations

import argparse
import os
import sys

import int8  # bench/int8.py: output_step
import zoo  # bench/zoo.py: the timing rules

VARIANTS = ("int8_tiled", "int8_generic", "f32")


def _compile_generic(nnvm, path: str, target: str):
    """The int8 module with qconv2d/qdense groups on the generic GPU schedule (main before this branch)."""
    from nnvm.gpu import block_schedules as bs

    saved = bs.CONV_TAGS, bs.DENSE_TAGS
    bs.CONV_TAGS, bs.DENSE_TAGS = ("conv2d",), ("dense",)
    try:
        return nnvm.compile(path, target=target)
    finally:
        bs.CONV_TAGS, bs.DENSE_TAGS = saved


def measure(model: str, target: str, repeat: int, rounds: int, block_seconds: float) -> dict:
    import numpy as np
    import onnxruntime as ort

    import nnvm
    from nnvm_testing.frontend_onnx import models, quantized

    load = os.getloadavg()[0]
    qpath = quantized.quantized_model_path(model, "qdq")
    mods = {"int8_tiled": nnvm.compile(qpath, target=target),
            "int8_generic": _compile_generic(nnvm, qpath, target),
            "f32": nnvm.compile(models.cached_model_path(model), target=target)}
    feeds = quantized.calibration_inputs(qpath, count=1, seed=11)[0]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(qpath, opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    step = int8.output_step(qpath)
    result = {"model": model, "target": target}
    for who in ("int8_tiled", "int8_generic"):
        got = mods[who].run(**feeds)[0]
        result[f"{who}_steps"] = float(np.abs(got - want).max()) / step
        result[f"{who}_top1"] = bool(got.argmax() == want.argmax())
    x = {k: v for k, v in feeds.items()}
    fns = [lambda m=mods[v]: m.run(**x) for v in VARIANTS]
    result["repeat"], result["steady_rounds"], times = zoo.steady_medians(fns, repeat, rounds, block_seconds)
    result["load"] = sorted((load, os.getloadavg()[0]))
    for who, (median, _best) in zip(VARIANTS, times):
        result[f"{who}_ms"] = median
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2", help="comma-separated")
    parser.add_argument("--targets", default="opencl,webgpu", help="comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="most runs in one block")
    parser.add_argument("--rounds", type=int, default=2, help="blocks of each variant, alternated")
    parser.add_argument("--block-seconds", type=float, default=1.0, help="aim of one block's length")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for model in args.models.split(","):
        for target in args.targets.split(","):
            r = measure(model, target, args.repeat, args.rounds, args.block_seconds)
            print(r, flush=True)
            rows.append(r)
    print("\nbatch 1; median of block medians in ms; errors against onnxruntime int8 in output steps")
    print("| model | target | int8 tiled | int8 generic (main) | float32 | tiled / generic | tiled / float32 "
          "| err tiled (steps) | err generic (steps) | top-1 same | load (1-min, before/after) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['target']} | {r['int8_tiled_ms']:.0f} | {r['int8_generic_ms']:.0f} "
              f"| {r['f32_ms']:.0f} | {r['int8_tiled_ms'] / r['int8_generic_ms']:.2f}x "
              f"| {r['int8_tiled_ms'] / r['f32_ms']:.2f}x | {r['int8_tiled_steps']:.2f} "
              f"| {r['int8_generic_steps']:.2f} | {r['int8_tiled_top1'] and r['int8_generic_top1']} "
              f"| {r['load'][0]:.1f} / {r['load'][1]:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
