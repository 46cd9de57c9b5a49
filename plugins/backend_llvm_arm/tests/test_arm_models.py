"""ResNet-18, MobileNetV2 and SqueezeNet 1.1 compiled for aarch64 and armv7 match onnxruntime on x86.

Full size (batch 1, 3x224x224, seeded random weights from the ONNX frontend's model builders), each
run once under qemu-user through ``mod.run``. Emulated floating point is slow: ResNet-18 costs about
30 s of CPU per target, so each test is one model on one target and they spread over test workers.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing.frontend_onnx.models import cached_model_path

MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_1")


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_model_matches_onnxruntime(model, arm_target, rel_error, capfd):
    import onnxruntime as ort

    path = cached_model_path(model)
    mod = nnvm.compile(path, target=arm_target)
    x = np.random.default_rng(0).standard_normal(mod.plan["inputs"][0]["shape"]).astype(np.float32)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {session.get_inputs()[0].name: x})
    (got,) = mod.run(x)
    assert got.shape == want.shape, f"{model} on {arm_target}: shape {got.shape}, expected {want.shape}"
    err = rel_error(got, want)
    assert err < 1e-4, f"{model} on {arm_target}: relative error {err:.3g} against onnxruntime"
    if not mod.library.runs_in_process():
        note = capfd.readouterr().err
        assert note.count("qemu") == 1, f"expected one line about qemu on stderr, got {note!r}"
