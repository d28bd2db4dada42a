/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Lock-order checking: the lock order of engine-internal.h, as ranks, and
 * wrappers for every lock and unlock that check it.
 *
 * Each thread keeps the set of locks it holds. Taking a lock while holding
 * one of a later rank (or of the same rank, unless the rank allows several
 * at once) aborts with both locks' names and places: the deadlock that
 * order prevents would otherwise show only under an unlucky interleaving.
 * A trylock never waits, so it is not checked, only recorded.
 *
 * The check is compiled in when ZSW_LOCKDEP is 1 (meson option `lockdep`,
 * on by default in debug and sanitizer builds); otherwise every wrapper is
 * the bare pthread call and the rank argument is discarded.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>

/* Outermost first; engine-internal.h says what each lock guards. */
enum zsw_lock_rank {
        ZSW_LOCK_DAEMON_RECLAIM, /* daemon/reclaim.c: reclaimer->lock */
        ZSW_LOCK_CONTROL,        /* engine->control_lock */
        ZSW_LOCK_EVICT,          /* target->evict_lock */
        ZSW_LOCK_WORKER,         /* engine->worker_lock */
        ZSW_LOCK_SERVE,          /* target->serve_lock */
        ZSW_LOCK_ROUND_STORE,    /* target->round_store_lock (rwlock) */
        ZSW_LOCK_BATCH,          /* target->batch_lock */
        ZSW_LOCK_TABLE,          /* engine->table_lock */
        ZSW_LOCK_AGE_STATS,      /* target->age_stats_lock */
        ZSW_LOCK_OWNERS,         /* store->owners_lock */
        ZSW_LOCK_OWNER,          /* owner->lock; several, in family order */
        ZSW_LOCK_STORE_POOL,     /* store->pool_lock (rwlock) */
        ZSW_LOCK_LRU,            /* lru->lock */
        ZSW_LOCK_ENTRY_CACHE,    /* zsw_entry_cache->lock */
        ZSW_LOCK_POOL_CLASS,     /* size_class->lock */
        ZSW_LOCK_POOL_EMPTY,     /* zsw_pool->empty_lock */
        ZSW_LOCK_POOL_ARENA,     /* zsw_pool->arena_lock */
        ZSW_LOCK_POOL_TABLE,     /* zsw_pool->table_lock */
        ZSW_LOCK_SWAPFILE_WRITE, /* zsw_swapfile->write_lock */
        ZSW_LOCK_SWAPFILE_READ,  /* zsw_swapfile->read_lock */
        ZSW_LOCK_SWAPFILE_ALLOC, /* zsw_swapfile->alloc_lock */
        ZSW_LOCK_WRITEBACK,      /* zsw_writeback->lock */
        ZSW_LOCK_PARALLEL,       /* zsw_parallel->lock */
        ZSW_LOCK_HEAT,           /* zsw_heat->lock */
        ZSW_LOCK_DICT_SAMPLE,    /* lru->sample_lock (store.c) */
        _ZSW_LOCK_RANK_MAX,
};

#ifndef ZSW_LOCKDEP
#define ZSW_LOCKDEP 0
#endif

#if ZSW_LOCKDEP

/* Checks that rank may be taken now (aborts if not) and records lock as
 * held; `check` false for a trylock. */
void zsw_lockdep_acquire(const void *lock, enum zsw_lock_rank rank, bool check, const char *name,
                         const char *file, int line);
/* Forgets lock; aborts if this thread does not hold it. */
void zsw_lockdep_release(const void *lock, const char *file, int line);

static inline void zsw_mutex_lock_at(pthread_mutex_t *m, enum zsw_lock_rank rank, const char *name,
                                     const char *file, int line) {
        zsw_lockdep_acquire(m, rank, true, name, file, line);
        pthread_mutex_lock(m);
}

static inline int zsw_mutex_trylock_at(pthread_mutex_t *m, enum zsw_lock_rank rank,
                                       const char *name, const char *file, int line) {
        int r = pthread_mutex_trylock(m);

        if (r == 0)
                zsw_lockdep_acquire(m, rank, false, name, file, line);
        return r;
}

static inline void zsw_mutex_unlock_at(pthread_mutex_t *m, const char *file, int line) {
        zsw_lockdep_release(m, file, line);
        pthread_mutex_unlock(m);
}

static inline void zsw_rwlock_rdlock_at(pthread_rwlock_t *l, enum zsw_lock_rank rank,
                                        const char *name, const char *file, int line) {
        zsw_lockdep_acquire(l, rank, true, name, file, line);
        pthread_rwlock_rdlock(l);
}

static inline void zsw_rwlock_wrlock_at(pthread_rwlock_t *l, enum zsw_lock_rank rank,
                                        const char *name, const char *file, int line) {
        zsw_lockdep_acquire(l, rank, true, name, file, line);
        pthread_rwlock_wrlock(l);
}

static inline void zsw_rwlock_unlock_at(pthread_rwlock_t *l, const char *file, int line) {
        zsw_lockdep_release(l, file, line);
        pthread_rwlock_unlock(l);
}

#define zsw_mutex_lock(m, rank) zsw_mutex_lock_at((m), (rank), #m, __FILE__, __LINE__)
#define zsw_mutex_trylock(m, rank) zsw_mutex_trylock_at((m), (rank), #m, __FILE__, __LINE__)
#define zsw_mutex_unlock(m) zsw_mutex_unlock_at((m), __FILE__, __LINE__)
#define zsw_rwlock_rdlock(l, rank) zsw_rwlock_rdlock_at((l), (rank), #l, __FILE__, __LINE__)
#define zsw_rwlock_wrlock(l, rank) zsw_rwlock_wrlock_at((l), (rank), #l, __FILE__, __LINE__)
#define zsw_rwlock_unlock(l) zsw_rwlock_unlock_at((l), __FILE__, __LINE__)

#else

#define zsw_mutex_lock(m, rank) ((void) (rank), pthread_mutex_lock(m))
#define zsw_mutex_trylock(m, rank) ((void) (rank), pthread_mutex_trylock(m))
#define zsw_mutex_unlock(m) pthread_mutex_unlock(m)
#define zsw_rwlock_rdlock(l, rank) ((void) (rank), pthread_rwlock_rdlock(l))
#define zsw_rwlock_wrlock(l, rank) ((void) (rank), pthread_rwlock_wrlock(l))
#define zsw_rwlock_unlock(l) pthread_rwlock_unlock(l)

#endif
