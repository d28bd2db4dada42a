/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A system call that touches neither errno nor any other TLS, for tasks
 * that share another thread's TLS (zswapd-rescue, and the host of a
 * tracer task while the task runs on its TLS: libzswapd/remote.c).
 * Returns -errno on failure. Not instrumented by the sanitizers: the
 * rescue calls it before the TLS it borrows is free to use.
 */
#pragma once

#define ZSW_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread"), unused))

ZSW_NO_SANITIZE static inline long zsw_raw_syscall(long n, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
        register long r10 __asm__("r10") = d;
        register long r8 __asm__("r8") = e;
        long ret;

        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                         : "rcx", "r11", "memory");
        return ret;
#elif defined(__aarch64__)
        register long x8 __asm__("x8") = n;
        register long x0 __asm__("x0") = a;
        register long x1 __asm__("x1") = b;
        register long x2 __asm__("x2") = c;
        register long x3 __asm__("x3") = d;
        register long x4 __asm__("x4") = e;

        __asm__ volatile("svc 0"
                         : "+r"(x0)
                         : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
                         : "memory");
        return x0;
#else
#error "zsw_raw_syscall() needs this architecture's system call instruction"
#endif
}
