"""Hand-written CUDA kernels for the compiler and the CPU runner, plus a helper building the argument
array ``cuLaunchKernel`` takes (``args[i]`` points at the i-th argument's value)."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from nnvm.errors import Error

# b[i] = 2 * a[i] + 1 over a grid of blocks; no barrier (runs without fibers).
SAXPY = r"""
extern "C" __global__ void __launch_bounds__(64) saxpy(float* __restrict__ b, const float* __restrict__ a,
                                                       int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 2.0f * a[i] + 1.0f;
}
"""

# Each block reverses its 64-element slice through shared memory: needs the barrier.
REVERSE = r"""
extern "C" __global__ void __launch_bounds__(64) reverse(float* __restrict__ out,
                                                         const float* __restrict__ in) {
  __shared__ float tile[64];
  unsigned base = blockIdx.x * 64;
  tile[threadIdx.x] = in[base + threadIdx.x];
  __syncthreads();
  out[base + threadIdx.x] = tile[63 - threadIdx.x];
}
"""

# The same without the barrier: right in one thread order at most, wrong in the other.
REVERSE_NO_BARRIER = REVERSE.replace("  __syncthreads();\n", "").replace("reverse(", "reverse_racy(")

# A block sum by tree reduction in shared memory: a barrier per step, 2-D blocks, float4 loads.
BLOCK_SUM = r"""
extern "C" __global__ void __launch_bounds__(128) block_sum(float* __restrict__ out,
                                                            const float4* __restrict__ in) {
  __shared__ float part[128];
  unsigned t = threadIdx.y * blockDim.x + threadIdx.x;
  float4 v = in[blockIdx.x * 128 + t];
  part[t] = v.x + v.y + v.z + v.w;
  __syncthreads();
  for (unsigned s = 64; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = part[0];
}
"""

# Only the first half of the block reaches the barrier.
DIVERGENT = r"""
extern "C" __global__ void divergent(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}
"""


class Args:
    """``void *args[]`` for ``cuLaunchKernel``: pointers to the argument values (device pointers are
    host addresses on the CPU runner), kept alive with this object."""

    def __init__(self, *values):
        self.values = []
        for v in values:
            if isinstance(v, np.ndarray):
                self.values.append(ctypes.c_uint64(v.ctypes.data))
            elif isinstance(v, float):
                self.values.append(ctypes.c_float(v))
            else:
                self.values.append(ctypes.c_int32(v))
        self.array = (ctypes.c_void_p * len(self.values))(*[ctypes.addressof(v) for v in self.values])


class _Handle:
    """A stream or event of the fake driver (the real one returns ``CUstream`` / ``CUevent`` objects)."""

    def __init__(self, kind: str, number: int):
        self.kind, self.number = kind, number

    def __int__(self) -> int:
        return self.number

    def __repr__(self) -> str:
        return f"<fake {self.kind} {self.number}>"


# What the fake device reports for each CU_DEVICE_ATTRIBUTE_ (an H100's numbers)
FAKE_LIMITS = {"MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024,
               "MAX_BLOCK_DIM_Z": 64, "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535,
               "MAX_GRID_DIM_Z": 65535, "MAX_SHARED_MEMORY_PER_BLOCK": 49152}


class FakeDriver:
    """The driver API calls ``native.CUDADevice`` makes, with the real ``CUresult`` codes: "device memory"
    in host buffers, launches run by the CPU runner on ``source``, host-to-device copies recorded in
    ``calls`` (so a test can count what a run uploads). Like the driver, it keeps the current context
    per thread: a call that needs one, on a thread where none was made current, is
    ``CUDA_ERROR_INVALID_CONTEXT``.

    Work on a created stream (launches, ``cuMemcpy*Async``, ``cuEventRecord``) is queued and runs only at
    ``cuStreamSynchronize`` (or a synchronous call), so a caller that reads a download, or reuses a
    staging buffer, before synchronizing gets wrong numbers, as on a GPU. A launch copies its arguments
    when it is made, ``sizeof`` each kernel parameter (the types read from ``source``), as the driver
    does. Streams, events and pinned host memory are tracked (``streams``, ``events``, ``pinned``), so
    a test can prove they are freed; ``async_copies`` says of each asynchronous copy whether its host
    side was pinned. ``fail`` (call name -> ``CUresult``) makes those calls return that error."""

    def __init__(self, source: str, arch=(8, 0), init_error=None, launch_error=None, limits=None,
                 function_max_threads: int = 1024, fail: dict | None = None):
        from cuda.bindings import driver

        from nnvm_backend_cuda.arguments import kernel_parameters

        self.CUresult = driver.CUresult
        self.CUdevice_attribute = driver.CUdevice_attribute
        self.CUfunction_attribute = driver.CUfunction_attribute
        self.source, self.arch = source, arch
        self.parameters = kernel_parameters(source)
        self.init_error, self.launch_error = init_error, launch_error
        self.limits = {**FAKE_LIMITS, **(limits or {})}
        self.function_max_threads = function_max_threads
        self.fail = dict(fail or {})
        self.buffers: dict = {}
        self.pinned: dict = {}  # address -> host buffer from cuMemHostAlloc
        self.streams: dict = {}  # stream number -> queued work (callables)
        self.events: dict = {}  # event number -> perf_counter when it ran, None before
        self.calls: list = []
        self.async_copies: list = []  # (kind, nbytes, host side pinned)
        self.launches: list = []  # (kernel, grid, block, stream number)
        self.loaded = None
        self._next = 0
        self._thread = threading.local()  # .context: the context current on this thread

    def __getattribute__(self, name: str):
        fail = object.__getattribute__(self, "__dict__").get("fail") or {}
        if name in fail:
            return lambda *args: (fail[name], None)
        return object.__getattribute__(self, name)

    def _no_context(self):
        """The error of a call made on a thread with no current context, else None."""
        if getattr(self._thread, "context", None) is None:
            return (self.CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        return None

    def _handle(self, kind: str) -> _Handle:
        self._next += 1
        return _Handle(kind, self._next)

    def _drain(self, stream=None) -> None:
        """Run the queued work of ``stream`` (None: of every stream), in order."""
        for number in [int(stream)] if stream is not None else list(self.streams):
            queue = self.streams.get(number, [])
            while queue:
                queue.pop(0)()

    def _enqueue(self, stream, work) -> tuple | None:
        """Queue ``work`` on ``stream`` (run it now on the default stream); an error for an unknown one."""
        if stream is None or int(stream) == 0:
            self._drain()
            work()
            return None
        if int(stream) not in self.streams:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.streams[int(stream)].append(work)
        return None

    def _pinned(self, address: int, nbytes: int) -> bool:
        return any(a <= address and address + nbytes <= a + b.nbytes for a, b in self.pinned.items())

    def cuInit(self, flags):
        if isinstance(self.init_error, Exception):
            raise self.init_error
        return (self.init_error or self.CUresult.CUDA_SUCCESS,)

    def cuDeviceGetCount(self):
        return self.CUresult.CUDA_SUCCESS, 1

    def cuDeviceGet(self, i):
        return self.CUresult.CUDA_SUCCESS, 0

    def cuDeviceGetAttribute(self, attr, dev):
        name = attr.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        if name == "COMPUTE_CAPABILITY_MAJOR":
            return self.CUresult.CUDA_SUCCESS, self.arch[0]
        if name == "COMPUTE_CAPABILITY_MINOR":
            return self.CUresult.CUDA_SUCCESS, self.arch[1]
        if name not in self.limits:
            return self.CUresult.CUDA_ERROR_INVALID_VALUE, 0
        return self.CUresult.CUDA_SUCCESS, self.limits[name]

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.CUresult.CUDA_SUCCESS, "ctx"

    def cuCtxSetCurrent(self, ctx):
        self._thread.context = ctx
        return (self.CUresult.CUDA_SUCCESS,)

    def cuModuleLoadData(self, image):
        from nnvm_backend_cuda.emulate import HostCUDA

        if error := self._no_context():
            return error
        self.loaded = bytes(image)
        return self.CUresult.CUDA_SUCCESS, HostCUDA(self.source)

    def cuModuleGetFunction(self, module, name):
        if error := self._no_context():
            return error
        if name.decode() not in module.names:
            return (self.CUresult.CUDA_ERROR_NOT_FOUND, None)
        return self.CUresult.CUDA_SUCCESS, (module, name.decode())

    def cuFuncGetAttribute(self, attr, f):
        if error := self._no_context():
            return error
        if attr != self.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
            return self.CUresult.CUDA_ERROR_INVALID_VALUE, 0
        return self.CUresult.CUDA_SUCCESS, self.function_max_threads

    def cuMemAlloc(self, n):
        if error := self._no_context():
            return error
        buf = np.zeros(n, dtype=np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return self.CUresult.CUDA_SUCCESS, buf.ctypes.data

    def cuMemFree(self, ptr):
        if error := self._no_context():
            return error
        del self.buffers[int(ptr)]
        return (self.CUresult.CUDA_SUCCESS,)

    def cuMemHostAlloc(self, n, flags):
        if error := self._no_context():
            return error
        buf = np.full(n, 0xCD, dtype=np.uint8)  # not zeros: a copy that never ran shows
        self.pinned[buf.ctypes.data] = buf
        return self.CUresult.CUDA_SUCCESS, buf.ctypes.data

    def cuMemFreeHost(self, ptr):
        if error := self._no_context():
            return error
        if self.pinned.pop(int(ptr), None) is None:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuMemcpyHtoD(self, dst, src, n):
        if error := self._no_context():
            return error
        self._drain()
        self.calls.append(("HtoD", n))
        ctypes.memmove(int(dst), src, n)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuMemcpyDtoH(self, dst, src, n):
        if error := self._no_context():
            return error
        self._drain()
        ctypes.memmove(dst, int(src), n)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        if error := self._no_context():
            return error
        self.calls.append(("HtoD", n))
        self.async_copies.append(("HtoD", n, self._pinned(int(src), n)))
        return self._enqueue(stream, lambda: ctypes.memmove(int(dst), int(src), n)) or (
            self.CUresult.CUDA_SUCCESS,)

    def cuMemcpyDtoHAsync(self, dst, src, n, stream):
        if error := self._no_context():
            return error
        self.async_copies.append(("DtoH", n, self._pinned(int(dst), n)))
        return self._enqueue(stream, lambda: ctypes.memmove(int(dst), int(src), n)) or (
            self.CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        from nnvm_backend_cuda.arguments import argument_array, c_type

        if error := self._no_context():
            return error
        if self.launch_error:
            return (self.launch_error,)
        module, name = f
        if bx * by * bz > self.limits["MAX_THREADS_PER_BLOCK"]:
            return (self.CUresult.CUDA_ERROR_INVALID_VALUE,)
        # the driver copies sizeof(parameter) bytes from each kernelParams[i] now
        pointers = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        array, copies = argument_array([ctypes.string_at(pointers[i], ctypes.sizeof(c_type(t)))
                                        for i, t in enumerate(self.parameters[name])])
        self.launches.append((name, (gx, gy, gz), (bx, by, bz), int(stream or 0)))

        def run(array=array, copies=copies):
            module.launch(name, (gx, gy, gz), (bx, by, bz), ctypes.addressof(array))

        return self._enqueue(stream, run) or (self.CUresult.CUDA_SUCCESS,)

    def cuCtxSynchronize(self):
        if error := self._no_context():
            return error
        self._drain()
        return (self.CUresult.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags):
        if error := self._no_context():
            return error
        stream = self._handle("stream")
        self.streams[int(stream)] = []
        return self.CUresult.CUDA_SUCCESS, stream

    def cuStreamSynchronize(self, stream):
        if error := self._no_context():
            return error
        if int(stream) not in self.streams:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self._drain(stream)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuStreamDestroy(self, stream):
        if error := self._no_context():
            return error
        if self.streams.pop(int(stream), None) is None:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuEventCreate(self, flags):
        if error := self._no_context():
            return error
        event = self._handle("event")
        self.events[int(event)] = None
        return self.CUresult.CUDA_SUCCESS, event

    def cuEventRecord(self, event, stream):
        if error := self._no_context():
            return error
        if int(event) not in self.events:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        self.events[int(event)] = "queued"
        return self._enqueue(stream, lambda: self.events.__setitem__(int(event), time.perf_counter())) or (
            self.CUresult.CUDA_SUCCESS,)

    def cuEventElapsedTime(self, start, stop):
        if error := self._no_context():
            return error
        times = [self.events.get(int(e)) for e in (start, stop)]
        if any(t is None for t in times):
            return self.CUresult.CUDA_ERROR_INVALID_HANDLE, 0.0
        if "queued" in times:
            return self.CUresult.CUDA_ERROR_NOT_READY, 0.0
        return self.CUresult.CUDA_SUCCESS, 1e3 * (times[1] - times[0])

    def cuEventDestroy(self, event):
        if error := self._no_context():
            return error
        if int(event) not in self.events:
            return (self.CUresult.CUDA_ERROR_INVALID_HANDLE,)
        del self.events[int(event)]
        return (self.CUresult.CUDA_SUCCESS,)

    def cuGetErrorName(self, err):
        return self.CUresult.CUDA_SUCCESS, err.name.encode()

    def cuGetErrorString(self, err):
        return self.CUresult.CUDA_SUCCESS, f"fake driver: {err.name.lower()}".encode()


def errors_on_fresh_threads(calls) -> dict:
    """Each ``(name, call)`` run alone on a new thread, in order: name -> the ``nnvm.Error`` it raised.
    A thread's first driver call has no current context unless the device makes one current."""
    failed = {}
    for name, call in calls:
        def run(name=name, call=call):
            try:
                call()
            except Error as exc:
                failed[name] = str(exc)
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    return failed
