/* CUDA C++ as host C++: force-included (g++ -include) before a generated .cu file so that the very
 * source NVRTC compiles runs on the CPU under nnvm's fiber scheduler (nnvm/runtime/fibers/fibers.h).
 * Each CUDA thread is one call of the kernel with nnvm_thread_idx set; __shared__ variables are one
 * copy per OS thread, which is per block since a block runs on one OS thread at a time. */
#ifndef NNVM_CUDA_SHIM_H
#define NNVM_CUDA_SHIM_H

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>

#include "fibers.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __constant__ static const

#define threadIdx nnvm_thread_idx
#define blockIdx nnvm_block_idx
#define blockDim nnvm_block_dim
#define gridDim nnvm_grid_dim
#define __syncthreads() nnvm_fibers_barrier()

/* Bit casts and fast intrinsics. */
static inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
static inline int __float_as_int(float v) { int i; std::memcpy(&i, &v, 4); return i; }
static inline unsigned __float_as_uint(float v) { unsigned i; std::memcpy(&i, &v, 4); return i; }
static inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
/* __expf and __logf: glibc's own declarations serve. */
static inline float __fdividef(float a, float b) { return a / b; }
using std::isfinite;
using std::isinf;
using std::isnan;
using std::max;
using std::min;
using std::signbit;
static inline long long max(long long a, int b) { return a > b ? a : b; }
static inline long long min(long long a, int b) { return a < b ? a : b; }

/* CUDA's vector structs with the element-wise operators the printer's helpers rely on. */
#define NNVM_VEC2(T, N) struct N { T x, y; };                                                        \
  static inline N make_##N(T a, T b) { return N{a, b}; }
#define NNVM_VEC3(T, N) struct N { T x, y, z; };                                                     \
  static inline N make_##N(T a, T b, T c) { return N{a, b, c}; }
#define NNVM_VEC4(T, N) struct alignas(sizeof(T) * 4) N { T x, y, z, w; };                          \
  static inline N make_##N(T a, T b, T c, T d) { return N{a, b, c, d}; }
#define NNVM_VECS(T, P) NNVM_VEC2(T, P##2) NNVM_VEC3(T, P##3) NNVM_VEC4(T, P##4)
NNVM_VECS(float, float)
NNVM_VECS(double, double)
NNVM_VECS(int, int)
NNVM_VECS(unsigned, uint)
NNVM_VECS(signed char, char)
NNVM_VECS(unsigned char, uchar)
NNVM_VECS(short, short)
NNVM_VECS(long long, longlong)
#undef NNVM_VEC2
#undef NNVM_VEC3
#undef NNVM_VEC4
#undef NNVM_VECS

#endif
