// Torch-free CPU kernel: plain pointers and sizes (the binding parallelizes).
#pragma once

#include <stdint.h>

// Converts n_pixels interleaved RGB pixels (3 * n_pixels bytes) to gray bytes.
void img2gray_cpu(const uint8_t* __restrict__ rgb, uint8_t* __restrict__ gray, int64_t n_pixels);
