"""The WGSL printer (a subclass of the core's C-family printer) and the device limits it checks: what the
conformance suite does not show by itself."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.errors import Error
from nnvm.gpu.kernels import lower_for_gpu
from nnvm.te.lower import lower_schedule
from nnvm_backend_webgpu import printer as printer_module
from nnvm_backend_webgpu.printer import WGSLPrinter
from nnvm_backend_webgpu.wgsl import DEFAULT_LIMITS


def _kernels(threads: int = 64, n: int = 256):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[n - 1 - i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bo, bi = s[B].split(B.op.axis[0], factor=threads)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    s[AS].compute_at(s[B], bo)
    s[AS].bind(s[AS].op.axis[0], "threadIdx.x")
    return lower_for_gpu(lower_schedule(s, [A, B], "flip")).kernels


def test_the_printer_is_a_small_subclass_of_the_c_family_printer():
    lines = len(inspect.getsource(printer_module).splitlines())
    assert lines <= 200, f"the WGSL printer has {lines} lines, the budget is 200"


def test_bindings_workgroup_memory_and_barriers_are_wgsl():
    source = WGSLPrinter().program(_kernels())
    assert "@group(0) @binding(0) var<storage, read_write> flip_k0_A: array<f32>;" in source
    assert "var<workgroup> flip_k0_A_shared: array<f32, 64>;" in source
    assert "@compute @workgroup_size(64, 1, 1)" in source and "workgroupBarrier();" in source


def test_a_kernel_beyond_the_device_limits_is_an_error_naming_the_kernel_and_the_limit():
    with pytest.raises(Error, match=r"kernel flip_k0: 512 threads per workgroup, more than this WebGPU "
                                    r"device allows \(max_compute_invocations_per_workgroup = 256\)"):
        WGSLPrinter({**DEFAULT_LIMITS, "max_compute_workgroup_size_x": 1024}).program(_kernels(512, 1024))
    with pytest.raises(Error, match=r"2 storage buffers.*max_storage_buffers_per_shader_stage = 1"):
        WGSLPrinter({"max_storage_buffers_per_shader_stage": 1}).program(_kernels())


def test_the_compiler_checks_the_adapters_limits():
    # lavapipe allows 1024 threads per workgroup, more than WebGPU's guaranteed 256: the adapter's own
    # limits are the ones checked, and a kernel using them runs.
    from nnvm_backend_webgpu.device import limits

    assert limits()["max_compute_invocations_per_workgroup"] >= 512
    A = te.placeholder((1024,), name="A")
    B = te.compute((1024,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=512)  # beyond WebGPU's guaranteed 256
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    f = nnvm.build(s, [A, B], target="webgpu")
    a = np.random.default_rng(0).standard_normal(1024).astype("float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, a + 1.0)


def test_a_target_option_is_one_sentence_and_status_1():
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", "nothing.onnx", "--target",
                           "webgpu -device=gpu"], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the webgpu target takes no options" in proc.stderr


def test_more_workgroups_than_one_axis_allows_are_folded_into_two():
    n = 2 * 70001  # 70001 workgroups of 2 threads: beyond WebGPU's 65535 along x
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=2)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    f = nnvm.build(s, [A, B], target="webgpu")
    (launch,) = next(iter(f.library.tables.values()))["launches"]
    assert launch["grid"] == [65535, 2, 1]
    a = np.random.default_rng(0).standard_normal(n).astype("float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_allclose(b, a * 2 + 1)  # the last workgroups too, and no spare one wrote


def test_a_buffer_larger_than_the_device_binds_is_an_error_at_compile_time():
    n = 48 * 2**20  # 192 MiB of float32: beyond the 128 MiB a binding holds on lavapipe (and by default)
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=256)
    s[B].bind(bo, "blockIdx.x")
    s[B].bind(bi, "threadIdx.x")
    with pytest.raises(Error, match=r"buffer A has 201326592 bytes, more than this WebGPU device binds "
                                    r"\(max_storage_buffer_binding_size = \d+\)"):
        nnvm.build(s, [A, B], target="webgpu")
