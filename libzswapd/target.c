/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The target: one process the engine serves (target-internal.h). Its
 * making and freeing, its settings, its figures for stats and the backoff
 * of reclaims that could not stop it. Publishing it (fault threads, the
 * reaper, the target list) is the engine's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hold.h"
#include "remote.h"
#include "target-internal.h"

/* A target that could not be stopped for a reclaim is not tried again for
 * 10 s, then 20, 40 ... up to 10 min: each try costs the caller (a policy's
 * reclaim worker) ZSW_REMOTE_STOP_TIMEOUT_MS of waiting. */
#define STUCK_BACKOFF_MIN_S 10u
#define STUCK_BACKOFF_MAX_S 600u

struct zsw_target *target_new(pid_t pid, const struct zsw_log *log) {
        struct zsw_target *t = calloc(1, sizeof(*t));

        if (!t)
                return NULL;
        t->log = log;
        t->pid = pid;
        t->attached_at_ns = zsw_now_ns();
        t->pidfd = t->uffd = t->target_uffd = -EBADF;
        pthread_mutex_init(&t->serve_lock, NULL);
        pthread_mutex_init(&t->evict_lock, NULL);
        pthread_mutex_init(&t->batch_lock, NULL);
        {
                pthread_rwlockattr_t a;

                /* A move waits for the stores in flight, not for every
                 * store still to come. */
                pthread_rwlockattr_init(&a);
                pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
                pthread_rwlock_init(&t->round_store_lock, &a);
                pthread_rwlockattr_destroy(&a);
        }
        pthread_mutex_init(&t->age_stats_lock, NULL);
        if (zsw_heat_new(&t->heat) < 0) {
                target_free(t);
                return NULL;
        }
        return t;
}

struct zsw_target *target_free(struct zsw_target *t) {
        if (!t)
                return NULL;
        zsw_store_owner_free(t->owner);
        zsw_age_free(t->age);
        zsw_heat_free(t->heat);
        free(t->reg_ranges);
        hold_free(atomic_load(&t->hold));
        safe_close(t->uffd);
        safe_close(t->pidfd);
        pthread_mutex_destroy(&t->serve_lock);
        pthread_mutex_destroy(&t->evict_lock);
        pthread_mutex_destroy(&t->batch_lock);
        pthread_rwlock_destroy(&t->round_store_lock);
        pthread_mutex_destroy(&t->age_stats_lock);
        free(t);
        return NULL;
}

int target_configure(struct zsw_target *t, const struct target_defaults *d,
                     const struct zsw_target_config *tc) {
        int c = (int) d->compressor, level = d->compression_level;

        t->prefetch_window = MIN(d->prefetch_window, FAULT_PREFETCH_MAX);
        t->prefetch_now = t->prefetch_window;
        t->zero_window = MIN(d->zero_window, ZSW_ZERO_WINDOW_MAX);
        if (tc) {
                if (tc->compressor) {
                        c = zsw_compressor_from_string(tc->compressor);
                        if (c < 0)
                                return -EINVAL;
                        if (c != (int) d->compressor)
                                level = 0;
                }
                if (tc->compression_level != 0)
                        level = tc->compression_level;
                t->prefetch_window = MIN(tc->prefetch_window, FAULT_PREFETCH_MAX);
                t->prefetch_now = t->prefetch_window;
                t->zero_window = MIN(tc->zero_window, ZSW_ZERO_WINDOW_MAX);
                t->owner_config.max_pages =
                        tc->max_pool_bytes ? MAX(tc->max_pool_bytes / ZSW_PAGE_SIZE, 1u) : 0;
                t->owner_config.no_writeback = tc->no_writeback;
                target_set_label(t, tc->label);
        }
        level = zsw_compress_level((enum zsw_compressor) c, level);
        if (level < 0)
                return level;
        t->owner_config.compressor = (enum zsw_compressor) c;
        t->owner_config.level = level;
        return 0;
}

void target_fill_stats(struct zsw_target *t, struct zsw_store *store, struct zsw_target_stats *s) {
        struct target_hold *hold = atomic_load(&t->hold);
        struct zsw_store_stats os, gs;
        unsigned prefetch_now, held_now;
        char path[64];
        unsigned long long size, resident;
        FILE *f;

        /* Events the target has seen through (its munmap returned) may be
         * read but not yet handled: wait for them, so that what we report
         * matches what the target did. */
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        zsw_store_owner_get_stats(t->owner, &os);
        prefetch_now = t->prefetch_now;
        held_now = hold ? hold->n_parked : 0;
        zsw_mutex_unlock(&t->serve_lock);
        zsw_store_get_stats(store, &gs);
        *s = (struct zsw_target_stats) {
                .pid = t->pid,
                .stored_pages = os.stored_pages,
                .payload_bytes = os.payload_bytes,
                .pool_bytes = gs.payload_bytes ? (uint64_t) ((double) gs.pool_bytes *
                                                             os.payload_bytes / gs.payload_bytes)
                                               : 0,
                .same_filled_pages = os.same_filled_pages,
                .lost_pages = os.lost_pages,
                .dict_bytes = os.dict_bytes,
                .evicted_pages = atomic_load(&t->evicted),
                .evict_aborted = atomic_load(&t->evict_aborted),
                .faults = atomic_load(&t->faults),
                .zero_faults = atomic_load(&t->zero_faults),
                .zero_ahead_pages = atomic_load(&t->zero_ahead),
                .throttled_faults = atomic_load(&t->throttled_faults),
                .throttled = atomic_load(&t->throttle),
                .hold_limit_bytes = hold ? atomic_load(&hold->limit_bytes) : 0,
                .held_faults = hold ? atomic_load(&hold->held) : 0,
                .held_now = held_now,
                .hold_timeouts = hold ? atomic_load(&hold->timeouts) : 0,
                .held_ns = hold ? atomic_load(&hold->held_ns) : 0,
                .refaults = atomic_load(&t->refaults),
                .wp_faults = atomic_load(&t->wp_faults),
                .prefetched_pages = atomic_load(&t->prefetched),
                .prefetch_hits = atomic_load(&t->prefetch_hits),
                .fault_ns_p50 = zsw_histogram_percentile(&t->fault_hist, 0.50),
                .fault_ns_p95 = zsw_histogram_percentile(&t->fault_hist, 0.95),
                .fault_ns_p99 = zsw_histogram_percentile(&t->fault_hist, 0.99),
                .stops = atomic_load(&t->stops),
                .stopped_ns = atomic_load(&t->stopped_ns),
                .stop_ns_max = atomic_load(&t->stop_ns_max),
                .stops_over_5ms = atomic_load(&t->stops_long),
                .remove_events = atomic_load(&t->remove_events),
                .attached_ns = zsw_now_ns() - t->attached_at_ns,
                .heat_uses = zsw_heat_touched(t->heat),
                .heat_table_bytes = zsw_heat_bytes(t->heat),
                .written_back_pages = os.written_back,
                .disk_pages = os.disk_pages,
                .disk_bytes = os.disk_bytes,
                .disk_reads = os.disk_reads,
                .refused_limit = os.rejects[ZSW_REJECT_LIMIT],
                .refused_pool_limit = os.rejects[ZSW_REJECT_POOL_LIMIT],
                .refused_writeback_off = os.rejects[ZSW_REJECT_WRITEBACK_OFF],
                .refused_reclaim_fail = os.rejects[ZSW_REJECT_RECLAIM_FAIL],
                .compressor = zsw_compressor_to_string(t->owner_config.compressor),
                .compression_level = t->owner_config.level,
                .prefetch_window = t->prefetch_window,
                .prefetch_window_now = prefetch_now,
                .zero_window = t->zero_window,
                .max_pool_bytes = t->owner_config.max_pages * ZSW_PAGE_SIZE,
                .no_writeback = t->owner_config.no_writeback,
        };
        /* A percentile is its bucket's midpoint, which may lie above the
         * longest stop itself. */
        s->stop_ns_p50 = MIN(zsw_histogram_percentile(&t->stop_hist, 0.50), s->stop_ns_max);
        s->stop_ns_p99 = MIN(zsw_histogram_percentile(&t->stop_hist, 0.99), s->stop_ns_max);
        zsw_mutex_lock(&t->age_stats_lock, ZSW_LOCK_AGE_STATS);
        s->age_scans = t->age_scans;
        s->age_present_pages = t->age_last.present_pages;
        s->age_idle_pages = t->age_last.idle_pages;
        s->age_protected_pages = t->age_last.protected_pages;
        s->age_table_bytes = t->age_last.table_bytes;
        s->age_scan_ns_last = t->age_last.duration_ns;
        s->age_scan_ns_total = t->age_scan_ns;
        s->age_unprotected_pages = t->age_last.unprotected_pages;
        zsw_mutex_unlock(&t->age_stats_lock);
        s->age_wp_faults = atomic_load(&t->age_wp_faults);
        s->age_wp_fault_ns = atomic_load(&t->age_wp_fault_ns);
        s->age_cost_ns =
                zsw_age_cost_ns(&(struct zsw_age_cost) { s->age_wp_faults, s->age_wp_fault_ns });
        snprintf(path, sizeof(path), "/proc/%d/statm", t->pid);
        f = t->pid > 0 ? fopen(path, "re") : NULL;
        if (f) {
                if (fscanf(f, "%llu %llu", &size, &resident) == 2)
                        s->resident_bytes = resident * (uint64_t) ZSW_PAGE_SIZE;
                fclose(f);
        }
}

void target_note_reclaim(struct zsw_target *t, int r) {
        if (r != -ETIMEDOUT) {
                if (r >= 0)
                        t->stuck_backoff_s = 0;
                return;
        }
        t->stuck_backoff_s = t->stuck_backoff_s ? MIN(t->stuck_backoff_s * 2, STUCK_BACKOFF_MAX_S)
                                                : STUCK_BACKOFF_MIN_S;
        t->stuck_retry_ns = zsw_now_ns() + t->stuck_backoff_s * 1000000000ull;
        if (zsw_remote_describe_stuck(t->pid, t->stuck_why, sizeof(t->stuck_why)) < 0)
                snprintf(t->stuck_why, sizeof(t->stuck_why), "no thread of it looks stuck now");
}

void target_set_label(struct zsw_target *t, const char *label) {
        snprintf(t->label, sizeof(t->label), "%s", label ?: "");
}

int target_maps_hash(struct zsw_target *t, uint64_t *ret) {
        _cleanup_close_ int fd = -EBADF;
        uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
        char path[32], buf[4096];
        ssize_t n;

        if (t->pid <= 0)
                return -ESRCH;
        snprintf(path, sizeof(path), "/proc/%d/maps", t->pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
                for (ssize_t i = 0; i < n; i++)
                        h = (h ^ (uint8_t) buf[i]) * UINT64_C(0x100000001b3);
        if (n < 0)
                return -errno;
        *ret = h;
        return 0;
}

int target_read_vmas(struct zsw_target *t, struct zsw_vma_list *ret) {
        _cleanup_close_ int dir = -EBADF;
        char path[32];

        if (t->pid <= 0)
                return -ESRCH;
        snprintf(path, sizeof(path), "/proc/%d", t->pid);
        dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
                return -errno;
        return zsw_vma_list_read(dir, "smaps", t->log, ret);
}
