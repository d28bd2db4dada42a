/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page ages from write protection (see age.h for why this kernel leaves
 * nothing better to user space).
 *
 * A page's byte holds its age in scans (bits 0-5), REFAULTED (bit 6):
 * the page came back by a fault after we took it, and HOT (bit 7): the
 * page was found written or faulted in at the last scan; a hot page has
 * age 0, and its bits 0-3 hold its backoff instead (below). The age of a
 * page means: "write-protected at the end of scan S - age and found
 * untouched by every scan since", so it has gone unused since the end of
 * that scan; times[] keeps when the last ZSW_AGE_MAX + 1 scans ended.
 *
 * Write protection is what costs the target: a page's first write after
 * a scan protected it is a WP fault served by a fault thread (one
 * userfaultfd round trip, tens of microseconds). Two rules keep that cost
 * below a share of the target's time (struct zsw_age_cost, 1% unless the
 * engine is told otherwise):
 *
 * - Backoff per page. A page found written (HOT) keeps a level in its
 *   age bits (a written page has age 0). Each time it is found written
 *   after we protected it (ARMED), its level rises, to 2 the first time
 *   then by one up to LEVEL_MAX, and it is protected again only at one
 *   scan in 2^level (which one depends on the page's address, so the
 *   protections of many hot pages spread over the scans instead of
 *   coming together). A
 *   page written all the time costs one fault per 2^LEVEL_MAX scans, and
 *   a hot page that turns cold starts aging at most 2^level - 1 scans
 *   late. A page found untouched ages and forgets its level.
 * - A budget per target: that share of its time, kept as a
 *   bucket that fills at that share of the time up to what a minute
 *   gives (BUDGET_WINDOW_NS), from which each scan takes what the WP
 *   faults on pages the scans protected cost since the scan before
 *   (struct zsw_age_cost: their service time plus AGE_WP_UNSEEN_NS
 *   each). A scan protects again at most as many written pages as what
 *   is left pays for at the cost per fault measured, whatever the levels
 *   say: a page protected once faults at most once, so the faults follow
 *   the protections. And while less than half the bucket is left, every
 *   page's level is raised to at least a floor that grows by one per
 *   scan (up to FLOOR_MAX), and comes down again once three quarters are
 *   back: the protections thin out evenly before the bucket runs dry.
 *   The pages left out stay unprotected and young, the safe side
 *   (nothing written is ever taken). Pages new since the last scan (new
 *   memory) are always protected: each one already cost the target a
 *   fault of its own (its first touch), and costs at most one more. A
 *   page protected while idle costs its fault whenever it is written
 *   again: that is how a scan learns it is in use; many such pages
 *   written at once can overdraw the bucket, which then holds later
 *   protections back until it is paid.
 *
 * Reads are not seen, so a page that is only read is taken when it is
 * old enough and comes back by a fault. Such a page keeps REFAULTED while
 * it stays, and counts half its age: it must go unused twice as long
 * before it is taken again, as the kernel's workingset detection
 * activates a page that refaults soon after its eviction.
 *
 * The scan walks the target's ranges in address order, so the chunk
 * table, sorted by address, is rebuilt by one merge per scan: chunks
 * where no page is present any more are freed, new ones allocated.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "age.h"
#include "pool.h"
#include "uffd.h"

#define CHUNK_PAGES 512u
#define AGE_MASK 0x3fu
#define AGE_REFAULTED 0x40u
#define AGE_HOT 0x80u
/* With AGE_HOT the age bits hold the backoff: a level, and whether the
 * last scan protected the page. */
#define HOT_LEVEL_MASK 0x07u
#define HOT_ARMED 0x08u
#define LEVEL_MAX 3u
#define FLOOR_MAX 6u
/* The part of a WP fault's round trip the fault thread cannot time: the
 * target's trap into the kernel and the fault thread's wake-up (a bare
 * userfaultfd round trip is 10-80 us, docs/performance.md). */
#define AGE_WP_UNSEEN_NS 25000u
#define BUDGET_WINDOW_NS (60 * UINT64_C(1000000000))
#define SCAN_RUNS 256u
#define PROTECT_TRIES 1000u

_Static_assert(ZSW_AGE_MAX == AGE_MASK, "an age must fit in its bits");

struct chunk {
        uint64_t base; /* first page number, a multiple of CHUNK_PAGES */
        uint8_t age[CHUNK_PAGES];
};

struct zsw_age {
        struct chunk **chunks; /* sorted by base */
        size_t n_chunks;
        uint64_t scans; /* scans done; scan S ended at times[S % ...] */
        uint64_t times[ZSW_AGE_MAX + 1];
        uint64_t hist[ZSW_AGE_MAX + 1]; /* present, still protected pages by effective age */
        unsigned floor;                 /* the least level of hot pages now */
        struct zsw_age_cost cost_seen;  /* as it was at the last scan */
        int64_t bucket_ns;              /* the budget left */
        bool budget_started;
};

int zsw_age_new(struct zsw_age **ret) {
        struct zsw_age *a = calloc(1, sizeof(*a));

        if (!a)
                return -ENOMEM;
        *ret = a;
        return 0;
}

struct zsw_age *zsw_age_free(struct zsw_age *a) {
        if (!a)
                return NULL;
        for (size_t i = 0; i < a->n_chunks; i++)
                free(a->chunks[i]);
        free(a->chunks);
        free(a);
        return NULL;
}

/* One scan's state: the table being built and the run being protected. */
struct scan {
        struct zsw_age *a;
        int uffd;
        size_t old_next;       /* next chunk of the old table to merge */
        struct chunk **chunks; /* the new table */
        size_t n, cap;
        struct chunk *cur;
        uint8_t prev[CHUNK_PAGES]; /* cur's ages before this scan */
        uint64_t hist[ZSW_AGE_MAX + 1];
        uint64_t protect_start, protect_end;
        /* Written pages this scan may still protect again (the budget). */
        uint64_t rearm_left;
        struct zsw_age_scan_stats st;
};

static void protect_flush(struct scan *s) {
        int r = 0;

        /* EAGAIN: the target's mappings are changing under an event (its
         * own madvise, an mremap) that the fault threads have not read
         * yet; they will in a moment. A range that went away, or stays
         * busy, stays unprotected: its pages read as written, young,
         * which is the safe side. */
        for (unsigned tries = 0; s->protect_end > s->protect_start && tries < PROTECT_TRIES;
             tries++) {
                r = zsw_uffd_writeprotect(s->uffd, s->protect_start,
                                          s->protect_end - s->protect_start, true, false);
                if (r != -EAGAIN)
                        break;
                sched_yield();
        }
        if (r < 0)
                s->st.protect_failures++;
        s->protect_start = s->protect_end = 0;
}

static void protect_page(struct scan *s, uint64_t addr) {
        if (s->protect_end != addr) {
                protect_flush(s);
                s->protect_start = addr;
        }
        s->protect_end = addr + ZSW_PAGE_SIZE;
        s->st.protected_pages++;
}

/* Makes the chunk of page pgno current: the old table's, or a new one. */
static int scan_enter_chunk(struct scan *s, uint64_t pgno) {
        struct zsw_age *a = s->a;
        uint64_t base = pgno - pgno % CHUNK_PAGES;
        struct chunk *c = NULL;

        if (s->cur && s->cur->base == base)
                return 0;
        /* Old chunks before this one saw no present page: they go. */
        while (s->old_next < a->n_chunks && a->chunks[s->old_next]->base < base) {
                free(a->chunks[s->old_next]);
                a->chunks[s->old_next++] = NULL;
        }
        if (s->old_next < a->n_chunks && a->chunks[s->old_next]->base == base) {
                c = a->chunks[s->old_next];
                a->chunks[s->old_next++] = NULL;
                memcpy(s->prev, c->age, sizeof(s->prev));
        } else {
                c = malloc(sizeof(*c));
                if (!c)
                        return -ENOMEM;
                c->base = base;
                memset(s->prev, 0, sizeof(s->prev));
        }
        /* Pages not present at this scan keep no age. */
        memset(c->age, 0, sizeof(c->age));
        if (s->n == s->cap) {
                size_t ncap = s->cap ? s->cap * 2 : 64;
                struct chunk **n = realloc(s->chunks, ncap * sizeof(*n));

                if (!n) {
                        free(c);
                        return -ENOMEM;
                }
                s->chunks = n;
                s->cap = ncap;
        }
        s->chunks[s->n++] = c;
        s->cur = c;
        return 0;
}

/* The age a page counts for: none while hot, half its age after a
 * refault. */
static uint32_t effective_age(uint8_t byte) {
        if (byte & AGE_HOT)
                return 0;
        return byte & AGE_REFAULTED ? (byte & AGE_MASK) / 2 : byte & AGE_MASK;
}

/* Whether a hot page at this level is protected again at this scan: at
 * one scan in 2^level, runs of 8 pages at different scans. */
static bool rearm_turn(const struct scan *s, uint64_t addr, unsigned level) {
        uint64_t phase = addr / ZSW_PAGE_SIZE / 8;

        return ((s->a->scans + phase) & ((UINT64_C(1) << level) - 1)) == 0;
}

/* A page used since the last scan (written, faulted back in, or left
 * unprotected by the last scan): young; protected again when the
 * backoff and the budget let it (see the top of this file). */
static void scan_written(struct scan *s, size_t i, uint64_t addr, uint8_t old) {
        bool fresh = (old & ~AGE_REFAULTED) == 0;
        unsigned level = 0;
        uint8_t armed = 0;

        if (old & AGE_HOT) {
                level = old & HOT_LEVEL_MASK;
                /* Written again after we protected it: hotter. Written
                 * within a scan interval of its protection, it is likely
                 * to be again: the first step is two levels. */
                if (old & HOT_ARMED)
                        level = MIN(level + (level ? 1 : 2), LEVEL_MAX);
        }
        if (fresh)
                armed = HOT_ARMED;
        else if (rearm_turn(s, addr, MAX(level, s->a->floor)) && s->rearm_left > 0) {
                s->rearm_left--;
                armed = HOT_ARMED;
        }
        if (armed)
                protect_page(s, addr);
        else
                s->st.unprotected_pages++;
        s->cur->age[i] = (uint8_t) (AGE_HOT | armed | level | (old & AGE_REFAULTED));
        s->hist[0]++;
}

static void scan_page(struct scan *s, uint64_t addr, bool written) {
        size_t i = addr / ZSW_PAGE_SIZE % CHUNK_PAGES;
        uint8_t old = s->prev[i], age;

        s->st.present_pages++;
        if (written) {
                scan_written(s, i, addr, old);
                return;
        }
        /* Untouched since it was protected (a hot page starts from 0);
         * at the first scan we do not know since when, so it starts at
         * 0. */
        age = s->a->scans == 1
                      ? 0
                      : (uint8_t) MIN((old & AGE_HOT ? 0u : old & AGE_MASK) + 1u, ZSW_AGE_MAX);
        s->cur->age[i] = age | (old & AGE_REFAULTED);
        s->hist[effective_age(s->cur->age[i])]++;
        if (age > 0)
                s->st.idle_pages++;
}

static int scan_range(struct scan *s, int pagemap_fd, uint64_t start, uint64_t end) {
        struct zsw_page_run runs[SCAN_RUNS];
        uint64_t pos = start;

        while (pos < end) {
                struct pm_scan_arg arg = {
                        .size = sizeof(arg),
                        .start = pos,
                        .end = end,
                        .vec = (uint64_t) (uintptr_t) runs,
                        .vec_len = ARRAY_SIZE(runs),
                        .category_mask = PAGE_IS_PRESENT,
                        .return_mask = PAGE_IS_PRESENT | PAGE_IS_WRITTEN | PAGE_IS_PFNZERO,
                };
                int k = ioctl(pagemap_fd, PAGEMAP_SCAN, &arg), r;

                if (k < 0)
                        return -errno;
                for (int j = 0; j < k; j++) {
                        /* The shared zero page costs nothing and is never
                         * taken: no age, no protection. */
                        if (runs[j].categories & PAGE_IS_PFNZERO)
                                continue;
                        for (uint64_t p = runs[j].start; p < runs[j].end; p += ZSW_PAGE_SIZE) {
                                r = scan_enter_chunk(s, p / ZSW_PAGE_SIZE);
                                if (r < 0)
                                        return r;
                                scan_page(s, p, runs[j].categories & PAGE_IS_WRITTEN);
                        }
                }
                if (arg.walk_end <= pos)
                        return -EIO;
                pos = arg.walk_end;
        }
        return 0;
}

uint64_t zsw_age_cost_ns(const struct zsw_age_cost *c) {
        return c->wp_fault_ns + c->wp_faults * AGE_WP_UNSEEN_NS;
}

/* Takes what the WP faults on pages the scans protected cost since the
 * last scan from the bucket, adds the share of the time since: sets the
 * floor of the levels and how many written pages this scan may protect
 * again. */
static void scan_budget(struct scan *s, const struct zsw_age_cost *cost, uint64_t now) {
        struct zsw_age *a = s->a;
        int64_t full;
        uint64_t last_end = a->times[a->scans % (ZSW_AGE_MAX + 1)];
        uint64_t allowed = 0, spent, per_fault;
        struct zsw_age_cost d;

        s->rearm_left = UINT64_MAX;
        if (!cost)
                return;
        full = (int64_t) (BUDGET_WINDOW_NS / 100 * cost->percent);
        if (!a->budget_started) {
                a->bucket_ns = full;
                a->budget_started = true;
        }
        d = (struct zsw_age_cost) { cost->wp_faults - a->cost_seen.wp_faults,
                                    cost->wp_fault_ns - a->cost_seen.wp_fault_ns };
        spent = zsw_age_cost_ns(&d);
        if (a->scans > 0 && now > last_end)
                allowed = (now - last_end) / 100 * cost->percent;
        /* A burst of writes to pages long protected can overdraw it; a
         * minute of the share pays any debt back. */
        a->bucket_ns = MAX(MIN(a->bucket_ns + (int64_t) allowed - (int64_t) spent, full), -full);
        if (a->bucket_ns < full / 2)
                a->floor = MIN(a->floor + 1, FLOOR_MAX);
        else if (a->bucket_ns >= full / 4 * 3 && a->floor > 0)
                a->floor--;
        per_fault = (cost->wp_faults ? cost->wp_fault_ns / cost->wp_faults : 0) + AGE_WP_UNSEEN_NS;
        s->rearm_left = a->bucket_ns > 0 ? (uint64_t) a->bucket_ns / per_fault : 0;
        a->cost_seen = *cost;
}

int zsw_age_scan(struct zsw_age *a, int pagemap_fd, int uffd, const struct zsw_range *ranges,
                 size_t n_ranges, const struct zsw_age_cost *cost, struct zsw_age_scan_stats *ret) {
        struct scan *s;
        uint64_t start = zsw_now_ns();
        int r = 0;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->a = a;
        s->uffd = uffd;
        scan_budget(s, cost, start);
        s->st.rearm_floor = a->floor;
        a->scans++;
        for (size_t i = 0; i < n_ranges && r >= 0; i++)
                r = scan_range(s, pagemap_fd, ranges[i].start, ranges[i].end);
        protect_flush(s);
        if (r < 0) {
                /* The target went away (or memory ran out) halfway: start
                 * afresh, every page young, rather than keep ages that
                 * this scan's protections may have made wrong. */
                for (size_t i = 0; i < a->n_chunks; i++)
                        free(a->chunks[i]);
                for (size_t i = 0; i < s->n; i++)
                        free(s->chunks[i]);
                free(a->chunks);
                free(s->chunks);
                a->chunks = NULL;
                a->n_chunks = 0;
                a->scans = 0;
                memset(a->hist, 0, sizeof(a->hist));
                free(s);
                return r;
        }
        for (size_t i = s->old_next; i < a->n_chunks; i++)
                free(a->chunks[i]);
        free(a->chunks);
        a->chunks = s->chunks;
        a->n_chunks = s->n;
        memcpy(a->hist, s->hist, sizeof(a->hist));
        /* The scan ends once every protection is in place: a page found
         * untouched later has gone unused since this moment. */
        a->times[a->scans % (ZSW_AGE_MAX + 1)] = zsw_now_ns();
        s->st.table_bytes =
                sizeof(*a) + s->cap * sizeof(struct chunk *) + s->n * sizeof(struct chunk);
        s->st.duration_ns = zsw_now_ns() - start;
        if (ret)
                *ret = s->st;
        free(s);
        return 0;
}

uint32_t zsw_age_threshold(const struct zsw_age *a, uint64_t min_age_ns, uint64_t now_ns) {
        if (min_age_ns == 0)
                return 0;
        /* Age k means unused since scan scans - k ended; the first scan
         * has no age to give (it does not know since when). */
        for (uint64_t k = 1; k <= ZSW_AGE_MAX && k < a->scans; k++) {
                uint64_t ended = a->times[(a->scans - k) % (ZSW_AGE_MAX + 1)];

                if (now_ns >= ended && now_ns - ended >= min_age_ns)
                        return (uint32_t) k;
        }
        return ZSW_AGE_NEVER;
}

uint64_t zsw_age_count(const struct zsw_age *a, uint32_t min_age) {
        uint64_t n = 0;

        for (uint32_t k = min_age; k <= ZSW_AGE_MAX; k++)
                n += a->hist[k];
        return n;
}

uint32_t zsw_age_coldest(const struct zsw_age *a, uint32_t min_age, uint64_t want) {
        uint64_t n = 0;

        for (uint32_t k = ZSW_AGE_MAX; k > min_age; k--) {
                n += a->hist[k];
                if (n >= want)
                        return k;
        }
        return min_age;
}

/* The byte of page pgno, NULL when the table has none; *hint caches the
 * chunk last found, as callers go in address order. */
static uint8_t *byte_of(const struct zsw_age *a, uint64_t pgno, size_t *hint) {
        uint64_t base = pgno - pgno % CHUNK_PAGES;
        size_t lo = 0, hi = a->n_chunks;

        if (*hint < a->n_chunks && a->chunks[*hint]->base == base)
                return &a->chunks[*hint]->age[pgno % CHUNK_PAGES];
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (a->chunks[mid]->base < base)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo >= a->n_chunks || a->chunks[lo]->base != base)
                return NULL;
        *hint = lo;
        return &a->chunks[lo]->age[pgno % CHUNK_PAGES];
}

static uint32_t age_of(const struct zsw_age *a, uint64_t pgno, size_t *hint) {
        const uint8_t *b = byte_of(a, pgno, hint);

        return b ? effective_age(*b) : 0;
}

void zsw_age_note_refaults(struct zsw_age *a, const uint64_t *pgnos, size_t n) {
        size_t hint = 0;

        for (size_t i = 0; i < n; i++) {
                uint8_t *b = byte_of(a, pgnos[i], &hint);

                /* No chunk: the page was not present at the last scan;
                 * the next one finds it young anyway (it came back
                 * unprotected), only without the mark. */
                if (b)
                        *b |= AGE_REFAULTED;
        }
}

int zsw_age_next_round(const struct zsw_age *a, int pagemap_fd, uint32_t min_age, uint64_t *cursor,
                       uint64_t end, uint64_t max, struct zsw_page_run *runs, size_t n_max) {
        struct zsw_page_run found[64];
        uint64_t pages = 0, stop;
        size_t n = 0, hint = 0;
        int k;

        if (*cursor >= end || max == 0 || n_max == 0)
                return 0;
        /* Present and still write-protected: untouched since the last
         * scan, and since any fault brought it back. */
        k = zsw_vma_scan(pagemap_fd, *cursor, end, PAGE_IS_PRESENT, PAGE_IS_WRITTEN, found,
                         ARRAY_SIZE(found), &stop);
        if (k < 0)
                return k;
        for (int j = 0; j < k; j++) {
                if (found[j].categories & PAGE_IS_PFNZERO)
                        continue;
                for (uint64_t p = found[j].start; p < found[j].end; p += ZSW_PAGE_SIZE) {
                        bool extends;

                        if (age_of(a, p / ZSW_PAGE_SIZE, &hint) < min_age)
                                continue;
                        extends = n > 0 && runs[n - 1].end == p;
                        if (pages == max || (!extends && n == n_max)) {
                                /* Full: resume at this page next time. */
                                *cursor = p;
                                return (int) n;
                        }
                        if (extends)
                                runs[n - 1].end += ZSW_PAGE_SIZE;
                        else
                                runs[n++] = (struct zsw_page_run) { p, p + ZSW_PAGE_SIZE,
                                                                    found[j].categories };
                        pages++;
                }
        }
        *cursor = stop;
        return (int) n;
}
