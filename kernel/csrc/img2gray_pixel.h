// The one definition of img2gray's arithmetic, shared by every backend.
//
//   gray = trunc( (fl(0.21f * r) + fl(0.72f * g)) + fl(0.07f * b) )
//
// Every product and every sum is rounded to float32 (round to nearest even),
// evaluated left to right, with NO fused multiply-add: FMA contraction skips a
// rounding and changes some results by one. The float-to-uint8 conversion
// truncates toward zero. The sum never exceeds 255.00001, so it fits uint8,
// and gray pixels (v, v, v) map to v for every v (the tests check all 2^24
// inputs against a numpy reference that evaluates the same expression).
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define IMG2GRAY_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define IMG2GRAY_HOST_DEVICE inline
#endif

#define IMG2GRAY_WEIGHT_R 0.21f
#define IMG2GRAY_WEIGHT_G 0.72f
#define IMG2GRAY_WEIGHT_B 0.07f

IMG2GRAY_HOST_DEVICE uint8_t img2gray_pixel(uint8_t r, uint8_t g, uint8_t b) {
#if defined(__CUDA_ARCH__)
  // The _rn intrinsics are never contracted into FMA, whatever -fmad says.
  const float sum = __fadd_rn(
      __fadd_rn(__fmul_rn(IMG2GRAY_WEIGHT_R, (float)r),
                __fmul_rn(IMG2GRAY_WEIGHT_G, (float)g)),
      __fmul_rn(IMG2GRAY_WEIGHT_B, (float)b));
#else
  // Host compilers must build this with -ffp-contract=off (build.toml says so);
  // the exhaustive test catches a build that does not.
  const float sum = (IMG2GRAY_WEIGHT_R * (float)r + IMG2GRAY_WEIGHT_G * (float)g) +
                    IMG2GRAY_WEIGHT_B * (float)b;
#endif
  return (uint8_t)sum;
}
