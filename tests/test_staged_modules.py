"""A model with a data-dependent node (``nnvm.staged``) end to end: ``nnvm run`` on the ONNX file and the
same compile on a GPU target (PoCL's CPU device), each against onnxruntime (the export of such a model:
tests/test_staged_export.py)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx

import nnvm
from nnvm_testing.frontend_onnx.check import run_onnxruntime
from nnvm_testing.frontend_onnx.shape_models import mask_select


def _feeds(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"boxes": rng.standard_normal((n, 4)).astype(np.float32),
            "scores": rng.random(n).astype(np.float32)}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_nnvm_run_on_a_model_with_nonzero(tmp_path):
    path = str(tmp_path / "select.onnx")
    onnx.save(mask_select(), path)
    feeds = _feeds(23, 0)
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    proc = _cli("run", path, *args, "--output", str(tmp_path / "out.npz"))
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out.npz")
    for name, want in zip(("scaled", "area", "nz"), run_onnxruntime(mask_select(), feeds)):
        assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
        np.testing.assert_allclose(got[name], want, rtol=1e-5, err_msg=name)


def test_a_staged_model_on_opencl_matches_onnxruntime():
    """The stages are symbolic modules of the GPU target (kernels over the dims, grids per binding)."""
    model = mask_select()
    mod = nnvm.compile(model, target="opencl -device=cpu", bounds={"count": (1, 64)}, tuning_log=False)
    for n, seed in [(5, 1), (40, 3), (40, 4)]:
        feeds = _feeds(n, seed)
        for g, w in zip(mod.run(**feeds), run_onnxruntime(model, feeds)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5)
    stages = mod.stats()["symbolic"]["stages"]
    assert [(s["kind"], s.get("mode")) for s in stages] == [("compiled", "kernels"), ("host", None),
                                                          ("compiled", "kernels")]
