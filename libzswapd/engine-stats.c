/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the engine tells about itself: its limits (fixed when it is made,
 * so read without a lock), and statistics, the engine's (every target's
 * counters and fault latencies merged, the store's and the writeback
 * tier's figures) and one target's (target_fill_stats()).
 */
#include <errno.h>

#include "engine-internal.h"
#include "writeback.h"

int zsw_engine_get_limits(struct zsw_engine *e, struct zsw_engine_limits *ret) {
        *ret = (struct zsw_engine_limits) {
                .pool_limit_bytes = e->config.pool_limit_bytes,
                .swapfile_max_bytes = !e->swapfile ? 0 :
                                      e->config.swapfile_max_bytes ?: ZSW_ENGINE_SWAPFILE_DEFAULT,
        };
        return 0;
}

int zsw_engine_get_target_stats(struct zsw_engine *e, pid_t pid, struct zsw_target_stats *ret) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        t = engine_find_target(e, pid);
        if (t)
                target_fill_stats(t, e->store, ret);
        zsw_mutex_unlock(&e->control_lock);
        return t ? 0 : -ENOENT;
}

static void writeback_fill_stats(struct zsw_engine *e, const struct zsw_store_stats *gs,
                                 struct zsw_engine_stats *s) {
        struct zsw_writeback_stats ws = {};

        if (e->writeback)
                zsw_writeback_get_stats(e->writeback, &ws);
        s->pool_limit_bytes = e->config.pool_limit_bytes;
        s->pool_limit_hit = gs->pool_limit_hit;
        s->refused_limit = gs->rejects[ZSW_REJECT_LIMIT];
        s->refused_pool_limit = gs->rejects[ZSW_REJECT_POOL_LIMIT];
        s->refused_writeback_off = gs->rejects[ZSW_REJECT_WRITEBACK_OFF];
        s->refused_reclaim_fail = gs->rejects[ZSW_REJECT_RECLAIM_FAIL];
        s->shrink_wakeups = ws.wakeups;
        s->shrink_steps = ws.steps;
        s->written_back_pages = ws.written_back;
        s->write_requests = ws.write_requests;
        s->bytes_written = ws.bytes_written;
        s->write_failures = ws.write_failures;
        s->disk_reads = gs->disk_reads;
        s->disk_pages = gs->disk_pages;
        s->disk_bytes_in_use = ws.disk_bytes_in_use;
}

int zsw_engine_get_stats(struct zsw_engine *e, struct zsw_engine_stats *ret) {
        struct zsw_histogram all = {};
        struct zsw_store_stats gs;
        struct zsw_engine_stats s = {};

        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        zsw_store_get_stats(e->store, &gs);
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target *t = e->targets; t; t = t->next) {
                s.targets++;
                s.faults += atomic_load(&t->faults);
                s.refaults += atomic_load(&t->refaults);
                s.wp_faults += atomic_load(&t->wp_faults);
                zsw_mutex_lock(&t->age_stats_lock, ZSW_LOCK_AGE_STATS);
                s.age_scan_ns_total += t->age_scan_ns;
                zsw_mutex_unlock(&t->age_stats_lock);
                s.evicted_pages += atomic_load(&t->evicted);
                s.evict_aborted += atomic_load(&t->evict_aborted);
                s.stops += atomic_load(&t->stops);
                s.stopped_ns += atomic_load(&t->stopped_ns);
                zsw_histogram_merge(&all, &t->fault_hist);
        }
        zsw_mutex_unlock(&e->table_lock);
        zsw_mutex_unlock(&e->control_lock);
        s.stored_pages = gs.stored_pages;
        s.payload_bytes = gs.payload_bytes;
        s.pool_bytes = gs.pool_bytes;
        s.pool_used_bytes = gs.pool_used_bytes;
        s.pool_cached_bytes = gs.pool_cached_bytes;
        s.pool_compacted_objects = gs.pool_compacted_objects;
        s.pool_compacted_bytes = gs.pool_compacted_bytes;
        s.meta_bytes = gs.meta_bytes;
        s.dict_bytes = gs.dict_bytes;
        s.same_filled_pages = gs.same_filled_pages;
        s.lost_pages = gs.lost_pages;
        s.incompressible_pages = gs.incompressible_pages;
        s.fault_ns_p50 = zsw_histogram_percentile(&all, 0.50);
        s.fault_ns_p95 = zsw_histogram_percentile(&all, 0.95);
        s.fault_ns_p99 = zsw_histogram_percentile(&all, 0.99);
        writeback_fill_stats(e, &gs, &s);
        *ret = s;
        return 0;
}

size_t zsw_engine_list_targets(struct zsw_engine *e, pid_t *pids, size_t n) {
        size_t i = 0;

        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (struct zsw_target *t = e->targets; t; t = t->next, i++)
                if (i < n)
                        pids[i] = t->pid;
        zsw_mutex_unlock(&e->table_lock);
        return i;
}
