/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "log.h"

static bool journal;
static int journal_fd = -EBADF; /* datagram socket for the native protocol */
static atomic_uint dropped;
static _Thread_local struct log_fields fields;

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

/* The unit a cgroup path names: its last component, when that is a
 * service, scope or slice. */
static const char *unit_of(const char *cgroup, size_t *ret_len) {
        static const char *const suffixes[] = { ".service", ".scope", ".slice" };
        const char *u = cgroup ? strrchr(cgroup, '/') : NULL;
        size_t n;

        if (!u || !*++u)
                return NULL;
        n = strlen(u);
        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                size_t k = strlen(suffixes[i]);

                if (n > k && strcmp(u + n - k, suffixes[i]) == 0) {
                        *ret_len = n;
                        return u;
                }
        }
        return NULL;
}

/* Appends one field in the journal's native protocol: "NAME=value\n", or
 * for a value holding a newline "NAME\n", its length as a little-endian
 * 64-bit number, the value and "\n". Returns the new length, or size + 1
 * when it does not fit. */
static size_t field_append(char *buf, size_t len, size_t size, const char *name, const char *value,
                           size_t value_len) {
        size_t name_len = strlen(name);
        bool binary = memchr(value, '\n', value_len) != NULL;
        size_t need = name_len + 1 + (binary ? 8 : 0) + value_len + 1;

        if (len + need > size)
                return size + 1;
        memcpy(buf + len, name, name_len);
        len += name_len;
        if (binary) {
                uint64_t le = htole64(value_len);

                buf[len++] = '\n';
                memcpy(buf + len, &le, 8);
                len += 8;
        } else
                buf[len++] = '=';
        memcpy(buf + len, value, value_len);
        len += value_len;
        buf[len++] = '\n';
        return len;
}

/* One entry with structured fields, sent without waiting: a journal that
 * does not keep up loses entries (counted), it never blocks a thread.
 * Returns false when the journal cannot be reached at all. */
static bool journal_send(int priority, const char *file, int line, const char *func,
                         const char *message) {
        static const struct sockaddr_un sa = {
                .sun_family = AF_UNIX,
                .sun_path = "/run/systemd/journal/socket",
        };
        char buf[2048], num[32];
        size_t len = 0, size = sizeof(buf), n;
        const char *unit;

#define ADD(name, value, value_len) \
        len = len <= size ? field_append(buf, len, size, name, value, value_len) : len
#define ADD_STR(name, value) ADD(name, value, strlen(value))
        n = (size_t) snprintf(num, sizeof(num), "%d", priority);
        ADD("PRIORITY", num, n);
        ADD_STR("SYSLOG_IDENTIFIER", program_invocation_short_name);
        ADD_STR("MESSAGE", message);
        ADD_STR("CODE_FILE", file);
        n = (size_t) snprintf(num, sizeof(num), "%d", line);
        ADD("CODE_LINE", num, n);
        ADD_STR("CODE_FUNC", func);
        if (fields.target_pid > 0) {
                n = (size_t) snprintf(num, sizeof(num), "%d", fields.target_pid);
                ADD("ZSWAPD_TARGET_PID", num, n);
        }
        if (fields.policy)
                ADD_STR("ZSWAPD_POLICY", fields.policy);
        if (fields.cgroup) {
                ADD_STR("ZSWAPD_CGROUP", fields.cgroup);
                unit = unit_of(fields.cgroup, &n);
                if (unit)
                        ADD("ZSWAPD_UNIT", unit, n);
        }
#undef ADD_STR
#undef ADD
        if (len > size)
                len = size; /* cut: the journal rejects a half field, so the
                             * message was long; keep what was whole before */
        if (sendto(journal_fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *) &sa,
                   sizeof(sa)) >= 0)
                return true;
        if (errno == EAGAIN || errno == ENOBUFS || errno == EMSGSIZE) {
                atomic_fetch_add(&dropped, 1);
                return true;
        }
        return false;
}

static void log_journal(int priority, const char *file, int line, const char *func,
                        const char *format, va_list ap) {
        char message[1024];
        int saved = errno;
        unsigned lost;

        vsnprintf(message, sizeof(message), format, ap);
        if (!journal_send(priority, file, line, func, message)) {
                /* journald is not listening (yet, or any more): the stream. */
                char b[1100];
                int n = snprintf(b, sizeof(b), "<%d>%s\n", priority, message);

                log_write_line(b, (size_t) MIN(n, (int) sizeof(b) - 1));
        }
        lost = atomic_exchange(&dropped, 0);
        if (lost > 0) {
                snprintf(message, sizeof(message), "%u log messages were lost (journal busy)",
                         lost);
                (void) journal_send(LOG_WARNING, __FILE__, __LINE__, __func__, message);
        }
        errno = saved;
}

static void log_dispatch(void *userdata, int priority, const char *file, int line, const char *func,
                         const char *format, va_list ap) {
        if (journal && journal_fd >= 0)
                log_journal(priority, file, line, func, format, ap);
        else
                log_stderr(userdata, priority, file, line, func, format, ap);
}

struct log_fields log_fields_push(const struct log_fields *f) {
        struct log_fields old = fields;

        fields = *f;
        return old;
}

void log_fields_pop(struct log_fields *saved) {
        fields = *saved;
}

static struct zsw_log logger = {
        .fn = log_dispatch,
        .max_priority = LOG_INFO,
};

bool log_fd_is_journal_stream(const char *journal_stream, int fd) {
        unsigned long long dev, ino;
        struct stat st;
        int n = 0;

        /* systemd sets "DEVICE:INODE" of the stream it connected; the fd is
         * the journal only if it is still that very file (a shell
         * redirection in ExecStart= or a child's own stderr is not). */
        if (!journal_stream || sscanf(journal_stream, "%llu:%llu%n", &dev, &ino, &n) != 2 ||
            journal_stream[n])
                return false;
        if (fstat(fd, &st) < 0)
                return false;
        return st.st_dev == dev && st.st_ino == ino;
}

void log_setup(int max_priority) {
        journal = log_fd_is_journal_stream(getenv("JOURNAL_STREAM"), STDERR_FILENO);
        if (journal && journal_fd < 0)
                journal_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        logger.max_priority = max_priority;
}

bool log_to_journal(void) {
        return journal && journal_fd >= 0;
}

const struct zsw_log *log_get(void) {
        return &logger;
}
