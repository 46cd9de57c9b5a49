"""The suite's models are the architectures they are named after, seeded, and readable by onnxruntime.

Parameter counts (weights and biases, batch-norm scale and shift; not the running statistics) are
torchvision's for the same architectures, which pins every layer's shape without downloading anything.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm_testing.frontend_onnx import models

TORCHVISION_PARAMETERS = {"resnet18": 11_689_512, "resnet50": 25_557_032, "mobilenet_v2": 3_504_872,
                          "squeezenet1_1": 1_235_496, "densenet121": 7_978_856}
NOT_PARAMETERS = ("running_mean", "running_var", "relu6.min", "relu6.max")


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMETERS))
def test_reference_model_matches_torchvision_and_runs(name):
    model = models.BUILDERS[name](seed=0)
    count = sum(int(np.prod(t.dims)) for t in model.graph.initializer if not t.name.endswith(NOT_PARAMETERS))
    assert count == TORCHVISION_PARAMETERS[name], f"{name}: {count} parameters"
    if name in ("squeezenet1_1", "densenet121"):  # ResNet-18 and MobileNetV2 run in tests/test_models.py
        assert model.SerializeToString() == models.BUILDERS[name](seed=0).SerializeToString()
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        (y,) = session.run(None, {"data": x})
        assert y.shape == (1, 1000) and np.isfinite(y).all() and y.std() > 0
