/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page heat: when each page of a target was last seen in use, for the
 * order in which eviction takes pages when no minimum age is asked.
 *
 * The kernel orders its LRU by accessed bits; user space here sees only
 * two signs of use: a page we took that comes back by a fault (a refault:
 * the page was in use while we held it), and a write to a page that a
 * round had write-protected (the round gives that page up). Each one
 * stamps the page with the time. Eviction then takes pages never seen in
 * use first and, of the others, the longest unused first
 * (evict.c), so a page read all the time costs one refault per
 * pass of eviction over everything colder, as in the kernel's
 * workingset, where a refault soon after eviction activates the page.
 * "Soon" is counted in pages, as the kernel does: a page that comes back
 * before as many pages went out after it as the target keeps present
 * (it would have stayed in a resident set that much larger) raises its
 * level, and each level doubles how long the page must then go unused
 * to be idle, up to 128 times; one that comes back only after more than
 * 32 such sets lowers it.
 * A stamp is the page's own: a page next to a hot one is not hotter for
 * it (docs/performance.md, "Heat of the page alone").
 * Stamps live in chunks of 512 pages (2 MiB of address space), made on
 * the first stamp there (a use, or the page taken): 2.5 KiB per 2 MiB
 * region ever taken or used.
 * Thread-safe: fault threads stamp while eviction reads.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct zsw_heat;

int zsw_heat_new(struct zsw_heat **ret);
struct zsw_heat *zsw_heat_free(struct zsw_heat *h);

/* Pages [pgno, pgno + n) were used at now_ns (zsw_now_ns()). Never fails:
 * a stamp that finds no memory for its chunk is dropped, which only lets
 * that page be taken sooner. */
void zsw_heat_touch(struct zsw_heat *h, uint64_t pgno, uint64_t n, uint64_t now_ns);

/* Pages [pgno, pgno + n) were taken: a fault that brings one back
 * measures its refault distance. */
void zsw_heat_taken(struct zsw_heat *h, uint64_t pgno, uint64_t n);

/* The target keeps this many pages present (a reclaim counts them): the
 * refault distance is weighed against it. Until it is told, refaults
 * leave levels as they are. */
void zsw_heat_set_resident(struct zsw_heat *h, uint64_t pages);

/* How long pgno has gone unused at now_ns, as seen, divided by 2^level,
 * its level counting the refaults that came soon after an eviction (hot
 * pages age slower): UINT64_MAX when it was never seen in use. */
uint64_t zsw_heat_idle_ns(struct zsw_heat *h, uint64_t pgno, uint64_t now_ns);

/* Whether a page idle for idle_ns (zsw_heat_idle_ns()) is cold for
 * cold_ns: times are kept in ticks of 2^20 ns, and cold_ns rounds down to
 * a tick. */
static inline bool zsw_heat_idle_for(uint64_t idle_ns, uint64_t cold_ns) {
        return idle_ns >= (cold_ns & ~((UINT64_C(1) << 20) - 1));
}

/* Whether pgno was seen in use less than cold_ns before now_ns (at its
 * level). A page never seen in use is cold whatever cold_ns is. */
bool zsw_heat_is_hot(struct zsw_heat *h, uint64_t pgno, uint64_t cold_ns, uint64_t now_ns);

/* Pages stamped in all, and the table's memory, for stats. */
uint64_t zsw_heat_touched(struct zsw_heat *h);
uint64_t zsw_heat_bytes(struct zsw_heat *h);
