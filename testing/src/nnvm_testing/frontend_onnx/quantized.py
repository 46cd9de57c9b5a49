"""Quantized ONNX models made by onnxruntime's own quantizer, for tests and benchmarks.

``quantized_model_path("resnet18", "qdq")`` takes the generated float model (``models``), folds its
batch normalization (``quant_pre_process``, as onnxruntime's documentation asks), and quantizes it
with ``quantize_static``: uint8 activations, int8 weights per output channel, 8 seeded calibration
inputs, in the QDQ format (``"qdq"``) or the QOperator format (``"qop"``). The result is written once
under the model cache (``~/.cache/nnvm/models``), never into a checkout.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from nnvm_testing.frontend_onnx.models import cache_dir, cached_model_path

QUANTIZED_VERSION = "1"  # bump when the recipe below changes
CALIBRATION_INPUTS = 8


def calibration_inputs(path: str, count: int = CALIBRATION_INPUTS, seed: int = 0) -> list[dict]:
    """``count`` seeded standard-normal feeds for the model's graph inputs."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(count):
        feed = {}
        for inp in model.graph.input:
            if inp.name not in inits:
                shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
                feed[inp.name] = rng.standard_normal(shape).astype(np.float32)
        feeds.append(feed)
    return feeds


def quantize_file(src: str, dst: str, fmt: str, calibration: list[dict]) -> None:
    """``src`` quantized statically by onnxruntime into ``dst`` (``fmt``: ``qdq`` or ``qop``)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(calibration)

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        pre = os.path.join(tmp, "pre.onnx")
        quant_pre_process(src, pre)
        quant_format = QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator
        quantize_static(pre, dst, Reader(), quant_format=quant_format, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def quantized_model_path(name: str, fmt: str = "qdq", seed: int = 0) -> str:
    """Path of generated model ``name`` quantized by onnxruntime in format ``fmt``, written once."""
    if fmt not in ("qdq", "qop"):
        raise ValueError(f"format {fmt!r}: expected 'qdq' or 'qop'")
    directory = cache_dir()
    path = os.path.join(directory, f"{name}-s{seed}-{fmt}-q{QUANTIZED_VERSION}.onnx")
    if not os.path.exists(path):
        src = cached_model_path(name, seed=seed)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp.onnx")
        os.close(fd)
        quantize_file(src, tmp, fmt, calibration_inputs(src))
        os.replace(tmp, path)  # concurrent workers never read a half-written model
    return path
