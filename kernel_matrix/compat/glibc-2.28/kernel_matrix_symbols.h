/* kernel-matrix: glibc 2.28 compatibility for manylinux_2_28 variants,
 * included before every source (-include).
 *
 * glibc 2.34 moved libdl into libc and gave dlsym a new symbol version
 * (GLIBC_2.34); a .so built on a newer system then needs glibc >= 2.34 to load,
 * although the function is the same. torch's stable-ABI headers call dlsym, so
 * every stable-ABI kernel would fail manylinux_2_28 (and NVTX's dlopen, dlclose
 * and dlerror likewise). libc still exports the old versions: bind to them.
 *
 * glibc 2.29 likewise versioned exp, exp2, log, log2 and pow anew (GLIBC_2.29):
 * host code calling them (fp64-emu's launcher takes log2 of a row norm) would
 * need glibc 2.29. libm still exports the old versions too.
 *
 * glibc 2.38 redirects sscanf, strtol and their kin to new C23 functions
 * (__isoc23_sscanf@GLIBC_2.38: deep-gemm) whenever _GNU_SOURCE is defined, as
 * g++ always does. The redirect is chosen by a macro that <features.h> sets
 * (C2X_STRTOL, renamed C23_STRTOL in glibc 2.40): read <features.h> here, first,
 * and turn it off, so later headers declare the functions every glibc has. The
 * one difference, C23's 0b prefix in strtol/scanf, no kernel source relies on. */
#ifndef KERNEL_MATRIX_SYMBOLS_H
#define KERNEL_MATRIX_SYMBOLS_H
#if defined(__linux__)
#include <features.h>
#undef __GLIBC_USE_C2X_STRTOL
#define __GLIBC_USE_C2X_STRTOL 0
#undef __GLIBC_USE_C23_STRTOL
#define __GLIBC_USE_C23_STRTOL 0
#endif
#if defined(__linux__) && !defined(__CUDA_ARCH__)
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
/* NVTX (which cub's Device* algorithms include: megablocks) calls these too. */
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver exp,exp@GLIBC_2.2.5");
__asm__(".symver exp2,exp2@GLIBC_2.2.5");
__asm__(".symver log,log@GLIBC_2.2.5");
__asm__(".symver log2,log2@GLIBC_2.2.5");
__asm__(".symver pow,pow@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
__asm__(".symver exp,exp@GLIBC_2.17");
__asm__(".symver exp2,exp2@GLIBC_2.17");
__asm__(".symver log,log@GLIBC_2.17");
__asm__(".symver log2,log2@GLIBC_2.17");
__asm__(".symver pow,pow@GLIBC_2.17");
#endif
#endif
#endif
