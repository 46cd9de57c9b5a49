"""The native Metal path (``native.MetalDevice`` through the library) against a fake of pyobjc's ``Metal``
module that runs dispatches on the CPU; on a Mac, the same model on the real GPU (marked ``gpu``)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.errors import Error
from nnvm.runtime.module import Module
from nnvm_backend_metal.library import MetalKernelLibrary
from nnvm_backend_metal.native import open_device
from nnvm_testing.backend_metal import FakeMetal
from nnvm_testing.frontend_onnx.shape_models import depthwise_net


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("metal") / "dw.onnx")
    onnx.save(depthwise_net(seed=0), path)
    x = np.random.default_rng(3).standard_normal((1, 8, 32, 32)).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return path, x, want


def _native(mod, fake):
    lib = MetalKernelLibrary(list(mod.library.tables.values()), mod.library.source_text(),
                             device=open_device(fake))
    return Module(mod.plan, mod.params, lib, mod.target, mod.stats()), lib


def test_native_path_fast_math_off_weights_once_and_matches_onnxruntime(model):
    path, x, want = model
    mod = nnvm.compile(path, target="metal")
    fake = FakeMetal()
    native, lib = _native(mod, fake)
    assert not lib.on_cpu
    first = native.run(x)[0]
    assert [o.fast_math for o in fake.options] == [False]  # one library, fast math off
    kernels = {k for t in lib.tables.values() for launch in t["launches"] for k in [launch["kernel"]]}
    assert {d[0] for d in fake.dispatches} == kernels
    assert lib.bytes_to_device >= mod.stats()["weight_bytes"]
    before = lib.bytes_to_device
    second = native.run(x)[0]
    assert lib.bytes_to_device - before == x.nbytes  # the weights stay on the device
    for got in (first, second):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_no_device_means_the_cpu_runner():
    assert open_device(FakeMetal(no_device=True)) is None


def test_errors_name_the_kernel(model):
    path, x, _ = model
    mod = nnvm.compile(path, target="metal")
    kernel = next(iter(mod.library.tables.values()))["launches"][0]["kernel"]
    native, _ = _native(mod, FakeMetal(launch_error="GPU hang"))
    with pytest.raises(Error, match=rf"the Metal kernel {kernel} failed: GPU hang"):
        native.run(x)
    native, _ = _native(mod, FakeMetal(max_threads=1))
    with pytest.raises(Error, match=rf"the Metal kernel {kernel} needs \d+ threads per threadgroup; this GPU "
                                    "runs at most 1 of it"):
        native.run(x)
    bad = MetalKernelLibrary([], "kernel void broken(float* p [[buffer(0)]]) {}",
                             device=open_device(FakeMetal()))
    with pytest.raises(Error, match="Apple's Metal compiler rejected the generated MSL"):
        bad.device.library(bad.source_text())


@pytest.mark.gpu
@pytest.mark.skipif(sys.platform != "darwin" or open_device() is None, reason="needs a Mac with a Metal GPU")
def test_real_metal_gpu_matches_onnxruntime(model):
    path, x, want = model
    mod = nnvm.compile(path, target="metal")
    assert not mod.library.on_cpu
    np.testing.assert_allclose(mod.run(x)[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
