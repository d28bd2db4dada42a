/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Attach and detach: the sequence that makes a process a target (checks,
 * its settings, a userfaultfd and a scratch mapping created inside it
 * with ptrace, its store owner, publication, registration of its ranges)
 * and the one that undoes it leaving nothing behind (every page copied
 * back, ranges unregistered, the events in flight read, its uffd
 * reference and scratch mapping removed). Either runs under control_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "hold.h"
#include "remote.h"
#include "uffd.h"
#include "vma.h"

#define SCRATCH_SIZE (64u * 1024u)
#define DETACH_CHUNK 64u
#define PF_KTHREAD 0x00200000u

static const uint64_t uffd_features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
                                      UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                      UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                                      UFFD_FEATURE_POISON;

/* Refuses what cannot or must not be attached, with the reason. */
static int check_attachable(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        char path[64], buf[1024], *p, state;
        unsigned long long flags;
        FILE *f;

        if (pid <= 0)
                return engine_fail(err, -EINVAL, "invalid process id %d", pid);
        if (pid == getpid())
                return engine_fail(err, -EINVAL, "process %d is zswapd itself", pid);
        if (engine_find_target(e, pid))
                return engine_fail(err, -EALREADY, "process %d is attached already", pid);
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        f = fopen(path, "re");
        if (!f)
                return engine_fail(err, -ESRCH, "no such process %d", pid);
        p = fgets(buf, sizeof(buf), f);
        fclose(f);
        /* comm may hold spaces and parentheses: parse after the last ')'. */
        if (!p || !(p = strrchr(buf, ')')) ||
            sscanf(p + 1, " %c %*d %*d %*d %*d %*d %llu", &state, &flags) != 2)
                return engine_fail(err, -ESRCH, "cannot read the state of process %d", pid);
        if (flags & PF_KTHREAD)
                return engine_fail(err, -EPERM,
                                   "process %d is a kernel thread: it has no user memory", pid);
        if (state == 'Z' || state == 'X')
                return engine_fail(err, -EINVAL, "process %d is a zombie: it has exited", pid);

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        if (!f)
                return engine_fail(err, -ESRCH, "no such process %d", pid);
        while (fgets(buf, sizeof(buf), f)) {
                int tracer;

                if (sscanf(buf, "TracerPid: %d", &tracer) == 1 && tracer != 0) {
                        fclose(f);
                        return engine_fail(
                                err, -EBUSY,
                                "process %d is traced by process %d (a debugger?); detach it first",
                                pid, tracer);
                }
        }
        fclose(f);
        return 0;
}

/* Removes what attach left inside the target: its uffd reference and the
 * scratch mapping. */
static int target_cleanup_remote(struct zsw_engine *e, struct zsw_target *t) {
        _cleanup_remote_ struct zsw_remote *remote = NULL;
        int r;

        if (t->target_uffd < 0 && !t->scratch)
                return 0;
        r = zsw_remote_seize(t->pid, e->log, &remote);
        if (r < 0)
                return r;
        if (t->target_uffd >= 0)
                zsw_remote_close(remote, t->target_uffd);
        if (t->scratch)
                zsw_remote_unmap(remote, t->scratch, t->scratch_size);
        t->target_uffd = -EBADF;
        t->scratch = 0;
        return 0;
}

int zsw_engine_attach(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        return zsw_engine_attach_with(e, pid, NULL, err);
}

int zsw_engine_attach_with(struct zsw_engine *e, pid_t pid, const struct zsw_target_config *tc,
                           struct zsw_engine_error *err) {
        struct zsw_target *t = NULL;
        size_t foreign = 0;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        r = check_attachable(e, pid, err);
        if (r < 0)
                goto out;
        t = target_new(pid, e->log);
        if (!t) {
                r = -ENOMEM;
                goto out;
        }
        r = target_configure(t,
                             &(struct target_defaults) {
                                     .compressor = e->compressor,
                                     .compression_level = e->config.compression_level,
                                     .prefetch_window = e->config.prefetch_window,
                                     .zero_window = e->config.zero_window,
                             },
                             tc);
        if (r < 0) {
                r = engine_fail(err, r, "unknown compressor '%s'",
                                tc && tc->compressor ? tc->compressor : "");
                goto out;
        }
        t->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (t->pidfd < 0) {
                r = engine_fail(err, -errno, "cannot open process %d: %s", pid, strerror(errno));
                goto out;
        }
        {
                _cleanup_remote_ struct zsw_remote *remote = NULL;

                r = zsw_remote_seize(pid, e->log, &remote);
                if (r == -ETIMEDOUT) {
                        r = engine_fail_stuck(err, pid, "left as it was; try again once it runs");
                        goto out;
                }
                if (r < 0) {
                        r = engine_fail(err, r, "cannot ptrace process %d: %s%s", pid, strerror(-r),
                                        r == -EPERM ? " (is zswapd missing CAP_SYS_PTRACE?)" : "");
                        goto out;
                }
                r = zsw_remote_map_scratch(remote, SCRATCH_SIZE, &t->scratch);
                if (r >= 0) {
                        t->scratch_size = SCRATCH_SIZE;
                        r = zsw_remote_open_uffd(remote, O_CLOEXEC | O_NONBLOCK, &t->target_uffd,
                                                 &t->uffd);
                }
                if (r < 0) {
                        r = engine_fail(err, r, "cannot create a userfaultfd inside process %d: %s",
                                        pid, strerror(-r));
                        goto out_remote;
                }
        }
        r = zsw_uffd_api(t->uffd, uffd_features, NULL);
        if (r < 0) {
                r = engine_fail(err, r, "userfaultfd handshake failed: %s (kernel too old?)",
                                strerror(-r));
                goto out_remote;
        }
        r = zsw_store_owner_new(e->store, &t->owner_config, &t->owner);
        if (r < 0) {
                r = engine_fail(err, r, "cannot set up its store: %s%s", strerror(-r),
                                r == -EINVAL ? " (bad compression level?)" : "");
                goto out_remote;
        }
        r = engine_publish(e, t);
        if (r < 0)
                goto out_remote;
        r = evict_register_ranges(&e->evict, t, NULL, NULL, &foreign);
        /* Its faults there go to that uffd, never to us; a process that
         * pages part of its memory itself keeps doing so. */
        if (r >= 0 && foreign > 0)
                zsw_log(e->log, LOG_WARNING,
                        "Process %d has %zu mappings registered with another userfaultfd: "
                        "another pager serves them, or a zswapd that died without saving its "
                        "state (see zswapd(8), WHAT SURVIVES WHAT); serving the rest",
                        pid, foreign);
        if (r < 0) {
                engine_unpublish(e, t);
                goto out_remote;
        }
        zsw_log(e->log, LOG_INFO, "Attached to process %d", pid);
        t = NULL;
        r = 0;
        goto out;

out_remote:
        target_cleanup_remote(e, t);
out:
        target_free(t);
        zsw_mutex_unlock(&e->control_lock);
        return r;
}

/* Puts every stored page back, in chunks under serve_lock so that the
 * target's events are ordered with our copies (see engine-internal.h). */
static int copy_back(struct zsw_engine *e, struct zsw_target *t) {
        _Alignas(64) uint8_t page[ZSW_PAGE_SIZE]; /* on the stack: the library keeps no globals */
        uint64_t pgno = 0;
        bool more = true;
        int r = 0;

        while (more && r >= 0) {
                zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
                for (unsigned i = 0; i < DETACH_CHUNK; i++) {
                        ssize_t copied;

                        if (!zsw_store_next(t->owner, pgno, &pgno)) {
                                more = false;
                                break;
                        }
                        /* A shared load: the entry goes once its page is
                         * in place (no eviction runs, we hold evict_lock),
                         * so a failed copy loses nothing. */
                        r = zsw_store_load(e->worker, t->owner, pgno, page, 0);
                        if (r == -ENODATA) {
                                /* Lost with a dead zswapd's disk: poisoned, as
                                 * its fault would be; the marker stays. */
                                int p = zsw_uffd_poison(t->uffd, pgno * ZSW_PAGE_SIZE,
                                                        ZSW_PAGE_SIZE);

                                copied = p < 0 ? p : (ssize_t) ZSW_PAGE_SIZE;
                                r = 0;
                        } else if (r < 0)
                                break;
                        else
                                copied = zsw_uffd_copy(t->uffd, pgno * ZSW_PAGE_SIZE, page,
                                                       ZSW_PAGE_SIZE, 0);
                        if (copied == -EAGAIN)
                                /* An event is pending: let the fault threads
                                 * read it first, then try this page again. */
                                break;
                        /* Gone with the process (ESRCH), or with its
                         * mapping (ENOENT): nothing to put back. Any other
                         * failure would leave a hole reading zeros once we
                         * unregister: stop, the target stays attached. */
                        if (copied < 0 && copied != -EEXIST && copied != -ENOENT) {
                                r = (int) copied;
                                break;
                        }
                        if (copied > 0 || copied == -EEXIST)
                                zsw_store_invalidate(t->owner, pgno, 1);
                        pgno++;
                }
                zsw_mutex_unlock(&t->serve_lock);
        }
        return r;
}

static void unregister_all(struct zsw_engine *e, struct zsw_target *t) {
        struct zsw_vma_list l = {};

        if (target_read_vmas(t, &l) < 0)
                return;
        for (size_t i = 0; i < l.n; i++)
                if (l.vmas[i].flags & ZSW_VMF_UFFD)
                        zsw_uffd_unregister(t->uffd, l.vmas[i].start,
                                            l.vmas[i].end - l.vmas[i].start);
        zsw_vma_list_free(&l);
}

/* Waits (up to a second) until no event of the target is in flight. A
 * fork that copied the target's mappings before we unregistered them still
 * raises its UFFD_EVENT_FORK afterwards, and its child, which holds a copy
 * of the target's descriptor table and with it our uffd, waits for that
 * event to be read: stop reading first and the child never completes, nor
 * does the uffd ever go away. The kernel counts such events from the
 * moment they are decided (mmap_changing) until they are read; while any
 * is, UFFDIO_WRITEPROTECT fails with EAGAIN before it looks at its range. */
static void wait_events_in_flight(struct zsw_target *t) {
        for (unsigned i = 0; i < 10000; i++) {
                if (zsw_uffd_writeprotect(t->uffd, 0, ZSW_PAGE_SIZE, false, true) != -EAGAIN)
                        return;
                usleep(100);
        }
}

int engine_detach_locked(struct zsw_engine *e, struct zsw_target *t, struct zsw_engine_error *err) {
        int r;

        /* Held first touches go first: they wait on us. */
        hold_stop(t);
        zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
        zsw_mutex_lock(&e->worker_lock, ZSW_LOCK_WORKER);
        r = copy_back(e, t);
        zsw_mutex_unlock(&e->worker_lock);
        if (r < 0 && r != -ESRCH) {
                zsw_mutex_unlock(&t->evict_lock);
                return engine_fail(err, r,
                                   "cannot put the pages of process %d back: %s; it stays attached",
                                   t->pid, strerror(-r));
        }
        /* Nothing is stored any more: unregistering cannot turn a page we
         * hold into zeros. */
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        unregister_all(e, t);
        zsw_mutex_unlock(&t->serve_lock);
        /* Fault threads still serve t: they read what is in flight. */
        wait_events_in_flight(t);
        r = target_cleanup_remote(e, t);
        if (r < 0 && r != -ESRCH)
                zsw_log(e->log, LOG_WARNING,
                        "Process %d has every page back, but its userfaultfd "
                        "reference (fd %d, no range registered) and a %zu-byte scratch mapping "
                        "stay "
                        "in it until it exits or execs: %s",
                        t->pid, t->target_uffd, t->scratch_size, strerror(-r));
        zsw_mutex_unlock(&t->evict_lock);
        engine_unpublish(e, t);
        zsw_log(e->log, LOG_INFO, "Detached from process %d", t->pid);
        target_free(t);
        return 0;
}

int zsw_engine_detach(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        struct zsw_target *t;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        r = t ? engine_detach_locked(e, t, err)
              : engine_fail(err, -ENOENT, "process %d is not attached", pid);
        zsw_mutex_unlock(&e->control_lock);
        return r;
}
