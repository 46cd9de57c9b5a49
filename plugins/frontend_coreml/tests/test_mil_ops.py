"""One-op ML Programs built with coremltools' MIL builder, compiled for llvm and compared with numpy
implementations of each op's documented semantics (``nnvm_testing.frontend_coreml.ops_ref``)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing.frontend_coreml.nets import coreml_ops
from nnvm_testing.frontend_coreml.ops_ref import CASES, ios18_reference, reference
from nnvm_testing.venvs import pytest_venv


@pytest.fixture(scope="session")
def ops_dir():
    return pytest_venv(coreml_ops)


@pytest.mark.parametrize("case", CASES)
def test_mil_op_matches_numpy(ops_dir, case):
    x = np.random.default_rng(2).standard_normal((1, 3, 7, 8)).astype(np.float32)
    (y,) = nnvm.compile(str(ops_dir / f"{case}.mlpackage"), target="llvm").run(x)
    np.testing.assert_allclose(y, reference(case, x), rtol=1e-5, atol=1e-5)


def test_ios18_weight_decompression(ops_dir):
    """constexpr_blockwise_shift_scale and the iOS18 constexpr_lut_to_dense (per-block LUTs, uint2)."""
    x = np.random.default_rng(4).standard_normal((2, 8)).astype(np.float32)
    (y,) = nnvm.compile(str(ops_dir / "ios18_compression.mlpackage"), target="llvm").run(x)
    np.testing.assert_allclose(y, ios18_reference(x), rtol=1e-6, atol=1e-6)
