"""Native execution on a Mac through ``pyobjc-framework-Metal``: the library built from the MSL source
with fast math off, one compute pipeline per kernel, shared-storage buffers, dispatch, errors naming the
kernel.

Everything goes through one ``metal`` module object (pyobjc's ``Metal``), so tests can hand in a fake at
exactly this boundary. "No Metal here" is the import failing (every machine but a Mac) or
``MTLCreateSystemDefaultDevice`` returning None: ``open_device`` then returns None.
"""

from __future__ import annotations

import threading

import numpy as np

from nnvm.errors import Error

_lock = threading.Lock()
_device: dict = {}  # "device" -> MetalDevice or None, probed once per process


def open_device(metal=None):
    """The system's default Metal device, or None off a Mac. Probed once per process unless a ``metal``
    module is given."""
    if metal is not None:
        return MetalDevice.open(metal)
    with _lock:
        if "device" not in _device:
            try:
                import Metal as metal_module
            except ImportError:
                _device["device"] = None
            else:
                _device["device"] = MetalDevice.open(metal_module)
        return _device["device"]


def _message(err) -> str:
    if err is None:
        return "unknown error"
    try:
        return str(err.localizedDescription())
    except Exception:
        return str(err)


class Stream:
    """An in-order queue: launches are committed command buffers; a copy waits for the last one."""

    def __init__(self, queue):
        self.queue = queue
        self.pending = None  # (command buffer, kernel) of the last launch

    def wait(self) -> None:
        if self.pending is None:
            return
        cb, kernel = self.pending
        self.pending = None
        cb.waitUntilCompleted()
        if cb.error() is not None:
            raise Error(f"the Metal kernel {kernel} failed: {_message(cb.error())}")


class MetalDevice:
    """One Metal device: its command queue, the library of one source and a pipeline per kernel."""

    def __init__(self, metal, device):
        self.metal = metal
        self.device = device
        self.name = str(device.name())

    @classmethod
    def open(cls, metal) -> MetalDevice | None:
        device = metal.MTLCreateSystemDefaultDevice()
        return None if device is None else cls(metal, device)

    def library(self, source: str):
        """The library of ``source``, fast math off (INF and NaN must survive); an error quotes Apple's
        compiler."""
        options = self.metal.MTLCompileOptions.new()
        options.setFastMathEnabled_(False)
        lib, err = self.device.newLibraryWithSource_options_error_(source, options, None)
        if lib is None:
            raise Error(f"Apple's Metal compiler rejected the generated MSL: {_message(err)}")
        return lib

    def pipeline(self, library, kernel: str, threads: int):
        fn = library.newFunctionWithName_(kernel)
        if fn is None:
            raise Error(f"the Metal library has no kernel {kernel}")
        pso, err = self.device.newComputePipelineStateWithFunction_error_(fn, None)
        if pso is None:
            raise Error(f"the Metal kernel {kernel}: no pipeline state: {_message(err)}")
        if threads > pso.maxTotalThreadsPerThreadgroup():
            raise Error(f"the Metal kernel {kernel} needs {threads} threads per threadgroup; this GPU runs "
                        f"at most {pso.maxTotalThreadsPerThreadgroup()} of it")
        return pso

    def alloc(self, nbytes: int):
        buf = self.device.newBufferWithLength_options_(max(int(nbytes), 4),
                                                       self.metal.MTLResourceStorageModeShared)
        if buf is None:
            raise Error(f"the Metal device could not allocate {nbytes} bytes")
        return buf

    @staticmethod
    def contents(buf, offset: int, nbytes: int) -> np.ndarray:
        whole = np.frombuffer(buf.contents().as_buffer(buf.length()), dtype=np.uint8)
        return whole[offset:offset + nbytes]

    def new_stream(self) -> Stream:
        return Stream(self.device.newCommandQueue())

    def dispatch(self, stream: Stream, kernel: str, pso, args: list, grid, block) -> None:
        """Encode and commit one dispatch; ``args``: (buffer, offset) per ``[[buffer(i)]]``."""
        stream.wait()  # one command buffer in flight per stream: copies in between see its results
        cb = stream.queue.commandBuffer()
        enc = cb.computeCommandEncoder()
        enc.setComputePipelineState_(pso)
        for i, (buf, offset) in enumerate(args):
            enc.setBuffer_offset_atIndex_(buf, offset, i)
        enc.dispatchThreadgroups_threadsPerThreadgroup_(self.metal.MTLSizeMake(*grid),
                                                        self.metal.MTLSizeMake(*block))
        enc.endEncoding()
        cb.commit()
        stream.pending = (cb, kernel)
