/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reaper: the engine's own thread. It wakes when a target's pidfd
 * says it exited, when a fault thread gives a target up
 * (engine_mark_dead()), and at least four times a second; each time, under
 * control_lock, it names new fork children (engine-fork.c), forgets the
 * targets that exited or exec'ed, and runs the age scans that are due;
 * then, without control_lock, compacts the store's pool when it is due.
 */
#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "engine-internal.h"
#include "uffd.h"

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
                        if (t->aging && t->pid > 0 && !atomic_load(&t->dead) &&
                            t->next_age_ns <= now)
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

void engine_mark_dead(void *userdata, struct zsw_target *t) {
        struct zsw_engine *e = userdata;

        atomic_store(&t->dead, true);
        engine_reaper_wake(e);
}

/* A target whose uffd reference inside it is gone has exec'ed (the
 * reference is O_CLOEXEC) or closed it: its old address space, and with it
 * everything we stored, is gone. */
static bool target_exec_ed(struct zsw_target *t) {
        if (t->target_uffd < 0 || t->pid <= 0)
                return false;
        return syscall(SYS_kcmp, getpid(), t->pid, KCMP_FILE, t->uffd, t->target_uffd) != 0;
}

/* The address space we serve is gone: the process exited or exec'ed. A
 * fork child not named has no pidfd to tell us so (short-lived children,
 * fork then exec, may be gone before the reaper finds them), and one
 * that exec'd between its naming and the reference we gave it holds that
 * reference in its new program. */
static bool target_mm_gone(struct zsw_target *t) {
        return zsw_uffd_mm_alive(t->uffd) == -ESRCH;
}

/* Marks the targets whose process has exited (their pidfd reads ready),
 * with control_lock held. An epoll event names no target: the one it
 * was registered for may have been detached and freed since epoll_wait()
 * returned, and its memory reused by another. */
static void mark_exited(struct zsw_engine *e) {
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target *t = e->targets; t; t = t->next)
                if (t->pidfd >= 0 &&
                    poll(&(struct pollfd) { .fd = t->pidfd, .events = POLLIN }, 1, 0) > 0)
                        atomic_store(&t->dead, true);
        zsw_mutex_unlock(&e->table_lock);
}

static void reap(struct zsw_engine *e) {
        for (;;) {
                struct zsw_target *t;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = e->targets; t; t = t->next)
                        if (atomic_load(&t->dead) || target_exec_ed(t) || target_mm_gone(t))
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return;
                if (t->pid > 0)
                        zsw_log(e->log, LOG_INFO, "Process %d exited or exec'ed; forgetting it",
                                t->pid);
                else
                        zsw_log(e->log, LOG_INFO,
                                "A fork child that exited before we could name it is "
                                "forgotten");
                atomic_store(&t->dead, true);
                /* A reclaim of it may still run (zsw_engine_reclaim drops
                 * control_lock): it ends quickly on a dead target. */
                zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
                zsw_mutex_unlock(&t->evict_lock);
                engine_unpublish(e, t);
                target_free(t);
        }
}

/* Frees leave partial slabs behind; under churn they are most of the
 * pool's overhead, and they grow back between passes: a thrashing target
 * frees tens of MiB of payloads a second, scattered over the slabs. A
 * pass with nothing to do costs a read of the pool's counters. */
#define COMPACT_INTERVAL_MS 250u

static void compact_due(struct zsw_engine *e, uint64_t *next_ns) {
        uint64_t now = zsw_now_ns();

        if (now < *next_ns)
                return;
        *next_ns = now + COMPACT_INTERVAL_MS * UINT64_C(1000000);
        (void) zsw_store_compact(e->store, false);
}

static void *reaper_main(void *userdata) {
        struct zsw_engine *e = userdata;
        uint64_t next_compact_ns = 0;

        /* Wakes often enough for compaction and for age scans. */
        int timeout_ms = (int) MIN(e->age_interval_ns ? e->age_interval_ns / 1000000 : UINT64_MAX,
                                   COMPACT_INTERVAL_MS);
        bool unnamed = false; /* a fork child just read is not linked yet */

        for (;;) {
                struct epoll_event evs[8];
                int n = epoll_wait(e->reaper_epfd, evs, (int) ARRAY_SIZE(evs),
                                   unnamed ? 1 : MAX(timeout_ms, 1));
                bool exited = false;
                uint64_t v;

                if (n < 0 && errno != EINTR)
                        break;
                for (int i = 0; i < n; i++)
                        exited = exited || evs[i].data.u64 == REAPER_EVENT_EXIT;
                if (read(e->reaper_stop_fd, &v, sizeof(v)) == sizeof(v) && v >= (1ull << 32))
                        break;
                zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
                if (exited)
                        mark_exited(e);
                unnamed = engine_name_children(e, false);
                reap(e);
                age_due_targets(e);
                zsw_mutex_unlock(&e->control_lock);
                compact_due(e, &next_compact_ns);
        }
        return NULL;
}

int engine_reaper_open(struct zsw_engine *e) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

        e->reaper_epfd = epoll_create1(EPOLL_CLOEXEC);
        e->reaper_stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (e->reaper_epfd < 0 || e->reaper_stop_fd < 0 ||
            epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, e->reaper_stop_fd, &ev) < 0)
                return -errno;
        return 0;
}

int engine_reaper_start(struct zsw_engine *e) {
        int r = -pthread_create(&e->reaper, NULL, reaper_main, e);

        e->reaper_started = r == 0;
        if (r == 0)
                pthread_setname_np(e->reaper, "zswapd-reaper");
        return r;
}

void engine_reaper_wake(struct zsw_engine *e) {
        uint64_t one = 1;

        if (write(e->reaper_stop_fd, &one, sizeof(one)) < 0)
                zsw_log_errno(e->log, LOG_WARNING, errno, "Cannot wake the reaper, ignoring: %m");
}

void engine_reaper_stop(struct zsw_engine *e) {
        uint64_t stop = 1ull << 32;

        if (e->reaper_started && write(e->reaper_stop_fd, &stop, sizeof(stop)) == sizeof(stop))
                pthread_join(e->reaper, NULL);
}
