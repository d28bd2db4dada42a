/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The writeback tier's shrinker: moves the coldest compressed entries of
 * the store to the swapfile when the pool reaches its limit, the way the
 * kernel's zswap shrink worker does, with merged writes.
 *
 * One thread, woken by the store when a store is refused at a limit. It
 * walks the owners round-robin (so that one service does not pay for
 * another); each step takes up to ZSW_WRITEBACK_STEP of an owner's coldest
 * entries off its second-chance LRU (referenced ones get another round),
 * writes them with one zsw_swapfile_write_batch() (consecutive sectors, one
 * request), switches the written ones to disk and puts the others back. It
 * stops once the pool is under its accept threshold and no owner is above
 * the threshold of its own limit.
 *
 * Failures lose nothing: an entry that could not be written (no space, an
 * I/O error) stays in memory, the failure is counted and logged once per
 * burst, the store counts its refusals as reclaim failures meanwhile, and
 * the shrinker backs off exponentially before it tries again.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "store.h"
#include "swapfile.h"

/* Entries per step: the kernel's SWAP_CLUSTER_MAX, and one write batch. */
#define ZSW_WRITEBACK_STEP 32u

struct zsw_writeback;

struct zsw_writeback_config {
        /* Pool memory in use (the pool's object bytes) at which stores are
         * refused and writeback starts; 0 for no global limit (owners'
         * own limits still trigger writeback). */
        uint64_t pool_limit_bytes;
        /* Stores are accepted again, and the shrinker stops, under this
         * percent of the limit; 0 for 90. */
        unsigned accept_threshold_percent;
        const struct zsw_log *log;
};

struct zsw_writeback_stats {
        uint64_t wakeups;               /* times the shrinker was woken with work to do */
        uint64_t steps;                 /* batches of isolated entries handled */
        uint64_t written_back;          /* pages moved to disk */
        uint64_t write_requests;        /* write requests those took */
        uint64_t bytes_written;         /* disk bytes written (sector-padded) */
        uint64_t payload_bytes_written; /* payload bytes of those pages */
        uint64_t write_failures;        /* pages a write failed for (kept in memory) */
        uint64_t invalidated;           /* pages invalidated while being written */
        uint64_t backoffs;              /* times the shrinker slept after failures */
        uint64_t disk_bytes_in_use;     /* swapfile space allocated now */
};

/*
 * Sets the store's limits and wake-up, and starts the shrink thread on
 * entries of s written to sf. The store's config must have read_disk and
 * free_disk going to sf (zsw_writeback_read_disk, zsw_writeback_free_disk
 * with sf as disk_userdata). s and sf must outlive the writeback object.
 * Call it before stores run: the store reads its limits unlocked.
 * Returns 0, -EINVAL for a bad setting, -ENOMEM or a pthread error.
 */
int zsw_writeback_new(struct zsw_store *s, struct zsw_swapfile *sf,
                      const struct zsw_writeback_config *config, struct zsw_writeback **ret);

/* Stops the thread (a step in flight finishes), takes the limits off the
 * store and frees the object; call it while no store runs. Accepts NULL,
 * returns NULL. */
struct zsw_writeback *zsw_writeback_free(struct zsw_writeback *wb);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_writeback *, zsw_writeback_free);

/* Wakes the shrinker (the store does it at a limit). Any thread. */
void zsw_writeback_wake(struct zsw_writeback *wb);

/*
 * Runs one step on o now, on the caller's thread: isolates up to n (at
 * most ZSW_WRITEBACK_STEP) of the coldest entries of o's family, writes
 * them, switches them to disk. Returns the pages written back (0: nothing
 * to write), or a negative errno when every page failed (nothing is lost).
 * For tests and benchmarks; o must not be freed meanwhile.
 */
int zsw_writeback_shrink_owner(struct zsw_writeback *wb, struct zsw_owner *o, size_t n);

/* Waits until the shrinker has nothing left to do (under every threshold,
 * or failing and backing off). For tests. */
void zsw_writeback_settle(struct zsw_writeback *wb);

void zsw_writeback_get_stats(struct zsw_writeback *wb, struct zsw_writeback_stats *ret);

/* The store's disk callbacks for a payload in swapfile userdata. */
int zsw_writeback_read_disk(void *userdata, uint64_t sector, uint32_t len, void *dst);
int zsw_writeback_read_disk_batch(void *userdata, const uint64_t *sectors, const uint32_t *lens,
                                  size_t n, void *const *dsts);
void zsw_writeback_free_disk(void *userdata, uint64_t sector, uint32_t len);
