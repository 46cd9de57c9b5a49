"""ResNet-18 and MobileNetV2 (torchvision's layout, random weights and BatchNorm statistics) converted by
coremltools to a NeuralNetwork ``.mlmodel`` and to ML Program ``.mlpackage``s, compiled for ``llvm`` and
compared with PyTorch's output. Float32 forms must match to 1e-4 of the output's range; the default
float16 ML Program (float16 weights) to 1e-2."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing.frontend_coreml.nets import coreml_nets
from nnvm_testing.venvs import pytest_venv

TOLERANCE = {"nn.mlmodel": 1e-4, "fp32.mlpackage": 1e-4, "fp16.mlpackage": 1e-2}


@pytest.fixture(scope="session")
def nets():
    return pytest_venv(coreml_nets)


@pytest.mark.parametrize("form", sorted(TOLERANCE))
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_net_matches_pytorch(nets, name, form):
    x = np.load(nets / f"{name}.input.npy")
    expected = np.load(nets / f"{name}.output.npy")
    mod = nnvm.compile(str(nets / f"{name}.{form}"), target="llvm")
    (y,) = mod.run(x)
    assert y.shape == expected.shape and y.dtype == np.float32
    err = np.abs(y - expected).max() / np.abs(expected).max()
    assert err < TOLERANCE[form], f"{name} {form}: max error {err:.2e} of the output's range"
