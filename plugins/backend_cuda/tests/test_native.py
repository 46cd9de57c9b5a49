"""The native path (``native.py``) against a fake CUDA driver at its boundary, and, marked ``gpu``,
against the real driver where an NVIDIA GPU exists.

The fake keeps "device memory" in host buffers and runs launches with the CPU runner, so a module
loaded, launched and copied back through ``CUDADevice`` is checked against numpy end to end.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from nnvm.errors import Error
from nnvm_backend_cuda.compiler import compile_cuda
from nnvm_backend_cuda.native import CUDADevice, open_device
from nnvm_testing.backend_cuda import REVERSE, SAXPY, FakeDriver, errors_on_fresh_threads

driver = pytest.importorskip("cuda.bindings.driver")
OK = driver.CUresult.CUDA_SUCCESS


def _reverse_through(device: CUDADevice, compiled, x: np.ndarray) -> np.ndarray:
    module = device.load(compiled.cubin, compiled.ptx, compiled.arch)
    fn = device.function(module, "reverse")
    d_in, d_out = device.alloc(x.nbytes), device.alloc(x.nbytes)
    try:
        device.upload(d_in, x.ctypes.data, x.nbytes)
        args, _keep = _pointer_args(d_out, d_in)
        device.launch(fn, "reverse", (x.size // 64, 1, 1), (64, 1, 1), ctypes.addressof(args))
        device.synchronize("reverse")
        y = np.empty_like(x)
        device.download(y.ctypes.data, d_out, y.nbytes)
        return y
    finally:
        device.free(d_in)
        device.free(d_out)


def _pointer_args(*ptrs):
    values = [ctypes.c_uint64(p) for p in ptrs]
    arr = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    return arr, values


def test_fake_driver_end_to_end_loads_the_cubin_for_the_devices_arch():
    fake = FakeDriver(REVERSE, arch=(8, 0))
    dev = open_device(fake)
    assert dev.arch == "sm_80"
    compiled = compile_cuda(REVERSE, "sm_80")
    x = np.arange(256, dtype="float32")
    y = _reverse_through(dev, compiled, x)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())
    assert fake.loaded == compiled.cubin
    assert not fake.buffers  # everything freed


def test_fake_driver_newer_gpu_gets_the_ptx():
    fake = FakeDriver(REVERSE, arch=(9, 0))
    compiled = compile_cuda(REVERSE, "sm_80")
    _reverse_through(open_device(fake), compiled, np.ones(64, dtype="float32"))
    assert fake.loaded == compiled.ptx + b"\0"


def test_launch_error_names_the_kernel():
    fake = FakeDriver(REVERSE, launch_error=driver.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    with pytest.raises(Error, match=r"cuLaunchKernel failed \(kernel reverse\): CUDA_ERROR_LAUNCH_OUT_OF"):
        _reverse_through(open_device(fake), compile_cuda(REVERSE, "sm_80"), np.ones(64, dtype="float32"))


def test_missing_kernel_is_named():
    dev = open_device(FakeDriver(REVERSE))
    module = dev.load(b"", b"", "sm_80")
    with pytest.raises(Error, match=r"kernel nope"):
        dev.function(module, "nope")


def test_every_call_makes_the_context_current_on_its_own_thread():
    # the driver's current context is per thread; a run's first call on a thread may be any of these
    fake = FakeDriver(REVERSE)
    dev = open_device(fake)
    module = dev.load(b"", b"", "sm_80")
    ptr = dev.alloc(256)
    x = np.ones(64, dtype="float32")
    calls = {"synchronize": lambda: dev.synchronize("reverse"),
             "function": lambda: dev.function(module, "reverse"),
             "alloc": lambda: dev.free(dev.alloc(64)), "upload": lambda: dev.upload(ptr, x.ctypes.data, 256),
             "download": lambda: dev.download(x.ctypes.data, ptr, 256), "free": lambda: dev.free(ptr)}
    failed = errors_on_fresh_threads(calls.items())
    assert not failed, failed


@pytest.mark.parametrize("failure", [OSError("libcuda.so.1 not found"), driver.CUresult.CUDA_ERROR_NO_DEVICE])
def test_no_gpu_is_cuinit_failing(failure):
    assert open_device(FakeDriver(SAXPY, init_error=failure)) is None


def test_this_machine_answers_without_raising():
    dev = open_device()
    assert dev is None or dev.arch.startswith("sm_")


@pytest.mark.gpu
@pytest.mark.skipif(open_device() is None, reason="no NVIDIA GPU and driver here")
def test_real_gpu_saxpy():
    dev = open_device()
    compiled = compile_cuda(SAXPY, dev.arch if dev.arch in ("sm_80", "sm_90") else "sm_80")
    module = dev.load(compiled.cubin, compiled.ptx, compiled.arch)
    fn = dev.function(module, "saxpy")
    a = np.random.default_rng(0).standard_normal(1000).astype("float32")
    b = np.zeros_like(a)
    d_a, d_b = dev.alloc(a.nbytes), dev.alloc(b.nbytes)
    dev.upload(d_a, a.ctypes.data, a.nbytes)
    arr, values = _pointer_args(d_b, d_a)
    n = ctypes.c_int32(1000)
    params = (ctypes.c_void_p * 3)(arr[0], arr[1], ctypes.addressof(n))
    dev.launch(fn, "saxpy", (16, 1, 1), (64, 1, 1), ctypes.addressof(params))
    dev.synchronize("saxpy")
    dev.download(b.ctypes.data, d_b, b.nbytes)
    dev.free(d_a)
    dev.free(d_b)
    np.testing.assert_allclose(b, 2 * a + 1, rtol=1e-6)
