"""The CPU runner (clang + the Metal shim + the core's fiber scheduler) on hand-written MSL, against numpy,
and the shim's address spaces: MSL with a wrong or missing address space does not compile, as on a Mac.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.errors import Error
from nnvm.gpu.host import argv
from nnvm_backend_metal.emulate import HostMetal

# Each threadgroup reverses its 64-element slice through threadgroup memory: needs the barrier.
REVERSE = r"""
#include <metal_stdlib>
using namespace metal;
kernel void reverse(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                    uint3 tid [[thread_position_in_threadgroup]],
                    uint3 gid [[threadgroup_position_in_grid]]) {
  threadgroup float tile[64];
  uint base = gid.x * 64;
  tile[tid.x] = in[base + tid.x];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[base + tid.x] = tile[63 - tid.x];
}
"""

# float4 through packed loads and stores, half, as_type, a vector splat.
VECTORS = r"""
#include <metal_stdlib>
using namespace metal;
kernel void vec(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                device half* h [[buffer(2)]],
                uint3 tid [[thread_position_in_threadgroup]], uint3 gid [[threadgroup_position_in_grid]]) {
  uint i = (gid.x * 8 + tid.x) * 4;
  float4 v = float4(*(device packed_float4*)(in + i));
  *(device packed_float4*)(out + i) = packed_float4(v * float4(2.0f) + float4(as_type<float>(0x3f800000u)));
  h[i / 4] = (half)v.x;
}
"""

WRONG_SPACE = r"""
#include <metal_stdlib>
using namespace metal;
void fill(device float* p) { p[0] = 1.0f; }
kernel void wrong(device float* out [[buffer(0)]],
                  uint3 tid [[thread_position_in_threadgroup]], uint3 gid [[threadgroup_position_in_grid]]) {
  threadgroup float tile[4];
  fill(tile);  /* a threadgroup array where a device pointer is needed */
  out[0] = tile[0];
}
"""

UNQUALIFIED_HELPER = r"""
#include <metal_stdlib>
using namespace metal;
void fill(float* p) { p[0] = 1.0f; }
kernel void unqualified(device float* out [[buffer(0)]], uint3 tid [[thread_position_in_threadgroup]],
                        uint3 gid [[threadgroup_position_in_grid]]) {
  fill(out);  /* a device pointer where an unqualified one is needed */
}
"""

UNQUALIFIED_BUFFER = r"""
#include <metal_stdlib>
using namespace metal;
kernel void bare(float* out [[buffer(0)]],
                 uint3 tid [[thread_position_in_threadgroup]], uint3 gid [[threadgroup_position_in_grid]]) {
  out[tid.x] = 1.0f;
}
"""


@pytest.mark.parametrize("reversed_", [False, True])
def test_threadgroup_memory_and_barrier(reversed_):
    rt = HostMetal(REVERSE)
    assert rt.barriers == {"reverse": True}
    x = np.arange(256, dtype="float32")
    y = np.zeros_like(x)
    args, _keep = argv([y.ctypes.data, x.ctypes.data])
    rt.launch("reverse", (4, 1, 1), (64, 1, 1), args, reversed=reversed_)
    np.testing.assert_array_equal(y, x.reshape(4, 64)[:, ::-1].ravel())


def test_missing_barrier_shows_up_in_one_thread_order():
    rt = HostMetal(REVERSE.replace("  threadgroup_barrier(mem_flags::mem_threadgroup);\n", "")
                   .replace("reverse(", "racy("))
    x = np.arange(256, dtype="float32")
    want = x.reshape(4, 64)[:, ::-1].ravel()
    results = []
    for order in (False, True):
        y = np.zeros_like(x)
        args, _keep = argv([y.ctypes.data, x.ctypes.data])
        rt.launch("racy", (4, 1, 1), (64, 1, 1), args, reversed=order)
        results.append(np.array_equal(y, want))
    assert not all(results)


def test_vectors_half_and_as_type():
    rt = HostMetal(VECTORS)
    x = np.random.default_rng(0).standard_normal(64).astype("float32")
    y = np.zeros_like(x)
    h = np.zeros(16, dtype="float16")
    args, _keep = argv([y.ctypes.data, x.ctypes.data, h.ctypes.data])
    rt.launch("vec", (2, 1, 1), (8, 1, 1), args)
    np.testing.assert_allclose(y, 2 * x + 1, rtol=1e-6)
    np.testing.assert_array_equal(h, x[::4].astype("float16"))  # round to nearest even, as a cast in Metal


@pytest.mark.parametrize("source", [WRONG_SPACE, UNQUALIFIED_HELPER, UNQUALIFIED_BUFFER],
                         ids=["threadgroup-as-device", "device-as-unqualified", "buffer-without-device"])
def test_wrong_address_space_does_not_compile(source):
    with pytest.raises(Error, match="the Metal kernels do not compile as host C\\+\\+"):
        HostMetal(source)
