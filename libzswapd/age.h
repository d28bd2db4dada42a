/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page ages: how long each present page of a target has gone unused, so
 * that eviction takes cold pages first and leaves recently used ones.
 *
 * This kernel offers no per-page accessed bit to user space (no
 * /sys/kernel/mm/page_idle, no MGLRU, no soft-dirty; pagemap and
 * kpageflags carry no young bit), so use is measured through what the
 * engine's userfaultfd already has: write protection. An age scan asks
 * PAGEMAP_SCAN which present pages are still write-protected
 * (PAGE_IS_WRITTEN clear): those were neither written nor brought back
 * by a fault since the scan that protected them, and age by one scan;
 * the others are young again and are protected anew. Reads are not seen:
 * a page only read is taken once it is old enough and, if it is read
 * again, comes back by a fault, young, and is not taken again before it
 * has aged twice the minimum (see docs/design.md).
 *
 * Ages are kept per page in a byte, in chunks of 512 pages (2 MiB of
 * address space) that exist only where the last scan found present
 * pages: about one byte per resident page, at worst 528 bytes per chunk.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vma.h"

/* The oldest age a page reaches, in scans. */
#define ZSW_AGE_MAX 63u
/* zsw_age_threshold(): no page can be old enough yet. */
#define ZSW_AGE_NEVER UINT32_MAX

struct zsw_age;

/* The WP faults a target took on pages that age scans protected, and
 * their service time as the fault threads measure it (from reading the
 * fault to letting the write through), since it was attached. */
struct zsw_age_cost {
        uint64_t wp_faults;
        uint64_t wp_fault_ns;
        /* The most of the target's time they may cost it (age.c says
         * how), 1-99. */
        uint32_t percent;
};

struct zsw_age_scan_stats {
        uint64_t present_pages;     /* resident pages seen (the zero page left out) */
        uint64_t idle_pages;        /* of those, untouched since the scan before */
        uint64_t protected_pages;   /* write-protected again by this scan */
        uint64_t unprotected_pages; /* found written and left unprotected: the
                                         * backoff of hot pages or the budget */
        uint64_t rearm_floor;       /* the least backoff level of hot pages */
        uint64_t protect_failures;  /* runs left unprotected (they stay young) */
        uint64_t table_bytes;       /* memory of the age table after it */
        uint64_t duration_ns;
};

int zsw_age_new(struct zsw_age **ret);
struct zsw_age *zsw_age_free(struct zsw_age *a);

/* Scans ranges (sorted, disjoint; the target's registered ranges) of the
 * target whose /proc/PID/pagemap is pagemap_fd and whose userfaultfd,
 * registered for WP, is uffd: ages the pages that stayed write-protected,
 * makes the others young and write-protects them again, as far as the
 * backoff of hot pages and the budget let it. cost: the target's WP
 * faults on pages the scans protected so far, for the budget (NULL: no
 * budget). Returns 0, or a negative errno (-ESRCH: the target is gone);
 * after a failure the table starts afresh, every page young. */
int zsw_age_scan(struct zsw_age *a, int pagemap_fd, int uffd, const struct zsw_range *ranges,
                 size_t n_ranges, const struct zsw_age_cost *cost, struct zsw_age_scan_stats *ret);

/* What those faults cost the target: their service time, and the part of
 * each round trip the fault threads cannot time (an estimate). */
uint64_t zsw_age_cost_ns(const struct zsw_age_cost *c);

/* Marks pages (page numbers) that came back by a fault after we took
 * them: while they stay, they count half their age, so they must go
 * unused twice as long before they are taken again. Call after a scan;
 * pages the last scan did not find present are left alone. */
void zsw_age_note_refaults(struct zsw_age *a, const uint64_t *pgnos, size_t n);

/* The age, in scans, that a page must have to have gone unused for
 * min_age_ns at now_ns: 0 for min_age_ns == 0 (any page), ZSW_AGE_NEVER
 * when the scans so far do not reach back that far. */
uint32_t zsw_age_threshold(const struct zsw_age *a, uint64_t min_age_ns, uint64_t now_ns);

/* Pages at least min_age scans old at the last scan. */
uint64_t zsw_age_count(const struct zsw_age *a, uint32_t min_age);

/* Coldest first: the highest age >= min_age that the last scan found on
 * at least want pages (min_age when fewer are that old). */
uint32_t zsw_age_coldest(const struct zsw_age *a, uint32_t min_age, uint64_t want);

/* Like zsw_vma_scan() for eviction: finds, from *cursor up to end, runs
 * of present pages that are still write-protected and at least min_age
 * scans old, at most max pages in at most n_max runs (the zero page left
 * out), and advances *cursor past what it looked at. Returns the number
 * of runs, possibly 0 before end is reached, or a negative errno. */
int zsw_age_next_round(const struct zsw_age *a, int pagemap_fd, uint32_t min_age, uint64_t *cursor,
                       uint64_t end, uint64_t max, struct zsw_page_run *runs, size_t n_max);
