#pragma once

#include <ATen/core/Tensor.h>

// output[..., h, w] = gray(input[..., h, w, :]) for uint8 RGB input [..., H, W, 3].
// Checks dtypes, shapes and devices, accepts non-contiguous tensors, and runs
// on the input's device and that device's current stream.
void img2gray_cpu_op(const at::Tensor& input, at::Tensor& output);
// The same into a new contiguous uint8 tensor [..., H, W] on the input's device.
at::Tensor to_gray_cpu_op(const at::Tensor& input);
#if defined(CUDA_KERNEL)
void img2gray_cuda_op(const at::Tensor& input, at::Tensor& output);
at::Tensor to_gray_cuda_op(const at::Tensor& input);
#endif
