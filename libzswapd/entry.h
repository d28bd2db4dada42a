/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Store entries: the metadata of one stored page, and the slab cache they
 * come from. Private to the store, its LRU and (later) the writeback tier.
 *
 * An entry is 40 bytes and holds its payload in one of three places:
 * inline (a same-filled page is one repeated 64-bit word), in the pool
 * (compressed or raw), or on disk (a sector offset in the swapfile; the
 * writeback tier moves entries there). Entries are reference counted: each
 * index slot that points to an entry holds one reference (a forked child's
 * index shares its parent's entries), and so does a loader between looking
 * an entry up and copying its payload, and the writeback tier while it has
 * an entry isolated. The payload is freed with the last reference.
 *
 * All owners that share an entry belong to one fork family and share one
 * LRU (see lru.h), so an entry never needs to say which LRU it is on.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "pool.h"

enum zsw_entry_state {
        ZSW_ENTRY_SAME,       /* value: the page is this word repeated */
        ZSW_ENTRY_COMPRESSED, /* handle: length bytes compressed with compressor */
        ZSW_ENTRY_RAW,        /* handle: the page as it was (did not shrink) */
        ZSW_ENTRY_DISK,       /* disk_sector: length compressed bytes in the swapfile */
        ZSW_ENTRY_LOST,       /* no content: its disk failed to read it when zswapd died;
                               * a load fails (-EIO), and the fault path poisons the page */
};

struct zsw_entry {
        /* LRU links, both NULL while the entry is not on an LRU (same-filled
         * entries never are: they take no pool memory to reclaim). next
         * also links free entries in the cache. */
        struct zsw_entry *prev, *next;
        union {
                uint64_t value;
                zsw_handle_t handle;
        };
        /* Where the writeback tier put the payload (512-byte sectors); kept
         * beside the handle so that a write can complete while loaders still
         * read the pool copy. */
        uint64_t disk_sector;
        _Atomic uint32_t refs;
        uint16_t length;   /* payload bytes; 0 for same-filled */
        uint8_t state : 4; /* enum zsw_entry_state; changed under the owner lock */
        /* A compressed payload's code (compress.h: the compressor, with
         * ZSW_WITH_DICT after its family's dictionary); on disk,
         * ZSW_ENTRY_DISK_RAW for a page written as it was. */
        uint8_t compressor : 4;
        /* Second chance: set by loads that keep the entry, cleared by the
         * LRU walk, read and written without a lock. */
        _Atomic uint8_t referenced;
};

#define ZSW_ENTRY_DISK_RAW 15u

_Static_assert(sizeof(struct zsw_entry) == 40, "keep entries small: metadata per page <= 64 bytes");

/* Entries are carved from chunks of memory and recycled through a free
 * list, so that a batch takes its entries with one lock round trip. */
struct zsw_entry_cache {
        pthread_mutex_t lock;
        struct zsw_entry *free;
        size_t nfree;
        void **chunks;
        size_t nchunks, chunks_cap;
};

void zsw_entry_cache_init(struct zsw_entry_cache *c);
void zsw_entry_cache_done(struct zsw_entry_cache *c);

/* Takes n entries, zeroed except that refs is 1. All or nothing: -ENOMEM. */
int zsw_entry_alloc_bulk(struct zsw_entry_cache *c, struct zsw_entry **ret, size_t n);
/* Returns entries to the cache (their payloads must be freed already). */
void zsw_entry_free_bulk(struct zsw_entry_cache *c, struct zsw_entry *const *entries, size_t n);
/* Returns a chain of entries linked through next, ending in NULL. */
void zsw_entry_free_chain(struct zsw_entry_cache *c, struct zsw_entry *head);

/* Bytes of entry memory taken from the system (metadata accounting). */
uint64_t zsw_entry_cache_bytes(struct zsw_entry_cache *c);
