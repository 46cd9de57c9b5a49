"""The native path's hardening, against the fake driver: argument arrays per parameter type, streams with
pinned staging and asynchronous copies, CUDA-event timing, launches refused beyond the device's limits,
and every failing driver call named in the error.

The fake queues a stream's work until it is synchronized and copies a launch's arguments at the launch,
``sizeof`` each kernel parameter, as the driver does; its launches run the same source on the CPU runner,
so results are checked against numpy.
"""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest
from onnx import helper

import nnvm
from nnvm.bench import device_times, format_result
from nnvm.errors import Error
from nnvm.runtime.module import Module
from nnvm_backend_cuda.arguments import kernel_parameters, pack_arguments
from nnvm_backend_cuda.compiler import compile_cuda
from nnvm_backend_cuda.library import CUDAKernelLibrary
from nnvm_backend_cuda.native import open_device
from nnvm_testing.backend_cuda import REVERSE, FakeDriver, errors_on_fresh_threads
from nnvm_testing.frontend_onnx.shape_models import _model

driver = pytest.importorskip("cuda.bindings.driver")
R = driver.CUresult

# Writes each scalar argument back, so a value passed with the wrong size or layout shows.
PROBE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(1) probe(long long* __restrict__ ints,
                                                     double* __restrict__ reals, const int a,
                                                     long long b, unsigned int c, float d, half h,
                                                     float4 v, double e, const float* __restrict__ p,
                                                     int2 q) {
  ints[0] = a; ints[1] = b; ints[2] = c; ints[3] = q.x; ints[4] = q.y;
  reals[0] = d; reals[1] = __half2float(h); reals[2] = v.x; reals[3] = v.y; reals[4] = v.z;
  reals[5] = v.w; reals[6] = e; reals[7] = p[0];
}
"""


def _model_module(fake_limits=None, **fake_args):
    """A two-kernel model (no weights) on the native path through a fake driver: (module, fake, x)."""
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]), n("Exp", ["r"], ["y"])]
    onnx_model = _model(nodes, {}, [("x", [4, 64])], [("y", [4, 64])], opset=13)
    mod = nnvm.compile(onnx_model, target="cuda -arch=sm_80")
    lib = mod.library
    fake = FakeDriver(lib.source_text(), arch=(8, 0), limits=fake_limits, **fake_args)
    native_lib = CUDAKernelLibrary(list(lib.tables.values()), lib.compiled, lib.source_text(),
                                   device=open_device(fake))
    x = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    return Module(mod.plan, mod.params, native_lib, mod.target, mod.stats()), fake, x


# -- argument layout --------------------------------------------------------------------------------
def test_argument_array_points_at_each_parameters_exact_type():
    types = kernel_parameters(PROBE)["probe"]
    assert types == ["long long*", "double*", "int", "long long", "unsigned int", "float", "half", "float4",
                     "double", "float*", "int2"]
    compile_cuda(PROBE, "sm_80")  # the probe is real CUDA, not only host C++
    fake = FakeDriver(PROBE)
    dev = open_device(fake)
    fn = dev.function(dev.load(b"", b"", "sm_80"), "probe")
    ints, reals = np.zeros(5, dtype=np.int64), np.zeros(8, dtype=np.float64)
    p = np.array([2.5], dtype=np.float32)
    d_ints, d_reals, d_p = dev.alloc(ints.nbytes), dev.alloc(reals.nbytes), dev.alloc(p.nbytes)
    dev.upload(d_p, p.ctypes.data, p.nbytes)
    values = [d_ints, d_reals, -7, -(2**40) - 3, 2**32 - 1, 1.5, 0.333, (1.0, -2.0, 3.5, 4.25), 1 / 3, d_p,
              (-(2**31), 2**31 - 1)]
    array, (_storage, converted) = pack_arguments("probe", types, values)
    assert [ctypes.sizeof(v) for v in converted] == [8, 8, 4, 8, 4, 4, 2, 16, 8, 8, 8]
    assert all(array[i] % 16 == 0 for i in range(len(types)))
    dev.launch(fn, "probe", (1, 1, 1), (1, 1, 1), ctypes.addressof(array))
    dev.download(ints.ctypes.data, d_ints, ints.nbytes)
    dev.download(reals.ctypes.data, d_reals, reals.nbytes)
    assert ints.tolist() == [-7, -(2**40) - 3, 2**32 - 1, -(2**31), 2**31 - 1]
    assert reals.tolist() == [1.5, float(np.float16(0.333)), 1.0, -2.0, 3.5, 4.25, 1 / 3, 2.5]


@pytest.mark.parametrize("values, message", [
    ([1, 2], r"CUDA kernel k takes 3 arguments \(float\*, int, half\), the launch gives 2"),
    ([1, 2**31, 0.5], r"CUDA kernel k: argument 1 \(2147483648\) does not fit parameter type int"),
    ([-1, 0, 0.5], r"CUDA kernel k: argument 0 \(-1\) does not fit parameter type float\*"),
])
def test_arguments_that_do_not_fit_are_refused_naming_the_kernel(values, message):
    with pytest.raises(Error, match=message):
        pack_arguments("k", ["float*", "int", "half"], values)


def test_an_unknown_parameter_type_is_named():
    with pytest.raises(Error, match=r"CUDA kernel k: parameter 0 has type 'mystruct'"):
        pack_arguments("k", ["mystruct"], [0])


# -- streams, pinned staging, async copies ----------------------------------------------------------
def test_model_runs_on_a_stream_with_pinned_async_copies_and_frees_what_it_holds():
    native, fake, x = _model_module()
    assert not fake.streams and not fake.pinned  # the weights' stream was released after the upload
    want = np.exp(np.maximum(x, 0))
    for _ in range(20):
        np.testing.assert_allclose(native.run(x)[0], want, rtol=1e-6)
    assert fake.launches and all(stream != 0 for *_, stream in fake.launches)  # on the arena's stream
    assert fake.async_copies and all(pinned for *_, pinned in fake.async_copies)
    assert {kind for kind, *_ in fake.async_copies} == {"HtoD", "DtoH"}
    assert len(fake.streams) == 1 and len(fake.pinned) == 1  # one arena: nothing more after 20 runs
    del native
    gc.collect()
    assert not fake.streams and not fake.pinned and not fake.events


def test_a_run_from_other_threads_makes_the_context_current():
    native, _fake, x = _model_module()
    native.run(x)  # the arena (and its stream) made on this thread
    got, failed = [], []

    def run():
        try:
            got.append(native.run(x)[0])
        except Error as exc:
            failed.append(str(exc))

    for _ in range(3):
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    assert not failed, failed
    for g in got:
        np.testing.assert_allclose(g, np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_stream_downloads_land_at_synchronize_and_staging_merges_into_one_chunk():
    fake = FakeDriver(REVERSE)
    dev = open_device(fake)
    stream = dev.new_stream()
    big = np.arange(50_000, dtype=np.float32)  # 200 KB: past the first 64 KiB chunk
    ptr = dev.alloc(big.nbytes)
    stream.copy_in(ptr, big)
    big_copy = big.copy()
    big[:] = -1  # staged at enqueue: changing the array now changes nothing
    out = np.zeros_like(big)
    stream.copy_out(out, ptr)
    assert not out.any()  # queued, not done
    stream.synchronize()
    np.testing.assert_array_equal(out, big_copy)
    assert len(stream.chunks) == 1 and stream.chunks[0][1] >= 2 * big.nbytes  # merged after the work
    stream.close()
    stream.close()  # twice is harmless
    dev.free(ptr)
    assert not fake.streams and not fake.pinned and not fake.buffers


def test_stream_calls_from_fresh_threads_make_the_context_current():
    fake = FakeDriver(REVERSE)
    dev = open_device(fake)
    ptr = dev.alloc(256)
    x = np.ones(64, dtype="float32")
    box = {}
    steps = [("new_stream", lambda: box.__setitem__("s", dev.new_stream())),
             ("copy_in", lambda: box["s"].copy_in(ptr, x)), ("record", lambda: box["s"].record("a")),
             ("copy_out", lambda: box["s"].copy_out(x, ptr)), ("record2", lambda: box["s"].record("b")),
             ("synchronize", lambda: box["s"].synchronize()),
             ("elapsed", lambda: box["s"].elapsed_ms("a", "b")), ("close", lambda: box["s"].close())]
    failed = errors_on_fresh_threads(steps)
    assert not failed, failed
    assert not fake.streams and not fake.events and not fake.pinned


# -- event timing -----------------------------------------------------------------------------------
def test_events_time_the_work_between_them():
    fake = FakeDriver(REVERSE)
    dev = open_device(fake)
    stream = dev.new_stream()
    stream.record("start")
    stream.record("stop")
    with pytest.raises(Error, match=r"cuEventElapsedTime\(start, stop\) failed: CUDA_ERROR_NOT_READY"):
        stream.elapsed_ms("start", "stop")  # not synchronized yet
    stream.synchronize()
    assert stream.elapsed_ms("start", "stop") >= 0.0
    assert len(fake.events) == 2
    stream.close()
    assert not fake.events


def test_bench_reports_device_time_beside_wall_time():
    native, _fake, x = _model_module()
    times = device_times(native, {"x": x}, repeat=3)
    assert set(times) == {"device_ms", "kernels_ms"}
    assert 0.0 <= times["kernels_ms"] <= times["device_ms"]
    r = {"model": "m", "target": "cuda", "kernels": 2, "compile_seconds": 0.1, "nnvm_ms": 1.0, "repeat": 3,
         "threads": None, **times}
    assert "measured by the device" in format_result(r)


def test_a_failing_timer_leaves_the_wall_times_and_says_why():
    native, fake, x = _model_module()
    fake.fail["cuEventElapsedTime"] = R.CUDA_ERROR_INVALID_HANDLE
    times = device_times(native, {"x": x}, repeat=2)
    assert "cuEventElapsedTime(start, done) failed" in times["device_error"]
    np.testing.assert_allclose(native.run(x)[0], np.exp(np.maximum(x, 0)), rtol=1e-6)  # runs go on


def test_no_device_time_on_the_cpu_runner():
    onnx_model = _model([helper.make_node("Relu", ["x"], ["y"])], {}, [("x", [4, 64])],
                        [("y", [4, 64])], opset=13)
    mod = nnvm.compile(onnx_model, target="cuda -arch=sm_80")
    if mod.library.on_cpu:
        assert device_times(mod, {"x": np.ones((4, 64), dtype="float32")}, repeat=2) == {}


# -- limits ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid, block, shared, message", [
    ((1, 1, 1), (2048, 1, 1), 0, r"maximum of 1024 threads per block \(2048\)"),
    ((1, 1, 1), (1, 1, 128), 0, r"maximum block size 64 along z \(128\)"),
    ((1, 70000, 1), (32, 1, 1), 0, r"maximum grid size 65535 along y \(70000\)"),
    ((1, 1, 1), (32, 1, 1), 65536, r"maximum of 49152 bytes of shared memory per block \(65536\)"),
    ((0, 1, 1), (32, 1, 1), 0, r"shape"),
])
def test_a_launch_beyond_the_devices_limits_is_refused_naming_kernel_launch_and_limit(grid, block, shared,
                                                                                       message):
    dev = open_device(FakeDriver(REVERSE))
    assert dev.limits.block == (1024, 1024, 64) and dev.limits.grid[1] == 65535
    with pytest.raises(Error, match=r"CUDA kernel reverse: launch grid .* block .* exceeds the device's "
                                    + message):
        dev.check_launch("reverse", grid, block, shared)


def test_unreadable_limits_leave_the_checks_to_the_driver():
    fake = FakeDriver(REVERSE)
    del fake.limits["MAX_GRID_DIM_Y"]
    dev = open_device(fake)
    assert dev.limits is None
    dev.check_launch("reverse", (1, 1, 1), (64, 1, 1))  # nothing to check against, nothing refused


def test_the_kernels_own_thread_limit_is_checked():
    fake = FakeDriver(REVERSE, function_max_threads=32)
    dev = open_device(fake)
    fn = dev.function(dev.load(b"", b"", "sm_80"), "reverse")
    with pytest.raises(Error, match=r"maximum of 32 threads per block for this kernel's registers \(64\)"):
        dev.check_launch("reverse", (1, 1, 1), (64, 1, 1), 0, fn)


def test_a_model_whose_launch_the_device_cannot_run_is_refused_before_any_launch():
    native, fake, x = _model_module(fake_limits={"MAX_THREADS_PER_BLOCK": 16})
    with pytest.raises(Error, match=r"CUDA kernel \w+: launch grid \(\d+, 1, 1\) block \(\d+, 1, 1\) exceeds "
                                    r"the device's maximum of 16 threads per block"):
        native.run(x)
    assert not fake.launches


# -- errors name the call and the kernel -------------------------------------------------------------
@pytest.mark.parametrize("call, error, message", [
    ("cuModuleLoadData", R.CUDA_ERROR_INVALID_IMAGE, r"CUDA cuModuleLoadData \(the sm_80 cubin\) failed"),
    ("cuModuleGetFunction", R.CUDA_ERROR_NOT_FOUND, r"cuModuleGetFunction failed \(kernel reverse\)"),
    ("cuMemAlloc", R.CUDA_ERROR_OUT_OF_MEMORY, r"cuMemAlloc of 256 bytes failed"),
    ("cuStreamCreate", R.CUDA_ERROR_OUT_OF_MEMORY, r"cuStreamCreate failed"),
    ("cuMemHostAlloc", R.CUDA_ERROR_OUT_OF_MEMORY, r"cuMemHostAlloc of 65536 bytes failed"),
    ("cuMemcpyHtoDAsync", R.CUDA_ERROR_INVALID_VALUE, r"cuMemcpyHtoDAsync of 256 bytes failed"),
    ("cuLaunchKernel", R.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, r"cuLaunchKernel failed \(kernel reverse\)"),
    ("cuMemcpyDtoHAsync", R.CUDA_ERROR_ILLEGAL_ADDRESS,
     r"cuMemcpyDtoHAsync of 256 bytes failed \(after kernel reverse\)"),
    ("cuStreamSynchronize", R.CUDA_ERROR_ILLEGAL_ADDRESS, r"cuStreamSynchronize failed \(kernel reverse\)"),
])
def test_each_failing_driver_call_is_named(call, error, message):
    fake = FakeDriver(REVERSE)
    dev = open_device(fake)
    x = np.arange(64, dtype="float32")

    def run():
        compiled = compile_cuda(REVERSE, "sm_80")
        fn = dev.function(dev.load(compiled.cubin, compiled.ptx, compiled.arch), "reverse")
        d_in, d_out = dev.alloc(x.nbytes), dev.alloc(x.nbytes)
        stream = dev.new_stream()
        stream.copy_in(d_in, x)
        array, _keep = pack_arguments("reverse", ["float*", "float*"], [d_out, d_in])
        stream.launch(fn, "reverse", (1, 1, 1), (64, 1, 1), ctypes.addressof(array))
        y = np.empty_like(x)
        stream.copy_out(y, d_out)
        stream.synchronize()
        return y

    np.testing.assert_array_equal(run(), x[::-1])  # all well without the failure
    fake.fail[call] = error
    with pytest.raises(Error, match=message + f".*{error.name}"):
        run()


@pytest.mark.gpu
@pytest.mark.skipif(open_device() is None, reason="no NVIDIA GPU and driver here")
def test_real_gpu_stream_pinned_copies_events_and_limits():
    from nnvm_testing.backend_cuda import SAXPY

    dev = open_device()
    compiled = compile_cuda(SAXPY, dev.arch if dev.arch in ("sm_80", "sm_90") else "sm_80")
    fn = dev.function(dev.load(compiled.cubin, compiled.ptx, compiled.arch), "saxpy")
    dev.check_launch("saxpy", (16, 1, 1), (64, 1, 1), 0, fn)
    with pytest.raises(Error, match="refused before launch"):
        dev.check_launch("saxpy", (1, 1, 1), (2048, 1, 1), 0, fn)
    a = np.random.default_rng(0).standard_normal(1000).astype("float32")
    d_a, d_b = dev.alloc(a.nbytes), dev.alloc(a.nbytes)
    stream = dev.new_stream()
    try:
        array, _keep = pack_arguments("saxpy", kernel_parameters(SAXPY)["saxpy"], [d_b, d_a, 1000])
        b = np.zeros_like(a)
        for _ in range(3):  # the staging is reused after each synchronize
            stream.record("start")
            stream.copy_in(d_a, a)
            stream.launch(fn, "saxpy", (16, 1, 1), (64, 1, 1), ctypes.addressof(array))
            stream.copy_out(b, d_b)
            stream.record("stop")
            stream.synchronize()
            np.testing.assert_allclose(b, 2 * a + 1, rtol=1e-6)
            assert stream.elapsed_ms("start", "stop") > 0.0
    finally:
        stream.close()
        dev.free(d_a)
        dev.free(d_b)
