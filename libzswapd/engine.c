/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine: its making and freeing, and the control calls that act on
 * an attached target (reclaim, age scan, throttle). Its other parts:
 * engine-attach.c (attach, detach), engine-fork.c (fork children),
 * engine-reaper.c (the reaper thread), engine-stats.c (limits,
 * statistics), all on engine-targets.c (the target table). The target
 * object is in target.c, eviction in evict.c, fault service in fault.c;
 * none of them calls back here. Lock order: engine-internal.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine-internal.h"
#include "hold.h"
#include "parallel.h"
#include "uffd.h"
#include "writeback.h"

int zsw_engine_reclaim(struct zsw_engine *e, pid_t pid, uint64_t max_bytes,
                       struct zsw_reclaim_result *ret, struct zsw_engine_error *err) {
        return zsw_engine_reclaim_cold(
                e, pid, &(struct zsw_reclaim_request) { .max_bytes = max_bytes }, ret, err);
}

/* A round that could not stop the target was given up and rolled back
 * (evict.c): say why, and hold off the next tries (target_note_reclaim()). */
static void reclaim_note_stuck(struct zsw_target *t, int r, struct zsw_engine_error *err) {
        struct zsw_engine_error e2 = {};

        target_note_reclaim(t, r);
        if (r != -ETIMEDOUT)
                return;
        snprintf(e2.message, sizeof(e2.message),
                 "the round in progress was undone; next try in "
                 "%u s",
                 t->stuck_backoff_s);
        (void) engine_fail_stuck(err, t->pid, e2.message);
}

int zsw_engine_reclaim_cold(struct zsw_engine *e, pid_t pid, const struct zsw_reclaim_request *req,
                            struct zsw_reclaim_result *ret, struct zsw_engine_error *err) {
        struct zsw_reclaim_result res = {};
        uint64_t start = zsw_now_ns();
        struct zsw_target *t;
        bool scan_due;
        int r;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (!t) {
                zsw_mutex_unlock(&e->control_lock);
                return engine_fail(err, -ENOENT, "process %d is not attached; attach it first",
                                   pid);
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
                r = engine_fail(err, -ETIMEDOUT,
                                "process %d could not be stopped at the last try (%s); "
                                "next try in %" PRIu64 " s",
                                pid, t->stuck_why,
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

/* The target of pid with its evict_lock held, which keeps it alive
 * without control_lock (detach and the reaper take it before freeing a
 * target); NULL if pid is not attached. */
static struct zsw_target *lock_for_evict(struct zsw_engine *e, pid_t pid) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (t)
                zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
        zsw_mutex_unlock(&e->control_lock);
        return t;
}

int zsw_engine_age_scan(struct zsw_engine *e, pid_t pid, struct zsw_engine_error *err) {
        struct zsw_target *t = lock_for_evict(e, pid);
        int r;

        if (!t)
                return engine_fail(err, -ENOENT, "process %d is not attached; attach it first",
                                   pid);
        r = evict_age_scan(&e->evict, t);
        zsw_mutex_unlock(&t->evict_lock);
        return r < 0 ? engine_fail(err, r, "age scan of process %d failed: %s", pid, strerror(-r))
                     : 0;
}

int zsw_engine_register(struct zsw_engine *e, pid_t pid) {
        struct zsw_target *t = lock_for_evict(e, pid);
        int r;

        if (!t)
                return -ENOENT;
        r = evict_register_ranges(&e->evict, t, NULL, NULL, NULL);
        zsw_mutex_unlock(&t->evict_lock);
        return r;
}

int zsw_engine_set_throttle(struct zsw_engine *e, pid_t pid, bool on) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (t)
                atomic_store_explicit(&t->throttle, on, memory_order_relaxed);
        zsw_mutex_unlock(&e->control_lock);
        return t ? 0 : -ENOENT;
}

int zsw_engine_set_label(struct zsw_engine *e, pid_t pid, const char *label) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (t)
                target_set_label(t, label);
        zsw_mutex_unlock(&e->control_lock);
        return t ? 0 : -ENOENT;
}

int zsw_engine_set_hold(struct zsw_engine *e, pid_t pid, int memory_dir_fd, uint64_t limit_bytes) {
        struct target_hold *h = NULL;
        struct zsw_target *t;
        int r = 0;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (!t)
                r = -ENOENT;
        else if (limit_bytes == 0)
                hold_stop(t);
        else {
                if (!atomic_load(&t->hold)) {
                        r = hold_new(memory_dir_fd, &h);
                        if (r >= 0)
                                r = fault_threads_add_hold(e->faults, t, h);
                        if (r < 0)
                                hold_free(h);
                }
                if (r >= 0)
                        hold_set_limit(t, limit_bytes);
        }
        zsw_mutex_unlock(&e->control_lock);
        return r;
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
                return zsw_log_errno(e->log, LOG_ERR, r, "Failed to open the swapfile %s: %m",
                                     path);
        sc->read_disk = zsw_writeback_read_disk;
        sc->read_disk_batch = zsw_writeback_read_disk_batch;
        sc->free_disk = zsw_writeback_free_disk;
        sc->disk_userdata = e->swapfile;
        return 0;
}

int engine_writeback_start(struct zsw_engine *e) {
        const struct zsw_engine_config *c = &e->config;

        if (!e->swapfile)
                return zsw_store_set_limits(e->store,
                                            &(struct zsw_store_limits) {
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
        struct zsw_engine *e;
        int r;

        /* Pages are ZSW_PAGE_SIZE bytes in every part of the engine, its
         * buffers and uffd copies, and for the daemon. */
        if (sysconf(_SC_PAGESIZE) != ZSW_PAGE_SIZE)
                return zsw_log_errno(config->log, LOG_ERR, -EOPNOTSUPP,
                                     "This machine's pages are "
                                     "%ld bytes; zswapd runs only where they are %u bytes",
                                     sysconf(_SC_PAGESIZE), ZSW_PAGE_SIZE);
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->config = *config;
        e->log = e->evict.log = config->log;
        e->evict.age_cost_percent = config->age_cost_percent ?: ZSW_ENGINE_AGE_COST_PERCENT_DEFAULT;
        if (config->age_interval_ms != UINT32_MAX)
                e->age_interval_ns =
                        (uint64_t) (config->age_interval_ms ?: ZSW_ENGINE_AGE_INTERVAL_DEFAULT_MS) *
                        1000000;
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
        sc.no_dict = config->no_dictionaries;
        sc.log = config->log;
        r = writeback_open(e, &sc);
        if (r >= 0)
                r = zsw_store_new(&sc, &e->store);
        if (r >= 0)
                r = engine_writeback_start(e);
        if (r >= 0)
                r = zsw_worker_new(e->store, &e->worker);
        if (r >= 0) {
                long cpus = sysconf(_SC_NPROCESSORS_ONLN);

                e->evict.worker = e->worker;
                r = zsw_parallel_new(e->store, cpus > 1 ? (unsigned) cpus - 1 : 0,
                                     &e->evict.evict_pool);
        }
        if (r >= 0)
                r = engine_reaper_open(e);
        if (r >= 0)
                r = fault_threads_start(e->store, config->fault_threads, e->log,
                                        &(struct fault_events) {
                                                .fork_child = engine_add_fork_child,
                                                .dead = engine_mark_dead,
                                                .userdata = e,
                                        },
                                        &e->faults);
        if (r >= 0)
                r = engine_reaper_start(e);
        if (r < 0) {
                zsw_engine_free(e);
                return r;
        }
        *ret = e;
        return 0;
}

int zsw_engine_add_kept_uffd(struct zsw_engine *e, pid_t keeper, int number, int fd) {
        struct kept_uffd *v;

        if (keeper <= 0 || number < 0 || fd < 0)
                return -EINVAL;
        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        v = reallocarray(e->kept, e->n_kept + 1, sizeof(*v));
        if (v) {
                e->kept = v;
                v[e->n_kept++] = (struct kept_uffd) { keeper, number, fd };
        }
        zsw_mutex_unlock(&e->control_lock);
        return v ? 0 : -ENOMEM;
}

unsigned zsw_engine_drop_kept_uffds(struct zsw_engine *e, zsw_engine_kept_fn fn, void *userdata) {
        unsigned n = 0;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        for (size_t i = 0; i < e->n_kept; i++) {
                if (fn)
                        fn(userdata, e->kept[i].keeper, e->kept[i].number, e->kept[i].fd < 0);
                if (e->kept[i].fd >= 0) {
                        safe_close(e->kept[i].fd);
                        n++;
                }
        }
        free(e->kept);
        e->kept = NULL;
        e->n_kept = 0;
        zsw_mutex_unlock(&e->control_lock);
        return n;
}

struct zsw_engine *zsw_engine_free(struct zsw_engine *e) {
        unsigned held = 0;

        if (!e)
                return NULL;
        engine_reaper_stop(e);
        /* Every page goes back before anything is freed; a live target
         * whose pages cannot all go back keeps the engine alive. */
        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        for (struct zsw_target *t = e->targets, *next; t; t = next) {
                struct zsw_engine_error err = {};
                struct zsw_store_stats os;

                next = t->next;
                if (atomic_load(&t->dead) || zsw_uffd_mm_alive(t->uffd) == -ESRCH) {
                        engine_unpublish(e, t);
                        target_free(t);
                } else if (engine_detach_locked(e, t, &err) < 0) {
                        zsw_store_owner_get_stats(t->owner, &os);
                        zsw_log(e->log, LOG_ERR,
                                "Not freeing the engine: %s (%" PRIu64 " pages "
                                "have no other copy); its fault threads go on serving it until "
                                "this process exits",
                                err.message, os.stored_pages);
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
        (void) zsw_engine_drop_kept_uffds(e, NULL, NULL);
        safe_close(e->reaper_epfd);
        safe_close(e->reaper_stop_fd);
        pthread_mutex_destroy(&e->control_lock);
        pthread_mutex_destroy(&e->table_lock);
        pthread_mutex_destroy(&e->worker_lock);
        free(e);
        return NULL;
}
