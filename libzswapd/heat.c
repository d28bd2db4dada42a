/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page heat (see heat.h): an open-addressed hash of 2 MiB chunks, each a
 * stamp per page. A stamp is the time of the last use seen, in units of
 * 2^20 ns (about 1 ms), plus one so that 0 means "never", in 31 bits;
 * differences are taken modulo 2^31, so a stamp more than ~25 days old may
 * look recent again, which only spares that page once. The top bit marks
 * a page taken: its other 31 bits then count the pages the target had
 * given up before it, so that its refault tells how many went after it
 * (its refault distance, in pages, modulo 2^31).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "heat.h"
#include "lockdep.h"
#include "util.h"

#define CHUNK_PAGES 512u
#define STAMP_SHIFT 20
/* A refault after more than this many resident sets' worth of pages went
 * after the page lowers its level (one within one resident set raises it). */
#define REFAULT_LATE_RESIDENTS 32u
#define REFAULT_LATE_MAX (UINT64_C(1) << 30)

/* A stamp with this bit is a page taken, not used: see the top. */
#define STAMP_TAKEN 0x80000000u
#define STAMP_TIME(s) ((s) & ~STAMP_TAKEN)
#define LEVEL_MAX 7u

struct heat_chunk {
        uint64_t base; /* first page number, a multiple of CHUNK_PAGES */
        uint32_t stamp[CHUNK_PAGES];
        uint8_t level[CHUNK_PAGES]; /* how hot its refaults showed it, 0-LEVEL_MAX */
};

struct zsw_heat {
        pthread_mutex_t lock;
        struct heat_chunk **slots; /* capacity a power of two, at most half full */
        size_t capacity, n_chunks;
        uint64_t touched;
        uint64_t taken;    /* pages given up so far; a taken page keeps its number */
        uint64_t resident; /* the target's present pages, 0 until told */
};

int zsw_heat_new(struct zsw_heat **ret) {
        struct zsw_heat *h = calloc(1, sizeof(*h));

        if (!h)
                return -ENOMEM;
        pthread_mutex_init(&h->lock, NULL);
        *ret = h;
        return 0;
}

struct zsw_heat *zsw_heat_free(struct zsw_heat *h) {
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->capacity; i++)
                free(h->slots[i]);
        free(h->slots);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return NULL;
}

static size_t slot_of(uint64_t base, size_t capacity) {
        /* Fibonacci hashing of the chunk number. */
        return (size_t) (((base / CHUNK_PAGES) * 0x9e3779b97f4a7c15ull) >> 32) & (capacity - 1);
}

static struct heat_chunk *chunk_find(const struct zsw_heat *h, uint64_t base) {
        if (h->capacity == 0)
                return NULL;
        for (size_t i = slot_of(base, h->capacity);; i = (i + 1) & (h->capacity - 1)) {
                if (!h->slots[i])
                        return NULL;
                if (h->slots[i]->base == base)
                        return h->slots[i];
        }
}

static void slot_put(struct heat_chunk **slots, size_t capacity, struct heat_chunk *c) {
        size_t i = slot_of(c->base, capacity);

        while (slots[i])
                i = (i + 1) & (capacity - 1);
        slots[i] = c;
}

static int table_grow(struct zsw_heat *h) {
        size_t capacity = h->capacity ? h->capacity * 2 : 64;
        struct heat_chunk **slots = calloc(capacity, sizeof(*slots));

        if (!slots)
                return -ENOMEM;
        for (size_t i = 0; i < h->capacity; i++)
                if (h->slots[i])
                        slot_put(slots, capacity, h->slots[i]);
        free(h->slots);
        h->slots = slots;
        h->capacity = capacity;
        return 0;
}

static struct heat_chunk *chunk_get(struct zsw_heat *h, uint64_t base) {
        struct heat_chunk *c = chunk_find(h, base);

        if (c)
                return c;
        if ((h->n_chunks + 1) * 2 > h->capacity && table_grow(h) < 0)
                return NULL;
        c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->base = base;
        slot_put(h->slots, h->capacity, c);
        h->n_chunks++;
        return c;
}

static uint32_t stamp_of(uint64_t now_ns) {
        return STAMP_TIME((uint32_t) (now_ns >> STAMP_SHIFT) + 1) ?: 1;
}

static uint32_t ticks_between(uint32_t then, uint32_t now) {
        return STAMP_TIME(now - STAMP_TIME(then));
}

/* A use of page i of c at stamp. A page taken comes back: had the target
 * kept as many pages more as went out after it, it would have stayed.
 * Under one resident set's worth it was in use all along (the kernel's
 * workingset activates such a refault): its level rises, and each level
 * doubles how long it must go unused to count as idle
 * (zsw_heat_idle_ns()); one that stayed away long falls back. Distances
 * are modulo 2^31 pages: a page back after 8 TiB went out after it may
 * count as soon, and "long" stops at 2^30 pages (a target keeping more
 * than 2^25 pages, 128 GiB, present has a shorter "long"). */
static void heat_use(struct zsw_heat *h, struct heat_chunk *c, size_t i, uint32_t stamp) {
        uint32_t s = c->stamp[i];

        if ((s & STAMP_TAKEN) && h->resident > 0) {
                uint64_t distance = STAMP_TIME((uint32_t) h->taken - STAMP_TIME(s));
                uint64_t late = MIN(REFAULT_LATE_RESIDENTS * h->resident, REFAULT_LATE_MAX);

                if (distance < h->resident)
                        c->level[i] = (uint8_t) MIN(c->level[i] + 1u, LEVEL_MAX);
                else if (distance > late && c->level[i] > 0)
                        c->level[i]--;
        }
        c->stamp[i] = stamp;
}

/* Stamps pages [pgno, pgno + n) used at stamp, or taken if stamp is 0. */
static void heat_stamp(struct zsw_heat *h, uint64_t pgno, uint64_t n, uint32_t stamp) {
        struct heat_chunk *c = NULL;

        zsw_mutex_lock(&h->lock, ZSW_LOCK_HEAT);
        for (uint64_t p = pgno; p < pgno + n; p++) {
                uint64_t base = p - p % CHUNK_PAGES;

                if (!c || c->base != base)
                        c = chunk_get(h, base);
                if (!c)
                        break;
                if (stamp == 0)
                        c->stamp[p % CHUNK_PAGES] = STAMP_TAKEN | STAMP_TIME((uint32_t) ++h->taken);
                else
                        heat_use(h, c, p % CHUNK_PAGES, stamp);
        }
        if (stamp != 0)
                h->touched += n;
        zsw_mutex_unlock(&h->lock);
}

void zsw_heat_touch(struct zsw_heat *h, uint64_t pgno, uint64_t n, uint64_t now_ns) {
        heat_stamp(h, pgno, n, stamp_of(now_ns));
}

void zsw_heat_taken(struct zsw_heat *h, uint64_t pgno, uint64_t n) {
        heat_stamp(h, pgno, n, 0);
}

void zsw_heat_set_resident(struct zsw_heat *h, uint64_t pages) {
        zsw_mutex_lock(&h->lock, ZSW_LOCK_HEAT);
        h->resident = pages;
        zsw_mutex_unlock(&h->lock);
}

uint64_t zsw_heat_idle_ns(struct zsw_heat *h, uint64_t pgno, uint64_t now_ns) {
        uint64_t base = pgno - pgno % CHUNK_PAGES, idle = UINT64_MAX;
        const struct heat_chunk *c;
        uint32_t s;

        zsw_mutex_lock(&h->lock, ZSW_LOCK_HEAT);
        c = chunk_find(h, base);
        s = c ? c->stamp[pgno - base] : 0;
        /* Never used, or taken and back without a fault (a zero fill
         * after the target discarded it): not seen in use. */
        if (s != 0 && !(s & STAMP_TAKEN))
                idle = (uint64_t) ticks_between(s, stamp_of(now_ns)) << STAMP_SHIFT >>
                       c->level[pgno - base];
        zsw_mutex_unlock(&h->lock);
        return idle;
}

bool zsw_heat_is_hot(struct zsw_heat *h, uint64_t pgno, uint64_t cold_ns, uint64_t now_ns) {
        return !zsw_heat_idle_for(zsw_heat_idle_ns(h, pgno, now_ns), cold_ns);
}

uint64_t zsw_heat_touched(struct zsw_heat *h) {
        uint64_t n;

        zsw_mutex_lock(&h->lock, ZSW_LOCK_HEAT);
        n = h->touched;
        zsw_mutex_unlock(&h->lock);
        return n;
}

uint64_t zsw_heat_bytes(struct zsw_heat *h) {
        uint64_t n;

        zsw_mutex_lock(&h->lock, ZSW_LOCK_HEAT);
        n = h->n_chunks * sizeof(struct heat_chunk) + h->capacity * sizeof(*h->slots);
        zsw_mutex_unlock(&h->lock);
        return n;
}
