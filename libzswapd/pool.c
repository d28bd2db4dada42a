/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pool allocator for compressed payloads: size-class slabs.
 *
 * Every object size is rounded up to a multiple of ZSW_POOL_CLASS_STEP; each
 * of the resulting classes owns slabs, mmap'ed runs of 1..16 pages cut into
 * equal objects, the page count chosen per class so that the slab tail left
 * over is the smallest fraction of the slab. Slab descriptors live outside
 * the slab, so a slab is pure payload and goes back to the system with one
 * munmap when its last object is freed (one empty slab per class is kept as
 * a spare so that a class hovering around a slab boundary does not mmap and
 * munmap on every batch; zsw_pool_shrink() drops the spares).
 *
 * A handle is (slab id + 1) << 16 | object index. Slab ids index a two-level
 * table whose chunks never move once published, so map and free find the
 * slab in O(1) without a lock. The free list of a slab is threaded through
 * its free objects (their first two bytes); objects never handed out yet are
 * taken from a bump index, so a new slab is touched only as it fills.
 * Memory taken from the system (pool_bytes) is therefore counted as the
 * slab pages objects have reached, not the mapped length: a page never
 * touched has no backing, and the last, partly filled slab of each class
 * would otherwise dominate the overhead of a small pool. Transparent huge
 * pages are refused on slabs, for they would back untouched pages.
 *
 * Fragmentation: partial slabs of a class sit in lists by fullness and
 * allocation always takes the fullest one, so that frees concentrate in the
 * emptier slabs and those drain and return to the system. Each class has its
 * own mutex; a bulk allocation sorts its objects by class and takes each
 * class lock once. Counters are atomics, so reading them is cheap.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pool.h"
#include "util.h"

#define NR_CLASSES (ZSW_POOL_MAX_OBJECT / ZSW_POOL_CLASS_STEP)
#define SLAB_MAX_PAGES 16u
/* Partial slabs are kept in this many lists by fullness. */
#define NR_GROUPS 8u
#define OBJ_NONE UINT16_MAX
#define HANDLE_IDX_BITS 16u

/* Slab table: DIR_SIZE chunks of CHUNK_SIZE slots, up to 16M slabs (at
 * least 64 GiB of pool). Only the directory (32 KiB) is allocated up front. */
#define CHUNK_BITS 12u
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define DIR_SIZE 4096u
#define MAX_SLABS (DIR_SIZE * CHUNK_SIZE)

struct slab {
        uint8_t *mem;
        struct slab *prev, *next; /* in its class's fullness list */
        uint32_t id;
        uint16_t cls;
        uint16_t used;      /* objects allocated */
        uint16_t free_head; /* first object of the in-slab free list */
        uint16_t bump;      /* objects [bump, nobj) were never handed out */
        uint16_t touched;   /* pages up to the end of object bump - 1 */
        int8_t group;       /* fullness list it is on, -1 when full or spare */
};

struct size_class {
        pthread_mutex_t lock;
        uint32_t size;
        uint16_t nobj;          /* objects per slab */
        uint16_t pages;         /* pages per slab */
        struct slab *groups[NR_GROUPS];
        struct slab *spare;     /* one empty slab kept mapped */
} __attribute__((aligned(64)));

struct zsw_pool {
        struct size_class classes[NR_CLASSES];

        pthread_mutex_t table_lock; /* slab id allocation, chunk creation */
        _Atomic(struct slab *) *_Atomic *dir;
        uint32_t *free_ids;         /* stack of released slab ids */
        size_t n_free_ids, free_ids_cap;
        uint32_t next_id;
        size_t n_chunks;

        atomic_uint_fast64_t pool_bytes, mapped_bytes, used_bytes, objects, slabs, meta_bytes;
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
        _Atomic(struct slab *) *chunk = atomic_load_explicit(&pool->dir[id >> CHUNK_BITS],
                                                             memory_order_acquire);

        return &chunk[id & (CHUNK_SIZE - 1)];
}

static int table_get_id(struct zsw_pool *pool, uint32_t *ret_id) {
        uint32_t id;

        pthread_mutex_lock(&pool->table_lock);
        if (pool->n_free_ids > 0)
                id = pool->free_ids[--pool->n_free_ids];
        else {
                if (pool->next_id >= MAX_SLABS) {
                        pthread_mutex_unlock(&pool->table_lock);
                        return -ENOMEM;
                }
                id = pool->next_id;
                if ((id >> CHUNK_BITS) >= pool->n_chunks) {
                        _Atomic(struct slab *) *chunk = calloc(CHUNK_SIZE, sizeof(*chunk));

                        if (!chunk) {
                                pthread_mutex_unlock(&pool->table_lock);
                                return -ENOMEM;
                        }
                        atomic_store_explicit(&pool->dir[pool->n_chunks++], chunk,
                                              memory_order_release);
                        atomic_fetch_add_explicit(&pool->meta_bytes,
                                                  CHUNK_SIZE * sizeof(*chunk),
                                                  memory_order_relaxed);
                }
                pool->next_id++;
        }
        pthread_mutex_unlock(&pool->table_lock);
        *ret_id = id;
        return 0;
}

static void table_put_id(struct zsw_pool *pool, uint32_t id) {
        pthread_mutex_lock(&pool->table_lock);
        atomic_store_explicit(table_slot(pool, id), NULL, memory_order_relaxed);
        /* The stack has room: it grew when the id was handed out the first
         * time (see slab_new), so releasing never fails. */
        pool->free_ids[pool->n_free_ids++] = id;
        pthread_mutex_unlock(&pool->table_lock);
}

/* Makes room in the free id stack for every id handed out so far, so that
 * table_put_id() cannot fail on the free path. */
static int table_reserve(struct zsw_pool *pool) {
        int r = 0;

        pthread_mutex_lock(&pool->table_lock);
        if (pool->free_ids_cap < (size_t) pool->next_id + 1) {
                size_t cap = MAX((size_t) 64, pool->free_ids_cap * 2);
                uint32_t *p = realloc(pool->free_ids, cap * sizeof(*p));

                if (p) {
                        atomic_fetch_add_explicit(&pool->meta_bytes,
                                                  (cap - pool->free_ids_cap) * sizeof(*p),
                                                  memory_order_relaxed);
                        pool->free_ids = p;
                        pool->free_ids_cap = cap;
                } else
                        r = -ENOMEM;
        }
        pthread_mutex_unlock(&pool->table_lock);
        return r;
}

/* Called with the class lock held. */
static int slab_new(struct zsw_pool *pool, unsigned cls, struct slab **ret) {
        struct size_class *c = &pool->classes[cls];
        size_t bytes = (size_t) c->pages * ZSW_PAGE_SIZE;
        _cleanup_free_ struct slab *s = NULL;
        uint32_t id;
        int r;

        r = table_reserve(pool);
        if (r < 0)
                return r;
        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s->mem == MAP_FAILED)
                return -ENOMEM;
        (void) madvise(s->mem, bytes, MADV_NOHUGEPAGE);
        r = table_get_id(pool, &id);
        if (r < 0) {
                munmap(s->mem, bytes);
                return r;
        }
        s->id = id;
        s->cls = (uint16_t) cls;
        s->free_head = OBJ_NONE;
        s->group = -1;
        atomic_store_explicit(table_slot(pool, id), s, memory_order_release);
        atomic_fetch_add_explicit(&pool->mapped_bytes, bytes, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->slabs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->meta_bytes, sizeof(*s), memory_order_relaxed);
        *ret = TAKE_PTR(s);
        return 0;
}

/* Called without the class lock: the slab is already out of its class. */
static void slab_destroy(struct zsw_pool *pool, struct slab *s) {
        size_t bytes = (size_t) pool->classes[s->cls].pages * ZSW_PAGE_SIZE;

        table_put_id(pool, s->id);
        munmap(s->mem, bytes);
        atomic_fetch_sub_explicit(&pool->mapped_bytes, bytes, memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->pool_bytes, (uint64_t) s->touched * ZSW_PAGE_SIZE,
                                  memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->slabs, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&pool->meta_bytes, sizeof(*s), memory_order_relaxed);
        free(s);
}

/* Takes an object; adds to *touched the pages it reaches for the first
 * time. */
static uint16_t slab_pop(struct size_class *c, struct slab *s, uint64_t *touched) {
        uint16_t idx;

        if (s->free_head != OBJ_NONE) {
                idx = s->free_head;
                memcpy(&s->free_head, s->mem + (size_t) idx * c->size, sizeof(uint16_t));
        } else {
                uint16_t pages;

                idx = s->bump++;
                pages = (uint16_t) DIV_ROUND_UP((size_t) s->bump * c->size, ZSW_PAGE_SIZE);
                *touched += pages - s->touched;
                s->touched = pages;
        }
        s->used++;
        return idx;
}

/* Returns the slab to allocate from: the fullest partial one, else the
 * spare, else a new one. Called with the class lock held. */
static int class_pick(struct zsw_pool *pool, unsigned cls, struct slab **ret) {
        struct size_class *c = &pool->classes[cls];

        for (unsigned g = NR_GROUPS; g-- > 0;)
                if (c->groups[g]) {
                        *ret = c->groups[g];
                        return 0;
                }
        if (c->spare) {
                *ret = TAKE_PTR(c->spare);
                return 0;
        }
        return slab_new(pool, cls, ret);
}

/* Frees one object with the class lock held. Returns a slab that emptied
 * and must be destroyed once the lock is dropped, or NULL. */
static struct slab *class_free_one(struct size_class *c, struct slab *s, uint16_t idx) {
        memcpy(s->mem + (size_t) idx * c->size, &s->free_head, sizeof(uint16_t));
        s->free_head = idx;
        s->used--;
        slab_relist(c, s);
        if (s->used > 0)
                return NULL;
        if (!c->spare) {
                c->spare = s;
                return NULL;
        }
        return s;
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

/* Sorts n handles so that those of one class are adjacent, then frees
 * each run under one lock, unmapping emptied slabs after dropping it. */
static void free_sorted(struct zsw_pool *pool, const zsw_handle_t *handles,
                        const uint16_t *order, size_t n) {
        size_t i = 0;

        while (i < n) {
                struct slab *s = handle_slab(pool, handles[order[i]]);
                unsigned cls = s->cls;
                struct size_class *c = &pool->classes[cls];
                struct slab *dead = NULL;
                uint64_t freed = 0;

                pthread_mutex_lock(&c->lock);
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
                pthread_mutex_unlock(&c->lock);

                atomic_fetch_sub_explicit(&pool->objects, freed, memory_order_relaxed);
                atomic_fetch_sub_explicit(&pool->used_bytes, freed * c->size,
                                          memory_order_relaxed);
                while (dead) {
                        struct slab *next = dead->next;

                        slab_destroy(pool, dead);
                        dead = next;
                }
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
        uint64_t touched = 0;
        int r = 0;

        pthread_mutex_lock(&c->lock);
        for (; *i < n && classes[order[*i]] == cls; (*i)++) {
                struct slab *s;
                uint16_t idx;

                r = class_pick(pool, cls, &s);
                if (r < 0)
                        break;
                idx = slab_pop(c, s, &touched);
                slab_relist(c, s);
                handles[order[*i]] = ((zsw_handle_t) (s->id + 1) << HANDLE_IDX_BITS) | idx;
        }
        pthread_mutex_unlock(&c->lock);

        atomic_fetch_add_explicit(&pool->pool_bytes, touched * ZSW_PAGE_SIZE,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->objects, *i - first, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->used_bytes, (*i - first) * c->size,
                                  memory_order_relaxed);
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
        };
}

uint64_t zsw_pool_shrink(struct zsw_pool *pool) {
        uint64_t released = 0;

        for (unsigned k = 0; k < NR_CLASSES; k++) {
                struct size_class *c = &pool->classes[k];
                struct slab *s;

                pthread_mutex_lock(&c->lock);
                s = TAKE_PTR(c->spare);
                pthread_mutex_unlock(&c->lock);
                if (s) {
                        released += (uint64_t) s->touched * ZSW_PAGE_SIZE;
                        slab_destroy(pool, s);
                }
        }
        return released;
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
                        munmap(s->mem, (size_t) pool->classes[s->cls].pages * ZSW_PAGE_SIZE);
                        free(s);
                }
        }
        for (size_t k = 0; k < pool->n_chunks; k++)
                free((void *) pool->dir[k]);
        for (unsigned k = 0; k < NR_CLASSES; k++)
                pthread_mutex_destroy(&pool->classes[k].lock);
        pthread_mutex_destroy(&pool->table_lock);
        free(pool->dir);
        free(pool->free_ids);
        free(pool);
        return NULL;
}
