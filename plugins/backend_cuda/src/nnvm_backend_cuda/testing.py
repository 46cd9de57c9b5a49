"""Hand-written CUDA kernels for the compiler and the CPU runner, plus a helper building the argument
array ``cuLaunchKernel`` takes (``args[i]`` points at the i-th argument's value)."""

from __future__ import annotations

import ctypes

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
