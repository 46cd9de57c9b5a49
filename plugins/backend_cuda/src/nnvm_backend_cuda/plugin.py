"""The ``cuda`` target: the loop program printed as CUDA C++, compiled by NVRTC, run natively or on the CPU.

A ``build`` call runs these stages (``CUDABackend.stages``) over all its functions:

1. ``gpu``: ``nnvm.tir.gpu.lower_for_gpu``: thread loops -> launch sizes and thread indices, shared
   buffers at block level, barriers; one launch per root loop nest;
2. ``vectorize``: ``nnvm.tir.vectorize``: vectorized loops -> ``float4`` loads, stores, arithmetic;
3. ``print``: ``printer.CUDAPrinter`` writes one CUDA source for all kernels;
4. ``compile``: NVRTC builds a cubin for ``-arch`` (and PTX), registers capped for 50% occupancy where
   that spills nothing, ptxas's report checked against the architecture's limits (``compiler.py``).

Target options: ``cuda -arch=sm_XY`` (default: the installed GPU's architecture, else ``sm_80``).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import nnvm
from nnvm.backend import Backend
from nnvm.errors import TargetError
from nnvm.gpu.library import launch_table, read_export
from nnvm.target import Target
from nnvm.tir.gpu import lower_for_gpu
from nnvm.tir.vectorize import C_FAMILY, vectorize_loops
from nnvm_backend_cuda import compiler, native
from nnvm_backend_cuda.library import FORMAT, CUDAKernelLibrary
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


class CUDABackend(Backend):
    """Compiles loop programs to CUDA C++ for NVIDIA GPUs."""

    name = "cuda"
    target_kinds = ("cuda",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    stages = (("gpu", "_gpu"), ("vectorize", "_vectorize"), ("print", "_print"), ("compile", "_compile"))

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

    def build(self, funcs: list, target: Target) -> CUDAKernelLibrary:
        state = {"funcs": list(funcs), "arch": target_arch(target), "seconds": {}}
        for stage, method in self.stages:
            start = time.perf_counter()
            state = getattr(self, method)(state)
            state["seconds"][stage] = time.perf_counter() - start
        return state["library"]

    def open_foreign(self, path: str) -> CUDAKernelLibrary | None:
        """The library of a file ``CUDAKernelLibrary.export`` wrote (a zip: manifest, ``kernels.cu``, cubin,
        PTX, blobs): native with the cubin or PTX where a GPU is, else on the CPU runner."""
        found = read_export(path, FORMAT, text_files=("kernels.cu", "ptxas.log"),
                            required_files=("kernels.cu", "kernels.cubin", "kernels.ptx"),
                            required_options=("arch",))
        return None if found is None else CUDAKernelLibrary.from_files(*found)

    # -- stages -----------------------------------------------------------------------------------
    def _gpu(self, state: dict) -> dict:
        state["programs"] = [lower_for_gpu(f) for f in state["funcs"]]
        return state

    def _vectorize(self, state: dict) -> dict:
        for prog in state["programs"]:
            prog.kernels = [replace(k, body=vectorize_loops(k.body, VECTORS)) for k in prog.kernels]
        return state

    def _print(self, state: dict) -> dict:
        kernels = [k for prog in state["programs"] for k in prog.kernels]
        state["source"] = CUDAPrinter().program(kernels)
        return state

    def _compile(self, state: dict) -> dict:
        threads = {k: t for k, (t, _) in compiler.launch_bounds(state["source"]).items()}
        source, compiled = compiler.compile_capped(state["source"], state["arch"], threads)
        state["source"] = source  # with the register caps: what the cubin was built from
        tables = [launch_table(p) for p in state["programs"]]
        state["library"] = CUDAKernelLibrary(tables, compiled, source)
        return state


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(CUDABackend())

