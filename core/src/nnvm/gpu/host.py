"""Device memory on the host, for GPU backends whose kernels run on the CPU (``nnvm.runtime.fibers``).

A "device buffer" is a 64-byte aligned numpy allocation and a device pointer its host address, so a
launch's argument array (``argv``: ``args[i]`` points at the i-th argument's value) is the one the
fiber runner's trampolines unpack. ``say_once`` is the one line a CPU run prints on stderr.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import numpy as np

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
