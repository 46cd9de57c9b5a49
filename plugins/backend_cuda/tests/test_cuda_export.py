"""A whole model on the native path (against the fake driver) and exported to one file.

The fake driver runs launches with the CPU runner and records every host-to-device copy, so the first
test proves the device-resident design through the real ``CUDADevice`` code: the weights go up once, a
second run uploads its input and nothing else.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.runtime.module import Module
from nnvm_backend_cuda.library import CUDAKernelLibrary
from nnvm_backend_cuda.native import open_device
from nnvm_testing.backend_cuda import FakeDriver
from nnvm_testing.frontend_onnx.shape_models import _model, depthwise_net


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cuda") / "dw.onnx")
    onnx.save(depthwise_net(seed=0), path)
    x = np.random.default_rng(3).standard_normal((1, 8, 32, 32)).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return path, x, want


def test_native_path_uploads_weights_once_and_matches_onnxruntime(model):
    path, x, want = model
    mod = nnvm.compile(path, target="cuda -arch=sm_80")
    lib = mod.library
    fake = FakeDriver(lib.source_text(), arch=(8, 0))
    native_lib = CUDAKernelLibrary(list(lib.tables.values()), lib.compiled, lib.source_text(),
                                   device=open_device(fake))
    native = Module(mod.plan, mod.params, native_lib, mod.target, mod.stats())
    first = native.run(x)[0]
    assert fake.loaded == lib.compiled.cubin  # the sm_80 cubin on an sm_80 device
    uploaded = sum(n for kind, n in fake.calls if kind == "HtoD")
    assert uploaded >= mod.stats()["weight_bytes"]
    fake.calls.clear()
    second = native.run(x)[0]
    assert sum(n for kind, n in fake.calls if kind == "HtoD") == x.nbytes
    for got in (first, second):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_native_path_runs_a_model_without_weights():
    # no weight to upload: the device module's first driver call is a synchronize, on a thread that has
    # made no context current (each conformance operator on a real GPU)
    from onnx import helper

    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]), n("Exp", ["r"], ["y"])]
    onnx_model = _model(nodes, {}, [("x", [4, 64])], [("y", [4, 64])], opset=13)
    mod = nnvm.compile(onnx_model, target="cuda -arch=sm_80")
    lib = mod.library
    fake = FakeDriver(lib.source_text(), arch=(8, 0))
    native_lib = CUDAKernelLibrary(list(lib.tables.values()), lib.compiled, lib.source_text(),
                                   device=open_device(fake))
    x = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    got = Module(mod.plan, mod.params, native_lib, mod.target, mod.stats()).run(x)[0]
    np.testing.assert_allclose(got, np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_export_is_one_file_that_a_fresh_process_runs(model, tmp_path):
    path, x, want = model
    mod = nnvm.compile(path, target="cuda -arch=sm_90")
    out = tmp_path / "dw.nnvm"
    mod.export(str(out))
    with zipfile.ZipFile(out) as z:
        names = set(z.namelist())
    assert {"manifest.json", "files/kernels.cu", "files/kernels.cubin", "files/kernels.ptx",
            "blobs/graph", "blobs/params"} <= names
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, nnvm; m = nnvm.load(sys.argv[1]); "
            "np.save(sys.argv[3], m.run(np.load(sys.argv[2]))[0]); m.run(np.load(sys.argv[2])); "
            "print(m.stats()['cuda_arch'])")
    proc = subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sm_90"
    if open_device() is None:  # said once, though the module ran twice
        assert proc.stderr.count("running the CUDA kernels on the CPU") == 1
    got = np.load(tmp_path / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
