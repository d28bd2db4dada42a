/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pool allocator for compressed payloads: size-class slabs.
 *
 * Every object size is rounded up to a multiple of ZSW_POOL_CLASS_STEP; each
 * of the resulting classes owns slabs, mmap'ed runs of 1..16 pages cut into
 * equal objects, the page count chosen per class so that the slab tail left
 * over is the smallest fraction of the slab. Slab descriptors live outside
 * the slab, so a slab is pure payload and goes back to the system whole.
 *
 * A handle is (slab id + 1) << 16 | object index. Slab ids index a two-level
 * table whose chunks never move once published, so map and free find the
 * slab in O(1) without a lock. The free list of a slab is threaded through
 * its free objects (their first two bytes); objects never handed out yet are
 * taken from a bump index.
 *
 * The costs of the memory calls shape the rest (figures in
 * docs/performance.md): under a hypervisor with shadow paging the first
 * access to a fresh 4 KiB page costs tens of microseconds even when it was
 * populated beforehand, a 2 MiB huge page a small fraction of that per
 * 4 KiB; an munmap of one small range pays a TLB shootdown, one munmap over
 * many adjacent slabs barely more than over one. Hence:
 * - slabs are carved one after the other out of arenas: 2 MiB-aligned runs
 *   advised MADV_HUGEPAGE and populated at once (one huge page where the
 *   kernel has one, else 512 small ones): with a slab per mmap, fresh
 *   pool pages were most of eviction's time. A slab goes back
 *   with munmap (the kernel splits the huge page); the arena's
 *   uncarved rest goes back when it no longer fits a slab, or with the
 *   cache below. The cost: when memory is fragmented the kernel may compact
 *   to find a huge page (THP defrag=madvise); without one it falls back to
 *   small pages, populated as well;
 * - pool_bytes counts what the pool holds resident: carved slabs (all their
 *   pages) and the arena's rest, which counts as cached;
 * - memory already touched is what is cheap to use, and the free path is
 *   the fault path's exclusive load, so a slab that empties is not unmapped
 *   on the spot: it goes to a cache of empty slabs that any class with the
 *   same slab length reuses as is, and a class with none of its length
 *   cuts a longer one (the rest stays cached). Under churn (pages stored
 *   and faulted back at tens of MiB/s) slabs empty and are needed again
 *   all the time: releasing them and populating fresh arenas instead cost
 *   ~3 ms per MiB here. So the cache is trimmed between compaction passes
 *   (zsw_pool_trim()): a slab that sat in it unused since the last trim
 *   goes, and everything goes once nothing was allocated since then (an
 *   idle pool). Past EMPTY_CACHE_MIN or 1/8 of the pool the free path
 *   releases the older half itself. A cut is never undone: the cached
 *   lengths shorten under churn until trims release the pieces nobody
 *   takes. Releases sort slabs by address so that adjacent ones go in one
 *   munmap; zsw_pool_shrink() releases all on demand.
 * Fragmentation: partial slabs of a class sit in lists by fullness and
 * allocation always takes the fullest one, so that frees concentrate in the
 * emptier slabs and those drain and return to the system. That is not
 * enough under churn (pages stored, faulted back, stored again): frees land
 * everywhere and leave many slabs part used. Compaction, as zsmalloc's,
 * moves the objects of a class's sparsest slab into its fullest ones until
 * the sparse slab is empty, for every class with a slab's worth of free
 * objects. It needs to know who holds each handle: each slab has a cell
 * per object, the address where the owner keeps the handle, set when the
 * owner publishes the object (after writing it) and cleared when it
 * unpublishes it (to read it without exclusion, or before freeing it) or
 * frees it. Only objects with a cell move; the move rewrites the cell's
 * handle. Readers are excluded by the caller (the store's pool_lock, held
 * for writing around each bounded step), allocation and freeing by the
 * class lock. Each class has its own mutex; a bulk allocation sorts its
 * objects by class and takes each class lock once. Counters are atomics,
 * so reading them is cheap.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "lockdep.h"
#include "pool.h"
#include "util.h"

#define NR_CLASSES ZSW_POOL_NR_CLASSES
#define SLAB_MAX_PAGES 16u
/* Partial slabs are kept in this many lists by fullness. */
#define NR_GROUPS 8u
#define OBJ_NONE UINT16_MAX
#define HANDLE_IDX_BITS 16u
#define EMPTY_CACHE_MIN (UINT64_C(2) << 20)
#define ARENA_SIZE (UINT64_C(2) << 20)

/* Slab table: DIR_SIZE chunks of CHUNK_SIZE slots, up to 16M slabs (at
 * least 64 GiB of pool). Only the directory (32 KiB) is allocated up front. */
#define CHUNK_BITS 12u
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define DIR_SIZE 4096u
#define MAX_SLABS (DIR_SIZE * CHUNK_SIZE)

struct slab {
        uint8_t *mem;
        struct slab *prev, *next; /* in its class's fullness list */
        /* Per object, where its owner keeps its handle (zsw_pool_publish()),
         * NULL while it may not move: free, unpublished or pinned. */
        _Atomic(zsw_handle_t *) *cells;
        uint32_t id;
        uint16_t ncells; /* length of cells */
        uint16_t cls;
        uint16_t pages;     /* mapped length */
        uint16_t used;      /* objects allocated */
        uint16_t free_head; /* first object of the in-slab free list */
        uint16_t bump;      /* objects [bump, nobj) were never handed out */
        int8_t group;       /* fullness list it is on, -1 when full or empty */
        uint32_t trim_gen;  /* cached empty: the pool's trim_gen when it came */
};

struct size_class {
        pthread_mutex_t lock;
        uint32_t size;
        uint16_t nobj;   /* objects per slab */
        uint16_t pages;  /* pages per slab */
        uint32_t nslabs; /* slabs holding objects (partial or full) */
        uint64_t used;   /* objects allocated */
        struct slab *groups[NR_GROUPS];
} __attribute__((aligned(64)));

struct zsw_pool {
        struct size_class classes[NR_CLASSES];

        pthread_mutex_t table_lock; /* slab id allocation, chunk creation */
        _Atomic(struct slab *) *_Atomic *dir;
        uint32_t *free_ids; /* stack of released slab ids */
        size_t n_free_ids, free_ids_cap;
        uint32_t next_id;
        size_t n_chunks;

        /* The uncarved rest of the current arena, [arena, arena + arena_left). */
        pthread_mutex_t arena_lock;
        uint8_t *arena;
        size_t arena_left;

        pthread_mutex_t empty_lock;
        struct slab *empty[SLAB_MAX_PAGES + 1]; /* by length, newest first, linked by next */
        uint64_t empty_bytes;                   /* their bytes */
        size_t empty_count;
        uint32_t trim_gen; /* trim intervals (RELEASE_STALE) so far */

        atomic_uint_fast64_t pool_bytes, mapped_bytes, used_bytes, objects, slabs, meta_bytes,
                cached_bytes, compacted_objects, compacted_bytes;
        /* Objects allocated, and that count at the last zsw_pool_trim()
         * (only its caller touches it). */
        atomic_uint_fast64_t allocs;
        uint64_t allocs_trimmed;
};

static unsigned size_to_class(uint32_t size) {
        return (size - 1) / ZSW_POOL_CLASS_STEP;
}

/* The page count whose tail waste is the smallest fraction of the slab;
 * the smaller slab wins ties, as it drains back to the system sooner. */
static unsigned class_pages(uint32_t size) {
        unsigned best = 1;
        uint64_t best_waste = ZSW_PAGE_SIZE % size; /* scaled by 1 page */

        for (unsigned p = 2; p <= SLAB_MAX_PAGES; p++) {
                uint64_t waste = (p * ZSW_PAGE_SIZE) % size;

                /* waste/p < best_waste/best, without division */
                if (waste * best < best_waste * p) {
                        best = p;
                        best_waste = waste;
                }
        }
        return best;
}

static unsigned slab_group(const struct size_class *c, unsigned used) {
        return MIN((unsigned) used * NR_GROUPS / c->nobj, NR_GROUPS - 1);
}

static void list_del(struct size_class *c, struct slab *s) {
        if (s->prev)
                s->prev->next = s->next;
        else
                c->groups[s->group] = s->next;
        if (s->next)
                s->next->prev = s->prev;
        s->prev = s->next = NULL;
        s->group = -1;
}

static void list_add(struct size_class *c, struct slab *s, unsigned group) {
        s->prev = NULL;
        s->next = c->groups[group];
        if (s->next)
                s->next->prev = s;
        c->groups[group] = s;
        s->group = (int8_t) group;
}

/* Puts a partial slab on the list matching its fullness; full and empty
 * slabs are on none. */
static void slab_relist(struct size_class *c, struct slab *s) {
        int want = s->used == 0 || s->used == c->nobj ? -1 : (int) slab_group(c, s->used);

        if (want == s->group)
                return;
        if (s->group >= 0)
                list_del(c, s);
        if (want >= 0)
                list_add(c, s, (unsigned) want);
}

static _Atomic(struct slab *) *table_slot(const struct zsw_pool *pool, uint32_t id) {
        _Atomic(struct slab *) *chunk =
                atomic_load_explicit(&pool->dir[id >> CHUNK_BITS], memory_order_acquire);

        return &chunk[id & (CHUNK_SIZE - 1)];
}

/* Grows the stack of released ids to hold every id handed out, plus the
 * one about to be, so that table_put_id() never fails on the free path.
 * Called with table_lock held. */
static int table_reserve_locked(struct zsw_pool *pool) {
        size_t cap;
        uint32_t *p;

        if (pool->free_ids_cap > pool->next_id)
                return 0;
        cap = MAX((size_t) 64, pool->free_ids_cap * 2);
        p = realloc(pool->free_ids, cap * sizeof(*p));
        if (!p)
                return -ENOMEM;
        atomic_fetch_add_explicit(&pool->meta_bytes, (cap - pool->free_ids_cap) * sizeof(*p),
                                  memory_order_relaxed);
        pool->free_ids = p;
        pool->free_ids_cap = cap;
        return 0;
}

/* Hands out a never used id, creating its table chunk if needed. Called
 * with table_lock held. */
static int table_new_id_locked(struct zsw_pool *pool, uint32_t *ret_id) {
        uint32_t id = pool->next_id;
        int r;

        if (id >= MAX_SLABS)
                return -ENOMEM;
        r = table_reserve_locked(pool);
        if (r < 0)
                return r;
        if ((id >> CHUNK_BITS) >= pool->n_chunks) {
                _Atomic(struct slab *) *chunk = calloc(CHUNK_SIZE, sizeof(*chunk));

                if (!chunk)
                        return -ENOMEM;
                atomic_store_explicit(&pool->dir[pool->n_chunks++], chunk, memory_order_release);
                atomic_fetch_add_explicit(&pool->meta_bytes, CHUNK_SIZE * sizeof(*chunk),
                                          memory_order_relaxed);
        }
        pool->next_id++;
        *ret_id = id;
        return 0;
}

static int table_get_id(struct zsw_pool *pool, uint32_t *ret_id) {
        int r = 0;

        zsw_mutex_lock(&pool->table_lock, ZSW_LOCK_POOL_TABLE);
        if (pool->n_free_ids > 0)
                *ret_id = pool->free_ids[--pool->n_free_ids];
        else
                r = table_new_id_locked(pool, ret_id);
        zsw_mutex_unlock(&pool->table_lock);
        return r;
}

static void table_put_id(struct zsw_pool *pool, uint32_t id) {
        zsw_mutex_lock(&pool->table_lock, ZSW_LOCK_POOL_TABLE);
        atomic_store_explicit(table_slot(pool, id), NULL, memory_order_relaxed);
        /* Room was made when the id was first handed out. */
        pool->free_ids[pool->n_free_ids++] = id;
        zsw_mutex_unlock(&pool->table_lock);
}

/* Gives the arena's rest back. Called with arena_lock held. */
static void arena_drop_locked(struct zsw_pool *pool) {
        uint64_t left = pool->arena_left;

        if (left > 0) {
                munmap(pool->arena, left);
                atomic_fetch_sub_explicit(&pool->pool_bytes, left, memory_order_relaxed);
                atomic_fetch_sub_explicit(&pool->cached_bytes, left, memory_order_relaxed);
        }
        pool->arena = NULL;
        pool->arena_left = 0;
}

/* Maps and populates a new arena in place of the current one's rest.
 * Called with arena_lock held. */
static int arena_new_locked(struct zsw_pool *pool) {
        uint8_t *m, *a;

        /* Twice the length, to cut an aligned arena out of it. */
        m = mmap(NULL, 2 * ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
                return -ENOMEM;
        a = (uint8_t *) (((uintptr_t) m + ARENA_SIZE - 1) & ~(uintptr_t) (ARENA_SIZE - 1));
        if (a > m)
                munmap(m, (size_t) (a - m));
        munmap(a + ARENA_SIZE, (size_t) (m + ARENA_SIZE - a));
        (void) madvise(a, ARENA_SIZE, MADV_HUGEPAGE);
        /* Populated, so that pool_bytes is resident memory whether the kernel
         * found a huge page or not. (Where the call is refused, the first
         * touches populate, and pool_bytes runs ahead of them.) */
        (void) madvise(a, ARENA_SIZE, MADV_POPULATE_WRITE);
        arena_drop_locked(pool);
        pool->arena = a;
        pool->arena_left = ARENA_SIZE;
        atomic_fetch_add_explicit(&pool->pool_bytes, ARENA_SIZE, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->cached_bytes, ARENA_SIZE, memory_order_relaxed);
        return 0;
}

/* Carves a slab's bytes out of the current arena, or a new one. */
static uint8_t *arena_take(struct zsw_pool *pool, size_t bytes) {
        uint8_t *p = NULL;

        zsw_mutex_lock(&pool->arena_lock, ZSW_LOCK_POOL_ARENA);
        if (pool->arena_left >= bytes || arena_new_locked(pool) >= 0) {
                p = pool->arena;
                pool->arena += bytes;
                pool->arena_left -= bytes;
                atomic_fetch_sub_explicit(&pool->cached_bytes, bytes, memory_order_relaxed);
        }
        zsw_mutex_unlock(&pool->arena_lock);
        return p;
}

/* Releases the arena's rest; returns its bytes. */
static uint64_t arena_release(struct zsw_pool *pool) {
        uint64_t left;

        zsw_mutex_lock(&pool->arena_lock, ZSW_LOCK_POOL_ARENA);
        left = pool->arena_left;
        arena_drop_locked(pool);
        zsw_mutex_unlock(&pool->arena_lock);
        return left;
}

/* Called with the class lock held. */
static int slab_new(struct zsw_pool *pool, unsigned cls, struct slab **ret) {
        struct size_class *c = &pool->classes[cls];
        size_t bytes = (size_t) c->pages * ZSW_PAGE_SIZE;
        _cleanup_free_ struct slab *s = NULL;
        uint32_t id;
        int r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cells = calloc(c->nobj, sizeof(*s->cells));
        if (!s->cells)
                return -ENOMEM;
        s->mem = arena_take(pool, bytes);
        if (!s->mem) {
                free(s->cells);
                return -ENOMEM;
        }
        r = table_get_id(pool, &id);
        if (r < 0) {
                munmap(s->mem, bytes);
                free(s->cells);
                return r;
        }
        s->id = id;
        s->ncells = c->nobj;
        s->cls = (uint16_t) cls;
        s->pages = c->pages;
        s->free_head = OBJ_NONE;
        s->group = -1;
        atomic_store_explicit(table_slot(pool, id), s, memory_order_release);
        atomic_fetch_add_explicit(&pool->mapped_bytes, bytes, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->slabs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->meta_bytes, sizeof(*s) + s->ncells * sizeof(*s->cells),
                                  memory_order_relaxed);
        *ret = TAKE_PTR(s);
        return 0;
}

static int cmp_slab_addr(const void *a, const void *b) {
        const struct slab *x = *(struct slab *const *) a, *y = *(struct slab *const *) b;

        return x->mem < y->mem ? -1 : x->mem > y->mem;
}

/* Gives n empty slabs, out of every list, back to the system: adjacent
 * ones in one munmap each run. Called without locks held. */
static void slabs_release(struct zsw_pool *pool, struct slab **v, size_t n) {
        uint64_t mapped = 0, meta = 0;

        qsort(v, n, sizeof(*v), cmp_slab_addr);
        for (size_t i = 0; i < n;) {
                uint8_t *start = v[i]->mem, *end = start;

                for (; i < n && v[i]->mem == end; i++) {
                        end += (size_t) v[i]->pages * ZSW_PAGE_SIZE;
                        mapped += (uint64_t) v[i]->pages * ZSW_PAGE_SIZE;
                        table_put_id(pool, v[i]->id);
                        meta += sizeof(struct slab) + v[i]->ncells * sizeof(*v[i]->cells);
                        free(v[i]->cells);
                        free(v[i]);
                }
                munmap(start, (size_t) (end - start));
        }
        atomic_fetch_sub_explicit(&pool->mapped_bytes, mapped, memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->pool_bytes, mapped, memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->slabs, n, memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->meta_bytes, meta, memory_order_relaxed);
}

/* What empty_cache_release() gives back of the cache of empty slabs. */
enum release {
        RELEASE_ALL,   /* all of it, with the arena's rest */
        RELEASE_HALF,  /* the older half of each length's list */
        RELEASE_STALE, /* the slabs cached before the last trim and unused since;
                        * starts the next interval */
};

/* How empty_cache_put() caches slabs. */
enum put {
        PUT_FREED, /* emptied by frees: past the bound, the older half goes */
        /* Nothing goes: the rest of a slab cut shorter, slabs compaction
         * emptied (with readers held off: no munmap there; and under
         * churn they are the ones the next allocations reuse, at a
         * fraction of a fresh arena's cost; the next trims release
         * those unused). */
        PUT_KEEP,
};

/* Gives (part of) the cache of empty slabs back to the system, so that
 * the slabs the next allocations need stay (fresh memory for them costs
 * far more than keeping these; the top of this file). Returns the bytes
 * released. */
static uint64_t empty_cache_release(struct zsw_pool *pool, enum release what) {
        struct slab *lists[SLAB_MAX_PAGES + 1] = {}, *stack[256], **batch = stack;
        _cleanup_free_ struct slab **heap = NULL;
        size_t n = 0, count = 0, cap = ARRAY_SIZE(stack);
        uint64_t bytes = 0;

        zsw_mutex_lock(&pool->empty_lock, ZSW_LOCK_POOL_EMPTY);
        for (unsigned p = 0; p <= SLAB_MAX_PAGES; p++) {
                struct slab **tail = &pool->empty[p];

                if (what == RELEASE_STALE) {
                        /* Every slab not cached since the last trim. */
                        struct slab **out = &lists[p];

                        while (*tail)
                                if ((*tail)->trim_gen != pool->trim_gen) {
                                        *out = *tail;
                                        *tail = (*tail)->next;
                                        out = &(*out)->next;
                                        *out = NULL;
                                } else
                                        tail = &(*tail)->next;
                } else {
                        /* Lists are newest first: the older half is a tail. */
                        size_t len = 0;

                        for (struct slab *s = pool->empty[p]; s; s = s->next)
                                len++;
                        for (size_t keep = what == RELEASE_HALF ? len / 2 : 0; keep > 0; keep--)
                                tail = &(*tail)->next;
                        lists[p] = *tail;
                        *tail = NULL;
                }
                for (struct slab *s = lists[p]; s; s = s->next) {
                        bytes += (uint64_t) s->pages * ZSW_PAGE_SIZE;
                        count++;
                }
        }
        pool->empty_bytes -= bytes;
        pool->empty_count -= count;
        if (what == RELEASE_STALE)
                pool->trim_gen++; /* what comes from now on stays a whole interval */
        zsw_mutex_unlock(&pool->empty_lock);
        atomic_fetch_sub_explicit(&pool->cached_bytes, bytes, memory_order_relaxed);

        /* All in one sorted array, so that neighbours of any length merge
         * into one munmap; without memory for it, in fixed batches. */
        if (count > cap) {
                heap = malloc(count * sizeof(*heap));
                if (heap) {
                        batch = heap;
                        cap = count;
                }
        }
        for (unsigned p = 0; p <= SLAB_MAX_PAGES; p++)
                for (struct slab *s = lists[p], *next; s; s = next) {
                        next = s->next;
                        batch[n++] = s;
                        if (n == cap) {
                                slabs_release(pool, batch, n);
                                n = 0;
                        }
                }
        if (n > 0)
                slabs_release(pool, batch, n);
        return what == RELEASE_ALL ? bytes + arena_release(pool) : bytes;
}

/* Past this the free path releases half the cache by itself: a bound
 * for when nothing trims it. */
static uint64_t empty_cache_bound(struct zsw_pool *pool) {
        return MAX(EMPTY_CACHE_MIN,
                   atomic_load_explicit(&pool->pool_bytes, memory_order_relaxed) / 8);
}

/* Caches slabs that emptied (chained through next), as how says. Called
 * without pool locks held. */
static void empty_cache_put(struct zsw_pool *pool, struct slab *dead, enum put how) {
        uint64_t added = 0, cached, bound;

        if (!dead)
                return;
        zsw_mutex_lock(&pool->empty_lock, ZSW_LOCK_POOL_EMPTY);
        for (struct slab *s = dead, *next; s; s = next) {
                next = s->next;
                s->trim_gen = pool->trim_gen;
                s->next = pool->empty[s->pages];
                pool->empty[s->pages] = s;
                added += (uint64_t) s->pages * ZSW_PAGE_SIZE;
                pool->empty_count++;
        }
        pool->empty_bytes += added;
        cached = pool->empty_bytes;
        zsw_mutex_unlock(&pool->empty_lock);
        atomic_fetch_add_explicit(&pool->cached_bytes, added, memory_order_relaxed);

        bound = empty_cache_bound(pool);
        if (cached > bound && how == PUT_FREED)
                empty_cache_release(pool, RELEASE_HALF);
}

/* Takes the shortest cached empty slab at least pages long, or NULL. */
static struct slab *empty_cache_get(struct zsw_pool *pool, unsigned pages) {
        struct slab *s = NULL;

        zsw_mutex_lock(&pool->empty_lock, ZSW_LOCK_POOL_EMPTY);
        while (pages <= SLAB_MAX_PAGES && !(s = pool->empty[pages]))
                pages++;
        if (s) {
                pool->empty[pages] = s->next;
                pool->empty_bytes -= (uint64_t) s->pages * ZSW_PAGE_SIZE;
                pool->empty_count--;
        }
        zsw_mutex_unlock(&pool->empty_lock);
        if (s)
                atomic_fetch_sub_explicit(&pool->cached_bytes, (uint64_t) s->pages * ZSW_PAGE_SIZE,
                                          memory_order_relaxed);
        return s;
}

/* Takes a cached empty slab of the given length, else the shortest
 * longer one cut to that length, its rest cached as a slab of its own:
 * under churn the cache fills with slabs of the lengths that emptied,
 * and memory that is already backed is cheap where a fresh arena is dear
 * (the top of this file). NULL if the cache holds no slab that long. */
static struct slab *empty_cache_take(struct zsw_pool *pool, unsigned pages) {
        struct slab *s = empty_cache_get(pool, pages), *rest;
        uint32_t id;

        if (!s || s->pages == pages)
                return s;
        rest = calloc(1, sizeof(*rest));
        if (!rest || table_get_id(pool, &id) < 0) {
                free(rest);
                return s; /* used whole: the class's objects fit in it */
        }
        *rest = (struct slab) { .mem = s->mem + (size_t) pages * ZSW_PAGE_SIZE,
                                .id = id,
                                .pages = (uint16_t) (s->pages - pages),
                                .free_head = OBJ_NONE,
                                .group = -1 };
        s->pages = (uint16_t) pages;
        atomic_store_explicit(table_slot(pool, id), rest, memory_order_release);
        atomic_fetch_add_explicit(&pool->slabs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->meta_bytes, sizeof(*rest), memory_order_relaxed);
        empty_cache_put(pool, rest, PUT_KEEP);
        return s;
}

/* Takes an object. */
static uint16_t slab_pop(struct size_class *c, struct slab *s) {
        uint16_t idx;

        if (s->free_head != OBJ_NONE) {
                idx = s->free_head;
                memcpy(&s->free_head, s->mem + (size_t) idx * c->size, sizeof(uint16_t));
        } else
                idx = s->bump++;
        if (s->used++ == 0)
                c->nslabs++;
        c->used++;
        return idx;
}

/* Returns the slab to allocate from: the fullest partial one, else a
 * cached empty one (empty_cache_take()), else a new one. Called with the
 * class lock held. */
static int class_pick(struct zsw_pool *pool, unsigned cls, struct slab **ret) {
        struct size_class *c = &pool->classes[cls];
        struct slab *s;

        for (unsigned g = NR_GROUPS; g-- > 0;)
                if (c->groups[g]) {
                        *ret = c->groups[g];
                        return 0;
                }
        s = empty_cache_take(pool, c->pages);
        if (s && s->ncells < c->nobj) {
                /* Every cell of an empty slab is NULL: growing loses none. */
                _Atomic(zsw_handle_t *) *cells = calloc(c->nobj, sizeof(*cells));

                if (!cells) {
                        s->next = NULL;
                        empty_cache_put(pool, s, PUT_KEEP);
                        return -ENOMEM;
                }
                atomic_fetch_add_explicit(&pool->meta_bytes, (c->nobj - s->ncells) * sizeof(*cells),
                                          memory_order_relaxed);
                free(s->cells);
                s->cells = cells;
                s->ncells = c->nobj;
        }
        if (s) {
                /* Carve it anew for this class; its pages stay backed. */
                s->cls = (uint16_t) cls;
                s->bump = 0;
                s->free_head = OBJ_NONE;
                *ret = s;
                return 0;
        }
        return slab_new(pool, cls, ret);
}

/* Frees one object with the class lock held. Returns the slab if it
 * emptied (it is then on no list), or NULL. */
static struct slab *class_free_one(struct size_class *c, struct slab *s, uint16_t idx) {
        atomic_store_explicit(&s->cells[idx], NULL, memory_order_relaxed);
        memcpy(s->mem + (size_t) idx * c->size, &s->free_head, sizeof(uint16_t));
        s->free_head = idx;
        s->used--;
        c->used--;
        if (s->used == 0)
                c->nslabs--;
        slab_relist(c, s);
        return s->used == 0 ? s : NULL;
}

static struct slab *handle_slab(const struct zsw_pool *pool, zsw_handle_t h) {
        uint32_t id = (uint32_t) ((h >> HANDLE_IDX_BITS) - 1);

        return atomic_load_explicit(table_slot(pool, id), memory_order_acquire);
}

void *zsw_pool_map(struct zsw_pool *pool, zsw_handle_t handle) {
        struct slab *s = handle_slab(pool, handle);
        uint16_t idx = handle & ((1u << HANDLE_IDX_BITS) - 1);

        return s->mem + (size_t) idx * pool->classes[s->cls].size;
}

/* Frees handles[order[0..n)], whose classes are sorted: each run of one
 * class under one lock, caching the slabs that emptied after dropping it. */
static void free_sorted(struct zsw_pool *pool, const zsw_handle_t *handles, const uint16_t *order,
                        size_t n) {
        size_t i = 0;

        while (i < n) {
                struct slab *s = handle_slab(pool, handles[order[i]]);
                unsigned cls = s->cls;
                struct size_class *c = &pool->classes[cls];
                struct slab *dead = NULL;
                uint64_t freed = 0;

                zsw_mutex_lock(&c->lock, ZSW_LOCK_POOL_CLASS);
                for (; i < n; i++) {
                        zsw_handle_t h = handles[order[i]];
                        struct slab *e;

                        s = handle_slab(pool, h);
                        if (s->cls != cls)
                                break;
                        e = class_free_one(c, s, h & ((1u << HANDLE_IDX_BITS) - 1));
                        if (e) {
                                /* Chain emptied slabs through their list
                                 * links, which they no longer use. */
                                e->next = dead;
                                dead = e;
                        }
                        freed++;
                }
                zsw_mutex_unlock(&c->lock);

                atomic_fetch_sub_explicit(&pool->objects, freed, memory_order_relaxed);
                atomic_fetch_sub_explicit(&pool->used_bytes, freed * c->size, memory_order_relaxed);
                empty_cache_put(pool, dead, PUT_FREED);
        }
}

/* A counting sort of indices by key (a class number), stable. */
static void sort_by_class(const uint16_t *cls, size_t n, uint16_t *ret_order) {
        uint32_t start[NR_CLASSES + 1] = {};

        for (size_t i = 0; i < n; i++)
                start[cls[i] + 1]++;
        for (unsigned k = 0; k < NR_CLASSES; k++)
                start[k + 1] += start[k];
        for (size_t i = 0; i < n; i++)
                ret_order[start[cls[i]]++] = (uint16_t) i;
}

/* Allocates objects order[*i..] while they are of class cls, writing their
 * handles; advances *i past what it allocated. */
static int class_alloc_run(struct zsw_pool *pool, unsigned cls, const uint16_t *classes,
                           const uint16_t *order, size_t n, size_t *i, zsw_handle_t *handles) {
        struct size_class *c = &pool->classes[cls];
        size_t first = *i;
        int r = 0;

        zsw_mutex_lock(&c->lock, ZSW_LOCK_POOL_CLASS);
        for (; *i < n && classes[order[*i]] == cls; (*i)++) {
                struct slab *s;
                uint16_t idx;

                r = class_pick(pool, cls, &s);
                if (r < 0)
                        break;
                idx = slab_pop(c, s);
                slab_relist(c, s);
                handles[order[*i]] = ((zsw_handle_t) (s->id + 1) << HANDLE_IDX_BITS) | idx;
        }
        zsw_mutex_unlock(&c->lock);

        atomic_fetch_add_explicit(&pool->objects, *i - first, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->used_bytes, (*i - first) * c->size, memory_order_relaxed);
        return r;
}

/* Batches up to this size need no heap for their scratch arrays. */
#define BULK_STACK 64u
/* The order array holds 16-bit indices; larger requests go in pieces. */
#define BULK_MAX UINT16_MAX

static int alloc_chunk(struct zsw_pool *pool, const uint32_t *sizes, size_t n,
                       zsw_handle_t *handles) {
        uint16_t cls_buf[BULK_STACK], order_buf[BULK_STACK];
        _cleanup_free_ uint16_t *cls_heap = NULL, *order_heap = NULL;
        uint16_t *cls = cls_buf, *order = order_buf;
        size_t i = 0;
        int r = 0;

        if (n > BULK_STACK) {
                cls = cls_heap = malloc(n * sizeof(*cls));
                order = order_heap = malloc(n * sizeof(*order));
                if (!cls || !order)
                        return -ENOMEM;
        }
        for (size_t k = 0; k < n; k++)
                cls[k] = (uint16_t) size_to_class(sizes[k]);
        sort_by_class(cls, n, order);

        while (i < n) {
                r = class_alloc_run(pool, cls[order[i]], cls, order, n, &i, handles);
                if (r < 0)
                        break;
        }
        if (r < 0)
                free_sorted(pool, handles, order, i);
        return r;
}

int zsw_pool_alloc_bulk(struct zsw_pool *pool, const uint32_t *sizes, size_t n,
                        zsw_handle_t *ret_handles) {
        zsw_handle_t buf[BULK_STACK];
        _cleanup_free_ zsw_handle_t *heap = NULL;
        zsw_handle_t *handles = buf;
        int r;

        for (size_t k = 0; k < n; k++)
                if (sizes[k] == 0 || sizes[k] > ZSW_POOL_MAX_OBJECT)
                        return -EINVAL;
        if (n > BULK_STACK) {
                handles = heap = malloc(n * sizeof(*handles));
                if (!handles)
                        return -ENOMEM;
        }

        for (size_t done = 0; done < n; done += BULK_MAX) {
                size_t m = MIN(n - done, (size_t) BULK_MAX);

                r = alloc_chunk(pool, sizes + done, m, handles + done);
                if (r < 0) {
                        zsw_pool_free_bulk(pool, handles, done);
                        return r;
                }
        }
        memcpy(ret_handles, handles, n * sizeof(*handles));
        atomic_fetch_add_explicit(&pool->allocs, n, memory_order_relaxed);
        return 0;
}

void zsw_pool_free_bulk(struct zsw_pool *pool, const zsw_handle_t *handles, size_t n) {
        while (n > 0) {
                uint16_t cls_buf[BULK_STACK], order_buf[BULK_STACK];
                size_t m = MIN(n, (size_t) BULK_STACK), k = 0;

                /* Skip the 0 entries and sort the rest by class, piecewise
                 * on the stack: freeing must not allocate. */
                for (size_t j = 0; j < m; j++)
                        if (handles[j] != 0) {
                                cls_buf[k] = handle_slab(pool, handles[j])->cls;
                                order_buf[k] = (uint16_t) j;
                                k++;
                        }
                if (k > 0) {
                        uint16_t sorted[BULK_STACK], cls_k[BULK_STACK];

                        memcpy(cls_k, cls_buf, k * sizeof(uint16_t));
                        sort_by_class(cls_k, k, sorted);
                        for (size_t j = 0; j < k; j++)
                                sorted[j] = order_buf[sorted[j]];
                        free_sorted(pool, handles, sorted, k);
                }
                handles += m;
                n -= m;
        }
}

void zsw_pool_get_stats(struct zsw_pool *pool, struct zsw_pool_stats *ret) {
        *ret = (struct zsw_pool_stats) {
                .pool_bytes = atomic_load_explicit(&pool->pool_bytes, memory_order_relaxed),
                .mapped_bytes = atomic_load_explicit(&pool->mapped_bytes, memory_order_relaxed),
                .used_bytes = atomic_load_explicit(&pool->used_bytes, memory_order_relaxed),
                .objects = atomic_load_explicit(&pool->objects, memory_order_relaxed),
                .slabs = atomic_load_explicit(&pool->slabs, memory_order_relaxed),
                .meta_bytes = atomic_load_explicit(&pool->meta_bytes, memory_order_relaxed),
                .cached_bytes = atomic_load_explicit(&pool->cached_bytes, memory_order_relaxed),
                .compacted_objects =
                        atomic_load_explicit(&pool->compacted_objects, memory_order_relaxed),
                .compacted_bytes =
                        atomic_load_explicit(&pool->compacted_bytes, memory_order_relaxed),
        };
}

uint64_t zsw_pool_shrink(struct zsw_pool *pool) {
        return empty_cache_release(pool, RELEASE_ALL);
}

uint64_t zsw_pool_trim(struct zsw_pool *pool) {
        uint64_t allocs = atomic_load_explicit(&pool->allocs, memory_order_relaxed);
        bool idle = allocs == pool->allocs_trimmed;

        pool->allocs_trimmed = allocs;
        return empty_cache_release(pool, idle ? RELEASE_ALL : RELEASE_STALE);
}

/* ---- compaction -----------------------------------------------------------
 * Within a class, the live objects of the sparsest partial slab move into
 * the fullest one until the sparse slab is empty; it then goes to the empty
 * cache, which the caller releases. An object moves only while it has a
 * cell, and the owner's handle in that cell is rewritten with the move. */

/* Sparse slabs passed over per class and pass because their objects may
 * not move: unpublished or pinned ones are few, and this bounds the walk. */
#define COMPACT_MAX_SKIP 8u

static zsw_handle_t handle_of(const struct slab *s, uint16_t idx) {
        return ((zsw_handle_t) (s->id + 1) << HANDLE_IDX_BITS) | idx;
}

static struct slab *handle_slab_idx(const struct zsw_pool *pool, zsw_handle_t h,
                                    uint16_t *ret_idx) {
        *ret_idx = h & ((1u << HANDLE_IDX_BITS) - 1);
        return handle_slab(pool, h);
}

void zsw_pool_publish(struct zsw_pool *pool, zsw_handle_t *cell) {
        uint16_t idx;
        struct slab *s = handle_slab_idx(pool, *cell, &idx);

        atomic_store_explicit(&s->cells[idx], cell, memory_order_release);
}

void zsw_pool_unpublish(struct zsw_pool *pool, zsw_handle_t handle) {
        uint16_t idx;
        struct slab *s = handle_slab_idx(pool, handle, &idx);

        atomic_store_explicit(&s->cells[idx], NULL, memory_order_relaxed);
}

/* A class worth compacting has at least a slab's worth of free objects in
 * its slabs: then its sparsest slab's objects fit in the others. */
static bool class_fragmented(const struct size_class *c) {
        return (uint64_t) c->nslabs * c->nobj - c->used >= c->nobj;
}

/* The partial slab after the skip sparsest ones (by fullness group). */
static struct slab *class_sparsest(const struct size_class *c, unsigned skip) {
        for (unsigned g = 0; g < NR_GROUPS; g++)
                for (struct slab *s = c->groups[g]; s; s = s->next)
                        if (skip-- == 0)
                                return s;
        return NULL;
}

static struct slab *class_fullest_but(const struct size_class *c, const struct slab * not ) {
        for (unsigned g = NR_GROUPS; g-- > 0;)
                for (struct slab *s = c->groups[g]; s; s = s->next)
                        if (s != not )
                                return s;
        return NULL;
}

/* Moves object idx of src into another partial slab. Class lock held.
 * Returns src if that emptied it, else NULL; *ret_moved false when no
 * other slab has room. */
static struct slab *object_move(struct size_class *c, struct slab *src, uint16_t idx,
                                zsw_handle_t *cell, bool *ret_moved) {
        struct slab *dst = class_fullest_but(c, src);
        uint16_t to;

        *ret_moved = dst != NULL;
        if (!dst)
                return NULL;
        to = slab_pop(c, dst);
        slab_relist(c, dst);
        memcpy(dst->mem + (size_t) to * c->size, src->mem + (size_t) idx * c->size, c->size);
        atomic_store_explicit(&dst->cells[to], cell, memory_order_relaxed);
        *cell = handle_of(dst, to);
        return class_free_one(c, src, idx);
}

/* Compacts class c by up to budget objects; class lock held. Emptied slabs
 * are chained to *dead. Returns the objects moved. */
static size_t class_compact(struct size_class *c, size_t budget, struct slab **dead) {
        size_t moved = 0;
        unsigned skip = 0;

        while (moved < budget && class_fragmented(c) && skip <= COMPACT_MAX_SKIP) {
                struct slab *src = class_sparsest(c, skip), *e = NULL;
                size_t before = moved;

                if (!src)
                        break;
                for (uint16_t i = 0; i < src->bump && !e && moved < budget; i++) {
                        zsw_handle_t *cell =
                                atomic_load_explicit(&src->cells[i], memory_order_acquire);
                        bool ok;

                        if (!cell)
                                continue;
                        e = object_move(c, src, i, cell, &ok);
                        if (!ok)
                                return moved;
                        moved++;
                }
                if (e) {
                        e->next = *dead;
                        *dead = e;
                } else if (moved == before)
                        /* Only objects that may not move left in it (a
                         * later pass may move them): try the next one. */
                        skip++;
        }
        return moved;
}

size_t zsw_pool_compact(struct zsw_pool *pool, size_t max_objects, unsigned *cursor) {
        size_t moved = 0;

        for (; *cursor < NR_CLASSES && moved < max_objects; (*cursor)++) {
                struct size_class *c = &pool->classes[*cursor];
                struct slab *dead = NULL;
                uint64_t freed = 0;
                size_t m;

                zsw_mutex_lock(&c->lock, ZSW_LOCK_POOL_CLASS);
                m = class_compact(c, max_objects - moved, &dead);
                zsw_mutex_unlock(&c->lock);
                for (struct slab *s = dead; s; s = s->next)
                        freed += (uint64_t) s->pages * ZSW_PAGE_SIZE;
                /* No munmap here: the caller holds its readers off. */
                empty_cache_put(pool, dead, PUT_KEEP);
                atomic_fetch_add_explicit(&pool->compacted_objects, m, memory_order_relaxed);
                atomic_fetch_add_explicit(&pool->compacted_bytes, freed, memory_order_relaxed);
                moved += m;
                if (moved >= max_objects)
                        break;
        }
        return moved;
}

int zsw_pool_new(struct zsw_pool **ret) {
        struct zsw_pool *pool;

        pool = calloc(1, sizeof(*pool));
        if (!pool)
                return -ENOMEM;
        pool->dir = calloc(DIR_SIZE, sizeof(*pool->dir));
        if (!pool->dir) {
                free(pool);
                return -ENOMEM;
        }
        pthread_mutex_init(&pool->table_lock, NULL);
        pthread_mutex_init(&pool->empty_lock, NULL);
        pthread_mutex_init(&pool->arena_lock, NULL);
        for (unsigned k = 0; k < NR_CLASSES; k++) {
                struct size_class *c = &pool->classes[k];

                pthread_mutex_init(&c->lock, NULL);
                c->size = (k + 1) * ZSW_POOL_CLASS_STEP;
                c->pages = (uint16_t) class_pages(c->size);
                c->nobj = (uint16_t) (c->pages * ZSW_PAGE_SIZE / c->size);
        }
        atomic_init(&pool->meta_bytes, sizeof(*pool) + DIR_SIZE * sizeof(*pool->dir));
        *ret = pool;
        return 0;
}

struct zsw_pool *zsw_pool_free(struct zsw_pool *pool) {
        if (!pool)
                return NULL;
        for (uint32_t id = 0; id < pool->next_id; id++) {
                struct slab *s = atomic_load_explicit(table_slot(pool, id), memory_order_relaxed);

                if (s) {
                        munmap(s->mem, (size_t) s->pages * ZSW_PAGE_SIZE);
                        free(s->cells);
                        free(s);
                }
        }
        if (pool->arena_left > 0)
                munmap(pool->arena, pool->arena_left);
        for (size_t k = 0; k < pool->n_chunks; k++)
                free((void *) pool->dir[k]);
        for (unsigned k = 0; k < NR_CLASSES; k++)
                pthread_mutex_destroy(&pool->classes[k].lock);
        pthread_mutex_destroy(&pool->table_lock);
        pthread_mutex_destroy(&pool->empty_lock);
        pthread_mutex_destroy(&pool->arena_lock);
        free(pool->dir);
        free(pool->free_ids);
        free(pool);
        return NULL;
}
