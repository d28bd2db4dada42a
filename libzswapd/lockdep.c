/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Lock-order checking (lockdep.h): a per-thread set of held locks, checked
 * at every acquisition. Debug builds only; a violation is a bug of ours,
 * so it aborts, as assert() does, after saying which locks and where.
 */
#include "lockdep.h"

#if ZSW_LOCKDEP

#include <stdio.h>
#include <stdlib.h>

/* Deeper than any path of ours: engine, target, store, pool, swapfile. */
#define HELD_MAX 16

struct held {
        const void *lock;
        enum zsw_lock_rank rank;
        const char *name, *file;
        int line;
};

static _Thread_local struct held held[HELD_MAX];
static _Thread_local unsigned n_held;

static const char *const rank_names[_ZSW_LOCK_RANK_MAX] = {
        [ZSW_LOCK_DAEMON_RECLAIM] = "daemon reclaimer",
        [ZSW_LOCK_CONTROL] = "control_lock",
        [ZSW_LOCK_EVICT] = "evict_lock",
        [ZSW_LOCK_WORKER] = "worker_lock",
        [ZSW_LOCK_SERVE] = "serve_lock",
        [ZSW_LOCK_ROUND_STORE] = "round_store_lock",
        [ZSW_LOCK_BATCH] = "batch_lock",
        [ZSW_LOCK_TABLE] = "table_lock",
        [ZSW_LOCK_AGE_STATS] = "age_stats_lock",
        [ZSW_LOCK_OWNERS] = "owners_lock",
        [ZSW_LOCK_OWNER] = "owner lock",
        [ZSW_LOCK_STORE_POOL] = "pool_lock",
        [ZSW_LOCK_LRU] = "LRU lock",
        [ZSW_LOCK_ENTRY_CACHE] = "entry cache lock",
        [ZSW_LOCK_POOL_CLASS] = "pool class lock",
        [ZSW_LOCK_POOL_EMPTY] = "pool empty_lock",
        [ZSW_LOCK_POOL_ARENA] = "pool arena_lock",
        [ZSW_LOCK_POOL_TABLE] = "pool table_lock",
        [ZSW_LOCK_SWAPFILE_WRITE] = "swapfile write_lock",
        [ZSW_LOCK_SWAPFILE_READ] = "swapfile read_lock",
        [ZSW_LOCK_SWAPFILE_ALLOC] = "swapfile alloc_lock",
        [ZSW_LOCK_WRITEBACK] = "writeback lock",
        [ZSW_LOCK_PARALLEL] = "parallel lock",
        [ZSW_LOCK_HEAT] = "heat lock",
        [ZSW_LOCK_DICT_SAMPLE] = "dictionary sample lock",
};

/* Ranks of which a thread may hold several: owners of one family, taken
 * in list order by the writeback switch (store.c). */
static bool rank_nests(enum zsw_lock_rank rank) {
        return rank == ZSW_LOCK_OWNER;
}

_Noreturn static void violation(const struct held *h, enum zsw_lock_rank rank, const void *lock,
                                const char *name, const char *file, int line, const char *what) {
        fprintf(stderr,
                "zswapd lock order violated: %s %s (%s, rank %d) at %s:%d while holding %s (%s, "
                "rank %d) "
                "taken at %s:%d; the order is in libzswapd/engine-internal.h\n",
                what, name, rank_names[rank], (int) rank, file, line, h->name, rank_names[h->rank],
                (int) h->rank, h->file, h->line);
        (void) lock;
        abort();
}

void zsw_lockdep_acquire(const void *lock, enum zsw_lock_rank rank, bool check, const char *name,
                         const char *file, int line) {
        if ((unsigned) rank >= _ZSW_LOCK_RANK_MAX) {
                fprintf(stderr, "zswapd lockdep: %s at %s:%d has no rank (%d)\n", name, file, line,
                        (int) rank);
                abort();
        }
        for (unsigned i = 0; i < n_held; i++) {
                const struct held *h = &held[i];

                if (h->lock == lock)
                        violation(h, rank, lock, name, file, line, "taking again");
                if (!check)
                        continue;
                if (h->rank > rank || (h->rank == rank && !rank_nests(rank)))
                        violation(h, rank, lock, name, file, line, "taking");
        }
        if (n_held == HELD_MAX) {
                fprintf(stderr, "zswapd lockdep: more than %d locks held at %s:%d\n", HELD_MAX,
                        file, line);
                abort();
        }
        held[n_held++] = (struct held) { lock, rank, name, file, line };
}

void zsw_lockdep_release(const void *lock, const char *file, int line) {
        for (unsigned i = n_held; i-- > 0;)
                if (held[i].lock == lock) {
                        held[i] = held[--n_held];
                        return;
                }
        fprintf(stderr, "zswapd lockdep: releasing %p at %s:%d, which this thread does not hold\n",
                lock, file, line);
        abort();
}

#endif
