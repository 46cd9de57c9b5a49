"""NVRTC from the PyPI wheels: cubin and PTX for a real architecture, ptxas's report per kernel, the
architecture's limits and compile errors as errors naming the kernel."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.errors import Error, TargetError
from nnvm_backend_cuda import compiler
from nnvm_backend_cuda.compiler import (
    ARCHS,
    CompiledCUDA,
    KernelUsage,
    check_arch,
    compile_capped,
    compile_cuda,
    kernel_names,
    launch_bounds,
    min_blocks,
    nvrtc_options,
    occupancy,
    parse_ptxas_log,
    with_min_blocks,
)
from nnvm_testing.backend_cuda import BLOCK_SUM, REVERSE, SAXPY
from nnvm_testing.frontend_onnx.shape_models import _model, depthwise_net


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_ptx_and_ptxas_report(arch):
    c = compile_cuda(REVERSE + SAXPY, arch)
    assert c.cubin[:4] == b"\x7fELF" and b".target " + arch.encode() in c.ptx
    assert set(c.usage) == {"reverse", "saxpy"}
    assert c.usage["reverse"].shared_bytes == 64 * 4 and c.usage["reverse"].barriers == 1
    assert c.usage["saxpy"].shared_bytes == 0 and c.usage["saxpy"].registers > 0
    assert all(u.spill_stores == 0 and u.spill_loads == 0 for u in c.usage.values())


def test_nvrtcs_own_cache_is_off_so_ptxas_always_reports():
    # NVRTC >= 12.9 caches programs on disk where a driver is installed; a hit has no ptxas report
    for version in ((12, 9), (13, 0)):
        assert b"--no-cache" in nvrtc_options("sm_90", version)
    assert b"--no-cache" not in nvrtc_options("sm_90", (12, 8))  # an option older NVRTCs reject
    assert nvrtc_options("sm_80", (12, 9), "/inc")[-1] == b"--include-path=/inc"
    # the option is accepted, and two compiles of one source in a row both carry the report
    for _ in range(2):
        compiler._cache.clear()
        assert set(compile_cuda(REVERSE, "sm_90").usage) == {"reverse"}


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


def test_blocks_per_sm_for_half_occupancy():
    # sm_80: 64 warps per SM, so 32 resident warps: 8 blocks of 98 threads (4 warps), 16 of 50 (2 warps)
    assert [min_blocks(t, "sm_80") for t in (98, 128, 50, 1024, 32)] == [8, 8, 16, 1, 32]
    assert min_blocks(768, "sm_80") == 2  # 24 warps: one block is 37.5%
    assert min_blocks(128, "sm_86") == 6  # 48 warps per SM


def test_launch_bounds_with_blocks_per_sm_are_read_back():
    src = with_min_blocks(REVERSE + SAXPY, {"reverse": 16})
    assert "__launch_bounds__(64, 16) reverse(" in src and "__launch_bounds__(64) saxpy(" in src
    assert launch_bounds(src) == {"reverse": (64, 16), "saxpy": (64, 0)}
    assert kernel_names(src) == ["reverse", "saxpy"]
    assert with_min_blocks(src, {}) == REVERSE + SAXPY
    assert compile_cuda(src, "sm_80").usage["reverse"].barriers == 1


def _threads(source: str) -> dict:
    return {k: t for k, (t, _) in launch_bounds(source).items()}


def _fake_ptxas(plain: dict, capped: dict):
    """A ``compile_cuda`` whose ptxas reports ``(registers, spill bytes)`` per kernel from ``plain`` or, for
    kernels with blocks per SM in their ``__launch_bounds__``, from ``capped``; the sources it saw."""
    seen = []

    def fake(source, arch, threads=None):
        seen.append(source)
        usage = {}
        for name in kernel_names(source):
            regs, spill = (capped if f") {name}(" in source and f", 8) {name}(" in source else plain)[name]
            usage[name] = KernelUsage(name, registers=regs, spill_stores=spill, spill_loads=spill)
        return CompiledCUDA(arch, b"", b"", usage)
    return fake, seen


def test_registers_are_capped_only_below_the_goal_and_only_without_spills(monkeypatch):
    names = ("wide", "tight", "fine", "spilly")
    src = "".join(f'extern "C" __global__ void __launch_bounds__(128) {n}(float* a) {{ a[0] = 0; }}\n'
                  for n in names)
    fake, seen = _fake_ptxas(plain={"wide": (128, 0), "tight": (96, 0), "fine": (32, 0), "spilly": (40, 8)},
                             capped={"wide": (64, 0), "tight": (64, 16), "fine": (64, 0), "spilly": (64, 0)})
    monkeypatch.setattr(compiler, "compile_cuda", fake)
    out, compiled = compile_capped(src, "sm_80", _threads(src))
    # wide: 25% -> capped at 50%; tight spills under the cap: left alone; fine: 100%, never capped (a cap
    # would let ptxas take 64 registers); spilly: ptxas's own choice spilled, the cap does not
    for bounds in ("(128, 8) wide(", "(128) tight(", "(128) fine(", "(128, 8) spilly("):
        assert bounds in out
    assert {k: u.registers for k, u in compiled.usage.items()} == {"wide": 64, "tight": 96, "fine": 32,
                                                                   "spilly": 64}
    assert len(seen) == 3 and seen[-1] == out
    # nothing to cap: one compile, the source as printed
    fake, seen = _fake_ptxas(plain={n: (32, 0) for n in names}, capped={})
    monkeypatch.setattr(compiler, "compile_cuda", fake)
    assert compile_capped(src, "sm_80", _threads(src))[0] == src and len(seen) == 1


def _strided_conv_and_dense():
    """ResNet-18's layer2 entry (3x3 stride-2 conv 64 -> 128 on 56x56, ReLU) and a 512 -> 1000 dense: the
    kernels that took 128-255 registers (12-25% occupancy) with 64-bit indices and uncapped ptxas."""
    from onnx import helper

    rng = np.random.default_rng(0)
    w = {"w": rng.normal(0, 0.05, (128, 64, 3, 3)), "fc": rng.normal(0, 0.05, (512, 1000))}
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
             n("Relu", ["c"], ["r"]), n("ReduceMean", ["r"], ["m"], axes=[2, 3], keepdims=0),
             n("Concat", ["m", "m", "m", "m"], ["f"], axis=1), n("Gemm", ["f", "fc"], ["y"])]
    return _model(nodes, w, [("x", [1, 64, 56, 56])], [("y", [1, 1000])], opset=13)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_model_kernels_reach_half_occupancy_without_spills(arch):
    mod = nnvm.compile(_strided_conv_and_dense(), target=f"cuda -arch={arch}")
    lib = mod.library
    assert "const int threadIdx_x = (int)threadIdx.x;" in lib.source_text()  # 32-bit indices
    assert compile_cuda(lib.source_text(), arch).cubin == lib.compiled.cubin  # the source as compiled
    kernels = mod.stats()["cuda_kernels"]
    assert any("conv2d" in k for k in kernels) and any("dense" in k for k in kernels), kernels
    for name, u in kernels.items():
        assert u["spill_stores"] == u["spill_loads"] == 0 and u["occupancy"] >= 0.5, (name, u)
