// gray-tvm-ffi's binding: img2gray on any DLPack tensor (torch, numpy, ...) through
// tvm-ffi. No torch header: the library links libtvm_ffi only.
#include <stdint.h>

#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/tvm_ffi.h>

#include "img2gray_cpu.h"
#ifdef CUDA_KERNEL
#include <tvm/ffi/extra/cuda/device_guard.h>

#include "img2gray_cuda.h"
#endif

// The [tvm-ffi] section's cxx-flags reach this file.
#ifndef GRAY_TVM_FFI_BINDING
#error "[tvm-ffi] cxx-flags were not applied"
#endif

namespace {

constexpr DLDataType kUInt8{kDLUInt, 8, 1};

// Where a view's elements start: DLPack may give a base pointer and a byte offset.
template <typename T>
T* elements(tvm::ffi::TensorView t) {
  return reinterpret_cast<T*>(static_cast<char*>(t.data_ptr()) + t.byte_offset());
}

void img2gray(tvm::ffi::TensorView rgb, tvm::ffi::TensorView gray) {
  TVM_FFI_CHECK(rgb.dtype() == kUInt8 && gray.dtype() == kUInt8, TypeError) << "img2gray takes uint8 tensors";
  TVM_FFI_CHECK(rgb.IsContiguous() && gray.IsContiguous(), ValueError) << "img2gray takes contiguous tensors";
  TVM_FFI_CHECK(rgb.ndim() >= 1 && rgb.size(-1) == 3, ValueError) << "rgb must be [..., 3]";
  TVM_FFI_CHECK(rgb.numel() == 3 * gray.numel(), ValueError) << "gray must hold one pixel per RGB triple";
  TVM_FFI_CHECK(rgb.device().device_type == gray.device().device_type &&
                    rgb.device().device_id == gray.device().device_id,
                ValueError)
      << "rgb and gray must be on the same device";
  const int64_t pixels = gray.numel();
  if (pixels == 0) return;
  if (rgb.device().device_type == kDLCPU) {
    img2gray_cpu(elements<const uint8_t>(rgb), elements<uint8_t>(gray), pixels);
    return;
  }
#ifdef CUDA_KERNEL
  if (rgb.device().device_type == kDLCUDA) {
    tvm::ffi::CUDADeviceGuard guard(rgb.device().device_id);
    auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(kDLCUDA, rgb.device().device_id));
    const cudaError_t error = img2gray_cuda_launch(elements<const uint8_t>(rgb), elements<uint8_t>(gray), pixels, stream);
    TVM_FFI_CHECK(error == cudaSuccess, RuntimeError) << cudaGetErrorString(error);
    return;
  }
#endif
  TVM_FFI_THROW(ValueError) << "img2gray: no kernel for this device in this build";
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(img2gray, img2gray);
