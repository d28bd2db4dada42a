/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * userfaultfd wrappers: the only place that speaks the UFFDIO_* ioctls.
 * The fault-service and event threads of the daemon call these; policy
 * (what to copy where, how to react to events) lives with them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pool.h"
#include "uffd.h"
#include "util.h"

int zsw_uffd_new(int flags) {
        int fd = (int) syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | flags);

        return fd < 0 ? -errno : fd;
}

int zsw_uffd_api(int fd, uint64_t wanted, uint64_t *ret_features) {
        struct uffdio_api api = { .api = UFFD_API, .features = wanted };

        if (ioctl(fd, UFFDIO_API, &api) < 0)
                return -errno;
        if (ret_features)
                *ret_features = api.features;
        return 0;
}

int zsw_uffd_register(int fd, uint64_t start, uint64_t len, uint64_t mode, uint64_t *ret_ioctls) {
        struct uffdio_register reg = {
                .range = { .start = start, .len = len },
                .mode = mode,
        };

        if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
                return -errno;
        if (ret_ioctls)
                *ret_ioctls = reg.ioctls;
        return 0;
}

int zsw_uffd_unregister(int fd, uint64_t start, uint64_t len) {
        struct uffdio_range range = { .start = start, .len = len };

        return ioctl(fd, UFFDIO_UNREGISTER, &range) < 0 ? -errno : 0;
}

int zsw_uffd_writeprotect(int fd, uint64_t start, uint64_t len, bool on, bool dontwake) {
        struct uffdio_writeprotect wp = {
                .range = { .start = start, .len = len },
                .mode = (on ? UFFDIO_WRITEPROTECT_MODE_WP : 0) |
                        (dontwake ? UFFDIO_WRITEPROTECT_MODE_DONTWAKE : 0),
        };

        return ioctl(fd, UFFDIO_WRITEPROTECT, &wp) < 0 ? -errno : 0;
}

/* The kernel writes the outcome twice: the ioctl's errno, and a count or
 * negative errno in the struct. A short fill shows as errno EAGAIN with a
 * positive count; "nothing done" as a negative count (EAGAIN included, for
 * mappings changing). Prefer the count so callers see short fills. */
static ssize_t fill_result(int r, int64_t count) {
        if (r >= 0 || count > 0)
                return (ssize_t) count;
        if (count < 0)
                return (ssize_t) count;
        return -errno;
}

ssize_t zsw_uffd_copy(int fd, uint64_t dst, const void *src, uint64_t len, uint64_t flags) {
        struct uffdio_copy copy = {
                .dst = dst,
                .src = (uint64_t) (uintptr_t) src,
                .len = len,
                .mode = flags,
        };
        int r = ioctl(fd, UFFDIO_COPY, &copy);

        return fill_result(r, copy.copy);
}

ssize_t zsw_uffd_zeropage(int fd, uint64_t start, uint64_t len, bool dontwake) {
        struct uffdio_zeropage zp = {
                .range = { .start = start, .len = len },
                .mode = dontwake ? UFFDIO_ZEROPAGE_MODE_DONTWAKE : 0,
        };
        int r = ioctl(fd, UFFDIO_ZEROPAGE, &zp);

        return fill_result(r, zp.zeropage);
}

int zsw_uffd_poison(int fd, uint64_t start, uint64_t len) {
        struct uffdio_poison p = { .range = { .start = start, .len = len } };

        if (ioctl(fd, UFFDIO_POISON, &p) < 0)
                return p.updated > 0 ? (int) p.updated : -errno;
        return 0;
}

int zsw_uffd_wake(int fd, uint64_t start, uint64_t len) {
        struct uffdio_range range = { .start = start, .len = len };

        return ioctl(fd, UFFDIO_WAKE, &range) < 0 ? -errno : 0;
}

int zsw_uffd_mm_alive(int fd) {
        /* Any valid user range (above mmap_min_addr, below the top). */
        struct uffdio_continue c = { .range = { .start = UINT64_C(1) << 32, .len = ZSW_PAGE_SIZE },
                                     .mode = UFFDIO_CONTINUE_MODE_DONTWAKE };

        if (ioctl(fd, UFFDIO_CONTINUE, &c) == 0)
                return 0;
        return errno == ESRCH || errno == EAGAIN ? -errno : 0;
}

int zsw_uffd_read_msgs(int fd, struct uffd_msg *msgs, size_t n) {
        ssize_t l;

        if (n == 0)
                return -EINVAL;
        /* One syscall, no poll first: on the fault path every syscall
         * counts, and the fd is O_NONBLOCK (see uffd.h). */
        l = read(fd, msgs, n * sizeof(struct uffd_msg));
        if (l < 0)
                return -errno;
        if (l == 0 || l % sizeof(struct uffd_msg) != 0)
                return -EIO;
        return (int) (l / sizeof(struct uffd_msg));
}
