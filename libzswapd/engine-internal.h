/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What engine.c (targets, attach, detach), fault.c (fault-service threads)
 * and evict.c (the eviction protocol) share. Not a public interface.
 *
 * The lock order of zswapd, every lock of libzswapd and the daemon, in one
 * line (lockdep.h has it as ranks and checks it in debug builds):
 *
 *   reclaimer lock -> control_lock -> evict_lock -> worker_lock ->
 *   serve_lock -> round_store_lock -> batch_lock -> table_lock ->
 *   age_stats_lock -> owners_lock -> owner lock -> pool_lock -> LRU lock ->
 *   entry cache lock -> pool class lock -> empty_lock -> arena_lock ->
 *   pool table_lock -> swapfile write_lock -> read_lock -> alloc_lock ->
 *   writeback lock -> parallel lock -> heat lock
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
 *   target->round_store_lock (rwlock): see struct zsw_target.
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
#include "lockdep.h"
#include "store.h"
#include "target-internal.h"
#include "vma.h"

/* A round's pages are read and stored ZSW_EVICT_CHUNK_PAGES at a time,
 * the next chunk read while the last one is compressed, through the two
 * halves of one 2 MiB buffer. */
#define ZSW_EVICT_CHUNK_PAGES 256u
#define FAULT_ZEROS_PAGES 64u

struct fault_buf;

struct fault_thread {
        struct zsw_engine *engine;
        pthread_t thread;
        int epfd;
        int stop_fd;                    /* eventfd: kicks the thread, or stops it */
        struct fault_buf *buf;          /* its pages for UFFDIO_COPY */
        /* Batches of epoll events it finished, and whether it still runs:
         * see fault_threads_remove(). */
        atomic_uint_fast64_t batches;
        atomic_bool running;
        struct zsw_worker *worker;
        bool started;
};

struct zsw_engine {
        struct zsw_engine_config config;
        enum zsw_compressor compressor; /* config.compressor's */
        const struct zsw_log *log;
        struct zsw_store *store;
        struct zsw_swapfile *swapfile;  /* NULL without writeback */
        struct zsw_writeback *writeback;

        pthread_mutex_t control_lock;
        pthread_mutex_t table_lock;
        struct zsw_target *targets;
        unsigned n_targets;

        struct fault_thread *threads;
        unsigned n_threads;
        atomic_uint next_fault_thread;  /* the next target's (fault_threads_add()) */
        const uint8_t *zeros;           /* FAULT_ZEROS_PAGES of zeros, read-only: what
                                         * fault.c fills written fresh pages from */

        /* Reclaim and detach run on the caller's thread with this worker,
         * reclaim's compression shared with the evict pool's threads. */
        pthread_mutex_t worker_lock;
        struct zsw_worker *worker;
        struct zsw_parallel *evict_pool;
        struct evict_round *evict_round;        /* reclaim's buffers, kept between calls */

        /* Age scans: every target every age_interval_ns (0: only when
         * asked), run by the reaper thread. */
        uint64_t age_interval_ns;

        /* Reaps targets that exited or exec'ed. */
        pthread_t reaper;
        int reaper_epfd;
        int reaper_stop_fd;
        bool reaper_started;
};

/* fault.c */
int fault_threads_start(struct zsw_engine *e);
void fault_threads_stop(struct zsw_engine *e);
int fault_threads_add(struct zsw_engine *e, struct zsw_target *t);
void fault_threads_remove(struct zsw_engine *e, struct zsw_target *t);

/* evict.c */
int evict_target(struct zsw_engine *e, struct zsw_target *t, uint64_t max_bytes,
                 uint64_t min_age_ms, struct zsw_reclaim_result *res, struct zsw_engine_error *err);
/* An age scan of t (age.c), with evict_lock held. */
int evict_age_scan(struct zsw_engine *e, struct zsw_target *t);
int evict_register_ranges(struct zsw_engine *e, struct zsw_target *t, struct zsw_range **ret,
                          size_t *ret_n);
struct evict_round *evict_round_free(struct evict_round *rd);
/* Called by fault threads with serve_lock held. */
bool evict_on_wp_fault(struct zsw_target *t, uint64_t addr);
enum evict_removal {
        REMOVAL_REMOVE,         /* UFFD_EVENT_REMOVE: the target's DONTNEED/FREE, or our drop */
        REMOVAL_UNMAP,          /* munmap: entries go */
        REMOVAL_MOVE,           /* the source of an mremap: entries move */
};
/* Applies the target's removal of [start, end): pages of the round in
 * flight are cancelled, and stored copies of what the target discarded are
 * dropped (the range reads zeros); our own drop changes nothing. */
void evict_on_remove(struct zsw_target *t, uint64_t start, uint64_t end, enum evict_removal kind);
enum evict_restore {
        RESTORE_STORE,          /* serve it from the store (or zero-fill if none) */
        RESTORE_ZERO,           /* zero-fill: the round cancelled the page, its entry may hold
                                 * what the target discarded (stored after the discard) */
        RESTORE_WAIT,           /* the page is being dropped: the round wakes the thread
                                 * once the drop is done and our REMOVE told apart from any
                                 * of the target's (before that, an entry may be one the
                                 * target discarded) */
};
/* How a missing fault on pgno may be served. With defer, RESTORE_WAIT
 * also asks the round to wake the faulting threads at its end. */
enum evict_restore evict_may_restore(struct zsw_target *t, uint64_t pgno, bool defer);
/* The target moved pages over [start, end) (mremap, REMAP event): pages
 * of the round in flight there leave it. Returns true if there were any:
 * then the caller moves the entries with round_store_lock write-held. */
bool evict_on_move_in(struct zsw_target *t, uint64_t start, uint64_t end);

/* The first page of [from, end) that the eviction round in flight holds
 * (whatever its state), end if none. */
uint64_t evict_first_in_round(struct zsw_target *t, uint64_t from, uint64_t end);
/* Pages [pgno, pgno + n) are back in place in the target: drops their
 * stored copies, now stale, except those of pages in the eviction round in
 * flight. Such a round may have read and stored the page we just placed,
 * and only the round knows whether that entry is the one that counts
 * (the page gets dropped) or not (the round cancels the page and drops
 * the entry itself); a stale entry of a present page is never read, a
 * wrongly dropped one is a lost page. batch_lock covers the invalidation
 * so that no round can take one of these pages in between. */
void evict_forget_restored(struct zsw_target *t, uint64_t pgno, uint64_t n);

/* engine.c */
int engine_add_fork_child(struct zsw_engine *e, struct zsw_target *parent, int child_uffd);
void engine_mark_dead(struct zsw_engine *e, struct zsw_target *t);
