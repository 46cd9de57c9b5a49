"""Hand-written CUDA kernels for the compiler and the CPU runner, plus a helper building the argument
array ``cuLaunchKernel`` takes (``args[i]`` points at the i-th argument's value)."""

from __future__ import annotations

import ctypes
import threading

import numpy as np

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


class FakeDriver:
    """The driver API calls ``native.CUDADevice`` makes, with the real ``CUresult`` codes: "device memory"
    in host buffers, launches run by the CPU runner on ``source``, host-to-device copies recorded in
    ``calls`` (so a test can count what a run uploads). Like the driver, it keeps the current context
    per thread: a call that needs one, on a thread where none was made current, is
    ``CUDA_ERROR_INVALID_CONTEXT``."""

    def __init__(self, source: str, arch=(8, 0), init_error=None, launch_error=None):
        from cuda.bindings import driver

        self.CUresult = driver.CUresult
        self.CUdevice_attribute = driver.CUdevice_attribute
        self.source, self.arch = source, arch
        self.init_error, self.launch_error = init_error, launch_error
        self.buffers: dict = {}
        self.calls: list = []
        self.loaded = None
        self._thread = threading.local()  # .context: the context current on this thread

    def _no_context(self):
        """The error of a call made on a thread with no current context, else None."""
        if getattr(self._thread, "context", None) is None:
            return (self.CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        return None

    def cuInit(self, flags):
        if isinstance(self.init_error, Exception):
            raise self.init_error
        return (self.init_error or self.CUresult.CUDA_SUCCESS,)

    def cuDeviceGetCount(self):
        return self.CUresult.CUDA_SUCCESS, 1

    def cuDeviceGet(self, i):
        return self.CUresult.CUDA_SUCCESS, 0

    def cuDeviceGetAttribute(self, attr, dev):
        major = attr == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return self.CUresult.CUDA_SUCCESS, self.arch[0] if major else self.arch[1]

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.CUresult.CUDA_SUCCESS, "ctx"

    def cuCtxSetCurrent(self, ctx):
        self._thread.context = ctx
        return (self.CUresult.CUDA_SUCCESS,)

    def cuModuleLoadData(self, image):
        from nnvm_backend_cuda.cpu import HostCUDA

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

    def cuMemcpyHtoD(self, dst, src, n):
        if error := self._no_context():
            return error
        self.calls.append(("HtoD", n))
        ctypes.memmove(dst, src, n)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuMemcpyDtoH(self, dst, src, n):
        if error := self._no_context():
            return error
        ctypes.memmove(dst, src, n)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if error := self._no_context():
            return error
        if self.launch_error:
            return (self.launch_error,)
        module, name = f
        module.launch(name, (gx, gy, gz), (bx, by, bz), params)
        return (self.CUresult.CUDA_SUCCESS,)

    def cuCtxSynchronize(self):
        if error := self._no_context():
            return error
        return (self.CUresult.CUDA_SUCCESS,)

    def cuGetErrorName(self, err):
        return self.CUresult.CUDA_SUCCESS, err.name.encode()
