/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Eviction (evict.c): taking a target's present pages into the store
 * without losing a write, and the rules the fault threads apply to the
 * round in flight. Not a public interface.
 */
#pragma once

#include "target-internal.h"

/* What an eviction runs with: the engine's log, and, under the engine's
 * worker_lock, its store worker, the pool that shares a round's
 * compression, and the round's buffers (made on the first reclaim, kept
 * between calls, freed by evict_round_free()). */
struct evictor {
        const struct zsw_log *log;
        struct zsw_worker *worker; /* the engine's */
        struct zsw_parallel *evict_pool;
        struct evict_round *evict_round;
        uint32_t age_cost_percent; /* see struct zsw_engine_config */
};

/* A round's pages are read and stored ZSW_EVICT_CHUNK_PAGES at a time,
 * the next chunk read while the last one is compressed, through the two
 * halves of one 2 MiB buffer. */
#define ZSW_EVICT_CHUNK_PAGES 256u

/* Evicts t's pages (see zsw_engine_reclaim_cold()), with t's evict_lock
 * held; why, if not NULL, receives what stopped an eviction under way. */
int evict_target(struct evictor *e, struct zsw_target *t, uint64_t max_bytes, uint64_t min_age_ms,
                 struct zsw_reclaim_result *res, char *why, size_t why_size);
/* The next round's pages from [*cursor, end) of the process whose
 * /proc/PID/pagemap is open as pagemap: present pages (not the shared zero
 * page), at most max in at most n_max regions; with cold_ns only pages
 * heat shows unused for that long at now, and the warmer pages of short
 * gaps between them, so that the drop has fewer ranges. Scans on until
 * the round is full or end is reached: a stop of the target per round is
 * the cost to spread. Advances *cursor past what it looked at. Returns
 * the number of regions, or -errno. */
int evict_next_round(int pagemap, struct zsw_heat *heat, uint64_t cold_ns, uint64_t now,
                     uint64_t *cursor, uint64_t end, uint64_t max, struct zsw_page_run *regions,
                     size_t n_max);
/* An age scan of t (age.c), with evict_lock held. */
int evict_age_scan(struct evictor *e, struct zsw_target *t);
/* Registers t's eligible mappings (those already registered stay so);
 * the registered ranges in *ret (may be NULL), and in *ret_foreign (may
 * be NULL) how many are registered with another userfaultfd (EBUSY). */
int evict_register_ranges(struct evictor *e, struct zsw_target *t, struct zsw_range **ret,
                          size_t *ret_n, size_t *ret_foreign);
struct evict_round *evict_round_free(struct evict_round *rd);
/* Called by fault threads with serve_lock held. */
bool evict_on_wp_fault(struct zsw_target *t, uint64_t addr, bool *ret_round);
enum evict_removal {
        REMOVAL_REMOVE, /* UFFD_EVENT_REMOVE: the target's DONTNEED/FREE, or our drop */
        REMOVAL_UNMAP,  /* munmap: entries go */
        REMOVAL_MOVE,   /* the source of an mremap: entries move */
};
/* Applies the target's removal of [start, end): pages of the round in
 * flight are cancelled, and stored copies of what the target discarded are
 * dropped (the range reads zeros); our own drop changes nothing. */
void evict_on_remove(struct zsw_target *t, uint64_t start, uint64_t end, enum evict_removal kind);
enum evict_restore {
        RESTORE_STORE, /* serve it from the store (or zero-fill if none) */
        RESTORE_ZERO,  /* zero-fill: the round cancelled the page, its entry may hold
                                 * what the target discarded (stored after the discard) */
        RESTORE_WAIT,  /* the page is being dropped: the round wakes the thread
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
