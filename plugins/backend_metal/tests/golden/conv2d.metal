// launches (x, y, z):
//   conv2d: conv2d_k0 grid (2, 2, 4) block (5, 5, 4)

#include <metal_stdlib>
using namespace metal;
#define NNVM_FLOORDIV(a, b) (((a) / (b)) - ((((a) % (b)) != 0) & (((a) < 0) != ((b) < 0))))
#define NNVM_FLOORMOD(a, b) ((a) - NNVM_FLOORDIV(a, b) * (b))

kernel void conv2d_k0(device float* data [[buffer(0)]], device float* weight [[buffer(1)]], device float* conv2d [[buffer(2)]], uint3 nnvm_tid [[thread_position_in_threadgroup]], uint3 nnvm_gid [[threadgroup_position_in_grid]]) {
  threadgroup float pad_shared[392];
  threadgroup float weight_shared[288];
  const long blockIdx_z = (long)nnvm_gid.z;
  const long blockIdx_y = (long)nnvm_gid.y;
  const long blockIdx_x = (long)nnvm_gid.x;
  const long threadIdx_z = (long)nnvm_tid.z;
  const long threadIdx_y = (long)nnvm_tid.y;
  const long threadIdx_x = (long)nnvm_tid.x;
  float conv2d_local[1];
  for (long n_c_init = 0L; n_c_init < 1L; ++n_c_init) {
    for (long o_c_init = 0L; o_c_init < 1L; ++o_c_init) {
      for (long y_c_init = 0L; y_c_init < 1L; ++y_c_init) {
        for (long x_c_init = 0L; x_c_init < 1L; ++x_c_init) {
          conv2d_local[(((n_c_init + o_c_init) + x_c_init) + y_c_init)] = 0.0f;
        }
      }
    }
  }
  for (long rc_outer = 0L; rc_outer < 1L; ++rc_outer) {
    for (long ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer = 0L; ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer < 3L; ++ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer) {
      pad_shared[((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)] = ((((((((blockIdx_y * 5L) + ((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L)) >= 1L) && (((blockIdx_y * 5L) + ((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L)) < 11L)) && (((blockIdx_x * 5L) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) >= 1L)) && (((blockIdx_x * 5L) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) < 11L))) ? (data[(((((((rc_outer * 800L) + (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) / 7L) * 100L)) + (blockIdx_y * 50L)) + (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L) * 10L)) + (blockIdx_x * 5L)) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) - 11L)]) : (0.0f));
    }
    for (long ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer = 3L; ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer < 3L + 1L; ++ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer) {
      if ((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 20L) + (threadIdx_z * 5L)) + threadIdx_y) < 79L) && (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) < 392L))) {
        pad_shared[((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)] = ((((((((blockIdx_y * 5L) + ((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L)) >= 1L) && (((blockIdx_y * 5L) + ((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L)) < 11L)) && (((blockIdx_x * 5L) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) >= 1L)) && (((blockIdx_x * 5L) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) < 11L))) ? (data[(((((((rc_outer * 800L) + (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) / 7L) * 100L)) + (blockIdx_y * 50L)) + (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 7L) % 7L) * 10L)) + (blockIdx_x * 5L)) + (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) % 7L)) - 11L)]) : (0.0f));
      }
    }
    for (long ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 = 0L; ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 < 2L; ++ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1) {
      weight_shared[((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)] = weight[((((((blockIdx_z * 288L) + (ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L)) + (rc_outer * 72L)) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)];
    }
    for (long ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 = 2L; ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 < 2L + 1L; ++ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1) {
      if (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 20L) + (threadIdx_z * 5L)) + threadIdx_y) < 58L) && (((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) < 288L)) && (((blockIdx_z * 4L) + (((((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x) / 3L) / 3L) / 8L)) < 16L))) {
        weight_shared[((((ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)] = weight[((((((blockIdx_z * 288L) + (ax0_ax1_fused_ax2_fused_ax3_fused_outer_outer_outer_1 * 100L)) + (rc_outer * 72L)) + (threadIdx_z * 25L)) + (threadIdx_y * 5L)) + threadIdx_x)];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (long rc_inner = 0L; rc_inner < 8L; ++rc_inner) {
      for (long ry = 0L; ry < 3L; ++ry) {
        for (long rx = 0L; rx < 3L; ++rx) {
          for (long n_c = 0L; n_c < 1L; ++n_c) {
            for (long o_c = 0L; o_c < 1L; ++o_c) {
              for (long y_c = 0L; y_c < 1L; ++y_c) {
                for (long x_c = 0L; x_c < 1L; ++x_c) {
                  conv2d_local[(((n_c + o_c) + x_c) + y_c)] = (conv2d_local[(((n_c + o_c) + x_c) + y_c)] + (pad_shared[((((((((n_c * 392L) + (rc_inner * 49L)) + (ry * 7L)) + (threadIdx_y * 7L)) + (y_c * 7L)) + rx) + threadIdx_x) + x_c)] * weight_shared[(((((o_c * 72L) + (threadIdx_z * 72L)) + (rc_inner * 9L)) + (ry * 3L)) + rx)]));
                }
              }
            }
          }
        }
      }
    }
  }
  for (long o_inner_inner = 0L; o_inner_inner < 1L; ++o_inner_inner) {
    conv2d[(((((((blockIdx_z * 400L) + (o_inner_inner * 100L)) + (threadIdx_z * 100L)) + (blockIdx_y * 50L)) + (threadIdx_y * 10L)) + (blockIdx_x * 5L)) + threadIdx_x)] = conv2d_local[o_inner_inner];
  }
}
