"""The ``metal`` target: the loop program printed as Metal Shading Language, run natively on a Mac or, on
every other machine, compiled as C++ by clang and run on the CPU.

A ``build`` call runs these stages (``MetalBackend.stages``) over all its functions:

1. ``gpu``: ``nnvm.tir.gpu.lower_for_gpu``: thread loops -> launch sizes and thread indices, threadgroup
   buffers at block level, barriers; one launch per root loop nest;
2. ``vectorize``: ``nnvm.tir.vectorize``: vectorized loops -> ``float4`` loads, stores, arithmetic;
3. ``print``: ``printer.MetalPrinter`` writes one MSL source for all kernels (Apple's limits checked);
4. ``compile``: Apple's compiler on a Mac (fast math off), clang with the shim elsewhere.

The target takes no options.
"""

from __future__ import annotations

import time
from dataclasses import replace

import nnvm
from nnvm.backend import Backend
from nnvm.errors import TargetError
from nnvm.gpu.library import launch_table, read_export
from nnvm.target import Target
from nnvm.tir.gpu import lower_for_gpu
from nnvm.tir.vectorize import vectorize_loops
from nnvm_backend_metal.library import FORMAT, MetalKernelLibrary
from nnvm_backend_metal.printer import MetalPrinter


class MetalBackend(Backend):
    """Compiles loop programs to Metal Shading Language for Apple GPUs."""

    name = "metal"
    target_kinds = ("metal",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    unsupported_dtypes = ("float64",)  # Metal has no double
    stages = (("gpu", "_gpu"), ("vectorize", "_vectorize"), ("print", "_print"), ("compile", "_compile"))

    def check_target(self, target: Target) -> None:
        if target.options:
            raise TargetError(f"target {target}: unknown option(s) {', '.join(sorted(target.options))}; the "
                              "metal target takes none")

    def build(self, funcs: list, target: Target) -> MetalKernelLibrary:
        state = {"funcs": list(funcs), "seconds": {}}
        for stage, method in self.stages:
            start = time.perf_counter()
            state = getattr(self, method)(state)
            state["seconds"][stage] = time.perf_counter() - start
        return state["library"]

    def open_foreign(self, path: str) -> MetalKernelLibrary | None:
        """The library of a file ``MetalKernelLibrary.export`` wrote (a zip: manifest, ``kernels.metal``,
        blobs): native on a Mac, else on the CPU runner."""
        found = read_export(path, FORMAT, text_files=("kernels.metal",))
        return None if found is None else MetalKernelLibrary.from_files(*found)

    # -- stages -----------------------------------------------------------------------------------
    def _gpu(self, state: dict) -> dict:
        state["programs"] = [lower_for_gpu(f) for f in state["funcs"]]
        return state

    def _vectorize(self, state: dict) -> dict:
        for prog in state["programs"]:
            prog.kernels = [replace(k, body=vectorize_loops(k.body)) for k in prog.kernels]
        return state

    def _print(self, state: dict) -> dict:
        kernels = [k for prog in state["programs"] for k in prog.kernels]
        state["source"] = MetalPrinter().program(kernels)
        return state

    def _compile(self, state: dict) -> dict:
        tables = [launch_table(p) for p in state["programs"]]
        state["library"] = MetalKernelLibrary(tables, state["source"])
        state["library"].check()
        return state


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(MetalBackend())
