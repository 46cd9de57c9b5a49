"""Calling compiled kernels from Python: the ``int32_t f(void **args)`` convention via ctypes."""

from __future__ import annotations

import ctypes

import numpy as np

from nnvm.errors import Error, InputError
from nnvm.runtime.threads import set_default_threads
from nnvm.target import parse_target
from nnvm.te.lower import lower_schedule

KERNEL_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)
# KernelLibrary.sequence_runner: (kernel count, kernels, their argument arrays, the failed one's index)
SEQUENCE_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.POINTER(ctypes.c_int64))


def kernel_from_address(address: int):
    set_default_threads()  # before any kernel can run its first parallel loop
    return KERNEL_TYPE(address)


def pointer_array(arrays) -> ctypes.Array:
    """A C array of the arrays' data pointers (kept alive by the caller)."""
    ptrs = (ctypes.c_void_p * max(len(arrays), 1))()
    for k, a in enumerate(arrays):
        ptrs[k] = a.ctypes.data
    return ptrs


class BuiltFunction:
    """A kernel built from a schedule, called with numpy arrays matching its parameter buffers."""

    def __init__(self, func, library, name: str):
        self.func = func
        self.library = library
        self.name = name
        self._kernel = kernel_from_address(library.address(name))
        self._specs = []
        for buf in func.params:
            shape = tuple(int(getattr(s, "value", s)) for s in buf.shape)
            self._specs.append((buf.name, shape, np.dtype(buf.dtype)))

    def __call__(self, *arrays):
        if len(arrays) != len(self._specs):
            raise InputError(f"{self.name} takes {len(self._specs)} arrays "
                             f"({', '.join(s[0] for s in self._specs)}), got {len(arrays)}")
        for a, (name, shape, dtype) in zip(arrays, self._specs):
            if not isinstance(a, np.ndarray):
                kind = type(a).__name__
                raise InputError(f"{self.name}: argument {name} must be a numpy array, got {kind}")
            if a.shape != shape or a.dtype != dtype:
                raise InputError(f"{self.name}: argument {name} must be {dtype}{list(shape)}, "
                                 f"got {a.dtype}{list(a.shape)}")
            if not a.flags.c_contiguous:
                raise InputError(f"{self.name}: argument {name} must be C-contiguous")
            if not a.flags.writeable:
                raise InputError(f"{self.name}: argument {name} must be writeable")
        ptrs = pointer_array(arrays)
        rc = self._kernel(ctypes.cast(ptrs, ctypes.c_void_p))
        if rc != 0:
            raise Error(f"kernel {self.name} failed with status {rc}")

    def source(self) -> str:
        return self.library.source()


def build_function(schedule, args, target, name: str = "main") -> BuiltFunction:

    tgt = parse_target(target)
    backend = tgt.backend
    backend.check_target(tgt)
    func = lower_schedule(schedule, args, name)
    library = backend.build([func], tgt)
    return BuiltFunction(func, library, name)
