"""The ``cuda`` target: the loop program printed as CUDA C++, compiled by NVRTC, run natively or on the CPU.

The stages are the GPU layer's (``nnvm.gpu.backend.GPUBackend``: lower for the GPU, vectorize, print,
compile); this plugin is the language and the driver:

- ``printer.CUDAPrinter`` spells the kernels, with CUDA's vector structs of 2 to 4 lanes (``VECTORS``);
- ``compile``: NVRTC builds a cubin for ``-arch`` (and PTX), registers capped for 50% occupancy where
  that spills nothing, ptxas's report checked against the architecture's limits (``compiler.py``);
- ``library.CUDAKernelLibrary`` runs them: natively, else on the CPU (``emulate.py``).

Target options: ``cuda -arch=sm_XY`` (default: the installed GPU's architecture, else ``sm_80``).
"""

from __future__ import annotations

import os
from dataclasses import replace

import nnvm
from nnvm.errors import TargetError
from nnvm.gpu.backend import GPUBackend
from nnvm.target import Target
from nnvm.tir.vectorize import C_FAMILY
from nnvm_backend_cuda import compiler, dp4a, native
from nnvm_backend_cuda.library import CUDAKernelLibrary
from nnvm_backend_cuda.printer import CUDAPrinter

# Logs tuned on real GPUs, one per architecture: ``sm_90.jsonl`` on an H200 (make gpu-check --tune-seconds)
TUNED_DIR = os.path.join(os.path.dirname(__file__), "tuned")
# CUDA's vector structs have 2 to 4 lanes (``.x`` to ``.w``); the rest of the C family's capabilities hold
VECTORS = replace(C_FAMILY, lanes=(2, 3, 4))


def target_arch(target: Target) -> str:
    """``-arch`` of the target, else the installed GPU's architecture, else ``sm_80``."""
    arch = target.options.get("arch")
    if arch is None:
        dev = native.open_device()
        arch = dev.arch if dev is not None and dev.arch in compiler.ARCHS else compiler.DEFAULT_ARCH
    return compiler.check_arch(str(arch), target)


class CUDABackend(GPUBackend):
    """Compiles loop programs to CUDA C++ for NVIDIA GPUs."""

    name = "cuda"
    target_kinds = ("cuda",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    printer = CUDAPrinter
    vectors = VECTORS
    library = CUDAKernelLibrary

    def check_target(self, target: Target) -> None:
        unknown = set(target.options) - {"arch"}
        if unknown:
            raise TargetError(f"target {target}: unknown option(s) {', '.join(sorted(unknown))}; the cuda "
                              "target takes -arch=sm_XY")
        target_arch(target)

    def default_tuning_logs(self, target: Target) -> list:
        """The log tuned on a GPU of the target's architecture (``tuned/<arch>.jsonl``), if one ships: a
        config measured on one architecture says little about another's occupancy and caches."""
        path = os.path.join(TUNED_DIR, f"{target_arch(target)}.jsonl")
        return [path] if os.path.exists(path) else []

    def build_options(self, target: Target) -> dict:
        return {"arch": target_arch(target)}

    def tensor_intrinsics(self, target: Target) -> dict:
        """``dp4a`` where the target's architecture has the instruction (sm_61 and up)."""
        return {"dp4a": dp4a.dp4a} if dp4a.has_dp4a(target_arch(target)) else {}

    def compile(self, source: str, tables: list, options: dict) -> CUDAKernelLibrary:
        threads = {k: t for k, (t, _) in compiler.launch_bounds(source).items()}
        source, compiled = compiler.compile_capped(source, options["arch"], threads)
        # the library keeps the source with the register caps: what the cubin was built from
        return CUDAKernelLibrary(tables, compiled, source)


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(CUDABackend())
