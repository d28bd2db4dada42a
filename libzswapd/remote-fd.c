/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Memory and descriptors of a target seized for injection (remote.c):
 * scratch mappings, and descriptors handed
 * to it (a socket pair it makes, one end taken with pidfd_getfd(), the
 * descriptor sent over it with SCM_RIGHTS), its userfaultfd among them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "linux-compat.h"
#include "remote-internal.h"

/* ---- memory and descriptors ------------------------------------------------ */

int zsw_remote_map_scratch(struct zsw_remote *r, size_t size, uint64_t *ret_addr) {
        unsigned long a[6] = {
                0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (unsigned long) -1, 0
        };
        long addr;

        if (size == 0)
                return -EINVAL;
        addr = zsw_remote_call(r, SYS_mmap, a);
        if (addr < 0 && addr >= -4095)
                return zsw_log_errno(remote_log(r), LOG_DEBUG, addr,
                                     "Failed to map scratch in %d: %m", zsw_remote_pid(r));
        *ret_addr = (uint64_t) addr;
        return 0;
}

int zsw_remote_unmap(struct zsw_remote *r, uint64_t addr, size_t size) {
        unsigned long a[6] = { addr, size };
        long k = zsw_remote_call(r, SYS_munmap, a);

        return k < 0 ? (int) k : 0;
}

int zsw_remote_close(struct zsw_remote *r, int target_fd) {
        unsigned long a[6] = { (unsigned long) target_fd };
        long k = zsw_remote_call(r, SYS_close, a);

        return k < 0 ? (int) k : 0;
}

/* ---- userfaultfd ------------------------------------------------------------ */

/* Where the fd-passing dance keeps its arguments in the target's scratch page. */
struct fdpass_area {
        int fds[2];
        struct msghdr msg;
        struct iovec iov;
        char byte;
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } control;
};

/* Our end of the target's socket pair, taken with pidfd_getfd(): checked
 * to be an AF_UNIX datagram socket the target made, since another thread
 * of the target may have reused that number meanwhile. */
static int take_socket(struct zsw_remote *r, int target_fd) {
        _cleanup_close_ int fd = (int) syscall(__NR_pidfd_getfd, remote_pidfd(r), target_fd, 0);
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int domain = 0, type = 0;
        socklen_t ilen = sizeof(int);

        if (fd < 0)
                return -errno;
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &ilen) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ilen) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        if (domain != AF_UNIX || type != SOCK_DGRAM || cred.pid != zsw_remote_pid(r))
                return -EIO;
        return TAKE_FD(fd);
}

static int send_fd(int sock, int fd) {
        union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
        } control = {};
        char byte = 'U';
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        struct msghdr msg = { .msg_iov = &iov,
                              .msg_iovlen = 1,
                              .msg_control = control.buf,
                              .msg_controllen = sizeof(control.buf) };
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);

        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
        return sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/* The target receives fd from us: returns its number in the target. The
 * target makes a socket pair, we take one end with pidfd_getfd() and send
 * fd over it, the target receives it on the other: no socket address, so
 * it works whatever network namespace either of us is in (an abstract
 * socket belongs to one). Both ends are closed again in the target. */
static long pass_fd(struct zsw_remote *r, uint64_t scratch, int fd) {
        struct fdpass_area area = {}, *t = (struct fdpass_area *) (uintptr_t) scratch;
        _cleanup_close_ int ours = -EBADF;
        long k, result = -EIO;
        struct cmsghdr *cmsg;

        k = zsw_remote_call(r, SYS_socketpair,
                            (unsigned long[6]) { AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                                                 0, (unsigned long) &t->fds });
        if (k < 0)
                return k;
        k = zsw_remote_read(r, scratch, &area, sizeof(area));
        if (k < 0)
                return k;

        ours = take_socket(r, area.fds[0]);
        k = ours < 0 ? ours : send_fd(ours, fd);
        if (k >= 0) {
                area.msg = (struct msghdr) { .msg_iov = &t->iov,
                                             .msg_iovlen = 1,
                                             .msg_control = t->control.buf,
                                             .msg_controllen = sizeof(area.control.buf) };
                area.iov = (struct iovec) { .iov_base = &t->byte, .iov_len = 1 };
                k = zsw_remote_write(r, scratch, &area, sizeof(area));
        }
        if (k >= 0)
                k = zsw_remote_call(r, SYS_recvmsg,
                                    (unsigned long[6]) { (unsigned long) area.fds[1],
                                                         (unsigned long) &t->msg,
                                                         MSG_CMSG_CLOEXEC | MSG_DONTWAIT });
        if (k >= 0)
                k = zsw_remote_read(r, scratch, &area, sizeof(area));
        if (k >= 0) {
                area.msg.msg_control = area.control.buf;
                cmsg = CMSG_FIRSTHDR(&area.msg);
                if (cmsg && cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS &&
                    cmsg->cmsg_len == CMSG_LEN(sizeof(int))) {
                        int tfd;

                        memcpy(&tfd, CMSG_DATA(cmsg), sizeof(int));
                        result = tfd;
                }
        } else
                result = k;
        (void) zsw_remote_close(r, area.fds[0]);
        (void) zsw_remote_close(r, area.fds[1]);
        return result;
}

int zsw_remote_install_fd(struct zsw_remote *r, int fd, int *ret_target_fd) {
        uint64_t scratch = 0;
        long tfd;
        int k;

        k = zsw_remote_map_scratch(r, sizeof(struct fdpass_area), &scratch);
        if (k < 0)
                return k;
        tfd = pass_fd(r, scratch, fd);
        (void) zsw_remote_unmap(r, scratch, sizeof(struct fdpass_area));
        if (tfd < 0)
                return (int) tfd;
        /* The number came out of the target's memory: it must name our file. */
        if (syscall(SYS_kcmp, getpid(), zsw_remote_pid(r), KCMP_FILE, fd, (int) tfd) != 0) {
                (void) zsw_remote_close(r, (int) tfd);
                return -EIO;
        }
        *ret_target_fd = (int) tfd;
        return 0;
}

/* A full userfaultfd for a target without CAP_SYS_PTRACE: it gets our
 * /dev/userfaultfd and asks that for one (Linux >= 6.1). */
static long uffd_via_device(struct zsw_remote *r, int flags) {
        _cleanup_close_ int dev = -EBADF;
        uint64_t scratch = 0;
        long tdev, tfd;
        int k;

        dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev < 0)
                return zsw_log_errno(remote_log(r), LOG_ERR, errno,
                                     "Failed to open /dev/userfaultfd: %m");
        k = zsw_remote_map_scratch(r, sizeof(struct fdpass_area), &scratch);
        if (k < 0)
                return k;
        tdev = pass_fd(r, scratch, dev);
        (void) zsw_remote_unmap(r, scratch, sizeof(struct fdpass_area));
        if (tdev < 0)
                return zsw_log_errno(remote_log(r), LOG_ERR, tdev,
                                     "Failed to hand /dev/userfaultfd to %d: %m",
                                     zsw_remote_pid(r));

        tfd = zsw_remote_call(
                r, SYS_ioctl,
                (unsigned long[6]) { tdev, USERFAULTFD_IOC_NEW, (unsigned long) flags });
        (void) zsw_remote_close(r, (int) tdev);
        return tfd;
}

static bool is_userfaultfd(int fd) {
        char path[64], link[64];
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, link, sizeof(link) - 1);
        if (n < 0)
                return false;
        link[n] = 0;
        return strcmp(link, "anon_inode:[userfaultfd]") == 0;
}

int zsw_remote_open_uffd(struct zsw_remote *r, int flags, int *ret_target_fd, int *ret_local_fd) {
        long tfd;
        int local;

        if (flags & ~(O_CLOEXEC | O_NONBLOCK))
                return -EINVAL; /* UFFD_USER_MODE_ONLY above all: it cannot serve read(2) */

        tfd = zsw_remote_call(r, SYS_userfaultfd, (unsigned long[6]) { (unsigned long) flags });
        if (tfd == -EPERM) {
                zsw_log(remote_log(r), LOG_DEBUG,
                        "Process %d may not call userfaultfd(2), using %s", zsw_remote_pid(r),
                        "/dev/userfaultfd");
                tfd = uffd_via_device(r, flags);
        }
        if (tfd < 0)
                return zsw_log_errno(remote_log(r), LOG_ERR, tfd,
                                     "Failed to create a userfaultfd in %d: %m", zsw_remote_pid(r));

        local = (int) syscall(__NR_pidfd_getfd, remote_pidfd(r), (int) tfd, 0);
        if (local < 0) {
                int k = -errno;

                (void) zsw_remote_close(r, (int) tfd);
                return zsw_log_errno(remote_log(r), LOG_ERR, k,
                                     "Failed to take the userfaultfd of %d: %m", zsw_remote_pid(r));
        }
        /* The number came out of the target's registers: make sure it names
         * what we asked for before anyone trusts it. */
        if (!is_userfaultfd(local)) {
                safe_close(local);
                return zsw_log_errno(remote_log(r), LOG_ERR, EIO,
                                     "fd %ld of %d is not a userfaultfd", tfd, zsw_remote_pid(r));
        }
        *ret_target_fd = (int) tfd;
        *ret_local_fd = local;
        return 0;
}
