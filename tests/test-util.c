/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>

#include "test.h"
#include "util.h"

static int last_priority;
static char last_message[256];

static void capture_log(void *userdata, int priority, const char *file, int line, const char *func,
                        const char *format, va_list ap) {
        last_priority = priority;
        vsnprintf(last_message, sizeof(last_message), format, ap);
}

TEST(log_errno_returns_negative_and_formats) {
        struct zsw_log log = { .fn = capture_log, .max_priority = LOG_DEBUG };

        ASSERT_EQ(zsw_log_errno(&log, LOG_ERR, ENOENT, "open %s: %m", "x"), -ENOENT);
        ASSERT_EQ(last_priority, LOG_ERR);
        ASSERT_STREQ(last_message, "open x: No such file or directory");
        ASSERT_EQ(zsw_log_errno(&log, LOG_ERR, -EPERM, "again"), -EPERM);
}

TEST(log_filters_by_priority) {
        struct zsw_log log = { .fn = capture_log, .max_priority = LOG_WARNING };

        last_message[0] = 0;
        zsw_log(&log, LOG_DEBUG, "hidden");
        ASSERT_STREQ(last_message, "");
        zsw_log(&log, LOG_ERR, "shown %d", 1);
        ASSERT_STREQ(last_message, "shown 1");
        ASSERT_EQ(zsw_log_errno(NULL, LOG_ERR, EIO, "nobody listens"), -EIO);
}

TEST(take_fd_hands_over) {
        _cleanup_close_ int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int kept;

        ASSERT_GE(fd, 0);
        kept = TAKE_FD(fd);
        ASSERT_LT(fd, 0);
        ASSERT_GE(fcntl(kept, F_GETFD), 0);
        close(kept);
}
