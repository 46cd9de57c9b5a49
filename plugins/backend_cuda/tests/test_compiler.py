"""NVRTC from the PyPI wheels: cubin and PTX for a real architecture, ptxas's report per kernel, the
architecture's limits and compile errors as errors naming the kernel."""

from __future__ import annotations

import pytest

import nnvm
from nnvm.errors import Error, TargetError
from nnvm_backend_cuda.compiler import (
    ARCHS,
    KernelUsage,
    check_arch,
    compile_cuda,
    occupancy,
    parse_ptxas_log,
)
from nnvm_backend_cuda.testing import BLOCK_SUM, REVERSE, SAXPY
from nnvm_frontend_onnx.testing.shape_models import depthwise_net


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_ptx_and_ptxas_report(arch):
    c = compile_cuda(REVERSE + SAXPY, arch)
    assert c.cubin[:4] == b"\x7fELF" and b".target " + arch.encode() in c.ptx
    assert set(c.usage) == {"reverse", "saxpy"}
    assert c.usage["reverse"].shared_bytes == 64 * 4 and c.usage["reverse"].barriers == 1
    assert c.usage["saxpy"].shared_bytes == 0 and c.usage["saxpy"].registers > 0
    assert all(u.spill_stores == 0 and u.spill_loads == 0 for u in c.usage.values())


def test_spills_are_read_from_the_log():
    log = """ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     40 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]"""
    u = parse_ptxas_log(log)["k"]
    got = (u.registers, u.shared_bytes, u.spill_stores, u.spill_loads, u.stack_bytes)
    assert got == (255, 4096, 12, 8, 40)


def test_kernels_beyond_the_architecture_are_errors_naming_them():
    with pytest.raises(Error, match=r"block_sum has 2048 threads per block"):
        compile_cuda(BLOCK_SUM, "sm_80", threads={"block_sum": 2048})
    big = REVERSE.replace("tile[64]", "tile[16384]").replace("reverse(", "big_tile(")
    with pytest.raises(Error, match=r"'big_tile' uses too much shared data"):
        compile_cuda(big, "sm_80", threads={"big_tile": 64})


def test_compile_error_names_the_kernel_and_line():
    src = SAXPY + '\nextern "C" __global__ void broken(float* a) {\n  a[0] = not_declared;\n}\n'
    with pytest.raises(Error, match=r'"not_declared" is undefined in kernel broken at line \d+: a\[0\] ='):
        compile_cuda(src, "sm_80")


def test_occupancy_follows_registers_and_shared_memory():
    assert occupancy(KernelUsage("k", registers=32), 256, "sm_80") == 1.0
    # 255 registers: 8160 per warp, 2 blocks of 4 warps fit the 64 Ki registers of an SM
    assert occupancy(KernelUsage("k", registers=255), 128, "sm_80") == pytest.approx(1 / 8)
    assert occupancy(KernelUsage("k", registers=32, shared_bytes=48 * 1024), 256, "sm_80") == 0.375


def test_unknown_arch_is_a_target_error():
    assert check_arch("sm_90") == "sm_90" and "sm_120" in ARCHS
    with pytest.raises(TargetError, match="sm_99 is not a known NVIDIA architecture"):
        nnvm.compile(depthwise_net(seed=0), target="cuda -arch=sm_99")
