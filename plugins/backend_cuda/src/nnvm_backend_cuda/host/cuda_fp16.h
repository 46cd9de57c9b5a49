/* Host stand-in for CUDA's cuda_fp16.h (the CPU runner only): __half as the compiler's _Float16. */
#ifndef NNVM_HOST_CUDA_FP16_H
#define NNVM_HOST_CUDA_FP16_H
typedef _Float16 __half;
typedef _Float16 half;
static inline __half __float2half(float f) { return (__half)f; }
static inline __half __float2half_rn(float f) { return (__half)f; }
static inline float __half2float(__half h) { return (float)h; }
#endif
