"""The ``metal`` target: the loop program printed as Metal Shading Language, run natively on a Mac or, on
every other machine, compiled as C++ by clang and run on the CPU.

The stages are the GPU layer's (``nnvm.gpu.backend.GPUBackend``: lower for the GPU, vectorize, print,
compile); this plugin is the language and the driver:

- ``printer.MetalPrinter`` spells the kernels in MSL (Apple's limits checked);
- ``compile``: Apple's compiler on a Mac (fast math off), clang with the shim elsewhere, at build so
  errors surface there;
- ``library.MetalKernelLibrary`` runs them: natively, else on the CPU (``emulate.py``).

The target takes no options.
"""

from __future__ import annotations

import nnvm
from nnvm.errors import TargetError
from nnvm.gpu.backend import GPUBackend
from nnvm.target import Target
from nnvm_backend_metal.library import MetalKernelLibrary
from nnvm_backend_metal.printer import MetalPrinter


class MetalBackend(GPUBackend):
    """Compiles loop programs to Metal Shading Language for Apple GPUs."""

    name = "metal"
    target_kinds = ("metal",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    unsupported_dtypes = ("float64",)  # Metal has no double
    printer = MetalPrinter
    library = MetalKernelLibrary

    def check_target(self, target: Target) -> None:
        if target.options:
            raise TargetError(f"target {target}: unknown option(s) {', '.join(sorted(target.options))}; the "
                              "metal target takes none")

    def compile(self, source: str, tables: list, options: dict) -> MetalKernelLibrary:
        library = MetalKernelLibrary(tables, source)
        library.check()
        return library


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(MetalBackend())
