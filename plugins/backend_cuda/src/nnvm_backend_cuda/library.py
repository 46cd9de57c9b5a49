"""CUDA kernels on the core's GPU library (``nnvm.gpu.library``): natively on an NVIDIA GPU, else on the CPU.

The shared base keeps the launch table, the device-resident runs (weights uploaded once, activations in
device arenas) and the one-file export; this is the device section for CUDA, in two flavours behind
the same seven methods:

- native (``native.CUDADevice``): ``cuMemAlloc``'d buffers, views as pointer + offset, a
  ``cuStreamCreate``'d stream per device arena with asynchronous copies through pinned staging memory,
  the cubin (or PTX on a newer GPU) loaded once, every launch checked against the device's limits once,
  ``cuLaunchKernel`` with an argument array built from the kernel's parameter types (``arguments.py``),
  CUDA events for ``nnvm bench``'s device time;
- the CPU runner (the core's ``nnvm.gpu.host.HostRunner`` with ``emulate.HostCUDA``), where ``cuInit``
  fails: "device memory" is host memory, a device pointer a host address, and a launch runs the same CUDA
  source compiled as host C++, each CUDA thread a fiber. The argument array is the very one
  ``cuLaunchKernel`` would get.
"""

from __future__ import annotations

import ctypes

import numpy as np

from nnvm.errors import Error
from nnvm.gpu.host import HostRunner
from nnvm.gpu.library import GPUKernelLibrary
from nnvm_backend_cuda import native
from nnvm_backend_cuda.arguments import kernel_parameters, pack_arguments
from nnvm_backend_cuda.compiler import CompiledCUDA, launch_bounds, occupancy, parse_ptxas_log
from nnvm_backend_cuda.emulate import HostCUDA

FORMAT = "nnvm-cuda"
CPU_NOTE = ("no NVIDIA GPU here: running the CUDA kernels on the CPU (the same source compiled as host "
            "C++, each CUDA thread a fiber)")


class CUDAKernelLibrary(GPUKernelLibrary):
    """Kernels of one build: ``kernels.cu``, its cubin for ``arch`` and PTX, the ptxas log."""

    format = FORMAT
    language = "CUDA"
    text_files = ("kernels.cu", "ptxas.log")
    required_files = ("kernels.cu", "kernels.cubin", "kernels.ptx")
    required_options = ("arch",)

    def __init__(self, tables: list, compiled: CompiledCUDA, source: str, blobs: dict | None = None,
                 device=None, reversed_threads: bool | None = None):
        files = {"kernels.cu": source, "kernels.cubin": compiled.cubin, "kernels.ptx": compiled.ptx,
                 "ptxas.log": compiled.log}
        super().__init__(tables, files, {"arch": compiled.arch}, blobs)
        self.compiled = compiled
        self.device = device if device is not None else native.open_device()
        # the CPU runner; reversed_threads: each block's threads in reverse order (None: as the
        # environment says, ``nnvm.runtime.host_kernels.threads_reversed``)
        self._host = HostRunner(HostCUDA, source, CPU_NOTE, reversed_threads)
        self._module = None
        self._functions: dict = {}
        self._signatures: dict | None = None  # kernel -> parameter types, read from the source
        self._checked: set = set()  # (kernel, grid, block) found within the device's limits

    @classmethod
    def from_files(cls, manifest: dict, files: dict, blobs: dict) -> CUDAKernelLibrary:
        """The library of an exported file (a zip: manifest, ``kernels.cu``, cubin, PTX, blobs): the cubin
        and PTX as compiled, no NVRTC; native with the cubin or PTX where a GPU is, else on the CPU."""
        log = files.get("ptxas.log", b"")
        log = log.decode() if isinstance(log, bytes) else log
        arch = manifest["options"]["arch"]
        compiled = CompiledCUDA(arch, files["kernels.cubin"], files["kernels.ptx"], parse_ptxas_log(log), log)
        return cls(manifest["functions"], compiled, files["kernels.cu"], blobs)

    @property
    def on_cpu(self) -> bool:
        return self.device is None

    def source_text(self) -> str:
        return self.files["kernels.cu"]

    # -- the device -------------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        return self._host.alloc(nbytes) if self.on_cpu else self.device.alloc(nbytes)

    def free(self, buf) -> None:
        if self.on_cpu:
            self._host.free(buf)
        else:
            self.device.free(buf)

    def view(self, buf, offset: int, nbytes: int):
        return buf + offset

    def copy_in(self, stream, buf, offset: int, host: np.ndarray) -> None:
        if self.on_cpu:
            self._host.copy_in(buf + offset, host)
        elif isinstance(stream, native.CUDAStream):
            stream.copy_in(buf + offset, host)  # staged in pinned memory, cuMemcpyHtoDAsync
        else:
            self.device.upload(buf + offset, host.ctypes.data, host.nbytes)

    def copy_out(self, stream, host: np.ndarray, buf, offset: int) -> None:
        if self.on_cpu:
            self._host.copy_out(host, buf + offset)
        elif isinstance(stream, native.CUDAStream):
            stream.copy_out(host, buf + offset)  # in ``host`` once the stream is synchronized
        else:
            self.device.download(host.ctypes.data, buf + offset, host.nbytes)

    def new_stream(self):
        """A ``cuStreamCreate``'d stream with its pinned staging memory; 0 on the CPU runner (in order)."""
        return 0 if self.on_cpu else self.device.new_stream()

    def release_stream(self, stream) -> None:
        if isinstance(stream, native.CUDAStream):
            stream.close()

    def synchronize(self, stream) -> None:
        if isinstance(stream, native.CUDAStream):
            stream.synchronize()
        elif not self.on_cpu:
            self.device.synchronize()

    def record(self, stream, mark: str) -> bool:
        """A CUDA event named ``mark`` recorded on the stream (natively; the CPU runner has no timer)."""
        if not isinstance(stream, native.CUDAStream):
            return False
        stream.record(mark)
        return True

    def elapsed_ms(self, stream, start: str, stop: str) -> float:
        return stream.elapsed_ms(start, stop)

    def prepare(self, kernel: str, args: list):
        """``cuLaunchKernel``'s argument array for ``args`` (device addresses), built from the kernel's own
        parameter list, and the function. Natively, every launch of the kernel in the launch tables is
        checked against the device's limits here, once, so a launch the device cannot run is refused
        before anything is launched."""
        types = self._parameters().get(kernel)
        if types is None:
            raise Error(f"no CUDA kernel named {kernel} in this library's source")
        for i, t in enumerate(types):
            if "*" not in t:
                raise Error(f"CUDA kernel {kernel}: parameter {i} is a {t}, but the launch table passes only "
                            f"buffers")
        array, values = pack_arguments(kernel, types, args)
        function = self._function(kernel)
        if not self.on_cpu:
            for table in self.tables.values():
                for launch in table["launches"]:  # a grid over symbolic dims: checked at its launch
                    if launch["kernel"] == kernel and all(isinstance(g, int) for g in launch["grid"]):
                        self._check_launch(kernel, function, launch["grid"], launch["block"])
        return kernel, function, array, values

    def launch(self, stream, prepared, grid: list, block: list) -> None:
        kernel, function, array, _values = prepared
        if self.on_cpu:
            self._host.launch(kernel, grid, block, array)
            return
        self._check_launch(kernel, function, grid, block)
        if isinstance(stream, native.CUDAStream):
            stream.launch(function, kernel, grid, block, ctypes.addressof(array))
        else:
            self.device.launch(function, kernel, grid, block, ctypes.addressof(array))

    def _check_launch(self, kernel: str, function, grid, block) -> None:
        """``CUDADevice.check_launch`` once per kernel and launch shape (a set lookup after that)."""
        key = (kernel, tuple(grid), tuple(block))
        if key in self._checked:
            return
        usage = self.compiled.usage.get(kernel)
        self.device.check_launch(kernel, grid, block, usage.shared_bytes if usage else 0, function)
        with self._lock:
            self._checked.add(key)

    def _parameters(self) -> dict:
        if self._signatures is None:
            self._signatures = kernel_parameters(self.source_text())
        return self._signatures

    def _function(self, kernel: str):
        if self.on_cpu:
            return None
        with self._lock:
            if self._module is None:
                self._module = self.device.load(self.compiled.cubin, self.compiled.ptx, self.compiled.arch)
            if kernel not in self._functions:
                self._functions[kernel] = self.device.function(self._module, kernel)
            return self._functions[kernel]

    # -- what ptxas said ----------------------------------------------------------------------------
    def usage(self) -> dict:
        """Per kernel: threads per block, the blocks per SM its registers were capped for (0: no cap),
        registers, shared memory, spills (ptxas's report) and the theoretical occupancy on the
        architecture it was compiled for."""
        caps = launch_bounds(self.source_text())
        out = {}
        for table in self.tables.values():
            for launch in table["launches"]:
                u = self.compiled.usage.get(launch["kernel"])
                if u is not None:
                    threads = int(np.prod(launch["block"]))
                    cap = caps.get(launch["kernel"], (0, 0))[1]
                    out[launch["kernel"]] = {"threads": threads, "min_blocks": cap, **u.as_dict(),
                                             "occupancy": round(occupancy(u, threads, self.compiled.arch), 3)}
        return out

    def stats(self) -> dict:
        """``cuda_arch`` and ``cuda_kernels`` (``usage()``) for ``mod.stats()``; ``cuda_spills``: the kernels
        that spill registers to local memory (none is the goal)."""
        usage = self.usage()
        spills = sorted(k for k, u in usage.items() if u["spill_stores"] or u["spill_loads"])
        return {"cuda_arch": self.compiled.arch, "cuda_kernels": usage, "cuda_spills": spills}
