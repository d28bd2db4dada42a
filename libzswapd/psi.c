/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * PSI reading and triggers (see psi.h). The files are tiny and the daemon
 * reads them every control period of every group, so the reader does one
 * read(2) into a stack buffer and parses in place: no allocation while
 * memory may be short.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "psi.h"

#define PSI_FILE_MAX 512

/* "12.34" as 1234; the kernel always prints two decimals, of at most 100. */
static int parse_centi(const char *s, size_t n, unsigned *ret) {
        unsigned v = 0, decimals = 0;
        bool dot = false, digits = false;

        for (size_t i = 0; i < n; i++) {
                if (s[i] == '.' && !dot) {
                        dot = true;
                        continue;
                }
                if (s[i] < '0' || s[i] > '9' || v > 1000000)
                        return -EBADMSG;
                if (dot && ++decimals > 2)
                        return -EBADMSG;
                v = v * 10 + (unsigned) (s[i] - '0');
                digits = true;
        }
        if (!digits)
                return -EBADMSG;
        for (; decimals < 2; decimals++)
                v *= 10;
        if (v > 10000)
                return -EBADMSG; /* a share of time: at most 100.00 */
        *ret = v;
        return 0;
}

static int parse_u64(const char *s, size_t n, uint64_t *ret) {
        uint64_t v = 0;

        if (n == 0)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9' || v > (UINT64_MAX - 9) / 10)
                        return -EBADMSG;
                v = v * 10 + (uint64_t) (s[i] - '0');
        }
        *ret = v;
        return 0;
}

/* Parses the words after "some"/"full" up to the end of the line; every
 * one of avg10, avg60, avg300 and total must be there. */
static int parse_line(const char *p, const char *end, struct zsw_psi_line *ret) {
        struct zsw_psi_line l = {};
        unsigned seen = 0;
        int r = 0;

        while (p < end) {
                const char *w = p, *eq;
                size_t n;

                while (w < end && *w == ' ')
                        w++;
                /* The text need not be NUL-terminated: scan within END. */
                for (n = 0; w + n < end && w[n] != ' ' && w[n] != '\n'; n++)
                        ;
                if (n == 0)
                        break;
                p = w + n;
                eq = memchr(w, '=', n);
                if (!eq)
                        return -EBADMSG;
#define KEY(k) ((size_t) (eq - w) == strlen(k) && memcmp(w, k, strlen(k)) == 0)
                if (KEY("avg10"))
                        r = parse_centi(eq + 1, p - eq - 1, &l.avg10), seen |= 1;
                else if (KEY("avg60"))
                        r = parse_centi(eq + 1, p - eq - 1, &l.avg60), seen |= 2;
                else if (KEY("avg300"))
                        r = parse_centi(eq + 1, p - eq - 1, &l.avg300), seen |= 4;
                else if (KEY("total"))
                        r = parse_u64(eq + 1, p - eq - 1, &l.total_usec), seen |= 8;
#undef KEY
                if (r < 0)
                        return r;
        }
        if (seen != 15)
                return -EBADMSG;
        *ret = l;
        return 0;
}

int zsw_psi_parse(const char *text, size_t size, struct zsw_psi *ret) {
        struct zsw_psi psi = {};
        bool has_some = false;
        const char *p = text, *end = text + size;
        int r;

        while (p < end) {
                const char *eol = memchr(p, '\n', end - p) ?: end;

                if (eol - p > 5 && memcmp(p, "some ", 5) == 0) {
                        r = parse_line(p + 5, eol, &psi.some);
                        if (r < 0)
                                return r;
                        has_some = true;
                } else if (eol - p > 5 && memcmp(p, "full ", 5) == 0) {
                        r = parse_line(p + 5, eol, &psi.full);
                        if (r < 0)
                                return r;
                        psi.has_full = true;
                } else if (eol != p)
                        return -EBADMSG;
                p = eol + 1;
        }
        if (!has_some)
                return -EBADMSG;
        *ret = psi;
        return 0;
}

int zsw_psi_read_at(int dir_fd, const char *name, struct zsw_psi *ret) {
        _cleanup_close_ int fd = -EBADF;
        char buf[PSI_FILE_MAX];
        ssize_t n;

        fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = read(fd, buf, sizeof(buf));
        if (n < 0)
                return -errno;
        if ((size_t) n == sizeof(buf))
                return -EBADMSG; /* far longer than any pressure file */
        return zsw_psi_parse(buf, n, ret);
}

int zsw_psi_trigger_open_at(int dir_fd, const char *name, bool full, uint64_t stall_usec,
                            uint64_t window_usec, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        char line[64];
        int n;

        if (stall_usec == 0 || stall_usec > window_usec || window_usec < ZSW_PSI_WINDOW_MIN_USEC ||
            window_usec > ZSW_PSI_WINDOW_MAX_USEC)
                return -EINVAL;

        /* Non-blocking: the kernel never blocks this write, but a fixture
         * that is a FIFO must not hang the daemon either. */
        fd = openat(dir_fd, name, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = snprintf(line, sizeof(line), "%s %" PRIu64 " %" PRIu64, full ? "full" : "some",
                     stall_usec, window_usec);
        /* The kernel takes the trailing NUL as the end of the trigger. */
        if (write(fd, line, n + 1) < 0)
                return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int zsw_psi_trigger_open_widen_at(int dir_fd, const char *name, bool full, uint64_t stall_usec,
                                  uint64_t window_usec, int *ret_fd, uint64_t *ret_stall_usec,
                                  uint64_t *ret_window_usec) {
        uint64_t w = window_usec, st = stall_usec;
        int r, fd;

        r = zsw_psi_trigger_open_at(dir_fd, name, full, st, w, &fd);
        if (r == -EINVAL && w % ZSW_PSI_WINDOW_UNPRIV_USEC != 0 && w <= ZSW_PSI_WINDOW_MAX_USEC &&
            st > 0 && st <= w) {
                w = DIV_ROUND_UP(w, ZSW_PSI_WINDOW_UNPRIV_USEC) * ZSW_PSI_WINDOW_UNPRIV_USEC;
                st = MAX(stall_usec * w / window_usec, UINT64_C(1));
                r = zsw_psi_trigger_open_at(dir_fd, name, full, st, w, &fd);
                if (r >= 0)
                        r = 1;
        }
        if (r < 0)
                return r;
        *ret_fd = fd;
        if (ret_stall_usec)
                *ret_stall_usec = st;
        if (ret_window_usec)
                *ret_window_usec = w;
        return r;
}

unsigned zsw_psi_stall_permyriad(uint64_t total_before, uint64_t total_after,
                                 uint64_t elapsed_usec) {
        uint64_t d;

        if (elapsed_usec == 0 || total_after <= total_before)
                return 0;
        d = total_after - total_before;
        if (d >= elapsed_usec)
                return 10000;
        return (unsigned) (d * 10000 / elapsed_usec);
}
