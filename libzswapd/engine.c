/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine: the set of targets, attach and detach, the reaper that
 * forgets targets that exited or exec'ed, and statistics. The target
 * object is in target.c, eviction in evict.c, fault service in fault.c;
 * none of them calls back here. Lock order: engine-internal.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "engine-internal.h"
#include "parallel.h"
#include "remote.h"
#include "uffd.h"
#include "vma.h"
#include "writeback.h"

#define SCRATCH_SIZE (64u * 1024u)
#define DETACH_CHUNK 64u
#define PF_KTHREAD 0x00200000u

static const uint64_t uffd_features = UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP |
                                      UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP |
                                      UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP |
                                      UFFD_FEATURE_POISON;

static int fail(struct zsw_engine_error *err, int r, const char *fmt, ...) _printf_(3, 4);
static int fail(struct zsw_engine_error *err, int r, const char *fmt, ...) {
        va_list ap;

        if (err) {
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
        }
        return r;
}

/* -ETIMEDOUT for a process none of whose threads stopped in time, with
 * what keeps it (the thread, its state, what it waits in) and advice. */
static int fail_stuck(struct zsw_engine_error *err, pid_t pid, const char *advice) {
        char why[192];

        if (zsw_remote_describe_stuck(pid, why, sizeof(why)) < 0)
                snprintf(why, sizeof(why), "no thread of it looks stuck now");
        return fail(err, -ETIMEDOUT, "process %d did not stop for ptrace within %u ms: %s; %s", pid,
                    ZSW_REMOTE_STOP_TIMEOUT_MS, why, advice);
}

static struct zsw_target *find_target(struct zsw_engine *e, pid_t pid) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (t = e->targets; t; t = t->next)
                if (t->pid == pid && !atomic_load(&t->dead))
                        break;
        zsw_mutex_unlock(&e->table_lock);
        return t;
}

/* Refuses what cannot or must not be attached, with the reason. */
static int check_attachable(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        char path[64], buf[1024], *p, state;
        unsigned long long flags;
        FILE *f;

        if (pid <= 0)
                return fail(err, -EINVAL, "invalid process id %d", pid);
        if (pid == getpid())
                return fail(err, -EINVAL, "process %d is zswapd itself", pid);
        if (find_target(e, pid))
                return fail(err, -EALREADY, "process %d is attached already", pid);
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        f = fopen(path, "re");
        if (!f)
                return fail(err, -ESRCH, "no such process %d", pid);
        p = fgets(buf, sizeof(buf), f);
        fclose(f);
        /* comm may hold spaces and parentheses: parse after the last ')'. */
        if (!p || !(p = strrchr(buf, ')')) ||
            sscanf(p + 1, " %c %*d %*d %*d %*d %*d %llu", &state, &flags) != 2)
                return fail(err, -ESRCH, "cannot read the state of process %d", pid);
        if (flags & PF_KTHREAD)
                return fail(err, -EPERM, "process %d is a kernel thread: it has no user memory", pid);
        if (state == 'Z' || state == 'X')
                return fail(err, -EINVAL, "process %d is a zombie: it has exited", pid);

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        if (!f)
                return fail(err, -ESRCH, "no such process %d", pid);
        while (fgets(buf, sizeof(buf), f)) {
                int tracer;

                if (sscanf(buf, "TracerPid: %d", &tracer) == 1 && tracer != 0) {
                        fclose(f);
                        return fail(err, -EBUSY,
                                    "process %d is traced by process %d (a debugger?); detach it first",
                                    pid, tracer);
                }
        }
        fclose(f);
        return 0;
}

/* Makes t live: fault threads serve it, the reaper watches it. */
static int target_publish(struct zsw_engine *e, struct zsw_target *t) {
        int r = fault_threads_add(e->faults, t);

        if (r < 0)
                return r;
        if (t->pidfd >= 0) {
                struct epoll_event ev = { .events = EPOLLIN, .data.ptr = t };

                if (epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, t->pidfd, &ev) < 0) {
                        r = -errno;
                        fault_threads_remove(e->faults, t);
                        return r;
                }
        }
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        t->next = e->targets;
        e->targets = t;
        e->n_targets++;
        zsw_mutex_unlock(&e->table_lock);
        return 0;
}

/* The opposite of target_publish; afterwards t may be freed. */
static void target_unpublish(struct zsw_engine *e, struct zsw_target *t) {
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target **p = &e->targets; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        e->n_targets--;
                        break;
                }
        zsw_mutex_unlock(&e->table_lock);
        if (t->pidfd >= 0)
                epoll_ctl(e->reaper_epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
        fault_threads_remove(e->faults, t);
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
        r = target_configure(t, &(struct target_defaults) {
                                     .compressor = e->compressor,
                                     .compression_level = e->config.compression_level,
                                     .prefetch_window = e->config.prefetch_window,
                                     .zero_window = e->config.zero_window,
                             }, tc);
        if (r < 0) {
                r = fail(err, r, "unknown compressor '%s'", tc && tc->compressor ? tc->compressor : "");
                goto out;
        }
        t->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        if (t->pidfd < 0) {
                r = fail(err, -errno, "cannot open process %d: %s", pid, strerror(errno));
                goto out;
        }
        {
                _cleanup_remote_ struct zsw_remote *remote = NULL;

                r = zsw_remote_seize(pid, e->log, &remote);
                if (r == -ETIMEDOUT) {
                        r = fail_stuck(err, pid, "left as it was; try again once it runs");
                        goto out;
                }
                if (r < 0) {
                        r = fail(err, r, "cannot ptrace process %d: %s%s", pid, strerror(-r),
                                 r == -EPERM ? " (is zswapd missing CAP_SYS_PTRACE?)" : "");
                        goto out;
                }
                r = zsw_remote_map_scratch(remote, SCRATCH_SIZE, &t->scratch);
                if (r >= 0) {
                        t->scratch_size = SCRATCH_SIZE;
                        r = zsw_remote_open_uffd(remote, O_CLOEXEC | O_NONBLOCK, &t->target_uffd, &t->uffd);
                }
                if (r < 0) {
                        r = fail(err, r, "cannot create a userfaultfd inside process %d: %s", pid,
                                 strerror(-r));
                        goto out_remote;
                }
        }
        r = zsw_uffd_api(t->uffd, uffd_features, NULL);
        if (r < 0) {
                r = fail(err, r, "userfaultfd handshake failed: %s (kernel too old?)", strerror(-r));
                goto out_remote;
        }
        r = zsw_store_owner_new(e->store, &t->owner_config, &t->owner);
        if (r < 0) {
                r = fail(err, r, "cannot set up its store: %s%s", strerror(-r),
                         r == -EINVAL ? " (bad compression level?)" : "");
                goto out_remote;
        }
        r = target_publish(e, t);
        if (r < 0)
                goto out_remote;
        r = evict_register_ranges(&e->evict, t, NULL, NULL);
        if (r < 0) {
                target_unpublish(e, t);
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
        _Alignas(64) uint8_t page[ZSW_PAGE_SIZE];      /* on the stack: the library keeps no globals */
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
                        if (r < 0)
                                break;
                        copied = zsw_uffd_copy(t->uffd, pgno * ZSW_PAGE_SIZE, page, ZSW_PAGE_SIZE, 0);
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

static int detach_locked(struct zsw_engine *e, struct zsw_target *t, struct zsw_engine_error *err) {
        int r;

        zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
        zsw_mutex_lock(&e->worker_lock, ZSW_LOCK_WORKER);
        r = copy_back(e, t);
        zsw_mutex_unlock(&e->worker_lock);
        if (r < 0 && r != -ESRCH) {
                zsw_mutex_unlock(&t->evict_lock);
                return fail(err, r, "cannot put the pages of process %d back: %s; it stays attached",
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
                zsw_log(e->log, LOG_WARNING, "Process %d has every page back, but its userfaultfd "
                        "reference (fd %d, no range registered) and a %zu-byte scratch mapping stay "
                        "in it until it exits or execs: %s", t->pid, t->target_uffd,
                        t->scratch_size, strerror(-r));
        zsw_mutex_unlock(&t->evict_lock);
        target_unpublish(e, t);
        zsw_log(e->log, LOG_INFO, "Detached from process %d", t->pid);
        target_free(t);
        return 0;
}

int zsw_engine_detach(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        struct zsw_target *t;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = find_target(e, pid);
        r = t ? detach_locked(e, t, err) : fail(err, -ENOENT, "process %d is not attached", pid);
        zsw_mutex_unlock(&e->control_lock);
        return r;
}

int zsw_engine_reclaim(struct zsw_engine *e, pid_t pid, uint64_t max_bytes,
                       struct zsw_reclaim_result *ret, struct zsw_engine_error *err) {
        return zsw_engine_reclaim_cold(e, pid, &(struct zsw_reclaim_request) { .max_bytes = max_bytes },
                                       ret, err);
}

/* A round that could not stop the target was given up and rolled back
 * (evict.c): say why, and hold off the next tries (target_note_reclaim()). */
static void reclaim_note_stuck(struct zsw_target *t, int r, struct zsw_engine_error *err) {
        struct zsw_engine_error e2 = {};

        target_note_reclaim(t, r);
        if (r != -ETIMEDOUT)
                return;
        snprintf(e2.message, sizeof(e2.message), "the round in progress was undone; next try in "
                 "%u s", t->stuck_backoff_s);
        (void) fail_stuck(err, t->pid, e2.message);
}

int zsw_engine_reclaim_cold(struct zsw_engine *e, pid_t pid, const struct zsw_reclaim_request *req,
                            struct zsw_reclaim_result *ret, struct zsw_engine_error *err) {
        struct zsw_reclaim_result res = {};
        uint64_t start = zsw_now_ns();
        struct zsw_target *t;
        bool scan_due;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = find_target(e, pid);
        if (!t) {
                zsw_mutex_unlock(&e->control_lock);
                return fail(err, -ENOENT, "process %d is not attached; attach it first", pid);
        }
        /* Nobody pays for age scans before somebody asks for ages. */
        t->aging = t->aging || req->min_cold_age_ms > 0;
        /* The target's evict_lock keeps it alive (detach and the reaper take
         * it before freeing a target), so control_lock can go: stats,
         * attach and the other control calls need not wait for a long
         * reclaim. */
        zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
        /* The reaper skips the scan of a target whose reclaim runs; reclaims
         * back to back (a budget) would starve it, so a due scan runs here. */
        scan_due = req->min_cold_age_ms > 0 && e->age_interval_ns && t->next_age_ns <= start;
        if (scan_due)
                t->next_age_ns = start + e->age_interval_ns;
        zsw_mutex_unlock(&e->control_lock);
        if (start < t->stuck_retry_ns) {
                r = fail(err, -ETIMEDOUT, "process %d could not be stopped at the last try (%s); "
                         "next try in %" PRIu64 " s", pid, t->stuck_why,
                         (uint64_t) DIV_ROUND_UP(t->stuck_retry_ns - start, 1000000000ull));
                zsw_mutex_unlock(&t->evict_lock);
                return r;
        }
        if (scan_due)
                (void) evict_age_scan(&e->evict, t);
        zsw_mutex_lock(&e->worker_lock, ZSW_LOCK_WORKER);
        r = evict_target(&e->evict, t, req->max_bytes, req->min_cold_age_ms, &res,
                         err ? err->message : NULL, sizeof(err->message));
        zsw_mutex_unlock(&e->worker_lock);
        reclaim_note_stuck(t, r, err);
        zsw_mutex_unlock(&t->evict_lock);
        res.duration_ns = zsw_now_ns() - start;
        if (r >= 0 && ret)
                *ret = res;
        return r;
}

int zsw_engine_age_scan(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        struct zsw_target *t;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = find_target(e, pid);
        if (!t) {
                zsw_mutex_unlock(&e->control_lock);
                return fail(err, -ENOENT, "process %d is not attached; attach it first", pid);
        }
        zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
        zsw_mutex_unlock(&e->control_lock);
        r = evict_age_scan(&e->evict, t);
        zsw_mutex_unlock(&t->evict_lock);
        return r < 0 ? fail(err, r, "age scan of process %d failed: %s", pid, strerror(-r)) : 0;
}

/* Age scans that are due, from the reaper with control_lock held. A
 * target that cannot be scanned (exiting, unnamed fork child) is tried
 * again at its next period. */
static void age_due_targets(struct zsw_engine *e) {
        uint64_t now = zsw_now_ns();

        if (e->age_interval_ns == 0)
                return;
        for (;;) {
                struct zsw_target *t;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = e->targets; t; t = t->next)
                        if (t->aging && t->pid > 0 && !atomic_load(&t->dead) && t->next_age_ns <= now)
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return;
                t->next_age_ns = now + e->age_interval_ns;
                /* A reclaim of it is running: the reaper holds control_lock
                 * and must not wait for it; this period's scan is skipped
                 * (ages only grow coarser by one period). */
                if (zsw_mutex_trylock(&t->evict_lock, ZSW_LOCK_EVICT) != 0)
                        continue;
                (void) evict_age_scan(&e->evict, t);
                zsw_mutex_unlock(&t->evict_lock);
        }
}

/* The fork event names the child's uffd but not the child: it is the
 * youngest child of the parent that we do not serve yet. (Two threads of
 * the parent forking at the same instant could be told apart only by
 * probing their memory; we accept the tiny ambiguity for the pid, which
 * only labels statistics and watches for exit.) */
static pid_t find_new_child(struct zsw_engine *e, pid_t parent) {
        unsigned long long best_start = 0;
        pid_t best = 0;
        char path[64];
        DIR *tasks;
        struct dirent *de;

        snprintf(path, sizeof(path), "/proc/%d/task", parent);
        tasks = opendir(path);
        if (!tasks)
                return 0;
        while ((de = readdir(tasks))) {
                char cpath[300], buf[4096];
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", parent, de->d_name);
                f = fopen(cpath, "re");
                if (!f)
                        continue;
                while (fscanf(f, "%4095s", buf) == 1) {
                        pid_t c = (pid_t) atoi(buf);
                        unsigned long long st = 0;
                        char spath[64], sbuf[1024], *p;
                        FILE *sf;

                        if (c <= 0 || find_target(e, c))
                                continue;
                        snprintf(spath, sizeof(spath), "/proc/%d/stat", c);
                        sf = fopen(spath, "re");
                        if (!sf)
                                continue;
                        p = fgets(sbuf, sizeof(sbuf), sf);
                        fclose(sf);
                        if (p && (p = strrchr(sbuf, ')')) &&
                            sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d "
                                          "%*d %*d %*d %*d %*d %llu", &st) == 1 &&
                            st >= best_start) {
                                best_start = st;
                                best = c;
                        }
                }
                fclose(f);
        }
        closedir(tasks);
        return best;
}

/* A fork of parent (struct fault_events): the child is served from now on. */
static void engine_add_fork_child(void *userdata, struct zsw_target *parent, int child_uffd) {
        struct zsw_engine *e = userdata;
        struct zsw_target *t = target_new(0, e->log);
        int r;

        if (!t) {
                safe_close(child_uffd);
                return;
        }
        t->uffd = child_uffd;
        t->owner_config = parent->owner_config;
        t->prefetch_window = parent->prefetch_window;
        t->prefetch_now = parent->prefetch_window;
        t->zero_window = parent->zero_window;
        /* The child's pages that the parent had evicted are missing in the
         * child too: it gets its own view of the same entries. */
        r = zsw_store_owner_clone(parent->owner, &t->owner);
        if (r < 0) {
                zsw_log(e->log, LOG_ERR,
                        "Cannot follow fork of process %d: %s; the child's evicted pages are lost",
                        parent->pid, strerror(-r));
                target_free(t);
                return;
        }
        /* The child is not in the parent's children list until its fork
         * completes, which waits for us to finish reading this event: the
         * reaper names it a moment later. */
        t->parent_pid = parent->pid;
        r = target_publish(e, t);
        if (r < 0) {
                target_free(t);
                return;
        }
        zsw_log(e->log, LOG_INFO, "Process %d forked; serving its child too", parent->pid);
}

/* A target its fault thread gave up on (struct fault_events): the reaper
 * forgets it. */
static void engine_mark_dead(void *userdata, struct zsw_target *t) {
        struct zsw_engine *e = userdata;
        uint64_t one = 1;

        atomic_store(&t->dead, true);
        if (write(e->reaper_stop_fd, &one, sizeof(one)) < 0)
                zsw_log_errno(e->log, LOG_WARNING, errno, "Cannot wake the reaper, ignoring: %m");
}

/* A target whose uffd reference inside it is gone has exec'ed (the
 * reference is O_CLOEXEC) or closed it: its old address space, and with it
 * everything we stored, is gone. */
static bool target_exec_ed(struct zsw_target *t) {
        if (t->target_uffd < 0 || t->pid <= 0)
                return false;
        return syscall(SYS_kcmp, getpid(), t->pid, KCMP_FILE, t->uffd, t->target_uffd) != 0;
}

/* A fork child's uffd arrived in our process only: if we died, its
 * missing pages would read as zeros. Like an attached target, it keeps a
 * reference of its own, and the parent's, which it inherited, goes. */
static void give_child_its_uffd(struct zsw_engine *e, struct zsw_target *t) {
        _cleanup_remote_ struct zsw_remote *remote = NULL;
        int r, tfd;

        r = zsw_remote_seize(t->pid, e->log, &remote);
        if (r >= 0)
                r = zsw_remote_install_fd(remote, t->uffd, &tfd);
        if (r < 0) {
                zsw_log(e->log, LOG_WARNING,
                        "Cannot give fork child %d a reference to its userfaultfd: %s; it depends on "
                        "zswapd staying up", t->pid, strerror(-r));
                return;
        }
        t->target_uffd = tfd;
        zsw_log(e->log, LOG_DEBUG, "Fork child %d holds its userfaultfd as fd %d", t->pid, tfd);
}

/* Names fork children (see engine_add_fork_child) and watches their exit. */
static void name_children(struct zsw_engine *e) {
        for (;;) {
                struct epoll_event ev = { .events = EPOLLIN };
                struct zsw_target *t;
                pid_t pid;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = e->targets; t; t = t->next)
                        if (t->pid == 0 && t->parent_pid > 0 && !atomic_load(&t->dead))
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return;
                pid = find_new_child(e, t->parent_pid);
                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                t->parent_pid = 0;      /* one try: a child gone already stays unnamed */
                if (pid > 0) {
                        t->pid = pid;
                        t->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
                        ev.data.ptr = t;
                        if (t->pidfd >= 0)
                                epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, t->pidfd, &ev);
                }
                zsw_mutex_unlock(&e->table_lock);
                if (pid > 0)
                        give_child_its_uffd(e, t);
        }
}

/* A fork child we could not name has no pidfd to tell us it exited: its
 * address space tells us instead. (Short-lived children, fork then exec,
 * are usually gone before the reaper looks for them.) */
static bool target_unnamed_gone(struct zsw_target *t) {
        return t->pid == 0 && t->parent_pid == 0 && zsw_uffd_mm_alive(t->uffd) == -ESRCH;
}

static void reap(struct zsw_engine *e) {
        for (;;) {
                struct zsw_target *t;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = e->targets; t; t = t->next)
                        if (atomic_load(&t->dead) || target_exec_ed(t) || target_unnamed_gone(t))
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return;
                if (t->pid > 0)
                        zsw_log(e->log, LOG_INFO, "Process %d exited or exec'ed; forgetting it", t->pid);
                else
                        zsw_log(e->log, LOG_INFO, "A fork child that exited before we could name it is "
                                "forgotten");
                atomic_store(&t->dead, true);
                /* A reclaim of it may still run (zsw_engine_reclaim drops
                 * control_lock): it ends quickly on a dead target. */
                zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
                zsw_mutex_unlock(&t->evict_lock);
                target_unpublish(e, t);
                target_free(t);
        }
}

static void *reaper_main(void *userdata) {
        struct zsw_engine *e = userdata;

        /* Wakes at least once a second, and often enough for age scans. */
        int timeout_ms = e->age_interval_ns ? (int) MIN(e->age_interval_ns / 1000000, 1000u) : 1000;

        for (;;) {
                struct epoll_event evs[8];
                int n = epoll_wait(e->reaper_epfd, evs, (int) ARRAY_SIZE(evs), MAX(timeout_ms, 1));
                uint64_t v;

                if (n < 0 && errno != EINTR)
                        break;
                for (int i = 0; i < n; i++)
                        if (evs[i].data.ptr)
                                atomic_store(&((struct zsw_target *) evs[i].data.ptr)->dead, true);
                if (read(e->reaper_stop_fd, &v, sizeof(v)) == sizeof(v) && v >= (1ull << 32))
                        break;
                zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
                name_children(e);
                reap(e);
                age_due_targets(e);
                zsw_mutex_unlock(&e->control_lock);
        }
        return NULL;
}

int zsw_engine_get_target_stats(struct zsw_engine *e, pid_t pid, struct zsw_target_stats *ret) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = find_target(e, pid);
        if (t)
                target_fill_stats(t, e->store, ret);
        zsw_mutex_unlock(&e->control_lock);
        return t ? 0 : -ENOENT;
}

int zsw_engine_set_throttle(struct zsw_engine *e, pid_t pid, bool on) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = find_target(e, pid);
        if (t)
                atomic_store_explicit(&t->throttle, on, memory_order_relaxed);
        zsw_mutex_unlock(&e->control_lock);
        return t ? 0 : -ENOENT;
}

static void writeback_fill_stats(struct zsw_engine *e, const struct zsw_store_stats *gs,
                                 struct zsw_engine_stats *s) {
        struct zsw_writeback_stats ws = {};

        if (e->writeback)
                zsw_writeback_get_stats(e->writeback, &ws);
        s->pool_limit_bytes = e->config.pool_limit_bytes;
        s->pool_limit_hit = gs->pool_limit_hit;
        s->refused_limit = gs->rejects[ZSW_REJECT_LIMIT];
        s->refused_pool_limit = gs->rejects[ZSW_REJECT_POOL_LIMIT];
        s->refused_writeback_off = gs->rejects[ZSW_REJECT_WRITEBACK_OFF];
        s->refused_reclaim_fail = gs->rejects[ZSW_REJECT_RECLAIM_FAIL];
        s->shrink_wakeups = ws.wakeups;
        s->shrink_steps = ws.steps;
        s->written_back_pages = ws.written_back;
        s->write_requests = ws.write_requests;
        s->bytes_written = ws.bytes_written;
        s->write_failures = ws.write_failures;
        s->disk_reads = gs->disk_reads;
        s->disk_pages = gs->disk_pages;
        s->disk_bytes_in_use = ws.disk_bytes_in_use;
}

int zsw_engine_get_stats(struct zsw_engine *e, struct zsw_engine_stats *ret) {
        struct zsw_histogram all = {};
        struct zsw_store_stats gs;
        struct zsw_engine_stats s = {};

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        zsw_store_get_stats(e->store, &gs);
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target *t = e->targets; t; t = t->next) {
                s.targets++;
                s.faults += atomic_load(&t->faults);
                s.refaults += atomic_load(&t->refaults);
                s.wp_faults += atomic_load(&t->wp_faults);
                zsw_mutex_lock(&t->age_stats_lock, ZSW_LOCK_AGE_STATS);
                s.age_scan_ns_total += t->age_scan_ns;
                zsw_mutex_unlock(&t->age_stats_lock);
                s.evicted_pages += atomic_load(&t->evicted);
                s.evict_aborted += atomic_load(&t->evict_aborted);
                s.stops += atomic_load(&t->stops);
                s.stopped_ns += atomic_load(&t->stopped_ns);
                zsw_histogram_merge(&all, &t->fault_hist);
        }
        zsw_mutex_unlock(&e->table_lock);
        zsw_mutex_unlock(&e->control_lock);
        s.stored_pages = gs.stored_pages;
        s.payload_bytes = gs.payload_bytes;
        s.pool_bytes = gs.pool_bytes;
        s.same_filled_pages = gs.same_filled_pages;
        s.incompressible_pages = gs.incompressible_pages;
        s.fault_ns_p50 = zsw_histogram_percentile(&all, 0.50);
        s.fault_ns_p95 = zsw_histogram_percentile(&all, 0.95);
        s.fault_ns_p99 = zsw_histogram_percentile(&all, 0.99);
        writeback_fill_stats(e, &gs, &s);
        *ret = s;
        return 0;
}

size_t zsw_engine_list_targets(struct zsw_engine *e, pid_t *pids, size_t n) {
        size_t i = 0;

        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target *t = e->targets; t; t = t->next, i++)
                if (i < n)
                        pids[i] = t->pid;
        zsw_mutex_unlock(&e->table_lock);
        return i;
}

/* The swapfile before the store (whose disk callbacks point at it), the
 * shrinker after it; without writeback, only the limit. */
static int writeback_open(struct zsw_engine *e, struct zsw_store_config *sc) {
        const struct zsw_engine_config *c = &e->config;
        const char *path = c->swapfile ?: ZSW_ENGINE_STATE_DIR;
        int r;

        if (!c->writeback)
                return 0;
        r = zsw_swapfile_open(path, c->swapfile_max_bytes ?: ZSW_ENGINE_SWAPFILE_DEFAULT, e->log,
                              &e->swapfile);
        if (r < 0)
                return zsw_log_errno(e->log, LOG_ERR, r, "Failed to open the swapfile %s: %m", path);
        sc->read_disk = zsw_writeback_read_disk;
        sc->read_disk_batch = zsw_writeback_read_disk_batch;
        sc->free_disk = zsw_writeback_free_disk;
        sc->disk_userdata = e->swapfile;
        return 0;
}

static int writeback_start(struct zsw_engine *e) {
        const struct zsw_engine_config *c = &e->config;

        if (!e->swapfile)
                return zsw_store_set_limits(e->store, &(struct zsw_store_limits) {
                                                              .pool_bytes = c->pool_limit_bytes,
                                                              .accept_percent = c->accept_threshold_percent,
                                                      });
        return zsw_writeback_new(e->store, e->swapfile,
                                 &(struct zsw_writeback_config) {
                                         .pool_limit_bytes = c->pool_limit_bytes,
                                         .accept_threshold_percent = c->accept_threshold_percent,
                                         .log = e->log,
                                 },
                                 &e->writeback);
}

int zsw_engine_new(const struct zsw_engine_config *config, struct zsw_engine **ret) {
        struct zsw_store_config sc = {};
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
        struct zsw_engine *e;
        int r;

        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->config = *config;
        e->log = e->evict.log = config->log;
        if (config->age_interval_ms != UINT32_MAX)
                e->age_interval_ns = (uint64_t) (config->age_interval_ms ?:
                                                 ZSW_ENGINE_AGE_INTERVAL_DEFAULT_MS) * 1000000;
        e->reaper_epfd = e->reaper_stop_fd = -EBADF;
        pthread_mutex_init(&e->control_lock, NULL);
        pthread_mutex_init(&e->table_lock, NULL);
        pthread_mutex_init(&e->worker_lock, NULL);

        r = config->compressor ? zsw_compressor_from_string(config->compressor)
                               : (int) ZSW_COMPRESSOR_DEFAULT;
        if (r < 0) {
                zsw_engine_free(e);
                return r;
        }
        sc.compressor = e->compressor = (enum zsw_compressor) r;
        sc.level = config->compression_level;
        sc.reject_incompressible = config->reject_incompressible;
        sc.log = config->log;
        r = writeback_open(e, &sc);
        if (r >= 0)
                r = zsw_store_new(&sc, &e->store);
        if (r >= 0)
                r = writeback_start(e);
        if (r >= 0)
                r = zsw_worker_new(e->store, &e->worker);
        if (r >= 0) {
                long cpus = sysconf(_SC_NPROCESSORS_ONLN);

                e->evict.worker = e->worker;
                r = zsw_parallel_new(e->store, cpus > 1 ? (unsigned) cpus - 1 : 0,
                                     &e->evict.evict_pool);
        }
        if (r >= 0) {
                e->reaper_epfd = epoll_create1(EPOLL_CLOEXEC);
                e->reaper_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                if (e->reaper_epfd < 0 || e->reaper_stop_fd < 0 ||
                    epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, e->reaper_stop_fd, &ev) < 0)
                        r = -errno;
        }
        if (r >= 0)
                r = fault_threads_start(e->store, config->fault_threads, e->log,
                                        &(struct fault_events) {
                                                .fork_child = engine_add_fork_child,
                                                .dead = engine_mark_dead,
                                                .userdata = e,
                                        },
                                        &e->faults);
        if (r >= 0) {
                r = -pthread_create(&e->reaper, NULL, reaper_main, e);
                e->reaper_started = r == 0;
        }
        if (r < 0) {
                zsw_engine_free(e);
                return r;
        }
        *ret = e;
        return 0;
}

struct zsw_engine *zsw_engine_free(struct zsw_engine *e) {
        unsigned held = 0;

        if (!e)
                return NULL;
        if (e->reaper_started) {
                uint64_t stop = 1ull << 32;

                if (write(e->reaper_stop_fd, &stop, sizeof(stop)) == sizeof(stop))
                        pthread_join(e->reaper, NULL);
        }
        /* Every page goes back before anything is freed; a live target
         * whose pages cannot all go back keeps the engine alive. */
        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        for (struct zsw_target *t = e->targets, *next; t; t = next) {
                struct zsw_engine_error err = {};
                struct zsw_store_stats os;

                next = t->next;
                if (atomic_load(&t->dead) || zsw_uffd_mm_alive(t->uffd) == -ESRCH) {
                        target_unpublish(e, t);
                        target_free(t);
                } else if (detach_locked(e, t, &err) < 0) {
                        zsw_store_owner_get_stats(t->owner, &os);
                        zsw_log(e->log, LOG_ERR, "Not freeing the engine: %s (%" PRIu64 " pages "
                                "have no other copy); its fault threads go on serving it until "
                                "this process exits", err.message, os.stored_pages);
                        held++;
                }
        }
        zsw_mutex_unlock(&e->control_lock);
        if (held > 0)
                return NULL;
        e->faults = fault_threads_stop(e->faults);
        zsw_parallel_free(e->evict.evict_pool);
        evict_round_free(e->evict.evict_round);
        /* No store runs any more: the shrinker can go. */
        zsw_writeback_free(e->writeback);
        zsw_worker_free(e->worker);
        zsw_store_free(e->store);
        zsw_swapfile_close(e->swapfile);
        safe_close(e->reaper_epfd);
        safe_close(e->reaper_stop_fd);
        pthread_mutex_destroy(&e->control_lock);
        pthread_mutex_destroy(&e->table_lock);
        pthread_mutex_destroy(&e->worker_lock);
        free(e);
        return NULL;
}
