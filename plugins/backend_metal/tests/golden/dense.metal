// launches (x, y, z):
//   dense: dense_k0 grid (2, 1, 1) block (16, 4, 1)

#include <metal_stdlib>
using namespace metal;
#define NNVM_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) & (((a) < 0) != ((b) < 0))))
#define NNVM_FLOORMOD(a, b) ((a) - NNVM_FLOORDIV(a, b) * (b))

kernel void dense_k0(device float* a [[buffer(0)]], device float* b [[buffer(1)]], device float* dense [[buffer(2)]], uint3 nnvm_tid [[thread_position_in_threadgroup]], uint3 nnvm_gid [[threadgroup_position_in_grid]]) {
  threadgroup float a_shared[128];
  threadgroup float b_shared[512];
  const long blockIdx_y = (long)nnvm_gid.y;
  const long blockIdx_x = (long)nnvm_gid.x;
  const long threadIdx_y = (long)nnvm_tid.y;
  const long threadIdx_x = (long)nnvm_tid.x;
  float dense_local[1];
  for (long i_c_init = 0L; i_c_init < 1L; ++i_c_init) {
    for (long j_c_init = 0L; j_c_init < 1L; ++j_c_init) {
      dense_local[(i_c_init + j_c_init)] = 0.0f;
    }
  }
  for (long k_outer = 0L; k_outer < 2L; ++k_outer) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long ax0_ax1_fused_outer_outer = 0L; ax0_ax1_fused_outer_outer < 2L; ++ax0_ax1_fused_outer_outer) {
      a_shared[(((ax0_ax1_fused_outer_outer * 64L) + (threadIdx_y * 16L)) + threadIdx_x)] = a[((((((blockIdx_y * 256L) + (ax0_ax1_fused_outer_outer * 128L)) + ((threadIdx_y / 2L) * 64L)) + (k_outer * 32L)) + ((threadIdx_y % 2L) * 16L)) + threadIdx_x)];
    }
    for (long ax0_ax1_fused_outer_outer_1 = 0L; ax0_ax1_fused_outer_outer_1 < 8L; ++ax0_ax1_fused_outer_outer_1) {
      b_shared[(((ax0_ax1_fused_outer_outer_1 * 64L) + (threadIdx_y * 16L)) + threadIdx_x)] = b[((((((blockIdx_x * 1024L) + (ax0_ax1_fused_outer_outer_1 * 128L)) + ((threadIdx_y / 2L) * 64L)) + (k_outer * 32L)) + ((threadIdx_y % 2L) * 16L)) + threadIdx_x)];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long k_inner = 0L; k_inner < 32L; ++k_inner) {
      for (long i_c = 0L; i_c < 1L; ++i_c) {
        for (long j_c = 0L; j_c < 1L; ++j_c) {
          dense_local[(i_c + j_c)] = (dense_local[(i_c + j_c)] + (a_shared[(((i_c * 32L) + (threadIdx_y * 32L)) + k_inner)] * b_shared[(((j_c * 32L) + (threadIdx_x * 32L)) + k_inner)]));
        }
      }
    }
  }
  dense[((((blockIdx_y * 128L) + (threadIdx_y * 32L)) + (blockIdx_x * 16L)) + threadIdx_x)] = dense_local[0L];
}
