/* kernel-matrix: glibc 2.28 compatibility for manylinux_2_28 variants,
 * included before every source (-include).
 *
 * glibc 2.34 moved libdl into libc and gave dlsym a new symbol version
 * (GLIBC_2.34); a .so built on a newer system then needs glibc >= 2.34 to load,
 * although the function is the same. torch's stable-ABI headers call dlsym, so
 * every stable-ABI kernel would fail manylinux_2_28 (and NVTX's dlopen, dlclose
 * and dlerror likewise). libc still exports the old versions: bind to them. */
#ifndef KERNEL_MATRIX_SYMBOLS_H
#define KERNEL_MATRIX_SYMBOLS_H
#if defined(__linux__) && !defined(__CUDA_ARCH__)
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
/* NVTX (which cub's Device* algorithms include: megablocks) calls these too. */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
#endif
#endif
#endif
