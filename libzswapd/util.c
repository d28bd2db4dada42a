/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <time.h>

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
