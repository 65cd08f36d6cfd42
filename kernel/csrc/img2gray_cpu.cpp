#include "img2gray_cpu.h"

#include "img2gray_pixel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define IMG2GRAY_X86_AVX2 1
#endif

namespace {

void img2gray_scalar(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t n_pixels) {
  // Compilers vectorize this where the ISA de-interleaves cheaply (aarch64: ld3).
  for (int64_t i = 0; i < n_pixels; ++i) {
    gray[i] = img2gray_pixel(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
  }
}

#if IMG2GRAY_X86_AVX2
// 8 pixels (24 bytes at p) as float R, G, B vectors. The two 16-byte halves are
// loaded at p and p + 12, so one in-lane shuffle per channel de-interleaves and
// zero-extends four pixels per lane. Reads p[0..28): 4 bytes past the 8 pixels.
__attribute__((target("avx2"))) inline void load8(const uint8_t* p, __m256& r, __m256& g, __m256& b) {
  const __m256i bytes = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12)), 1);
  const __m256i pick_r = _mm256_setr_epi8(0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1,  //
                                          0, -1, -1, -1, 3, -1, -1, -1, 6, -1, -1, -1, 9, -1, -1, -1);
  const __m256i pick_g = _mm256_setr_epi8(1, -1, -1, -1, 4, -1, -1, -1, 7, -1, -1, -1, 10, -1, -1, -1,  //
                                          1, -1, -1, -1, 4, -1, -1, -1, 7, -1, -1, -1, 10, -1, -1, -1);
  const __m256i pick_b = _mm256_setr_epi8(2, -1, -1, -1, 5, -1, -1, -1, 8, -1, -1, -1, 11, -1, -1, -1,  //
                                          2, -1, -1, -1, 5, -1, -1, -1, 8, -1, -1, -1, 11, -1, -1, -1);
  r = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, pick_r));
  g = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, pick_g));
  b = _mm256_cvtepi32_ps(_mm256_shuffle_epi8(bytes, pick_b));
}

// img2gray_pixel() for 8 pixels, as int32: the same float32 operations in the
// same order (no FMA), then truncation.
__attribute__((target("avx2"))) inline __m256i gray8(const uint8_t* p) {
  __m256 r, g, b;
  load8(p, r, g, b);
  const __m256 sum = _mm256_add_ps(
      _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(IMG2GRAY_WEIGHT_R), r),
                    _mm256_mul_ps(_mm256_set1_ps(IMG2GRAY_WEIGHT_G), g)),
      _mm256_mul_ps(_mm256_set1_ps(IMG2GRAY_WEIGHT_B), b));
  return _mm256_cvttps_epi32(sum);
}

// Above this many pixels per call the output cannot stay in cache anyway:
// non-temporal stores then skip reading the output lines before writing them.
constexpr int64_t kStreamingPixels = 1 << 20;

template <bool kStream>
__attribute__((target("avx2"))) void img2gray_avx2_blocks(const uint8_t* __restrict__ rgb,
                                                          uint8_t* __restrict__ gray, int64_t n_pixels) {
  constexpr int64_t kBlock = 32;
  int64_t i = 0;
  if (kStream) {  // streaming stores need 32-byte aligned output
    const int64_t head = (32 - (reinterpret_cast<uintptr_t>(gray) & 31)) & 31;
    i = head < n_pixels ? head : n_pixels;
    img2gray_scalar(rgb, gray, i);
  }
  // The last load8 of a block reads 4 bytes past it: leave 2 pixels of slack.
  for (; i + kBlock + 2 <= n_pixels; i += kBlock) {
    const uint8_t* p = rgb + 3 * i;
    const __m256i g0 = gray8(p), g1 = gray8(p + 24), g2 = gray8(p + 48), g3 = gray8(p + 72);
    // int32 -> uint8 (values are 0..255); packs work per 128-bit lane, so the
    // final permute restores pixel order.
    const __m256i packed = _mm256_packus_epi16(_mm256_packus_epi32(g0, g1), _mm256_packus_epi32(g2, g3));
    const __m256i ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(gray + i), ordered);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(gray + i), ordered);
    }
  }
  if (kStream) {
    _mm_sfence();  // order the streaming stores before anything that follows
  }
  img2gray_scalar(rgb + 3 * i, gray + i, n_pixels - i);
}

void img2gray_avx2(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t n_pixels) {
  if (n_pixels >= kStreamingPixels) {
    img2gray_avx2_blocks<true>(rgb, gray, n_pixels);
  } else {
    img2gray_avx2_blocks<false>(rgb, gray, n_pixels);
  }
}

bool has_avx2() {
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
}
#endif

}  // namespace

void img2gray_cpu(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t n_pixels) {
#if IMG2GRAY_X86_AVX2
  if (has_avx2()) {
    img2gray_avx2(rgb, gray, n_pixels);
    return;
  }
#endif
  img2gray_scalar(rgb, gray, n_pixels);
}
