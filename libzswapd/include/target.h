/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A target (a process the engine is attached to) as the engine's callers
 * see it: the settings it may have of its own, what a reclaim of it did,
 * and its figures. The engine's calls that take and give these are in
 * engine.h; the target object itself is private (target-internal.h).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define ZSW_ZERO_WINDOW_MAX 511u

/* What one target may have of its own (a policy's settings). Fork children
 * the engine follows inherit their parent's. */
struct zsw_target_config {
        const char *compressor;   /* "lz4" or "zstd"; NULL: the engine's */
        int compression_level;    /* 0: the engine's for its own compressor,
                                   * else that compressor's default */
        unsigned prefetch_window; /* pages brought back around a fault, 0 = off */
        /* A first touch of a page we never took is zero-filled together
         * with up to this many pages after it (0: that page alone; at
         * most ZSW_ZERO_WINDOW_MAX, and never past the end of its 2 MiB
         * region or a page we hold): the shared zero page costs no memory,
         * and the target's later write to one of them is the kernel's own
         * copy-on-write fault (1-10 us) instead of a round trip through a
         * fault thread (50-100 us). */
        unsigned zero_window;
        /* Bytes of pages the target may keep in the pool (neither
         * same-filled nor written back), 0 for no limit of its own;
         * counted in whole pages, at least one. At it, its coldest pages
         * are written back, or with no_writeback its stores are refused
         * (counted in refused_limit / refused_writeback_off). */
        uint64_t max_pool_bytes;
        bool no_writeback; /* never write its pages to the swapfile */
        /* Its name in a state a re-exec or a dead zswapd leaves (a
         * policy's), NULL for none: zsw_engine_set_label(). */
        const char *label;
};
/* A label's bytes with its NUL: longer ones are cut. */
#define ZSW_ENGINE_LABEL_MAX 64u

struct zsw_reclaim_result {
        uint64_t scanned_pages; /* present pages considered */
        uint64_t evicted_pages; /* dropped from the target, now in the store */
        uint64_t aborted_pages; /* eviction cancelled by a racing write */
        uint64_t refused_pages; /* the store refused them (limits, incompressible) */
        uint64_t cold_pages;    /* old enough at the last age scan (with a minimum age) */
        uint64_t duration_ns;
};

struct zsw_target_stats {
        pid_t pid;
        uint64_t resident_bytes; /* VmRSS of the target now */
        uint64_t stored_pages;
        uint64_t payload_bytes;
        uint64_t pool_bytes; /* share of the pool, by payload */
        uint64_t dict_bytes; /* its fork family's compression dictionary, 0 for none yet */
        uint64_t same_filled_pages;
        uint64_t lost_pages;    /* lost with a dead zswapd's disk: a touch is SIGBUS */
        uint64_t evicted_pages; /* total over the target's life */
        uint64_t evict_aborted;
        uint64_t faults;
        uint64_t zero_faults;      /* faults on pages never taken */
        uint64_t zero_ahead_pages; /* zero-filled after such a fault (zero_window) */
        uint64_t throttled_faults; /* zero faults while throttled (zsw_engine_set_throttle()) */
        bool throttled;
        /* The first-touch hold (zsw_engine_set_hold()): its limit (0: off),
         * the faults it held, how many of them are held now, the ones let
         * go at the 100 ms bound instead of for room, and the time they
         * waited in all. */
        uint64_t hold_limit_bytes;
        uint64_t held_faults;
        uint64_t held_now;
        uint64_t hold_timeouts;
        uint64_t held_ns;
        uint64_t refaults;  /* faults that brought back a page we had taken */
        uint64_t wp_faults; /* writes to pages protected by age scans or rounds */
        uint64_t prefetched_pages;
        uint64_t prefetch_hits;
        uint64_t fault_ns_p50, fault_ns_p95, fault_ns_p99;
        /* Ptrace stops of every thread of the target by eviction drops:
         * how many, their total and longest time (first thread interrupted
         * to last let go), against the time it has been attached; their
         * median and 99th percentile (within 12.5%, never above the
         * longest), and how many lasted over 5 ms. */
        uint64_t stops;
        uint64_t stopped_ns;
        uint64_t stop_ns_max;
        uint64_t stop_ns_p50, stop_ns_p99;
        uint64_t stops_over_5ms;
        /* UFFD_EVENT_REMOVE events, each a round trip its madvise waited
         * for: its own MADV_DONTNEED/FREE of registered memory (and our
         * drops' where the kernel lacks guard regions). */
        uint64_t remove_events;
        uint64_t attached_ns;
        /* Uses seen (refaults, writes that cancelled an eviction) that
         * order eviction without a minimum age, and their table's memory. */
        uint64_t heat_uses;
        uint64_t heat_table_bytes;
        /* Writeback tier: the target's share (per fork family for disk). */
        uint64_t written_back_pages;
        uint64_t disk_pages;
        uint64_t disk_bytes; /* payload bytes on disk */
        uint64_t disk_reads;
        uint64_t refused_limit; /* its own limit */
        uint64_t refused_pool_limit;
        uint64_t refused_writeback_off;
        uint64_t refused_reclaim_fail;
        /* Its settings (struct zsw_target_config, as applied). */
        const char *compressor; /* static string */
        int compression_level;  /* as resolved (compress.h) */
        unsigned prefetch_window;
        unsigned prefetch_window_now; /* as recent prefetches paid */
        unsigned zero_window;
        uint64_t max_pool_bytes; /* whole pages */
        bool no_writeback;
        /* Page ages, as the last age scan found them. */
        uint64_t age_scans;
        uint64_t age_present_pages;   /* resident pages (the zero page left out) */
        uint64_t age_idle_pages;      /* of those, unused since the scan before */
        uint64_t age_protected_pages; /* write-protected again by the last scan */
        uint64_t age_table_bytes;     /* memory of the target's age table */
        uint64_t age_scan_ns_last;    /* cost of the last scan */
        uint64_t age_scan_ns_total;
        uint64_t age_unprotected_pages; /* written pages the last scan left unprotected
                                         * (backoff of hot pages, or the budget) */
        /* What age scans cost the target itself (they never stop it):
         * WP faults on pages they protected, the faults' service time as
         * the fault threads measured it, and with the part of each round
         * trip they cannot time added (an estimate; age scans keep it
         * below 1% of attached_ns). */
        uint64_t age_wp_faults;
        uint64_t age_wp_fault_ns;
        uint64_t age_cost_ns;
};
