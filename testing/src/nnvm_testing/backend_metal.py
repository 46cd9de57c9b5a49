"""A fake of pyobjc's ``Metal`` module with the calls ``native.MetalDevice`` makes, for testing the native
path off a Mac: buffers are host memory, the "library" is the MSL compiled by the CPU runner (clang and
the shim, so a source the shim rejects is a compile error here too), and a committed command buffer runs
its dispatch on the CPU. ``options`` records the compile options, ``dispatches`` every dispatch."""

from __future__ import annotations

import numpy as np

from nnvm.gpu.host import argv


class _Error:
    def __init__(self, text: str):
        self.text = text

    def localizedDescription(self):  # noqa: N802 - pyobjc's name
        return self.text


class _Options:
    fast_math = True  # Metal's default

    @classmethod
    def new(cls):
        return cls()

    def setFastMathEnabled_(self, on):  # noqa: N802
        self.fast_math = bool(on)


class _Contents:
    def __init__(self, array):
        self.array = array

    def as_buffer(self, n):
        return memoryview(self.array)[:n]


class _Buffer:
    def __init__(self, n):
        self.array = np.zeros(n + 64, dtype=np.uint8)
        self.offset = (-self.array.ctypes.data) % 64  # 64-byte aligned, as Metal's are
        self.n = n

    def length(self):
        return self.n

    def contents(self):
        return _Contents(self.array[self.offset:self.offset + self.n])

    def address(self):
        return self.array.ctypes.data + self.offset


class _Library:
    def __init__(self, host):
        self.host = host

    def newFunctionWithName_(self, name):  # noqa: N802
        return name if name in self.host.names else None


class _Pipeline:
    def __init__(self, max_threads):
        self.max_threads = max_threads

    def maxTotalThreadsPerThreadgroup(self):  # noqa: N802
        return self.max_threads


class _Encoder:
    def __init__(self, cb):
        self.cb = cb

    def setComputePipelineState_(self, pso):  # noqa: N802
        self.cb.pso = pso

    def setBuffer_offset_atIndex_(self, buf, offset, index):  # noqa: N802
        self.cb.args[index] = buf.address() + offset

    def dispatchThreadgroups_threadsPerThreadgroup_(self, grid, block):  # noqa: N802
        self.cb.sizes = (grid, block)

    def endEncoding(self):  # noqa: N802
        pass


class _CommandBuffer:
    def __init__(self, fake):
        self.fake, self.args, self.sizes, self._error = fake, {}, None, None

    def computeCommandEncoder(self):  # noqa: N802
        return _Encoder(self)

    def commit(self):
        kernel = self.fake.kernel_of[id(self.pso)]
        self.fake.dispatches.append((kernel, *self.sizes))
        if self.fake.launch_error:
            self._error = _Error(self.fake.launch_error)
            return
        array, _keep = argv([self.args[i] for i in range(len(self.args))])
        self.fake.host.launch(kernel, self.sizes[0], self.sizes[1], array)

    def waitUntilCompleted(self):  # noqa: N802
        pass

    def error(self):
        return self._error


class _Queue:
    def __init__(self, fake):
        self.fake = fake

    def commandBuffer(self):  # noqa: N802
        return _CommandBuffer(self.fake)


class _Device:
    def __init__(self, fake):
        self.fake = fake

    def name(self):
        return "Fake Apple GPU"

    def newLibraryWithSource_options_error_(self, source, options, _err):  # noqa: N802
        from nnvm.errors import Error
        from nnvm_backend_metal.emulate import HostMetal

        self.fake.options.append(options)
        try:
            self.fake.host = HostMetal(source)
        except Error as exc:
            return None, _Error(str(exc))
        return _Library(self.fake.host), None

    def newComputePipelineStateWithFunction_error_(self, fn, _err):  # noqa: N802
        pso = _Pipeline(self.fake.max_threads)
        self.fake.kernel_of[id(pso)] = fn
        self.fake.pipelines.append(pso)
        return pso, None

    def newBufferWithLength_options_(self, n, mode):  # noqa: N802
        assert mode == FakeMetal.MTLResourceStorageModeShared
        return _Buffer(n)

    def newCommandQueue(self):  # noqa: N802
        return _Queue(self.fake)


class FakeMetal:
    """Stands in for ``import Metal``. ``no_device``: ``MTLCreateSystemDefaultDevice`` returns None;
    ``max_threads``: what every pipeline allows per threadgroup; ``launch_error``: every command buffer
    fails with this text."""

    MTLResourceStorageModeShared = 0
    MTLCompileOptions = _Options

    def __init__(self, no_device: bool = False, max_threads: int = 1024, launch_error: str | None = None):
        self.no_device, self.max_threads, self.launch_error = no_device, max_threads, launch_error
        self.options: list = []
        self.dispatches: list = []
        self.pipelines: list = []
        self.kernel_of: dict = {}
        self.host = None

    def MTLCreateSystemDefaultDevice(self):  # noqa: N802
        return None if self.no_device else _Device(self)

    @staticmethod
    def MTLSizeMake(x, y, z):  # noqa: N802
        return (x, y, z)
