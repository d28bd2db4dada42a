/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The entry slab cache: entries are carved from 40 KiB chunks and recycled
 * through one free list under one mutex, so that a store batch takes all
 * of its entries, and an invalidation returns all of its entries, with one
 * lock round trip instead of one malloc per page. Chunks are kept for reuse
 * until the store is freed: entry memory is bounded by the peak number of
 * stored pages (40 bytes each), which is small beside the payloads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "lockdep.h"
#include "util.h"

#define CHUNK_ENTRIES 1024u

void zsw_entry_cache_init(struct zsw_entry_cache *c) {
        *c = (struct zsw_entry_cache) {};
        pthread_mutex_init(&c->lock, NULL);
}

void zsw_entry_cache_done(struct zsw_entry_cache *c) {
        for (size_t i = 0; i < c->nchunks; i++)
                free(c->chunks[i]);
        free(c->chunks);
        pthread_mutex_destroy(&c->lock);
        *c = (struct zsw_entry_cache) {};
}

/* Called with the lock held. */
static int cache_grow(struct zsw_entry_cache *c) {
        struct zsw_entry *chunk;

        if (c->nchunks == c->chunks_cap) {
                size_t cap = MAX(c->chunks_cap * 2, (size_t) 16);
                void **a = realloc(c->chunks, cap * sizeof(*a));

                if (!a)
                        return -ENOMEM;
                c->chunks = a;
                c->chunks_cap = cap;
        }
        chunk = malloc(CHUNK_ENTRIES * sizeof(*chunk));
        if (!chunk)
                return -ENOMEM;
        c->chunks[c->nchunks++] = chunk;
        for (size_t i = 0; i < CHUNK_ENTRIES; i++) {
                chunk[i].next = c->free;
                c->free = &chunk[i];
        }
        c->nfree += CHUNK_ENTRIES;
        return 0;
}

int zsw_entry_alloc_bulk(struct zsw_entry_cache *c, struct zsw_entry **ret, size_t n) {
        zsw_mutex_lock(&c->lock, ZSW_LOCK_ENTRY_CACHE);
        while (c->nfree < n) {
                int r = cache_grow(c);

                if (r < 0) {
                        zsw_mutex_unlock(&c->lock);
                        return r;
                }
        }
        for (size_t i = 0; i < n; i++) {
                ret[i] = c->free;
                c->free = c->free->next;
        }
        c->nfree -= n;
        zsw_mutex_unlock(&c->lock);

        for (size_t i = 0; i < n; i++) {
                memset(ret[i], 0, sizeof(*ret[i]));
                atomic_init(&ret[i]->refs, 1);
        }
        return 0;
}

void zsw_entry_free_bulk(struct zsw_entry_cache *c, struct zsw_entry *const *entries, size_t n) {
        struct zsw_entry *head = NULL;

        /* Chain outside the lock, splice inside it. */
        for (size_t i = n; i-- > 0;) {
                entries[i]->next = head;
                head = entries[i];
        }
        zsw_entry_free_chain(c, head);
}

void zsw_entry_free_chain(struct zsw_entry_cache *c, struct zsw_entry *head) {
        struct zsw_entry *tail = head;
        size_t n = 0;

        if (!head)
                return;
        for (n = 1; tail->next; n++)
                tail = tail->next;
        zsw_mutex_lock(&c->lock, ZSW_LOCK_ENTRY_CACHE);
        tail->next = c->free;
        c->free = head;
        c->nfree += n;
        zsw_mutex_unlock(&c->lock);
}

uint64_t zsw_entry_cache_bytes(struct zsw_entry_cache *c) {
        uint64_t b;

        zsw_mutex_lock(&c->lock, ZSW_LOCK_ENTRY_CACHE);
        b = (uint64_t) c->nchunks * CHUNK_ENTRIES * sizeof(struct zsw_entry);
        zsw_mutex_unlock(&c->lock);
        return b;
}
