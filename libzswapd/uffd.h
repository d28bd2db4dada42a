/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Thin wrappers over a userfaultfd the daemon holds. The uffd usually
 * belongs to another process (the target creates it, the daemon takes it
 * with pidfd_getfd(2)); every range below is an address in the mm the uffd
 * was created in, while buffers (src of a copy, msgs of a read) live in the
 * caller's own address space.
 *
 * The wrappers translate the kernel's conventions into ours: >= 0 on
 * success, a negative errno on failure. Three outcomes the fault path must
 * handle get distinct codes:
 *   -EEXIST  the page is already present (somebody populated it first);
 *   -EAGAIN  the target's mappings are changing (a fork/mremap/remove/unmap
 *            event is pending and must be read first); nothing was done;
 *   -ESRCH   the target's mm is gone (it exited).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "uffd-compat.h"

/* Creates a uffd in the calling process (O_CLOEXEC|O_NONBLOCK plus flags,
 * e.g. UFFD_USER_MODE_ONLY). Returns the fd or a negative errno. */
int zsw_uffd_new(int flags);

/* Performs the UFFDIO_API handshake, enabling exactly `wanted`
 * (UFFD_FEATURE_* bits). The handshake is once per uffd, whoever does it:
 * when the target created the uffd the daemon does it, so capability checks
 * (EVENT_FORK needs CAP_SYS_PTRACE) apply to the daemon, not the target.
 * Fails with -EINVAL when the kernel lacks a wanted feature or the uffd was
 * already initialised. On success *ret_features (may be NULL) receives
 * every feature the kernel supports, a superset of `wanted`. */
int zsw_uffd_api(int fd, uint64_t wanted, uint64_t *ret_features);

/* Registers [start, start + len) (page aligned, whole VMAs need not be
 * covered) for mode = UFFDIO_REGISTER_MODE_MISSING and/or _WP. On success
 * *ret_ioctls (may be NULL) receives the ioctls the range supports
 * (1 << _UFFDIO_COPY, ...). -EBUSY: already registered with another uffd;
 * -EINVAL: the range holds a mapping that cannot be registered. */
int zsw_uffd_register(int fd, uint64_t start, uint64_t len, uint64_t mode, uint64_t *ret_ioctls);

/* Unregisters the range; threads blocked on it are woken and retry the
 * fault without userfaultfd (missing anonymous pages become zero). */
int zsw_uffd_unregister(int fd, uint64_t start, uint64_t len);

/* Write-protects (on) or un-protects the range, which must be registered
 * with _WP. Un-protecting wakes threads waiting on a WP fault unless
 * dontwake is set. Pages not present are left alone (no marker without
 * UFFD_FEATURE_WP_UNPOPULATED). */
int zsw_uffd_writeprotect(int fd, uint64_t start, uint64_t len, bool on, bool dontwake);

/* Fills missing pages at dst with len bytes from src (in the caller's
 * memory) and wakes the faulting threads, unless flags has
 * UFFDIO_COPY_MODE_DONTWAKE; UFFDIO_COPY_MODE_WP installs them
 * write-protected.
 *
 * Returns the number of bytes copied, which may be short of len: the kernel
 * stops at the first page it cannot fill and reports that case as EAGAIN
 * with the partial count in uffdio_copy.copy; we return that count, and
 * the caller retries the rest to learn why it stopped. Negative only when
 * nothing was copied: -EEXIST (first page present), -EAGAIN (mappings
 * changing: read the events, then retry or drop the request), -ENOENT
 * (dst no longer registered or mapped), -ESRCH (target exited). */
ssize_t zsw_uffd_copy(int fd, uint64_t dst, const void *src, uint64_t len, uint64_t flags);

/* Maps the shared zero page into missing pages; same returns as copy. */
ssize_t zsw_uffd_zeropage(int fd, uint64_t start, uint64_t len, bool dontwake);

/* Marks missing pages poisoned (UFFD_FEATURE_POISON): a user access then
 * gets SIGBUS at that address, a kernel access EFAULT. Wakes the faulting
 * threads. Same returns as copy, 0 when the whole range is done. */
int zsw_uffd_poison(int fd, uint64_t start, uint64_t len);

/* Wakes threads waiting on faults in the range, after DONTWAKE fills. */
int zsw_uffd_wake(int fd, uint64_t start, uint64_t len);

/* Whether the address space fd was created in still exists: -ESRCH once
 * its process exited or exec'ed, 0 while it lives, -EAGAIN while one of its
 * events is unread (ask again later). Changes nothing: a CONTINUE, which
 * this anonymous-memory uffd can never perform, answers ESRCH before it
 * looks at the range. */
int zsw_uffd_mm_alive(int fd);

/* Reads up to n messages from an O_NONBLOCK uffd (a blocking one would
 * block here): returns how many (>= 1), or -EAGAIN when none is pending. A UFFD_EVENT_FORK message installs the
 * child's new uffd in the calling process (msg.arg.fork.ufd), so only the
 * process meant to own those fds may read. Events are synchronous: the
 * target's fork/mremap/madvise/munmap does not return until its event has
 * been read here, so keep a reader running while acting on the target. */
int zsw_uffd_read_msgs(int fd, struct uffd_msg *msgs, size_t n);
