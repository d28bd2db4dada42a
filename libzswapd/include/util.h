/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Small helpers shared by every part of zswapd: scope-bound cleanup of
 * memory and descriptors with explicit hand-over of ownership, and the
 * logging callback through which the library reports without printing.
 */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <syslog.h>
#include <unistd.h>

/* 1 in a ThreadSanitizer build: gcc says so with a macro, clang only
 * through __has_feature(). That runtime cannot follow a task that shares
 * memory without being a thread (zswapd-rescue, the injection tracer). */
#if defined(__SANITIZE_THREAD__)
#define ZSW_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZSW_THREAD_SANITIZER 1
#endif
#endif
#ifndef ZSW_THREAD_SANITIZER
#define ZSW_THREAD_SANITIZER 0
#endif

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DIV_ROUND_UP(n, d) (((n) + (d) -1) / (d))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Hand ownership over: return the value and leave the variable empty so
 * that its cleanup handler does nothing. */
#define TAKE_PTR(p)                  \
        ({                           \
                typeof(p) _p_ = (p); \
                (p) = NULL;          \
                _p_;                 \
        })
#define TAKE_FD(fd)              \
        ({                       \
                int _fd_ = (fd); \
                (fd) = -EBADF;   \
                _fd_;            \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}

/* Closing must not clobber the errno the caller is about to report. */
static inline int safe_close(int fd) {
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -EBADF;
}

static inline void closep(int *fd) {
        *fd = safe_close(*fd);
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Declares NAME##p(T **) that calls FUNC(*p) when *p is not NULL, for use
 * with _cleanup_(). FUNC must return NULL (destructors here all do). */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func) \
        static inline void func##p(type *p) {   \
                if (*p)                         \
                        *p = func(*p);          \
        }

/*
 * The library never prints. Whoever owns a library object passes a
 * struct zsw_log; priorities are syslog's (LOG_ERR ... LOG_DEBUG). A NULL
 * fn discards everything.
 */
typedef void (*zsw_log_fn)(void *userdata, int priority, const char *file, int line,
                           const char *func, const char *format, va_list ap);

struct zsw_log {
        zsw_log_fn fn;
        void *userdata;
        int max_priority;
};

_printf_(6, 7) void zsw_log_internal(const struct zsw_log *log, int priority, const char *file,
                                     int line, const char *func, const char *format, ...);

/* Logs and evaluates to -abs(error), so callers can log and return in one
 * step: return zsw_log_errno(log, LOG_ERR, r, "Failed to ...: %m"); */
#define zsw_log_errno(log, prio, error, ...)                                                      \
        ({                                                                                        \
                int _e_ = (error) < 0 ? -(error) : (error);                                       \
                const struct zsw_log *_l_ = (log);                                                \
                if (_l_ && _l_->fn && (prio) <= _l_->max_priority) {                              \
                        errno = _e_;                                                              \
                        zsw_log_internal(_l_, (prio), __FILE__, __LINE__, __func__, __VA_ARGS__); \
                }                                                                                 \
                -_e_;                                                                             \
        })

#define zsw_log(log, prio, ...)                                                                   \
        do {                                                                                      \
                const struct zsw_log *_l_ = (log);                                                \
                if (_l_ && _l_->fn && (prio) <= _l_->max_priority)                                \
                        zsw_log_internal(_l_, (prio), __FILE__, __LINE__, __func__, __VA_ARGS__); \
        } while (0)

/* Monotonic clock in nanoseconds, for latency accounting. */
uint64_t zsw_now_ns(void);

/* Up to size - 1 bytes of the file at path (a /proc file), NUL-terminated,
 * with open() and one read(): no memory allocated, no stdio lock (for the
 * rescue task and the tracer, which run after threads died). -errno if it
 * cannot be read. */
int zsw_read_small_file(const char *path, char *buf, size_t size);

/* The shortest scheduler slice the kernel takes for a SCHED_OTHER thread
 * (sched_setattr(2)'s sched_runtime, Linux 6.12 or later). */
#define ZSW_SCHED_SLICE_MIN_NS 100000ull

/* Sets the calling thread's scheduler slice, keeping its policy
 * (SCHED_OTHER) and nice value; threads it makes inherit it. Kernels
 * before 6.12 accept and ignore it. */
int zsw_sched_set_slice(uint64_t ns);

/* The scheduler slice of thread tid (0: the caller). */
int zsw_sched_get_slice(pid_t tid, uint64_t *ret_ns);
