/* kernel-matrix: glibc 2.28 compatibility for manylinux_2_28 variants.
 *
 * Put first on the include path, this header hides glibc's own (glibc >= 2.32).
 * libstdc++ (GCC >= 11) checks `__has_include(<sys/single_threaded.h>)` and, when
 * the header exists, reads glibc's `__libc_single_threaded` (symbol version
 * GLIBC_2.32) to skip atomic reference counts in single-threaded programs. That
 * one reference would stop the .so from loading on glibc 2.28.
 *
 * Here the flag is a per-file constant "not known to be single-threaded": reference
 * counts are always atomic, exactly what libstdc++ does on glibc < 2.32. Mixing with
 * libraries that do read glibc's flag is safe: an atomic update is also correct in a
 * single-threaded process. */
#ifndef KERNEL_MATRIX_COMPAT_SINGLE_THREADED_H
#define KERNEL_MATRIX_COMPAT_SINGLE_THREADED_H
static const char __libc_single_threaded __attribute__((__unused__)) = 0;
#endif
