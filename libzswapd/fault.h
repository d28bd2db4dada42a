/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fault service (fault.c): the threads that serve the targets'
 * userfaultfds. They work on targets (target-internal.h), the store and
 * the eviction round in flight (evict.h), and report what they saw to
 * their owner through struct fault_events. Not a public interface.
 */
#pragma once

#include "target-internal.h"

struct fault_threads;

/* What the fault threads report to their owner, from a fault thread. */
struct fault_events {
        /* parent forked: child_uffd is the child's userfaultfd, now the
         * callee's. Called with parent's serve_lock held, while the fork
         * waits for its event to be read: the child is served
         * (fault_threads_add()) before it runs. */
        void (*fork_child)(void *userdata, struct zsw_target *parent, int child_uffd);
        /* Reading t's userfaultfd failed: t exited, or cannot be served
         * any more. Called without t's locks. */
        void (*dead)(void *userdata, struct zsw_target *t);
        void *userdata;
};

/* Starts n_threads fault threads (0: one per CPU we may run on), each
 * with a worker of store. */
int fault_threads_start(struct zsw_store *store, unsigned n_threads, const struct zsw_log *log,
                        const struct fault_events *events, struct fault_threads **ret);
/* Stops the threads and frees them; accepts NULL and returns NULL. */
struct fault_threads *fault_threads_stop(struct fault_threads *s);
/* Serves t from one of the threads. */
int fault_threads_add(struct fault_threads *s, struct zsw_target *t);
/* Gives t the first-touch hold (hold.h; t has none yet): its timer goes
 * into the epoll set of t's fault thread. Caller holds control_lock. */
int fault_threads_add_hold(struct fault_threads *s, struct zsw_target *t, struct target_hold *hold);
/* See fault.c: afterwards no fault thread uses t. */
void fault_threads_remove(struct fault_threads *s, struct zsw_target *t);
