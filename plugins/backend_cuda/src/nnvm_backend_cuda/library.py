"""CUDA kernels behind the core's kernel calling convention: natively on an NVIDIA GPU, else on the CPU.

Each function of the library is a C callback ``int32_t f(void **args)`` (``args[k]`` host pointers, one
per parameter) that launches the function's kernels in order with ``cuLaunchKernel``'s argument array.
On the CPU runner a device pointer is a host address, so the kernels work on the runtime's arena and
weights directly; temporaries are host buffers of the library.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError
from nnvm.runtime.kernel import KERNEL_TYPE
from nnvm_backend_cuda import native
from nnvm_backend_cuda.compiler import CompiledCUDA, occupancy

CPU_NOTE = ("no NVIDIA GPU here: running the module's CUDA kernels on the CPU (the same source as host "
            "C++, each CUDA thread a fiber)")
_notes_shown: set = set()
_note_lock = threading.Lock()


def _say_once(note: str) -> None:
    with _note_lock:
        if note not in _notes_shown:
            _notes_shown.add(note)
            print(f"nnvm: {note}", file=sys.stderr)


class CUDAKernelLibrary(KernelLibrary):
    """Kernels of one build: CUDA source, its cubin and PTX, and the launch table of every function."""

    def __init__(self, source: str, tables: list, compiled: CompiledCUDA, blobs: dict | None = None,
                 device=None, reversed_threads: bool | None = None):
        self.source_text = source
        self.tables = {t["name"]: t for t in tables}
        self.compiled = compiled
        self._blobs = blobs or {}
        self.device = device if device is not None else native.open_device()
        # CPU runner: threads of each block in reverse order (None: as NNVM_GPU_THREAD_ORDER says)
        self.reversed_threads = reversed_threads
        self._callbacks: dict = {}
        self._lock = threading.Lock()
        self._host = None
        self._module = None
        self._functions: dict = {}
        self._temps: dict = {}

    # -- the KernelLibrary interface --------------------------------------------------------------
    def source(self) -> str:
        lines = ["// launches (grid, block as x, y, z):"]
        for name, table in self.tables.items():
            for launch in table["launches"]:
                grid = tuple(g // b for g, b in zip(launch["global"], launch["local"]))
                lines.append(f"//   {name}: {launch['kernel']} grid {grid} block {tuple(launch['local'])}")
        return "\n".join(lines) + "\n\n" + self.source_text

    def blob(self, name: str) -> bytes:
        if name not in self._blobs:
            raise ModelLoadError(f"this CUDA module has no {name} section")
        return self._blobs[name]

    def address(self, name: str) -> int:
        if name not in self.tables:
            raise Error(f"no kernel named {name!r} in this library (kernels: {', '.join(self.tables)})")
        if name not in self._callbacks:
            def call(args, _name=name):
                try:
                    self.run(_name, args)
                    return 0
                except Exception as exc:  # never let an exception cross the C boundary
                    print(f"nnvm cuda: {exc}", file=sys.stderr)
                    return 1

            self._callbacks[name] = KERNEL_TYPE(call)
        return ctypes.cast(self._callbacks[name], ctypes.c_void_p).value

    def usage(self) -> dict:
        """Per kernel: threads per block, registers, shared memory, spills (ptxas's report) and the
        theoretical occupancy on the architecture it was compiled for."""
        out = {}
        for table in self.tables.values():
            for launch in table["launches"]:
                u = self.compiled.usage.get(launch["kernel"])
                if u is not None:
                    threads = int(np.prod(launch["local"]))
                    out[launch["kernel"]] = {"threads": threads, **u.as_dict(),
                                             "occupancy": round(occupancy(u, threads, self.compiled.arch), 3)}
        return out

    def stats(self) -> dict:
        """``cuda_arch`` and ``cuda_kernels`` (``usage()``) for ``mod.stats()``; ``cuda_spills``: the kernels
        that spill registers to local memory (none is the goal)."""
        usage = self.usage()
        spills = sorted(k for k, u in usage.items() if u["spill_stores"] or u["spill_loads"])
        return {"cuda_arch": self.compiled.arch, "cuda_kernels": usage, "cuda_spills": spills}

    # -- running ----------------------------------------------------------------------------------
    def run(self, name: str, args) -> None:
        """Run function ``name`` on ``args`` (a ``void **`` of host pointers, one per parameter)."""
        if self.device is None:
            self._run_on_cpu(name, args)
        else:
            self._run_native(name, args)

    def _run_on_cpu(self, name: str, args) -> None:
        from nnvm_backend_cuda.cpu import HostCUDA

        with self._lock:
            if self._host is None:
                self._host = HostCUDA(self.source_text)
        _say_once(CPU_NOTE)
        table = self.tables[name]
        ptrs = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
        values = [ctypes.c_uint64(ptrs[k] or 0) for k in range(len(table["params"]))]
        temps = [np.zeros(max(t["nbytes"], 4), dtype=np.uint8) for t in table["temporaries"]]
        values += [ctypes.c_uint64(t.ctypes.data) for t in temps]
        argv = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        for launch in table["launches"]:
            grid = [g // b for g, b in zip(launch["global"], launch["local"])]
            self._host.launch(launch["kernel"], grid, launch["local"], argv, reversed=self.reversed_threads)

    def _run_native(self, name: str, args) -> None:
        dev = self.device
        with self._lock:
            if self._module is None:
                self._module = dev.load(self.compiled.cubin, self.compiled.ptx, self.compiled.arch)
        table = self.tables[name]
        ptrs = ctypes.cast(args, ctypes.POINTER(ctypes.c_void_p))
        bufs = [dev.alloc(p["nbytes"]) for p in table["params"]] + \
            [dev.alloc(t["nbytes"]) for t in table["temporaries"]]
        try:
            for k, p in enumerate(table["params"]):
                if p["read"]:
                    dev.upload(bufs[k], ptrs[k], p["nbytes"])
            values = [ctypes.c_uint64(b) for b in bufs]
            argv = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
            last = None
            for launch in table["launches"]:
                kernel = launch["kernel"]
                if kernel not in self._functions:
                    self._functions[kernel] = dev.function(self._module, kernel)
                grid = [g // b for g, b in zip(launch["global"], launch["local"])]
                dev.launch(self._functions[kernel], kernel, grid, launch["local"], ctypes.addressof(argv))
                last = kernel
            dev.synchronize(last)
            for k, p in enumerate(table["params"]):
                if p["written"]:
                    dev.download(ptrs[k], bufs[k], p["nbytes"])
        finally:
            for b in bufs:
                dev.free(b)
