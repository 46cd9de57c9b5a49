"""Export writes one shared library that a fresh process loads with only the core."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort

import nnvm
from nnvm_testing.frontend_onnx import models


def test_export_and_load_in_fresh_process(tmp_path):
    path = models.cached_model_path("mobilenet_v2")
    mod = nnvm.compile(path, target="llvm")
    artifact = tmp_path / "mobilenet_v2.so"
    mod.export(str(artifact))
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys, numpy as np, nnvm
        mod = nnvm.load({str(artifact)!r})
        out = mod.run(np.load({str(tmp_path / 'x.npy')!r}))[0]
        np.save({str(tmp_path / 'y.npy')!r}, out)
        assert 'nnvm_frontend_onnx' not in sys.modules and 'llvmlite' not in sys.modules, sorted(sys.modules)
    """)
    env = dict(os.environ, NNVM_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "y.npy")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"exported mobilenet_v2: max relative error {err:.2e}"
