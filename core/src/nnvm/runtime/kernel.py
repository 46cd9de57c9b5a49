"""Calling compiled kernels from Python: the ``int32_t f(void **args)`` convention via ctypes."""

from __future__ import annotations

import ctypes

import numpy as np

from nnvm.errors import Error, InputError
from nnvm.runtime.threads import set_default_threads
from nnvm.target import parse_target
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E

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
            shape = tuple(s if isinstance(s, E.Var) else _static_extent(s, buf.name) for s in buf.shape)
            self._specs.append((buf.name, shape, np.dtype(buf.dtype)))
        self._dims = func.dims

    def __call__(self, *arrays):
        if len(arrays) != len(self._specs):
            raise InputError(f"{self.name} takes {len(self._specs)} arrays "
                             f"({', '.join(s[0] for s in self._specs)}), got {len(arrays)}")
        dims: dict = {}  # symbolic dim -> its value, from the first array giving it
        for a, (name, shape, dtype) in zip(arrays, self._specs):
            if not isinstance(a, np.ndarray):
                kind = type(a).__name__
                raise InputError(f"{self.name}: argument {name} must be a numpy array, got {kind}")
            if len(a.shape) == len(shape):
                for k, s in enumerate(shape):
                    if isinstance(s, E.Var) and dims.setdefault(s, a.shape[k]) != a.shape[k]:
                        raise InputError(f"{self.name}: argument {name} dim {k} ({s.name}) is {a.shape[k]}, "
                                         f"but an earlier argument has {s.name} = {dims[s]}")
            want = tuple(dims.get(s, s) if isinstance(s, E.Var) else s for s in shape)
            if a.shape != want or a.dtype != dtype:
                shown = [getattr(s, "name", s) for s in shape]
                raise InputError(f"{self.name}: argument {name} must be {dtype}{shown}, "
                                 f"got {a.dtype}{list(a.shape)}")
            if not a.flags.c_contiguous:
                raise InputError(f"{self.name}: argument {name} must be C-contiguous")
            if not a.flags.writeable:
                raise InputError(f"{self.name}: argument {name} must be writeable")
        values = [np.array([dims[d]], dtype=np.int64) for d in self._dims]
        ptrs = pointer_array(list(arrays) + values)
        rc = self._kernel(ctypes.cast(ptrs, ctypes.c_void_p))
        if rc != 0:
            raise Error(f"kernel {self.name} failed with status {rc}")

    def source(self) -> str:
        return self.library.source()


def _static_extent(extent, buffer: str) -> int:
    """A parameter's extent as an int: a constant, or (symbolic) a bare dim variable only for now."""
    if isinstance(extent, E.Const) or isinstance(extent, int):
        return int(getattr(extent, "value", extent))
    raise Error(f"buffer {buffer}: the extent {extent} is an expression of symbolic dims; a function's "
                "parameters take a constant or a single dim for now")


def build_function(schedule, args, target, name: str = "main") -> BuiltFunction:

    tgt = parse_target(target)
    backend = tgt.backend
    backend.check_target(tgt)
    func = lower_schedule(schedule, args, name)
    library = backend.build([func], tgt)
    return BuiltFunction(func, library, name)
