/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine's table of targets: finding an attached target by pid,
 * publishing a new one (fault threads serve it, the reaper watches its
 * pidfd, control calls find it) and taking one out before it is freed;
 * and the one-line explanations of failed control calls (struct
 * zsw_engine_error). The other engine-*.c files and engine.c build on
 * this one; it calls none of them.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/epoll.h>

#include "engine-internal.h"
#include "remote.h"

int engine_fail(struct zsw_engine_error *err, int r, const char *fmt, ...) {
        va_list ap;

        if (err) {
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
        }
        return r;
}

int engine_fail_stuck(struct zsw_engine_error *err, pid_t pid, const char *advice) {
        char why[192];

        if (zsw_remote_describe_stuck(pid, why, sizeof(why)) < 0)
                snprintf(why, sizeof(why), "no thread of it looks stuck now");
        return engine_fail(err, -ETIMEDOUT,
                           "process %d did not stop for ptrace within %u ms: %s; %s", pid,
                           ZSW_REMOTE_STOP_TIMEOUT_MS, why, advice);
}

struct zsw_target *engine_find_target(struct zsw_engine *e, pid_t pid) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (t = e->targets; t; t = t->next)
                if (t->pid == pid && !atomic_load(&t->dead))
                        break;
        zsw_mutex_unlock(&e->table_lock);
        return t;
}

int engine_publish(struct zsw_engine *e, struct zsw_target *t) {
        int r = fault_threads_add(e->faults, t);

        if (r < 0)
                return r;
        if (t->pidfd >= 0) {
                struct epoll_event ev = { .events = EPOLLIN, .data.u64 = REAPER_EVENT_EXIT };

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

void engine_unpublish(struct zsw_engine *e, struct zsw_target *t) {
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target **p = &e->targets; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        e->n_targets--;
                        break;
                }
        /* Children still to be named lose their parent's target: its pid
         * was taken when they were read, or they cannot be named. */
        for (struct zsw_target *c = e->targets; c; c = c->next)
                if (c->fork_parent == t)
                        c->fork_parent = NULL;
        zsw_mutex_unlock(&e->table_lock);
        if (t->pidfd >= 0)
                epoll_ctl(e->reaper_epfd, EPOLL_CTL_DEL, t->pidfd, NULL);
        fault_threads_remove(e->faults, t);
}
