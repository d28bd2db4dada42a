/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "log.h"

static bool journal;
static atomic_uint dropped;

static void log_write_line(const char *line, size_t len) {
        ssize_t n;

        /* The journal's stream is a socket: send() can refuse to wait. A
         * terminal or a pipe gets a plain write(). */
        n = send(STDERR_FILENO, line, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK)
                n = write(STDERR_FILENO, line, len);
        if (n < 0)
                atomic_fetch_add(&dropped, 1);
}

static const char *plain_prefix(int priority) {
        if (priority <= LOG_ERR)
                return "error: ";
        if (priority == LOG_WARNING)
                return "warning: ";
        if (priority == LOG_DEBUG)
                return "debug: ";
        return "";
}

static void log_stderr(void *userdata, int priority, const char *file, int line, const char *func,
                       const char *format, va_list ap) {
        char buf[1024];
        int saved = errno, n;
        unsigned lost;

        if (journal)
                n = snprintf(buf, sizeof(buf), "<%d>", priority);
        else
                n = snprintf(buf, sizeof(buf), "%s", plain_prefix(priority));
        errno = saved; /* for %m */
        n += vsnprintf(buf + n, sizeof(buf) - n, format, ap);
        if ((size_t) n >= sizeof(buf) - 1)
                n = sizeof(buf) - 2; /* truncated: keep the line whole */
        buf[n++] = '\n';
        log_write_line(buf, n);

        lost = atomic_exchange(&dropped, 0);
        if (lost > 0) {
                n = snprintf(buf, sizeof(buf), "%s%u log messages were lost (log stream full)\n",
                             journal ? "<4>" : "warning: ", lost);
                log_write_line(buf, n);
        }
        errno = saved;
}

static struct zsw_log logger = {
        .fn = log_stderr,
        .max_priority = LOG_INFO,
};

static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        /* systemd sets "DEVICE:INODE" of the stream it connected; stderr is
         * the journal only if it is still that very socket. */
        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return st.st_dev == dev && st.st_ino == ino;
}

void log_setup(int max_priority) {
        journal = stderr_is_journal();
        logger.max_priority = max_priority;
}

const struct zsw_log *log_get(void) {
        return &logger;
}
