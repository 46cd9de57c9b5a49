"""The nine gluon model-zoo nets, exported by MXNet 1.9.1 with random weights and random BatchNorm
statistics, compiled for ``llvm`` from their ``-symbol.json`` (the ``.params`` found beside it) and
compared with MXNet's own output for the same seeded input (max relative error 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing import frontend_mxnet as testing
from nnvm_testing.venvs import pytest_venv


@pytest.mark.parametrize("name", testing.ZOO)
def test_zoo_net_compiles_from_symbol_json_and_matches_mxnet(name):
    model = pytest_venv(testing.zoo_models, [name])[name]
    x, want = np.load(model.input), np.load(model.output)
    mod = nnvm.compile(str(model.symbol), target="llvm", shapes={"data": x.shape})
    (got,) = mod.run(x)
    assert got.shape == want.shape, f"{name}: output shape {got.shape}, MXNet {want.shape}"
    err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{name} output {want.shape}: max relative error {err:.2e} vs MXNet 1.9.1"
