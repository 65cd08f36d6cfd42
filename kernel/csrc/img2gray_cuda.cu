#include "img2gray_cuda.h"
#include "img2gray_pixel.h"

namespace {

constexpr int kThreadsPerBlock = 256;
// A grid-stride loop covers any pixel count with a bounded grid.
constexpr int64_t kMaxBlocks = 65535LL * 32;

__global__ void img2gray_kernel(const uint8_t* __restrict__ rgb,
                                uint8_t* __restrict__ gray, int64_t n_pixels) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_pixels;
       i += stride) {
    const uint8_t* p = rgb + 3 * i;
    gray[i] = img2gray_pixel(p[0], p[1], p[2]);
  }
}

}  // namespace

cudaError_t img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray,
                                 int64_t n_pixels, cudaStream_t stream) {
  if (n_pixels <= 0) {
    return cudaSuccess;
  }
  int64_t blocks = (n_pixels + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > kMaxBlocks) {
    blocks = kMaxBlocks;
  }
  img2gray_kernel<<<(unsigned int)blocks, kThreadsPerBlock, 0, stream>>>(rgb, gray,
                                                                        n_pixels);
  return cudaGetLastError();
}
