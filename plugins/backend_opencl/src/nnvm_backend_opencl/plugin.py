"""The ``opencl`` target: the loop program printed as OpenCL C, built and run with pyopencl.

The stages are the GPU layer's (``nnvm.gpu.backend.GPUBackend``: lower for the GPU, vectorize, print,
compile); this plugin is the language and the driver:

- ``printer.OpenCLPrinter`` spells the kernels in OpenCL C (shared buffers are ``__local``);
- ``compile``: the OpenCL driver builds the source once (cached by source hash, see ``runtime.py``);
- ``library.OpenCLKernelLibrary`` runs them on the device.

Target options: ``opencl -device=cpu|gpu|accelerator`` (PoCL's CPU device is ``cpu``).
"""

from __future__ import annotations

import nnvm
from nnvm.errors import TargetError
from nnvm.gpu.backend import GPUBackend
from nnvm.target import Target
from nnvm_backend_opencl import runtime
from nnvm_backend_opencl.library import OpenCLKernelLibrary
from nnvm_backend_opencl.printer import OpenCLPrinter


class OpenCLBackend(GPUBackend):
    """Compiles loop programs to OpenCL C for any OpenCL 1.2 device."""

    name = "opencl"
    target_kinds = ("opencl",)
    keys, device = ("gpu",), "gpu"  # the GPU layer (nnvm.gpu) serves it
    printer = OpenCLPrinter
    library = OpenCLKernelLibrary

    def check_target(self, target: Target) -> None:
        unknown = set(target.options) - {"device"}
        if unknown:
            raise TargetError(f"target {target}: unknown option(s) {', '.join(sorted(unknown))}; the opencl "
                              "target takes -device=cpu|gpu|accelerator")
        runtime.device_kind(target)

    def build_options(self, target: Target) -> dict:
        return {"device": runtime.device_kind(target)}

    def compile(self, source: str, tables: list, options: dict) -> OpenCLKernelLibrary:
        return OpenCLKernelLibrary(source, tables, options["device"])


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(OpenCLBackend())
