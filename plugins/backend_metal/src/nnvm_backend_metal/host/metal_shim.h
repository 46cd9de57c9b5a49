/* Metal Shading Language as clang C++, so the very MSL the Metal printer writes runs on the CPU under
 * nnvm's fiber scheduler (nnvm/runtime/fibers/fibers.h). Compiled with clang++ only: g++ has neither
 * ext_vector_type nor address spaces.
 *
 * Metal's address spaces are real clang address spaces, so the compiler checks them as Apple's does:
 * a threadgroup array passed where a device pointer is wanted, a device pointer passed where a
 * threadgroup (or an unqualified) one is wanted, or a kernel buffer parameter without `device` or
 * `constant` (checked by the trampolines, nnvm_is_buffer) fails to compile. `threadgroup` is only ever
 * printed on the arrays a kernel declares at its top level: one copy per OS thread, that is per block
 * (a block runs on one OS thread), shared by the block's fibers. Vectors are ext_vector_type (operators,
 * .x/.xyzw, splat casts); `packed_floatN` the same with 4-byte alignment; `half` clang's __fp16. */
#ifndef NNVM_METAL_SHIM_H
#define NNVM_METAL_SHIM_H

#include <math.h>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fibers.h"

#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup static thread_local __attribute__((address_space(3)))
#define thread
#define kernel

namespace metal {}
namespace mem_flags { enum { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 }; }
static inline void threadgroup_barrier(int) { nnvm_fibers_barrier(); }

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;

/* half: clang's __fp16 (binary16 in memory, arithmetic in float). clang turns its conversions into calls
 * to the two functions below, defined here so no runtime library is needed; float -> half rounds to
 * nearest even, as Metal does. */
typedef __fp16 half;
extern "C" __attribute__((visibility("hidden"))) unsigned short __gnu_f2h_ieee(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  /* rounds to infinity */
  if (a < 0x38800000u) {  /* a subnormal half or zero: scale so the half's last bit is 1.0, round */
    float v; std::memcpy(&v, &a, 4);
    return (unsigned short)(sign | (uint32_t)nearbyintf(v * 16777216.0f));
  }
  uint32_t r = a + 0xc8000fffu + ((a >> 13) & 1u);  /* rebias the exponent, round to nearest even */
  return (unsigned short)(sign | (r >> 13));
}
extern "C" __attribute__((visibility("hidden"))) float __gnu_h2f_ieee(unsigned short h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0) { float v = (float)m / 16777216.0f; std::memcpy(&x, &v, 4); x |= sign; }
  else if (e == 31) x = sign | 0x7f800000u | (m << 13);
  else x = sign | ((e + 112u) << 23) | (m << 13);
  float f; std::memcpy(&f, &x, 4); return f;
}

/* as_type<T>(x): Metal's bit cast. */
template <typename T, typename F> static inline T as_type(F v) {
  static_assert(sizeof(T) == sizeof(F), "as_type between types of different sizes");
  T t; std::memcpy(&t, &v, sizeof t); return t;
}

/* Vectors; nnvm_lanes<V> is the number of elements (a float3 takes 16 bytes, as in Metal). */
template <typename V> struct nnvm_vec { static constexpr int lanes = 0; };
#define NNVM_VEC(T, N, L)                                                                           \
  typedef T N __attribute__((ext_vector_type(L)));                                                  \
  typedef T packed_##N __attribute__((ext_vector_type(L), aligned(sizeof(T))));                     \
  template <> struct nnvm_vec<N> { static constexpr int lanes = L; typedef T scalar; };
#define NNVM_VECS(T, P) NNVM_VEC(T, P##2, 2) NNVM_VEC(T, P##3, 3) NNVM_VEC(T, P##4, 4)
NNVM_VECS(float, float)
NNVM_VECS(int, int)
NNVM_VECS(uint, uint)
NNVM_VECS(char, char)
NNVM_VECS(uchar, uchar)
NNVM_VECS(short, short)
NNVM_VECS(ushort, ushort)
NNVM_VECS(long, long)
NNVM_VECS(ulong, ulong)
#undef NNVM_VECS
#undef NNVM_VEC

/* Metal's math functions on vectors, lane by lane. */
#define NNVM_VMATH1(F)                                                                              \
  template <typename V, int L = nnvm_vec<V>::lanes, typename = std::enable_if_t<(L > 0)>>           \
  static inline V F(V a) { V r; for (int i = 0; i < L; ++i) r[i] = ::F(a[i]); return r; }
#define NNVM_VMATH2(F)                                                                              \
  template <typename V, int L = nnvm_vec<V>::lanes, typename = std::enable_if_t<(L > 0)>>           \
  static inline V F(V a, V b) { V r; for (int i = 0; i < L; ++i) r[i] = ::F(a[i], b[i]); return r; }
NNVM_VMATH1(exp) NNVM_VMATH1(exp2) NNVM_VMATH1(log) NNVM_VMATH1(log2) NNVM_VMATH1(sqrt) NNVM_VMATH1(tanh)
NNVM_VMATH1(fabs) NNVM_VMATH1(floor) NNVM_VMATH1(ceil) NNVM_VMATH1(rint) NNVM_VMATH1(trunc)
NNVM_VMATH1(sin) NNVM_VMATH1(cos)
NNVM_VMATH2(fmax) NNVM_VMATH2(fmin) NNVM_VMATH2(pow) NNVM_VMATH2(fmod)
#undef NNVM_VMATH1
#undef NNVM_VMATH2

/* Metal builtins C's math library lacks. */
static inline float rsqrt(float x) { return 1.0f / sqrtf(x); }
template <typename V, int L = nnvm_vec<V>::lanes, typename = std::enable_if_t<(L > 0)>>
static inline V rsqrt(V a) { V r; for (int i = 0; i < L; ++i) r[i] = rsqrt(a[i]); return r; }
/* max/min of one type, as Metal's: mixed types are ambiguous there, so they do not compile here either. */
template <typename T> static inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }
static inline float sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x); }

/* Kernel parameters: a buffer must be in the device or constant address space. */
template <typename T> struct nnvm_is_buffer : std::true_type {};
template <typename T> struct nnvm_is_buffer<T*> : std::false_type {};
template <typename T> struct nnvm_is_buffer<device T*> : std::true_type {};
template <typename T> struct nnvm_is_buffer<constant T*> : std::true_type {};

/* The two position parameters every printed kernel ends with. */
static inline uint3 nnvm_uint3(nnvm_dim3 d) { uint3 r; r.x = d.x; r.y = d.y; r.z = d.z; return r; }

#endif
