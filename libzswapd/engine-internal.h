/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine's state (struct zsw_engine), shared by engine.c and its
 * engine-*.c parts alone: fault.c, evict.c and target.c never see it.
 * Not a public interface.
 *
 * The lock order of zswapd, every lock of libzswapd and the daemon, in one
 * line (lockdep.h has it as ranks and checks it in debug builds):
 *
 *   reclaimer lock -> control_lock -> evict_lock -> worker_lock ->
 *   serve_lock -> round_store_lock -> batch_lock -> table_lock ->
 *   age_stats_lock -> owners_lock -> owner lock -> pool_lock -> LRU lock ->
 *   entry cache lock -> pool class lock -> empty_lock -> arena_lock ->
 *   pool table_lock -> swapfile write_lock -> read_lock -> alloc_lock ->
 *   writeback lock -> parallel lock -> heat lock -> dictionary sample lock
 *
 * A thread holding one takes only locks to its right; several of one kind
 * never, except owner locks of one family, in list order. A trylock may go
 * against the order. What each guards:
 *   reclaimer->lock (daemon/reclaim.c): the daemon's reclaim queue; the
 *     engine is called without it. Condition variable cond.
 *   engine->control_lock: control calls (attach, detach, reclaim, stats)
 *     and the reaper, one at a time, so a target never disappears under a
 *     control call. Reclaim holds it only to find its target and take the
 *     target's evict_lock, so a long reclaim does not stall stats or
 *     attach. Fault threads never take it: an eviction waits on them (its
 *     drop raises an event they must read).
 *   target->evict_lock (mutex): one eviction, age scan or detach of a
 *     target at a time; detach and the reaper take it before freeing one.
 *   engine->worker_lock: the engine's store worker (reclaim, copy back).
 *   target->serve_lock (mutex): reading and handling a target's uffd
 *     messages. Held from read(2) until every message of the batch is
 *     handled, events (remap, remove, unmap, fork) before faults: read(2)
 *     returns faults first, and reading an event lets the target's thread
 *     act on it, so a fault must never be served from a store view that
 *     an event already read has not yet changed.
 *   target->round_store_lock (rwlock): see struct zsw_target (target-internal.h).
 *   target->batch_lock (mutex): the state of the eviction in flight,
 *     shared between the evicting thread and the fault threads.
 *   engine->table_lock: the target list (a fork child is published under
 *     its parent's serve_lock).
 *   target->age_stats_lock: the age scans' figures (struct zsw_target).
 *   store.c: owners_lock (the owner list), owner->lock (an owner's index
 *     and LRU insertion order), pool_lock (rwlock: pool payload reads
 *     against the switch to disk), lru->lock (lru.c); entry.c's cache lock.
 *   pool.c: a size class's lock, then the empty-slab cache, the arena and
 *     the slab-id table, each a leaf under the class lock.
 *   swapfile.c: write_lock (one write round), read_lock (the read ring),
 *     alloc_lock (the block bitmap, freed into under pool_lock).
 *   writeback.c: its thread's state; condition variables cond and idle.
 *   parallel.c: the worker pool's jobs; condition variables start and done.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "engine.h"
#include "evict.h"
#include "fault.h"
#include "lockdep.h"
#include "store.h"
#include "target-internal.h"
#include "vma.h"

struct zsw_engine {
        struct zsw_engine_config config;
        enum zsw_compressor compressor; /* config.compressor's */
        const struct zsw_log *log;
        struct zsw_store *store;
        struct zsw_swapfile *swapfile; /* NULL without writeback */
        struct zsw_writeback *writeback;

        pthread_mutex_t control_lock;
        pthread_mutex_t table_lock;
        struct zsw_target *targets;
        unsigned n_targets;

        struct fault_threads *faults;

        /* Reclaim and detach run on the caller's thread with this worker,
         * reclaim's compression shared with the evict pool's threads. */
        pthread_mutex_t worker_lock;
        struct zsw_worker *worker;
        struct evictor evict;

        /* Age scans: every target every age_interval_ns (0: only when
         * asked), run by the reaper thread. */
        uint64_t age_interval_ns;

        /* Uffds of fork children not named yet that a dead zswapd's
         * rescue task handed to the service manager
         * (zsw_engine_add_kept_uffd()), for the adoption of its state. */
        struct kept_uffd {
                pid_t keeper;
                int number; /* the descriptor's number in keeper */
                int fd;     /* ours, -EBADF once taken */
        } * kept;
        size_t n_kept;

        /* Reaps targets that exited or exec'ed. */
        pthread_t reaper;
        int reaper_epfd;
        int reaper_stop_fd;
        bool reaper_started;
};

/* The reaper's epoll data: its stop eventfd is 0, every target's pidfd
 * this (see mark_exited() in engine-reaper.c). */
#define REAPER_EVENT_EXIT UINT64_C(1)

/* engine-targets.c: the target table, and control calls' errors. */
int engine_fail(struct zsw_engine_error *err, int r, const char *fmt, ...) _printf_(3, 4);
/* -ETIMEDOUT for a process none of whose threads stopped in time, with
 * what keeps it (the thread, its state, what it waits in) and advice. */
int engine_fail_stuck(struct zsw_engine_error *err, pid_t pid, const char *advice);
/* The live target of pid, or NULL; the caller holds control_lock. */
struct zsw_target *engine_find_target(struct zsw_engine *e, pid_t pid);
/* Makes t live: fault threads serve it, the reaper watches it. */
int engine_publish(struct zsw_engine *e, struct zsw_target *t);
/* The opposite of engine_publish(); afterwards t may be freed. */
void engine_unpublish(struct zsw_engine *e, struct zsw_target *t);

/* engine.c: the shrinker (or, without writeback, the pool limit); again
 * after a re-exec that did not happen (zsw_engine_thaw()). */
int engine_writeback_start(struct zsw_engine *e);

/* engine-attach.c: puts every page of t back, removes what attach left
 * in it and frees it; under control_lock. On failure t stays attached. */
int engine_detach_locked(struct zsw_engine *e, struct zsw_target *t, struct zsw_engine_error *err);

/* engine-fork.c: a fork of parent (struct fault_events): the child is
 * served from now on; the reaper names it (engine_name_children()). */
void engine_add_fork_child(void *userdata, struct zsw_target *parent, int child_uffd);
bool engine_name_children(struct zsw_engine *e, bool now_all);
/* A fork child not named yet, taken over from a dead zswapd's state
 * (engine-load.c): named like one just forked, from its saved fork tick. */
void engine_fork_child_adopted(struct zsw_target *t, uint64_t forked_tick);

/* engine-load.c: after a zswapd died, the stored copies of pages present
 * in t go (t is named). Returns how many, or -errno. */
int engine_drop_present(struct zsw_target *t);

/* engine-reaper.c: its descriptors (before the fault threads and any
 * target), its thread, and the stop of it. */
int engine_reaper_open(struct zsw_engine *e);
int engine_reaper_start(struct zsw_engine *e);
void engine_reaper_stop(struct zsw_engine *e);
/* Has the reaper make a pass now (a fork child to name). */
void engine_reaper_wake(struct zsw_engine *e);
/* A target its fault thread gave up on (struct fault_events): the reaper
 * forgets it. */
void engine_mark_dead(void *userdata, struct zsw_target *t);
