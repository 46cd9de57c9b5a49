"""The ``opencl`` target: the loop program printed as OpenCL C, built and run with pyopencl.

A ``build`` call runs these stages (``OpenCLBackend.stages``) over all its functions:

1. ``gpu``: ``nnvm.tir.gpu.lower_for_gpu``: thread loops -> launch sizes and thread indices,
   shared buffers -> ``__local`` at block level, barriers; one launch per root loop nest;
2. ``vectorize``: ``nnvm.tir.vectorize``: vectorized loops -> ``float4`` loads, stores, arithmetic;
3. ``print``: ``printer.OpenCLPrinter`` (the core's C-family printer) writes one source for all;
4. ``compile``: the OpenCL driver builds it once (cached by source hash, see ``runtime.py``).

Target options: ``opencl -device=cpu|gpu|accelerator`` (PoCL's CPU device is ``cpu``).
"""

from __future__ import annotations

import time
from dataclasses import replace

import nnvm
from nnvm.backend import Backend
from nnvm.errors import TargetError
from nnvm.gpu.library import launch_table
from nnvm.target import Target
from nnvm.tir.gpu import lower_for_gpu
from nnvm.tir.vectorize import C_FAMILY, vectorize_loops
from nnvm_backend_opencl import runtime
from nnvm_backend_opencl.library import OpenCLKernelLibrary, load_library
from nnvm_backend_opencl.printer import OpenCLPrinter


class OpenCLBackend(Backend):
    """Compiles loop programs to OpenCL C for any OpenCL 1.2 device."""

    name = "opencl"
    target_kinds = ("opencl",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    stages = (("gpu", "_gpu"), ("vectorize", "_vectorize"), ("print", "_print"), ("compile", "_compile"))

    def check_target(self, target: Target) -> None:
        unknown = set(target.options) - {"device"}
        if unknown:
            raise TargetError(f"target {target}: unknown option(s) {', '.join(sorted(unknown))}; the opencl "
                              "target takes -device=cpu|gpu|accelerator")
        runtime.device_kind(target)

    def build(self, funcs: list, target: Target) -> OpenCLKernelLibrary:
        state = {"funcs": list(funcs), "device": runtime.device_kind(target), "seconds": {}}
        for stage, method in self.stages:
            start = time.perf_counter()
            state = getattr(self, method)(state)
            state["seconds"][stage] = time.perf_counter() - start
        return state["library"]

    def open_foreign(self, path: str):
        return load_library(path)

    # -- stages -----------------------------------------------------------------------------------
    def _gpu(self, state: dict) -> dict:
        state["programs"] = [lower_for_gpu(f) for f in state["funcs"]]
        return state

    def _vectorize(self, state: dict) -> dict:
        for prog in state["programs"]:
            prog.kernels = [replace(k, body=vectorize_loops(k.body, C_FAMILY)) for k in prog.kernels]
        return state

    def _print(self, state: dict) -> dict:
        kernels = [k for prog in state["programs"] for k in prog.kernels]
        state["source"] = OpenCLPrinter().program(kernels)
        return state

    def _compile(self, state: dict) -> dict:
        tables = [launch_table(p) for p in state["programs"]]
        state["library"] = OpenCLKernelLibrary(state["source"], tables, state["device"])
        return state


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(OpenCLBackend())

