"""One-layer NeuralNetwork models built with coremltools' NeuralNetworkBuilder, compiled for llvm and
compared with numpy implementations of each layer's documented semantics (``ops_ref.nn_reference``)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing.frontend_coreml.nets import coreml_nn_ops
from nnvm_testing.frontend_coreml.ops_ref import NN_CASES, nn_reference
from nnvm_testing.venvs import pytest_venv


@pytest.fixture(scope="session")
def nn_dir():
    return pytest_venv(coreml_nn_ops)


@pytest.mark.parametrize("case", NN_CASES)
def test_nn_layer_matches_numpy(nn_dir, case):
    x = np.random.default_rng(3).standard_normal((1, 3, 7, 8)).astype(np.float32)
    (y,) = nnvm.compile(str(nn_dir / f"{case}.mlmodel"), target="llvm").run(x)
    np.testing.assert_allclose(y, nn_reference(case, x), rtol=1e-5, atol=1e-5)
