"""GPU kernels on the CPU, for backends whose hardware is absent (CUDA off NVIDIA, Metal off a Mac).

``HostRunner`` is that device, written once for every such backend: "device memory" is host memory
(``HostMemory``: a 64-byte aligned numpy allocation, a device pointer its host address, so a launch's
argument array, ``argv``, is the one the fiber runner's trampolines unpack) and a launch runs the very
source the backend generated, compiled for the CPU by the language plugin's ``HostSource`` subclass
(``nnvm.runtime.host_kernels``), built on the first launch. ``say_once`` is the one line a CPU run prints
on stderr.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

from nnvm.runtime.host_kernels import HostSource

_notes_shown: set = set()
_note_lock = threading.Lock()


def say_once(note: str) -> None:
    """``nnvm: note`` on stderr, once per process per note (as ``Module.run`` does under an emulator)."""
    with _note_lock:
        if note in _notes_shown:
            return
        _notes_shown.add(note)
    print(f"nnvm: {note}", file=sys.stderr)


class HostMemory:
    """Host allocations standing in for device memory; addresses are plain ints."""

    def __init__(self):
        self._buffers: dict = {}  # address -> numpy array keeping it alive
        self._lock = threading.Lock()

    def alloc(self, nbytes: int) -> int:
        buf = np.zeros(max(int(nbytes), 4) + 64, dtype=np.uint8)
        addr = buf.ctypes.data + (-buf.ctypes.data) % 64
        with self._lock:
            self._buffers[addr] = buf
        return addr

    def free(self, addr: int) -> None:
        with self._lock:
            self._buffers.pop(addr, None)

    @staticmethod
    def copy_in(addr: int, host: np.ndarray) -> None:
        ctypes.memmove(addr, host.ctypes.data, host.nbytes)

    @staticmethod
    def copy_out(host: np.ndarray, addr: int) -> None:
        ctypes.memmove(host.ctypes.data, addr, host.nbytes)


def argv(args: list) -> tuple:
    """``(array, values)``: a ``void **`` whose i-th entry points at the i-th pointer argument; keep
    ``values`` alive as long as the array."""
    values = [ctypes.c_uint64(int(a)) for a in args]
    array = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    return array, values


class HostRunner(HostMemory):
    """The device of a GPU library whose hardware is absent: host memory, and ``kernels`` (a
    ``HostSource`` subclass, the language plugin's) built from ``source`` on first use. ``note`` is said
    once on stderr at the first launch; ``reversed_threads`` runs the threads of every block in reverse
    order (None: as ``NNVM_GPU_THREAD_ORDER`` says)."""

    def __init__(self, kernels: type[HostSource], source: str, note: str,
                 reversed_threads: bool | None = None):
        super().__init__()
        self._make = kernels
        self._source = source
        self._built: HostSource | None = None
        self._build_lock = threading.Lock()  # not the memory's: allocations need not wait for a compile
        self.note = note
        self.reversed_threads = reversed_threads

    def kernels(self) -> HostSource:
        """The source built for the CPU (compiled on the first call: a compiler error surfaces here)."""
        with self._build_lock:
            if self._built is None:
                self._built = self._make(self._source)
            return self._built

    def launch(self, kernel: str, grid, block, args) -> None:
        """Run ``grid`` blocks of ``block`` threads of ``kernel`` on the argument array ``args``."""
        say_once(self.note)
        self.kernels().launch(kernel, grid, block, args, reversed=self.reversed_threads)
