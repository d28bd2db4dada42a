/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page heat (see heat.h): an open-addressed hash of 2 MiB chunks, each a
 * stamp per page. A stamp is the time of the last use seen, in units of
 * 2^20 ns (about 1 ms), plus one so that 0 means "never"; differences are
 * taken modulo 2^32, so a stamp more than ~50 days old may look recent
 * again, which only spares that page once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "heat.h"
#include "util.h"

#define CHUNK_PAGES 512u
#define STAMP_SHIFT 20

struct heat_chunk {
        uint64_t base;                  /* first page number, a multiple of CHUNK_PAGES */
        uint32_t stamp[CHUNK_PAGES];
};

struct zsw_heat {
        pthread_mutex_t lock;
        struct heat_chunk **slots;      /* capacity a power of two, at most half full */
        size_t capacity, n_chunks;
        uint64_t touched;
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
        return (uint32_t) (now_ns >> STAMP_SHIFT) + 1;
}

void zsw_heat_touch(struct zsw_heat *h, uint64_t pgno, uint64_t n, uint64_t now_ns) {
        uint32_t stamp = stamp_of(now_ns);
        struct heat_chunk *c = NULL;

        pthread_mutex_lock(&h->lock);
        for (uint64_t p = pgno; p < pgno + n; p++) {
                uint64_t base = p - p % CHUNK_PAGES;

                if (!c || c->base != base)
                        c = chunk_get(h, base);
                if (!c)
                        break;
                c->stamp[p % CHUNK_PAGES] = stamp;
        }
        h->touched += n;
        pthread_mutex_unlock(&h->lock);
}

static uint32_t stamp_at(const struct zsw_heat *h, uint64_t pgno) {
        const struct heat_chunk *c = chunk_find(h, pgno - pgno % CHUNK_PAGES);

        return c ? c->stamp[pgno % CHUNK_PAGES] : 0;
}

bool zsw_heat_is_hot(struct zsw_heat *h, uint64_t pgno, uint64_t cold_ns, uint64_t now_ns) {
        uint32_t now = stamp_of(now_ns), horizon = (uint32_t) MIN(cold_ns >> STAMP_SHIFT, UINT32_MAX);
        bool hot = false;

        pthread_mutex_lock(&h->lock);
        for (uint64_t p = pgno ? pgno - 1 : 0; p <= pgno + 1 && !hot; p++) {
                uint32_t s = stamp_at(h, p);

                hot = s != 0 && now - s < horizon;
        }
        pthread_mutex_unlock(&h->lock);
        return hot;
}

uint64_t zsw_heat_touched(struct zsw_heat *h) {
        uint64_t n;

        pthread_mutex_lock(&h->lock);
        n = h->touched;
        pthread_mutex_unlock(&h->lock);
        return n;
}

uint64_t zsw_heat_bytes(struct zsw_heat *h) {
        uint64_t n;

        pthread_mutex_lock(&h->lock);
        n = h->n_chunks * sizeof(struct heat_chunk) + h->capacity * sizeof(*h->slots);
        pthread_mutex_unlock(&h->lock);
        return n;
}
