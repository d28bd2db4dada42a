/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

void zsw_log_internal(const struct zsw_log *log, int priority, const char *file, int line,
                      const char *func, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        log->fn(log->userdata, priority, file, line, func, format, ap);
        va_end(ap);
}

uint64_t zsw_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* sched_setattr(2)'s argument, SCHED_ATTR_SIZE_VER1 (linux/sched/types.h
 * clashes with <sched.h>). */
struct sched_attr_v1 {
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
        uint32_t util_min, util_max;
};

int zsw_sched_set_slice(uint64_t ns) {
        struct sched_attr_v1 a = { .size = sizeof(a), .policy = SCHED_OTHER, .runtime = ns };

        /* The nice value is set too: keep ours (-1 is a valid one). */
        errno = 0;
        a.nice = getpriority(PRIO_PROCESS, 0);
        if (errno != 0)
                return -errno;
        return syscall(SYS_sched_setattr, 0, &a, 0) < 0 ? -errno : 0;
}

int zsw_sched_get_slice(pid_t tid, uint64_t *ret_ns) {
        struct sched_attr_v1 a = {};

        if (syscall(SYS_sched_getattr, tid, &a, sizeof(a), 0) < 0)
                return -errno;
        *ret_ns = a.runtime;
        return 0;
}

int zsw_read_small_file(const char *path, char *buf, size_t size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = read(fd, buf, size - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        return 0;
}
