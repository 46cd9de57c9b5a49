"""nnvm's own quantizer (``nnvm.quantize``) against onnxruntime's ``quantize_static`` (issue 40).

    uv run python bench/quantize.py                       # ResNet-18 and MobileNetV2, 256 inputs, 32 calib
    uv run python bench/quantize.py --models resnet18 --inputs 64 --methods minmax

For each generated zoo model (seeded random weights, ``nnvm_testing.frontend_onnx.models``), in two forms:

- ``zoo``: the model as the tests build it. With random weights its logits are dominated by one
  input-independent vector, so nearly every input has the same top-1 class (the table says how many
  distinct classes the inputs reach): agreement there checks little.
- ``centred``: the same network with the classifier's bias re-centred on the mean logits of 64 other
  generated images (``quantized.centred_model_path``); the top-1 then follows the input.
- ``trained``: the same architecture trained on a ten-class synthetic task (``synthetic_task``,
  ``scripts/train_synthetic.py``, 32 x 32 inputs): decisions with a margin, as a deployed classifier's;
  its inputs are the task's images (seed 1, calibration seed 2).

Inputs: ``quantized.generated_images`` (gratings and blobs with varied colour, gain and offset, in the
range of ImageNet-normalized pixels): ``--calibration`` images with seed 2 to calibrate, ``--inputs``
with seed 1 to compare. The reference is the float model run by onnxruntime. nnvm's QDQ file is run by
onnxruntime and by nnvm's own compile of it, and once more without bias correction (A/B); the peer is
``quantize_static`` (QDQ, per-channel int8 weights, uint8 activations, the same calibration images and
the matching calibration method; its ``quant_pre_process`` first, as its documentation asks; the Q/DQ
pair it puts on the logits removed, since nnvm.quantize leaves graph outputs float) run by onnxruntime.
``--openvino``: nnvm.quantize's file run by OpenVINO too (printed as a line of its own).
Agreement: the fraction of inputs whose top-1 class is the float model's. Quantizing time is each
quantizer's, one after the other (both calibrate by running the model: nnvm with nnvm, onnxruntime with
onnxruntime).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter

import numpy as np

PEER_METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}


def ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def logits(run, images) -> np.ndarray:
    return np.stack([run(x).reshape(-1) for x in images])


def peer_quantize(path: str, out: str, calibration: list, method: str) -> None:
    """onnxruntime's ``quantize_static`` with ``method``'s calibration."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"data": x} for x in calibration])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(path, pre)
        quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, PEER_METHODS[method]))


def openvino_request(path: str, threads: int):
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    return ov.Core().compile_model(path, "CPU", config).create_infer_request()


def float_outputs(path: str) -> None:
    """Drop the Q -> DQ pair that ``quantize_static`` puts on each graph output, in place: the outputs
    then come float from the last quantized node, as nnvm.quantize writes them (uint8 logits would add
    ties and a rounding of their own, which is not what is compared here)."""
    import onnx

    model = onnx.load(path)
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    drop = set()
    for out in g.output:
        dq = producer.get(out.name)
        q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        if q is None or q.op_type != "QuantizeLinear":
            continue
        for n in g.node:
            for k, o in enumerate(n.output):
                if o == q.input[0]:
                    n.output[k] = out.name
        drop |= {dq.name, q.name}
    keep = [n for n in g.node if n.name not in drop]
    del g.node[:]
    g.node.extend(keep)
    onnx.save(model, path)


def agreement(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(top-1 agreement, max |got - want| over max |want|)."""
    return (float(np.mean(got.argmax(1) == want.argmax(1))),
            float(np.abs(got - want).max() / np.abs(want).max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--forms", default="trained,centred,zoo")
    parser.add_argument("--methods", default="minmax,percentile,entropy")
    parser.add_argument("--inputs", type=int, default=256)
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-peer", action="store_true", help="skip onnxruntime's quantize_static")
    parser.add_argument("--openvino", action="store_true",
                        help="also run nnvm.quantize's file in OpenVINO (CPU plugin, its default precision)")
    args = parser.parse_args()
    os.environ.setdefault("NNVM_NUM_THREADS", str(args.threads))

    import onnx

    import nnvm
    from nnvm_frontend_onnx.quantizer import quantize_onnx  # the bias-correction A/B switch lives there
    from nnvm_testing.frontend_onnx import models, quantized

    generated = (quantized.generated_images(args.inputs, seed=1),
                 quantized.generated_images(args.calibration, seed=2))
    task = (quantized.task_images(args.inputs, seed=1), quantized.task_images(args.calibration, seed=2))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.inputs} inputs, {args.calibration} "
          f"calibration inputs, {args.threads} threads", flush=True)
    rows = []
    for name in args.models.split(","):
        for form in args.forms.split(","):
            images, calibration = task if form == "trained" else generated
            path = {"centred": quantized.centred_model_path, "trained": quantized.trained_model_path,
                    "zoo": models.cached_model_path}[form](name)
            sess = ort_session(path, args.threads)
            want = logits(lambda x, s=sess: s.run(None, {"data": x})[0], images)
            top = Counter(want.argmax(1).tolist())
            classes = f"{len(top)} ({top.most_common(1)[0][1] / len(images):.0%})"
            # the ceiling of any 8-bit quantizer: the float model on the inputs rounded to uint8 alone
            lo = min(0.0, *(float(x.min()) for x in calibration))
            step = (max(0.0, *(float(x.max()) for x in calibration)) - lo) / 255
            rounded = [(np.round((x - lo) / step).clip(0, 255) * step + lo).astype(np.float32)
                       for x in images]
            ceiling = agreement(logits(lambda x, s=sess: s.run(None, {"data": x})[0], rounded), want)[0]
            print(f"{name} {form}: distinct top-1 {classes}; float model on uint8-rounded inputs: top-1 "
                  f"agreement {ceiling:.1%}", flush=True)
            for method in args.methods.split(","):
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                q = nnvm.quantize(path, calibration, method=method)
                ours_s = time.perf_counter() - t0
                with tempfile.TemporaryDirectory() as tmp:
                    qpath = os.path.join(tmp, "q.onnx")
                    onnx.save(q, qpath)
                    s = ort_session(qpath, args.threads)
                    in_ort = agreement(logits(lambda x, s=s: s.run(None, {"data": x})[0], images), want)
                    mod = nnvm.compile(qpath, target="llvm")
                    in_nnvm = agreement(logits(lambda x, m=mod: m.run(x)[0], images), want)
                    if args.openvino:
                        request = openvino_request(qpath, args.threads)
                        in_ov = agreement(logits(lambda x, r=request: r.infer({0: x})[0], images), want)
                        print(f"{name} {form} {method}: nnvm.quantize's file run by OpenVINO: agreement "
                              f"{in_ov[0]:.1%}, max rel err {in_ov[1]:.3f}", flush=True)
                    plain = quantize_onnx(path, calibration, method=method, bias_correction=False)
                    s = ort_session(plain, args.threads)
                    uncorrected = agreement(logits(lambda x, s=s: s.run(None, {"data": x})[0], images), want)
                    peer, peer_s = (None, None), None
                    if not args.no_peer:
                        ppath = os.path.join(tmp, "peer.onnx")
                        t0 = time.perf_counter()
                        peer_quantize(path, ppath, calibration, method)
                        peer_s = time.perf_counter() - t0
                        float_outputs(ppath)
                        p = ort_session(ppath, args.threads)
                        peer = agreement(logits(lambda x, p=p: p.run(None, {"data": x})[0], images), want)
                rows.append((name, form, classes, ceiling, method, in_ort, in_nnvm, uncorrected, peer, ours_s,
                             peer_s, load))
                print(_row(rows[-1]), flush=True)
    print()
    print("| model | form | distinct top-1 (most common) | float on uint8 inputs | method | nnvm.quantize, "
          "run by onnxruntime: agreement / max rel err | same file run by nnvm | without bias correction | "
          "quantize_static (peer), float outputs | ratio of agreements (ours/peer) | quantize s (ours / "
          "peer) | load |")
    print("| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(_row(row))


def _row(row) -> str:
    name, form, classes, ceiling, method, in_ort, in_nnvm, uncorrected, peer, ours_s, peer_s, load = row
    ratio = f"{in_ort[0] / peer[0]:.2f}" if peer[0] else "-"
    peer_text = f"{peer[0]:.1%} / {peer[1]:.3f}" if peer[0] is not None else "-"
    peer_time = f"{peer_s:.1f}" if peer_s is not None else "-"
    return (f"| {name} | {form} | {classes} | {ceiling:.1%} | {method} | {in_ort[0]:.1%} / {in_ort[1]:.3f} | "
            f"{in_nnvm[0]:.1%} / {in_nnvm[1]:.3f} | {uncorrected[0]:.1%} / {uncorrected[1]:.3f} | "
            f"{peer_text} | {ratio} | {ours_s:.1f} / {peer_time} | "
            f"{load:.2f} |")


if __name__ == "__main__":
    main()
