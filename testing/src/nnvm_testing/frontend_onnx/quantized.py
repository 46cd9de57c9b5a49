"""Quantized ONNX models made by onnxruntime's own quantizer, for tests and benchmarks.

``quantized_model_path("resnet18", "qdq")`` takes the generated float model (``models``), folds its
batch normalization (``quant_pre_process``, as onnxruntime's documentation asks), and quantizes it
with ``quantize_static``: uint8 activations, int8 weights per output channel, 8 seeded calibration
inputs, in the QDQ format (``"qdq"``) or the QOperator format (``"qop"``). The result is written once
under the model cache (``~/.cache/nnvm/models``), never into a checkout.

``dynamic_quantized_model_path("bert")``: a Hugging Face export (``torch_models.hf_model_path``)
quantized by ``quantize_dynamic`` as onnxruntime's documentation shows it for transformers (int8
weights per tensor; ``MatMulInteger`` fed by ``DynamicQuantizeLinear``), and ``text_inputs`` for it.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from nnvm_testing.frontend_onnx import torch_models
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


def onnxruntime_int8(path: str, feeds: dict) -> list:
    """onnxruntime's outputs for ``feeds`` (one thread, CPU): the int8 reference of a quantized model."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def output_step(path: str) -> float:
    """One quantization step of a QDQ model's output: the scale of the DequantizeLinear that makes it."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    out = model.graph.output[0].name
    for node in model.graph.node:
        if out in node.output and node.op_type == "DequantizeLinear" and node.input[1] in inits:
            return float(numpy_helper.to_array(inits[node.input[1]]).max())
    raise ValueError(f"{path}: the output is not made by a DequantizeLinear with a constant scale")


def check_within_one_step(path: str, mod, where: str, seed: int = 1) -> None:
    """``mod`` (a compiled QDQ model) against onnxruntime's int8 output on a seeded calibration-like
    input: at most one output quantization step apart everywhere, and the same top-1."""
    feeds = calibration_inputs(path, count=1, seed=seed)[0]
    (want,) = onnxruntime_int8(path, feeds)
    got = mod.run(**feeds)[0]
    steps = float(np.abs(got - want).max()) / output_step(path)
    assert steps <= 1 + 1e-6, f"{where}: {steps:.2f} output quantization steps from onnxruntime's int8"
    assert got.argmax() == want.argmax(), f"{where}: top-1 differs from onnxruntime's int8"


DYNAMIC_VERSION = "1"  # bump when the recipe below changes


def dynamic_quantized_model_path(name: str = "bert", batch: int = 1, seq: int = 128,
                                 layers: int | None = None, width: int | None = None,
                                 heads: int | None = None, dynamic: bool = False,
                                 exporter: str = "dynamo") -> str:
    """Hugging Face model ``name`` (``torch_models.hf_model_path``: its default config, or a smaller one;
    ``dynamic``: symbolic batch and sequence) quantized by onnxruntime's ``quantize_dynamic`` (int8
    weights), written once to the model cache."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = torch_models.hf_model_path(name, batch, seq, layers=layers, width=width, heads=heads,
                                     dynamic=dynamic, exporter=exporter)
    base = os.path.basename(src)[: -len(".onnx")]
    path = os.path.join(cache_dir(), f"{base}-dynamic-q{DYNAMIC_VERSION}.onnx")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(src):
        os.makedirs(cache_dir(), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".tmp.onnx")
        os.close(fd)
        quantize_dynamic(src, tmp, weight_type=QuantType.QInt8)
        os.replace(tmp, path)  # concurrent workers never read a half-written model
    return path


def text_inputs(path: str, seed: int = 0) -> dict:
    """Seeded token ids (below 1000) and an all-ones attention mask for a text model's int64 inputs."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = (np.ones(shape, np.int64) if "mask" in inp.name
                           else rng.integers(0, 1000, shape).astype(np.int64))
    return feeds


# -- nnvm's own quantizer: inputs and models that make top-1 agreement mean something ------------------
CENTRED_VERSION = "1"  # bump when the images or the centring below change


def generated_images(count: int, seed: int) -> list[np.ndarray]:
    """``count`` seeded (1, 3, 224, 224) float32 images in the range of ImageNet-normalized pixels
    ([0, 1] less the mean, over the std: [-2.12, 2.64]): a sum of one to four oriented gratings (some
    under a Gaussian blob) with per-channel colours, a global gain and offset, and pixel noise, clipped to
    that range. Varied global statistics, as natural images have."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:224, :224] / 224.0
    images = []
    for _ in range(count):
        x = np.zeros((3, 224, 224))
        for _ in range(int(rng.integers(1, 5))):
            freq, angle = np.exp(rng.uniform(0.0, np.log(60.0))), rng.uniform(0.0, np.pi)
            g = np.sin(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + rng.uniform(0.0, 6.3))
            if rng.random() < 0.5:
                cx, cy, r = rng.uniform(0.0, 1.0), rng.uniform(0.0, 1.0), rng.uniform(0.05, 0.5)
                g = g * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r * r))
            x += g[None] * rng.normal(0.0, 1.5, (3, 1, 1))
        x = x * np.exp(rng.normal(0.0, 0.7)) + rng.normal(0.0, 1.0, (3, 1, 1))
        x += rng.uniform(0.0, 0.5) * rng.standard_normal((3, 224, 224))
        images.append(np.clip(x, -2.12, 2.64)[None].astype(np.float32))  # pixels in [0, 1], normalized
    return images


def centred_model_path(name: str, seed: int = 0) -> str:
    """Generated model ``name`` with its classifier's bias re-centred: ``b - mean(logits)`` over 64
    generated images (seed 3), the logits by onnxruntime. With random weights every input's logits are
    dominated by one input-independent vector (ResNet-18: one class is the top-1 of nearly every generated
    image), so top-1 agreement would check little; re-centred, the top-1 follows the input (256 generated
    images reach 54 classes on ResNet-18, 197 on MobileNetV2). Another random-weight model, written once
    to the cache."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    directory = cache_dir()
    path = os.path.join(directory, f"{name}-s{seed}-centred-c{CENTRED_VERSION}.onnx")
    if os.path.exists(path):
        return path
    src = cached_model_path(name, seed=seed)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])
    mean = np.mean([sess.run(None, {"data": x})[0][0] for x in generated_images(64, seed=3)], axis=0)
    model = onnx.load(src)
    (fc,) = [n for n in model.graph.node if n.name == "fc"]
    for t in model.graph.initializer:
        if t.name == fc.input[2]:
            t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) - mean).astype(np.float32), t.name))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp.onnx")
    os.close(fd)
    onnx.save(model, tmp)
    os.replace(tmp, path)
    return path


# -- trained weights: a classifier whose decisions follow its input (``synthetic_task``) ------------------
def trained_model_path(name: str) -> str:
    """``name`` (resnet18, mobilenet_v2) trained on ``synthetic_task`` by ``scripts/train_synthetic.py``
    in the torch venv, exported to ONNX (input ``data``: ``(1, 3, 32, 32)``; output ``logits``), written
    once to the model cache (minutes of CPU: training, not a download)."""
    from pathlib import Path

    from nnvm_testing.frontend_onnx import synthetic_task, torch_models

    script = torch_models.SCRIPTS / "train_synthetic.py"
    return torch_models._exported(torch_models.torch_python(), [script, Path(synthetic_task.__file__)],
                                  f"trained_{name}", [name], f"{name} trained on the synthetic task",
                                  timeout=4 * 3600)  # training: 38 min for ResNet-18 at load 15


def task_images(count: int, seed: int) -> list[np.ndarray]:
    """``count`` seeded images of the synthetic task, each ``(1, 3, 32, 32)``: the trained models' inputs."""
    from nnvm_testing.frontend_onnx import synthetic_task

    images, _ = synthetic_task.labelled_images(count, seed)
    return [x[None] for x in images]
