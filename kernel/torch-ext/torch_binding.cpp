#include "torch_binding.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "img2gray_cpu.h"
#include "registration.h"

#if defined(CUDA_KERNEL)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "img2gray_cuda.h"
#endif

namespace {

// Pixels per CPU task: large enough that scheduling costs vanish.
constexpr int64_t kCpuGrainPixels = 1 << 16;

// The same checks and wording as the fake implementations in img2gray/__init__.py.
void check_input(const at::Tensor& input) {
  TORCH_CHECK_TYPE(input.scalar_type() == at::kByte,
                   "img2gray: expected input of dtype torch.uint8, got ",
                   input.scalar_type());
  TORCH_CHECK_VALUE(input.dim() >= 3,
                    "img2gray: expected input of shape [..., H, W, 3], got ",
                    input.sizes());
  TORCH_CHECK_VALUE(input.size(-1) == 3,
                    "img2gray: expected 3 channels (RGB) in the last dimension "
                    "of input [..., H, W, 3], got ",
                    input.size(-1), " in shape ", input.sizes());
}

void check_arguments(const at::Tensor& input, const at::Tensor& output) {
  check_input(input);
  TORCH_CHECK_TYPE(output.scalar_type() == at::kByte,
                   "img2gray: expected output of dtype torch.uint8, got ",
                   output.scalar_type());
  const auto expected = input.sizes().slice(0, input.dim() - 1);
  TORCH_CHECK_VALUE(output.sizes() == expected,
                    "img2gray: expected output of shape ", expected,
                    " for input of shape ", input.sizes(), ", got ",
                    output.sizes());
  TORCH_CHECK(input.device() == output.device(),
              "img2gray: expected input and output on the same device, got "
              "input on ",
              input.device(), " and output on ", output.device());
  at::assert_no_internal_overlap(output);
  at::assert_no_overlap(output, input);
}

// A fresh contiguous output for a checked input (uint8, on the input's device):
// allocated here rather than by torch.empty in Python, whose argument parsing
// cost more host time per call than the rest of the op (issue 15).
at::Tensor new_output(const at::Tensor& input) {
  return at::empty(input.sizes().slice(0, input.dim() - 1), input.options());
}

// Runs convert(rgb, gray, n_pixels) on contiguous memory: a contiguous copy of
// a strided input, and a scratch output copied back into a strided output.
template <typename Convert>
void run_contiguous(const at::Tensor& input, at::Tensor& output, Convert convert) {
  if (output.numel() == 0) {
    return;
  }
  const at::Tensor rgb = input.contiguous();
  const bool write_in_place = output.is_contiguous();
  at::Tensor gray = write_in_place ? output : at::empty(output.sizes(), output.options());
  convert(rgb.const_data_ptr<uint8_t>(), gray.mutable_data_ptr<uint8_t>(), gray.numel());
  if (!write_in_place) {
    output.copy_(gray);
  }
}

void convert_cpu(const at::Tensor& input, at::Tensor& output) {
  run_contiguous(input, output, [](const uint8_t* rgb, uint8_t* gray, int64_t n) {
    at::parallel_for(0, n, kCpuGrainPixels, [&](int64_t begin, int64_t end) {
      img2gray_cpu(rgb + 3 * begin, gray + begin, end - begin);
    });
  });
}

#if defined(CUDA_KERNEL)
// The caller has checked the arguments and set the input's device.
void convert_cuda(const at::Tensor& input, at::Tensor& output) {
  run_contiguous(input, output, [&](const uint8_t* rgb, uint8_t* gray, int64_t n) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.device().index()).stream();
    C10_CUDA_CHECK(img2gray_cuda_launch(rgb, gray, n, stream));
  });
}
#endif

}  // namespace

void img2gray_cpu_op(const at::Tensor& input, at::Tensor& output) {
  check_arguments(input, output);
  convert_cpu(input, output);
}

at::Tensor to_gray_cpu_op(const at::Tensor& input) {
  check_input(input);
  at::Tensor output = new_output(input);
  convert_cpu(input, output);
  return output;
}

#if defined(CUDA_KERNEL)
void img2gray_cuda_op(const at::Tensor& input, at::Tensor& output) {
  // The dispatcher picks this kernel when any argument is on CUDA, so the
  // device check must come before the guard, which needs a CUDA device.
  check_arguments(input, output);
  const c10::cuda::OptionalCUDAGuard device_guard(input.device());
  convert_cuda(input, output);
}

at::Tensor to_gray_cuda_op(const at::Tensor& input) {
  check_input(input);
  const c10::cuda::OptionalCUDAGuard device_guard(input.device());
  at::Tensor output = new_output(input);
  convert_cuda(input, output);
  return output;
}
#endif

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  ops.def("img2gray(Tensor input, Tensor! output) -> ()");
  // The functional form: the output is allocated in C++ (img2gray() without out=).
  ops.def("to_gray(Tensor input) -> Tensor");
  ops.impl("img2gray", c10::kCPU, &img2gray_cpu_op);
  ops.impl("to_gray", c10::kCPU, &to_gray_cpu_op);
#if defined(CUDA_KERNEL)
  ops.impl("img2gray", c10::kCUDA, &img2gray_cuda_op);
  ops.impl("to_gray", c10::kCUDA, &to_gray_cuda_op);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
