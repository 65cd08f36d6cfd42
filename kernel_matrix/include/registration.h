// kernel-matrix's registration macros: the ones kernel-builder generates, with
// one difference that makes builds cacheable.
//
// kernel-builder compiles the op namespace (the per-build `_img2gray_cuda_<hash>`)
// into the binding via TORCH_EXTENSION_NAME, so any change to any source file
// recompiles the binding against torch's headers, for every torch version. Here the
// namespace is a string, `km_op_namespace`, defined with the module's PyInit_
// function in a tiny generated file (module.cpp). The binding's object then depends
// only on its own source and torch's headers, and the object cache reuses it.
//
// In the binding TU, TORCH_EXTENSION_NAME is the stable base name (`_img2gray_cuda`);
// the macros below ignore their NAME argument and register under km_op_namespace.
#pragma once

#include <Python.h>

#define _KM_CONCAT(A, B) A##B
#define KM_CONCAT(A, B) _KM_CONCAT(A, B)
#define _KM_STRINGIFY(A) #A
#define KM_STRINGIFY(A) _KM_STRINGIFY(A)

// The per-build op namespace, e.g. "_img2gray_cuda_1a2b3c4" (generated module.cpp).
extern "C" const char km_op_namespace[];

// TORCH_LIBRARY and TORCH_LIBRARY_IMPL from torch/library.h, with the namespace
// given as a string instead of a token.
#define TORCH_LIBRARY_EXPAND(NAME, MODULE)                                             \
  static void km_library_init(torch::Library&);                                        \
  static const torch::detail::TorchLibraryInit km_library_static_init(                 \
      torch::Library::DEF, &km_library_init, km_op_namespace, std::nullopt, __FILE__, \
      __LINE__);                                                                       \
  void km_library_init(torch::Library& MODULE)

#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) _KM_LIBRARY_IMPL(DEVICE, MODULE, C10_UID)
#define _KM_LIBRARY_IMPL(DEVICE, MODULE, UID)                                                    \
  static void KM_CONCAT(km_library_impl_init_##DEVICE##_, UID)(torch::Library&);                 \
  static const torch::detail::TorchLibraryInit KM_CONCAT(km_library_impl_static_init_##DEVICE##_, \
                                                         UID)(                                   \
      torch::Library::IMPL, &KM_CONCAT(km_library_impl_init_##DEVICE##_, UID), km_op_namespace, \
      std::make_optional(c10::DispatchKey::DEVICE), __FILE__, __LINE__);                         \
  void KM_CONCAT(km_library_impl_init_##DEVICE##_, UID)(torch::Library & MODULE)

// The module's PyInit_ function is in module.cpp, where its name is known.
#define REGISTER_EXTENSION(NAME)

// The stable-ABI counterparts (torch/csrc/stable/library.h, torch >= 2.10), for
// kernels whose [torch] stable-abi targets a torch version.
#define STABLE_TORCH_LIBRARY_EXPAND(NAME, MODULE)                                              \
  static void km_stable_library_init(torch::stable::detail::StableLibrary&);                   \
  static const torch::stable::detail::StableTorchLibraryInit km_stable_library_static_init(    \
      torch::stable::detail::StableLibrary::Kind::DEF, &km_stable_library_init, km_op_namespace, \
      nullptr, __FILE__, __LINE__);                                                            \
  void km_stable_library_init(torch::stable::detail::StableLibrary& MODULE)

#define STABLE_TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) _KM_STABLE_LIBRARY_IMPL(DEVICE, MODULE, C10_UID)
#define _KM_STABLE_LIBRARY_IMPL(DEVICE, MODULE, UID)                                              \
  static void KM_CONCAT(km_stable_impl_init_##DEVICE##_, UID)(torch::stable::detail::StableLibrary&); \
  static const torch::stable::detail::StableTorchLibraryInit KM_CONCAT(                           \
      km_stable_impl_static_init_##DEVICE##_, UID)(                                               \
      torch::stable::detail::StableLibrary::Kind::IMPL,                                           \
      &KM_CONCAT(km_stable_impl_init_##DEVICE##_, UID), km_op_namespace, #DEVICE, __FILE__,       \
      __LINE__);                                                                                  \
  void KM_CONCAT(km_stable_impl_init_##DEVICE##_, UID)(torch::stable::detail::StableLibrary & MODULE)
