/* kernel-matrix: glibc 2.28 compatibility for manylinux_2_28 variants,
 * included before every source (-include).
 *
 * glibc 2.34 moved libdl into libc and gave dlsym a new symbol version
 * (GLIBC_2.34); a .so built on a newer system then needs glibc >= 2.34 to load,
 * although the function is the same. torch's stable-ABI headers call dlsym, so
 * every stable-ABI kernel would fail manylinux_2_28 (and NVTX's dlopen, dlclose
 * and dlerror likewise). libc still exports the old versions: bind to them (in
 * the table at the end, with the other functions glibc 2.34 moved).
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
 * one difference, C23's 0b prefix in strtol/scanf, no kernel source relies on.
 *
 * glibc 2.34 moved libpthread, librt, libanl and libutil into libc too (2.32
 * already four pthread functions), each function under a new version: a kernel
 * using std::call_once or std::thread (pthread_once, pthread_create) would need
 * glibc 2.34. The table below binds every one of them to the version glibc 2.28
 * exports as its default, the same function: on x86_64 the newest version up to
 * 2.28 that this libc still exports (objdump -T), on aarch64 the same or 2.17,
 * its first. glibc 2.28 resolves them in libpthread, librt and libdl, which
 * torch's libraries load. Left out: what libanl, libresolv and libutil held
 * (getaddrinfo_a, ns_name_*, openpty...), which nothing loads there: a call stays
 * at GLIBC_2.34, and the ABI check says so at build time rather than the loader
 * at import. tests/containers/test_container_build.py checks the table against the libc of
 * the machine it runs on. A .symver of a function a source does not call adds
 * nothing to its object. */
#ifndef KERNEL_MATRIX_SYMBOLS_H
#define KERNEL_MATRIX_SYMBOLS_H
#if defined(__linux__)
#include <features.h>
#undef __GLIBC_USE_C2X_STRTOL
#define __GLIBC_USE_C2X_STRTOL 0
#undef __GLIBC_USE_C23_STRTOL
#define __GLIBC_USE_C23_STRTOL 0
#endif
/* Each binding only where this glibc exports the new version beside the old one: an
 * older glibc's default is the old version already, and in glibc 2.28 the moved
 * functions are not in libc yet, where ld refuses a versioned reference that no
 * library on its command line defines ("no symbol version section"). */
#if defined(__linux__) && !defined(__CUDA_ARCH__) && defined(__GLIBC_PREREQ)
#if defined(__x86_64__)
#define KERNEL_MATRIX_GLIBC_2_28(name, x86_64, aarch64) __asm__(".symver " #name "," #name "@GLIBC_" x86_64);
#elif defined(__aarch64__)
#define KERNEL_MATRIX_GLIBC_2_28(name, x86_64, aarch64) __asm__(".symver " #name "," #name "@GLIBC_" aarch64);
#else
#define KERNEL_MATRIX_GLIBC_2_28(name, x86_64, aarch64)
#endif
/* function, its version on x86_64, on aarch64 */
#if __GLIBC_PREREQ(2, 29) /* libm's new versions in glibc 2.29 */
KERNEL_MATRIX_GLIBC_2_28(exp, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(exp2, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(log, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(log2, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pow, "2.2.5", "2.17")
#endif
#if __GLIBC_PREREQ(2, 32) /* moved into libc in glibc 2.32 */
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_setaffinity_np, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getaffinity_np, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getattr_np, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_sigmask, "2.2.5", "2.17")
#endif
#if __GLIBC_PREREQ(2, 34) /* moved into libc in glibc 2.34 */
KERNEL_MATRIX_GLIBC_2_28(__mq_open_2, "2.7", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_cleanup_routine, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_key_create, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_register_cancel, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_register_cancel_defer, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_unregister_cancel, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_unregister_cancel_restore, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(__pthread_unwind_next, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(_pthread_cleanup_pop, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(_pthread_cleanup_push, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_cancel, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_cancel64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_error, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_error64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_fsync, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_fsync64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_read, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_read64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_return, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_return64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_suspend, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_suspend64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_write, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(aio_write64, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(call_once, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_broadcast, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_destroy, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_init, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_signal, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_timedwait, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(cnd_wait, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(dladdr, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dladdr1, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlclose, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlerror, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlinfo, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlmopen, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlopen, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlsym, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(dlvsym, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(lio_listio, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(lio_listio64, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_close, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_getattr, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_notify, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_open, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_receive, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_send, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_setattr, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_timedreceive, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_timedsend, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mq_unlink, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(mtx_destroy, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(mtx_init, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(mtx_lock, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(mtx_timedlock, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(mtx_trylock, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(mtx_unlock, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_getaffinity_np, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_getguardsize, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_getstack, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_getstackaddr, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_getstacksize, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_setguardsize, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_setstack, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_setstackaddr, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_attr_setstacksize, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrier_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrier_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrier_wait, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrierattr_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrierattr_getpshared, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrierattr_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_barrierattr_setpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_cancel, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_condattr_getclock, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_condattr_getpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_condattr_setclock, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_condattr_setpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_create, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_detach, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getattr_default_np, "2.18", "2.18")
KERNEL_MATRIX_GLIBC_2_28(pthread_getconcurrency, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getcpuclockid, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getname_np, "2.12", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_getspecific, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_join, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_key_create, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_key_delete, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_kill, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutex_consistent, "2.12", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutex_getprioceiling, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutex_setprioceiling, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutex_timedlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutex_trylock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_getprioceiling, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_getprotocol, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_getpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_getrobust, "2.12", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_gettype, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_setprioceiling, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_setprotocol, "2.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_setpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_setrobust, "2.12", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_mutexattr_settype, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_once, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_rdlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_timedrdlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_timedwrlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_tryrdlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_trywrlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_unlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlock_wrlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_getkind_np, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_getpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_setkind_np, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_rwlockattr_setpshared, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_setaffinity_np, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_setattr_default_np, "2.18", "2.18")
KERNEL_MATRIX_GLIBC_2_28(pthread_setconcurrency, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_setname_np, "2.12", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_setschedprio, "2.3.4", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_setspecific, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_sigqueue, "2.11", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_spin_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_spin_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_spin_lock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_spin_trylock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_spin_unlock, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_testcancel, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_timedjoin_np, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(pthread_tryjoin_np, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_close, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_destroy, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_getvalue, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_init, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_open, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_post, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_timedwait, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_trywait, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_unlink, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(sem_wait, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(shm_open, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(shm_unlink, "2.2.5", "2.17")
KERNEL_MATRIX_GLIBC_2_28(thrd_create, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(thrd_detach, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(thrd_exit, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(thrd_join, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(timer_create, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(timer_delete, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(timer_getoverrun, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(timer_gettime, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(timer_settime, "2.3.3", "2.17")
KERNEL_MATRIX_GLIBC_2_28(tss_create, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(tss_delete, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(tss_get, "2.28", "2.28")
KERNEL_MATRIX_GLIBC_2_28(tss_set, "2.28", "2.28")
#endif
#undef KERNEL_MATRIX_GLIBC_2_28
#endif
#endif
