/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pool allocator for compressed payloads.
 *
 * Size-class slabs: an object of L bytes (1 <= L <= ZSW_POOL_MAX_OBJECT)
 * lives in the class whose size is the smallest multiple of
 * ZSW_POOL_CLASS_STEP that holds it; each class carves slabs (mmap'ed runs
 * of pages, the count per class chosen to waste the least tail space) into
 * equal objects. A store batch allocates all of its objects in one call,
 * taking each class lock once. A slab whose last object is freed goes back
 * to the system (through a small cache of empty slabs), so the pool shrinks
 * with its content; compaction moves the objects of sparse slabs into
 * fuller ones, so that the room frees leave scattered in partial slabs goes
 * back too.
 *
 * Handles are opaque non-zero integers. The memory behind a handle does
 * not move while it is allocated, unless its owner published it for
 * compaction (zsw_pool_publish()): then compaction may move it, and
 * rewrites the owner's copy of the handle, under an exclusion the owner
 * provides (see zsw_pool_compact()). All calls are thread-safe.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "page.h"

#define ZSW_POOL_CLASS_STEP 32u
#define ZSW_POOL_MAX_OBJECT ZSW_PAGE_SIZE

typedef uint64_t zsw_handle_t;

struct zsw_pool;

struct zsw_pool_stats {
        uint64_t pool_bytes;        /* bytes taken from the system: slabs (their
                                 * pages are populated as they are carved out
                                 * of 2 MiB arenas), cached empty slabs and the
                                 * current arena's uncarved rest included */
        uint64_t used_bytes;        /* bytes of allocated objects, class-rounded */
        uint64_t objects;           /* allocated objects */
        uint64_t slabs;             /* slabs currently mapped */
        uint64_t meta_bytes;        /* allocator bookkeeping on the heap */
        uint64_t mapped_bytes;      /* bytes of slabs mapped */
        uint64_t cached_bytes;      /* part of pool_bytes in empty slabs kept
                                 * for reuse and in the arena's rest (see
                                 * zsw_pool_shrink) */
        uint64_t compacted_objects; /* objects moved by compaction, in all */
        uint64_t compacted_bytes;   /* slab bytes compaction emptied, in all */
};

int zsw_pool_new(struct zsw_pool **ret);
struct zsw_pool *zsw_pool_free(struct zsw_pool *pool);

/* Allocates n objects, object i of sizes[i] bytes, and writes their handles
 * to ret_handles. All or nothing: on failure (-ENOMEM, or -EINVAL for a size
 * out of range) nothing stays allocated and ret_handles is untouched. */
int zsw_pool_alloc_bulk(struct zsw_pool *pool, const uint32_t *sizes, size_t n,
                        zsw_handle_t *ret_handles);

/* Frees n handles (0 entries are skipped). */
void zsw_pool_free_bulk(struct zsw_pool *pool, const zsw_handle_t *handles, size_t n);

/* The object's memory; valid until the handle is freed. */
void *zsw_pool_map(struct zsw_pool *pool, zsw_handle_t handle);

/* A consistent-enough snapshot of the counters: each is read atomically,
 * the set is not (cheap enough to call on every batch). */
void zsw_pool_get_stats(struct zsw_pool *pool, struct zsw_pool_stats *ret);

/* Slabs that empty are cached for reuse rather than unmapped on the spot
 * (an munmap costs a TLB shootdown, too much for the free path, and fresh
 * memory costs far more to fill than cached memory to reuse); the older
 * half of the cache is released by the free path once the cache passes
 * 2 MiB or 1/8 of the pool. This releases all of it now, with the arena's
 * rest, for memory pressure, and returns the bytes given back to the
 * system. Safe to call from any thread. */
uint64_t zsw_pool_shrink(struct zsw_pool *pool);
/* Between compaction passes, from one thread: releases the slabs cached
 * before the last trim and unused since, or everything, with the arena's
 * rest, when nothing was allocated since the last trim (an idle pool).
 * The churn of the moment keeps its reserve. Returns the bytes given
 * back. */
uint64_t zsw_pool_trim(struct zsw_pool *pool);

/* Compaction. An object may move to another slab of its class, and its
 * handle change, once its owner has published it: cell is where the owner
 * keeps the handle, and a move rewrites *cell. Publish an object only
 * after writing it; unpublish it before reading its memory or its handle
 * without the exclusion below (an I/O in flight) and before freeing it
 * (free clears the cell too, but a freer must read the handle it frees
 * while the object cannot move). */
void zsw_pool_publish(struct zsw_pool *pool, zsw_handle_t *cell);
void zsw_pool_unpublish(struct zsw_pool *pool, zsw_handle_t handle);

/* Moves up to max_objects published objects out of the sparsest slabs of
 * each class that has a slab's worth of free objects, into its fullest
 * slabs; the slabs emptied go to the empty-slab cache, whatever its bound
 * (zsw_pool_trim() or zsw_pool_shrink() gives them back, once the
 * exclusion is over). The caller excludes, for the duration of the call,
 * every read of published objects' memory and cells, every write of their
 * cells and every unpublish; allocation, publishing and freeing may run
 * concurrently. *cursor is the class to start at (0 for a new pass); the
 * call advances it, and the pass is over once it reaches
 * ZSW_POOL_NR_CLASSES. Returns the objects moved. */
#define ZSW_POOL_NR_CLASSES (ZSW_POOL_MAX_OBJECT / ZSW_POOL_CLASS_STEP)
size_t zsw_pool_compact(struct zsw_pool *pool, size_t max_objects, unsigned *cursor);
