"""Whole models against onnxruntime: ResNet-18, MobileNetV2, SqueezeNet 1.1 and DenseNet-121.

The models are the seeded-random-weight ONNX builds of ``nnvm_testing.frontend_onnx.models`` (written
once under ``$NNVM_CACHE_DIR/models``), compiled at the default ``opt_level=3`` so the whole pipeline
(batch norm folded into convolutions, fusion, the target's schedules) is what gets checked. The
criterion is the issue's: ``max |nnvm - onnxruntime| / max |onnxruntime| < 1e-4`` over the output.
"""

from __future__ import annotations

import time

import numpy as np

from nnvm_conformance.runner import FAIL, MODEL_RTOL, PASS, UNSUPPORTED, Result, is_unsupported

MODELS = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2", "squeezenet1_1": "SqueezeNet 1.1",
          "densenet121": "DenseNet-121"}


def _onnxruntime(path: str, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"data": x})[0]


def run_model(name: str, target: str) -> Result:
    """Model ``name`` (a key of ``MODELS``) compiled for ``target`` against onnxruntime on one input."""
    import nnvm
    from nnvm_testing.frontend_onnx.models import cached_model_path

    start = time.perf_counter()
    path = cached_model_path(name)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    want = _onnxruntime(path, x)
    shape = f"data float32{list(x.shape)}"
    try:
        (got,) = nnvm.compile(path, target=target).run(data=x)
    except Exception as exc:  # noqa: BLE001 - reported as the model's outcome
        status = UNSUPPORTED if is_unsupported(exc) else FAIL
        return Result(name, target, status, None, 1, shape, f"{type(exc).__name__}: {exc}".splitlines()[0],
                      time.perf_counter() - start, kind="model")
    seconds = time.perf_counter() - start
    if got.shape != want.shape:
        message = f"output shape {got.shape}, onnxruntime {want.shape}"
        return Result(name, target, FAIL, None, 1, shape, message, seconds, kind="model")
    err = float(np.abs(got.astype(np.float64) - want).max() / max(float(np.abs(want).max()), 1e-30))
    if not err < MODEL_RTOL:
        return Result(name, target, FAIL, err, 1, shape, f"relative error {err:.3g} >= {MODEL_RTOL:g}",
                      seconds, kind="model")
    return Result(name, target, PASS, err, 1, "", "", seconds, kind="model")
