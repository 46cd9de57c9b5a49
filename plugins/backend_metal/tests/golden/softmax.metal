// launches (x, y, z):
//   softmax: softmax_k0 grid (1, 1, 1) block (8, 1, 1)
//   softmax: softmax_k1 grid (1, 1, 1) block (8, 1, 1)
//   softmax: softmax_k2 grid (4, 1, 1) block (64, 1, 1)

#include <metal_stdlib>
using namespace metal;
#define NNVM_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) & (((a) < 0) != ((b) < 0))))
#define NNVM_FLOORMOD(a, b) ((a) - NNVM_FLOORDIV(a, b) * (b))

kernel void softmax_k0(device float* a [[buffer(0)]], device float* softmax [[buffer(1)]], device float* softmax_max [[buffer(2)]], device float* softmax_expsum [[buffer(3)]], uint3 nnvm_tid [[thread_position_in_threadgroup]], uint3 nnvm_gid [[threadgroup_position_in_grid]]) {
  const long blockIdx_x = (long)nnvm_gid.x;
  const long threadIdx_x = (long)nnvm_tid.x;
  softmax_max[((blockIdx_x * 8L) + threadIdx_x)] = (-as_type<float>(0x7f800000u));
  for (long k1 = 0L; k1 < 100L; ++k1) {
    softmax_max[((blockIdx_x * 8L) + threadIdx_x)] = fmax(softmax_max[((blockIdx_x * 8L) + threadIdx_x)], a[(((blockIdx_x * 800L) + (threadIdx_x * 100L)) + k1)]);
  }
}

kernel void softmax_k1(device float* a [[buffer(0)]], device float* softmax [[buffer(1)]], device float* softmax_max [[buffer(2)]], device float* softmax_expsum [[buffer(3)]], uint3 nnvm_tid [[thread_position_in_threadgroup]], uint3 nnvm_gid [[threadgroup_position_in_grid]]) {
  const long blockIdx_x = (long)nnvm_gid.x;
  const long threadIdx_x = (long)nnvm_tid.x;
  softmax_expsum[((blockIdx_x * 8L) + threadIdx_x)] = 0.0f;
  for (long k1 = 0L; k1 < 100L; ++k1) {
    softmax_expsum[((blockIdx_x * 8L) + threadIdx_x)] = (softmax_expsum[((blockIdx_x * 8L) + threadIdx_x)] + exp((a[(((blockIdx_x * 800L) + (threadIdx_x * 100L)) + k1)] - softmax_max[((blockIdx_x * 8L) + threadIdx_x)])));
  }
}

kernel void softmax_k2(device float* a [[buffer(0)]], device float* softmax [[buffer(1)]], device float* softmax_max [[buffer(2)]], device float* softmax_expsum [[buffer(3)]], uint3 nnvm_tid [[thread_position_in_threadgroup]], uint3 nnvm_gid [[threadgroup_position_in_grid]]) {
  const long blockIdx_x = (long)nnvm_gid.x;
  const long threadIdx_x = (long)nnvm_tid.x;
  if ((((blockIdx_x * 64L) + threadIdx_x) < 200L)) {
    *(device packed_float4*)(softmax + ((blockIdx_x * 256L) + (threadIdx_x * 4L))) = packed_float4((exp((float4(*(device packed_float4*)(a + ((blockIdx_x * 256L) + (threadIdx_x * 4L)))) - float4(softmax_max[(((blockIdx_x * 64L) + threadIdx_x) / 25L)]))) / float4(softmax_expsum[(((blockIdx_x * 64L) + threadIdx_x) / 25L)])));
  }
}
