// Torch-free interface to the CUDA kernel: plain pointers, sizes and a stream,
// so the compiled object can be linked into any torch version's extension.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

// Converts n_pixels interleaved RGB pixels (3 * n_pixels bytes at rgb) to
// n_pixels gray bytes at gray, on the given stream of the current device.
// Both buffers must be contiguous device memory. Returns the launch error, if any.
cudaError_t img2gray_cuda_launch(const uint8_t* rgb, uint8_t* gray,
                                 int64_t n_pixels, cudaStream_t stream);
