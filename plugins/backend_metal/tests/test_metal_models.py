"""Models compiled for ``metal`` (natively on a Mac, else on the CPU runner) against onnxruntime: a
transformer encoder, a depthwise net and a GRU (shapes the conformance CNNs lack; the builders are the
ONNX frontend's testing.shape_models), and the export to one file that a fresh process loads and runs."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm_backend_metal.native import open_device
from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS, shape_model_reference


@pytest.mark.parametrize("name", sorted(SHAPE_MODELS))
def test_model_of_another_shape_matches_onnxruntime(name, tmp_path):
    path, x, want = shape_model_reference(name, tmp_path)
    got = nnvm.compile(path, target="metal").run(x)[0]
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    assert err < 1e-4, f"{name} on metal: max relative error {err:.2e} against onnxruntime"


def test_export_is_one_file_that_a_fresh_process_runs(tmp_path):
    path, x, want = shape_model_reference("depthwise_net", tmp_path)
    mod = nnvm.compile(path, target="metal")
    assert "kernel void" in mod.library.source() and "threadgroup" in mod.library.source()
    out = tmp_path / "dw.nnvm"
    mod.export(str(out))
    with zipfile.ZipFile(out) as z:
        assert {"manifest.json", "files/kernels.metal", "blobs/graph", "blobs/params"} <= set(z.namelist())
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, nnvm; m = nnvm.load(sys.argv[1]); "
            "np.save(sys.argv[3], m.run(np.load(sys.argv[2]))[0]); m.run(np.load(sys.argv[2]))")
    proc = subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if open_device() is None:  # said once, though the module ran twice
        assert proc.stderr.count("running the Metal kernels on the CPU") == 1
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
