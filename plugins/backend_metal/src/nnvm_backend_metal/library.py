"""Metal kernels on the core's GPU library (``nnvm.gpu.library``): natively on a Mac, else on the CPU.

The shared base keeps the launch table, the device-resident runs and the one-file export (``kernels.metal``,
the plan, the weights); this is the device section for Metal, in two flavours behind the same methods:

- native (``native.MetalDevice``): shared-storage ``MTLBuffer``s, views as (buffer, offset), the library
  built from the source once, a pipeline per kernel, one dispatch per launch;
- the CPU runner (the core's ``nnvm.gpu.host.HostRunner`` with ``emulate.HostMetal``): "device memory" is
  host memory, and a launch runs the same MSL compiled as C++ by clang, each Metal thread a fiber.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm.gpu.host import HostRunner, argv
from nnvm.gpu.library import GPUKernelLibrary
from nnvm_backend_metal import native
from nnvm_backend_metal.emulate import HostMetal

FORMAT = "nnvm-metal"
CPU_NOTE = ("no Metal GPU here: running the Metal kernels on the CPU (the same MSL compiled as C++ by "
            "clang, each Metal thread a fiber)")


class MetalKernelLibrary(GPUKernelLibrary):
    """Kernels of one build: ``kernels.metal``."""

    format = FORMAT
    language = "Metal"
    base_align = 16
    text_files = ("kernels.metal",)

    def __init__(self, tables: list, source: str, blobs: dict | None = None, device=None,
                 reversed_threads: bool | None = None, on_cpu: bool | None = None):
        super().__init__(tables, {"kernels.metal": source}, {}, blobs)
        self.device = None if on_cpu else (device if device is not None else native.open_device())
        # the CPU runner; reversed_threads: each block's threads in reverse order (None: as the
        # environment says, ``nnvm.runtime.host_kernels.threads_reversed``)
        self._host = HostRunner(HostMetal, source, CPU_NOTE, reversed_threads)
        self._library = None
        self._pipelines: dict = {}

    @classmethod
    def from_files(cls, manifest: dict, files: dict, blobs: dict) -> MetalKernelLibrary:
        """The library of an exported file (a zip: manifest, ``kernels.metal``, blobs): native on a Mac, else
        on the CPU runner."""
        return cls(manifest["functions"], files["kernels.metal"], blobs)

    @property
    def on_cpu(self) -> bool:
        return self.device is None

    def source_text(self) -> str:
        return self.files["kernels.metal"]

    def check(self) -> None:
        """Compile the source now (clang here, Apple's compiler on a Mac), so errors surface at build."""
        if self.on_cpu:
            self._host.kernels()
        else:
            for table in self.tables.values():
                for launch in table["launches"]:
                    self._pipeline(launch["kernel"], math.prod(launch["block"]))

    # -- the device -------------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        return self._host.alloc(nbytes) if self.on_cpu else self.device.alloc(nbytes)

    def free(self, buf) -> None:
        if self.on_cpu:
            self._host.free(buf)

    def view(self, buf, offset: int, nbytes: int):
        return buf + offset if self.on_cpu else (buf, offset)

    def _native(self, buf, offset: int, nbytes: int) -> np.ndarray:
        base, extra = buf if isinstance(buf, tuple) else (buf, 0)
        return self.device.contents(base, extra + offset, nbytes)

    def copy_in(self, stream, buf, offset: int, host: np.ndarray) -> None:
        if self.on_cpu:
            self._host.copy_in(buf + offset, host)
        else:
            stream.wait()
            self._native(buf, offset, host.nbytes)[:] = host.reshape(-1).view(np.uint8)

    def copy_out(self, stream, host: np.ndarray, buf, offset: int) -> None:
        if self.on_cpu:
            self._host.copy_out(host, buf + offset)
        else:
            stream.wait()
            host.reshape(-1).view(np.uint8)[:] = self._native(buf, offset, host.nbytes)

    def new_stream(self):
        return None if self.on_cpu else self.device.new_stream()

    def synchronize(self, stream) -> None:
        if not self.on_cpu:
            stream.wait()

    def prepare(self, kernel: str, args: list):
        if self.on_cpu:
            return (kernel, *argv(args))
        return kernel, [a if isinstance(a, tuple) else (a, 0) for a in args]

    def launch(self, stream, prepared, grid: list, block: list) -> None:
        kernel, args = prepared[0], prepared[1]
        if self.on_cpu:
            self._host.launch(kernel, grid, block, args)
        else:
            pso = self._pipeline(kernel, math.prod(block))
            self.device.dispatch(stream, kernel, pso, args, grid, block)

    def _pipeline(self, kernel: str, threads: int):
        with self._lock:
            if self._library is None:
                self._library = self.device.library(self.source_text())
            if kernel not in self._pipelines:
                self._pipelines[kernel] = self.device.pipeline(self._library, kernel, threads)
            return self._pipelines[kernel]
