#include "img2gray_cuda.h"
#include "img2gray_pixel.h"

namespace {

// img2gray moves 4 bytes per pixel (3 read, 1 written) and should run at the
// speed of a device copy of those bytes. Each thread converts groups of 16
// pixels: three 16-byte loads (48 RGB bytes) and one 16-byte store.
constexpr int kThreadsPerBlock = 256;
constexpr int kPixelsPerGroup = 16;

// 2^23 as a float: 0x4B000000 | b (b < 2^23) is the float 2^23 + b, exactly.
constexpr float kTwo23 = 8388608.0f;

// Byte k of the 48 bytes in w, as a float, with the product by weight folded in:
// fma(weight, 2^23 + v, -weight * 2^23) is the exact value weight * v rounded
// once, i.e. the same float as __fmul_rn(weight, (float)v). (weight * 2^23 is
// exact: a power-of-two scaling.) One PRMT and one FFMA, where the plain
// expression needs a byte extract, an I2F and an FMUL: on sm_90 the I2F and
// F2I conversions issue at a quarter of the float rate, and at four per pixel
// they, not memory, limited the first version of this kernel.
template <int k>
__device__ __forceinline__ float weighted_byte(const uint32_t (&w)[12], float weight) {
  // __byte_perm picks byte k % 4 of the word into byte 0, zeros into bytes
  // 1-2 and 0x4B into byte 3 (bytes 4-7 of the selector's pool are 0x4B00).
  const uint32_t bits = __byte_perm(w[k / 4], 0x4B00u, 0x5440u | (k % 4));
  return __fmaf_rn(weight, __uint_as_float(bits), -weight * kTwo23);
}

// img2gray_pixel() of pixel p of the group, as the float 2^23 + gray, whose
// low byte is gray: for 0 <= sum < 2^23, sum + 2^23 rounded toward zero is
// 2^23 + trunc(sum) (the float spacing there is 1). Bit-exact with
// img2gray_pixel() for all 2^24 inputs (the exhaustive test runs this path).
template <int p>
__device__ __forceinline__ uint32_t gray_bits(const uint32_t (&w)[12]) {
  const float r = weighted_byte<3 * p>(w, IMG2GRAY_WEIGHT_R);
  const float g = weighted_byte<3 * p + 1>(w, IMG2GRAY_WEIGHT_G);
  const float b = weighted_byte<3 * p + 2>(w, IMG2GRAY_WEIGHT_B);
  return __float_as_uint(__fadd_rz(__fadd_rn(__fadd_rn(r, g), b), kTwo23));
}

// Low bytes of four words -> one word (three PRMTs).
__device__ __forceinline__ uint32_t pack4(uint32_t q0, uint32_t q1, uint32_t q2, uint32_t q3) {
  return __byte_perm(__byte_perm(q0, q1, 0x0040u), __byte_perm(q2, q3, 0x0040u), 0x5410u);
}

// 16 interleaved RGB pixels (48 bytes) -> 16 gray bytes.
__device__ __forceinline__ uint4 gray16(const uint4& a, const uint4& b, const uint4& c) {
  const uint32_t w[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
  uint4 out;
  out.x = pack4(gray_bits<0>(w), gray_bits<1>(w), gray_bits<2>(w), gray_bits<3>(w));
  out.y = pack4(gray_bits<4>(w), gray_bits<5>(w), gray_bits<6>(w), gray_bits<7>(w));
  out.z = pack4(gray_bits<8>(w), gray_bits<9>(w), gray_bits<10>(w), gray_bits<11>(w));
  out.w = pack4(gray_bits<12>(w), gray_bits<13>(w), gray_bits<14>(w), gray_bits<15>(w));
  return out;
}

template <bool kStreaming>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if (kStreaming) {
    return __ldcs(p);
  }
  return *p;
}

template <bool kStreaming>
__device__ __forceinline__ void store16(uint4* p, const uint4& v) {
  if (kStreaming) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// rgb and gray must be 16-byte aligned. Block b converts tiles b, b + gridDim.x,
// ... of kUnroll * kThreadsPerBlock groups; in a tile, thread t takes groups
// t, t + kThreadsPerBlock, ..., so every load instruction of a warp covers one
// contiguous span, and a thread issues all 3 * kUnroll loads (48 * kUnroll
// bytes in flight) before it computes. Then the n_pixels % 16 tail pixels, one
// per thread of block 0.
template <int kUnroll, bool kStreaming>
__global__ void __launch_bounds__(kThreadsPerBlock)
    img2gray_groups(const uint4* __restrict__ rgb, uint4* __restrict__ gray, int64_t n_pixels) {
  const int64_t n_groups = n_pixels / kPixelsPerGroup;
  constexpr int64_t kTile = (int64_t)kUnroll * kThreadsPerBlock;
  for (int64_t base = (int64_t)blockIdx.x * kTile + threadIdx.x; base < n_groups;
       base += (int64_t)gridDim.x * kTile) {
    uint4 in[kUnroll][3];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t group = base + u * kThreadsPerBlock;
      if (group < n_groups) {
#pragma unroll
        for (int i = 0; i < 3; ++i) {
          in[u][i] = load16<kStreaming>(rgb + 3 * group + i);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t group = base + u * kThreadsPerBlock;
      if (group < n_groups) {
        store16<kStreaming>(gray + group, gray16(in[u][0], in[u][1], in[u][2]));
      }
    }
  }
  const int64_t tail = n_pixels - n_groups * kPixelsPerGroup;
  if (blockIdx.x == 0 && threadIdx.x < tail) {
    const int64_t i = n_groups * kPixelsPerGroup + threadIdx.x;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(rgb) + 3 * i;
    reinterpret_cast<uint8_t*>(gray)[i] = img2gray_pixel(p[0], p[1], p[2]);
  }
}

// Any alignment (views that start mid-allocation): one pixel per thread.
__global__ void __launch_bounds__(kThreadsPerBlock)
    img2gray_unaligned(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t n_pixels) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_pixels; i += stride) {
    gray[i] = img2gray_pixel(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The production setting (kernel/benchmarks/img2gray_variants.cu measures the
// others; benchmarks/results/h200-img2gray-timing.md has the numbers). One
// group of 16 pixels per thread and one block per tile: on the H200 a
// grid-stride grid of 8 blocks per SM ran 7-12% slower at 16384^2, and 2 or 4
// groups per thread gained nothing.
constexpr int kUnroll = 1;
// Plain loads and stores, not the streaming hints (__ldcs/__stcs, evict-first):
// with the hints, an image that fits in the L2 (2160x3840: 33 MB of traffic)
// could not displace what earlier kernels left there, and back to back it ran
// at DRAM speed, 9.4 us against 6.4-6.8 us with plain accesses; and with an L2
// full of dirty lines (do_bench's flush, or any large previous kernel) they
// cost 8% at 16384^2. They won only in a few cold cases (64x512x512 b2b, 2160
// under do_bench), by 5-12%.
constexpr bool kStreaming = false;
// Blocks for the unaligned path: a grid-stride loop, so a bounded grid.
constexpr int64_t kUnalignedMaxBlocks = 65535;

}  // namespace

cudaError_t img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray, int64_t n_pixels, cudaStream_t stream) {
  if (n_pixels <= 0) {
    return cudaSuccess;
  }
  // One block per tile, sized from n_pixels alone: no device query on the
  // per-call path, and the hardware block scheduler balances the SMs.
  if (aligned16(rgb) && aligned16(gray)) {
    const int64_t groups = n_pixels / kPixelsPerGroup;
    const int64_t tile = (int64_t)kUnroll * kThreadsPerBlock;
    int64_t blocks = (groups + tile - 1) / tile;
    blocks = blocks < 1 ? 1 : blocks;  // block 0 also converts the tail pixels
    blocks = blocks < 0x7FFFFFFF ? blocks : 0x7FFFFFFF;  // grid-stride beyond
    img2gray_groups<kUnroll, kStreaming><<<(unsigned int)blocks, kThreadsPerBlock, 0, stream>>>(
        reinterpret_cast<const uint4*>(rgb), reinterpret_cast<uint4*>(gray), n_pixels);
  } else {
    int64_t blocks = (n_pixels + kThreadsPerBlock - 1) / kThreadsPerBlock;
    blocks = blocks < kUnalignedMaxBlocks ? blocks : kUnalignedMaxBlocks;
    img2gray_unaligned<<<(unsigned int)blocks, kThreadsPerBlock, 0, stream>>>(rgb, gray, n_pixels);
  }
  return cudaGetLastError();
}
