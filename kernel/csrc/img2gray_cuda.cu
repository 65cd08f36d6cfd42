#include "img2gray_cuda.h"
#include "img2gray_pixel.h"

namespace {

// img2gray moves 4 bytes per pixel and computes little: it is bound by memory
// bandwidth. Each thread converts 16 pixels per step with three 16-byte loads
// (48 RGB bytes) and one 16-byte store, streaming past the caches.
constexpr int kThreadsPerBlock = 256;
constexpr int kPixelsPerGroup = 16;
// Enough resident blocks per SM to keep every SM's memory pipeline full; the
// grid-stride loop covers larger images with this many blocks.
constexpr int kBlocksPerSm = 8;

__device__ __forceinline__ uint32_t byte_of(uint32_t word, int index) { return (word >> (8 * index)) & 0xFFu; }

// Four pixels packed in three little-endian words -> four gray bytes in one word.
__device__ __forceinline__ uint32_t gray4(uint32_t w0, uint32_t w1, uint32_t w2) {
  const uint32_t p0 = img2gray_pixel(byte_of(w0, 0), byte_of(w0, 1), byte_of(w0, 2));
  const uint32_t p1 = img2gray_pixel(byte_of(w0, 3), byte_of(w1, 0), byte_of(w1, 1));
  const uint32_t p2 = img2gray_pixel(byte_of(w1, 2), byte_of(w1, 3), byte_of(w2, 0));
  const uint32_t p3 = img2gray_pixel(byte_of(w2, 1), byte_of(w2, 2), byte_of(w2, 3));
  return p0 | (p1 << 8) | (p2 << 16) | (p3 << 24);
}

// rgb and gray must be 16-byte aligned. Groups of 16 pixels, then the
// n_pixels % 16 tail pixels, one per thread of the first threads.
__global__ void __launch_bounds__(kThreadsPerBlock)
    img2gray_vectorized(const uint4* __restrict__ rgb, uint4* __restrict__ gray, int64_t n_pixels) {
  const int64_t n_groups = n_pixels / kPixelsPerGroup;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t group = first; group < n_groups; group += stride) {
    const uint4 a = __ldcs(rgb + 3 * group);
    const uint4 b = __ldcs(rgb + 3 * group + 1);
    const uint4 c = __ldcs(rgb + 3 * group + 2);
    uint4 out;
    out.x = gray4(a.x, a.y, a.z);
    out.y = gray4(a.w, b.x, b.y);
    out.z = gray4(b.z, b.w, c.x);
    out.w = gray4(c.y, c.z, c.w);
    __stcs(gray + group, out);
  }
  const int64_t tail = n_pixels - n_groups * kPixelsPerGroup;
  if (first < tail) {
    const int64_t i = n_groups * kPixelsPerGroup + first;
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

cudaError_t img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray, int64_t n_pixels, cudaStream_t stream) {
  if (n_pixels <= 0) {
    return cudaSuccess;
  }
  int device = 0, sms = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status == cudaSuccess) {
    status = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  if (status != cudaSuccess) {
    return status;
  }
  const int64_t max_blocks = (int64_t)sms * kBlocksPerSm;
  if (aligned16(rgb) && aligned16(gray)) {
    const int64_t groups = n_pixels / kPixelsPerGroup;
    // At least enough threads for the tail pixels.
    const int64_t threads_needed = groups > kPixelsPerGroup ? groups : kPixelsPerGroup;
    int64_t blocks = (threads_needed + kThreadsPerBlock - 1) / kThreadsPerBlock;
    blocks = blocks < max_blocks ? blocks : max_blocks;
    img2gray_vectorized<<<(unsigned int)blocks, kThreadsPerBlock, 0, stream>>>(
        reinterpret_cast<const uint4*>(rgb), reinterpret_cast<uint4*>(gray), n_pixels);
  } else {
    int64_t blocks = (n_pixels + kThreadsPerBlock - 1) / kThreadsPerBlock;
    blocks = blocks < max_blocks ? blocks : max_blocks;
    img2gray_unaligned<<<(unsigned int)blocks, kThreadsPerBlock, 0, stream>>>(rgb, gray, n_pixels);
  }
  return cudaGetLastError();
}
