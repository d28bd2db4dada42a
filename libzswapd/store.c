/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The compressed store (see store.h): the batched store pipeline, the load
 * path, invalidation, fork and mremap support, and the accounting.
 *
 * A store batch is carried by a struct store_batch through five stages,
 * modelled on the kernel's zswap_store_pages():
 *
 *   entries   take the batch's entries from the slab cache in one go and
 *             fill them; same-filled pages become values right here
 *   compress  the rest of the batch through the worker's context, no lock
 *   pool      one bulk allocation for all payloads, then copy them in
 *   index     under the owner's lock: drop stale entries, publish all
 *   account   still under the lock: counters, per-owner charge, one LRU
 *             splice for the batch
 *
 * Every stage either completes for the whole batch or fails, and a failure
 * undoes what the earlier stages did (store_batch_abort()), so that a page
 * is never half stored. Index and account share one critical section on
 * purpose: once an entry is in the index a concurrent exclusive load may
 * free it, so its LRU linkage must be in place before the lock is dropped.
 *
 * Reference counts: one per index slot pointing to the entry, plus one per
 * loader or isolation in flight. The owner lock orders index changes; a
 * reference taken under it keeps the payload alive after it is released.
 *
 * Writeback switches an entry from the pool to disk once, never back. The
 * switch holds pool_lock for writing and the locks of every owner of the
 * entry's family (the only owners that can reach it); loads read pool
 * payloads under pool_lock for reading, so pool memory is never freed under
 * a reader, and everything that reads an entry's state holds one of those.
 *
 * Compaction (zsw_store_compact()) moves pool payloads and rewrites
 * entries' handles under pool_lock held for writing, in steps of
 * COMPACT_STEP objects. So every read of a pool payload or of an entry's
 * handle holds pool_lock, except where the object cannot move: a store
 * batch writes its payloads before publishing them to the pool (after the
 * index stage, under the owner lock, before anyone else can reach and free
 * them), and the writeback tier unpublishes (pins) the payloads it writes
 * until the switch or putback. An entry's handles are read and unpublished
 * under pool_lock before they are freed.
 *
 * Lock order: engine-internal.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zstd.h>

#include "entry.h"
#include "index.h"
#include "lockdep.h"
#include "lru.h"
#include "store.h"

/* Counters kept both globally and per owner. */
enum {
        C_PAGES,
        C_PAYLOAD,
        C_SAME,
        C_LOST, /* entries of ZSW_ENTRY_LOST: no memory, no disk */
        C_INCOMPRESSIBLE,
        C_STORES,
        C_LOADS,
        C_INVALIDATIONS,
        C_DISK_PAGES, /* global only: per owner, see struct zsw_lru */
        C_DISK_BYTES,
        C_WRITTEN_BACK,
        C_DISK_READS,
        C_LIMIT_HIT,
        C_REJECT,
        _C_MAX = C_REJECT + _ZSW_REJECT_MAX,
};

typedef _Atomic uint64_t counters_t[_C_MAX];

struct zsw_store {
        struct zsw_store_config cfg;
        struct zsw_pool *pool;
        struct zsw_entry_cache entries;
        counters_t counters;
        struct zsw_histogram hist[_ZSW_LATENCY_MAX];

        pthread_mutex_t owners_lock;
        struct zsw_owner *owners;
        uint64_t next_owner_id; /* under owners_lock */
        uint64_t stats_pass;    /* under owners_lock: zsw_store_get_stats() */
        _Atomic unsigned workers;

        pthread_rwlock_t pool_lock; /* pool payload reads vs. the switch to disk */
        struct zsw_store_limits limits;
        uint64_t accept_bytes;     /* the limit's accept threshold */
        _Atomic bool reached_full; /* refusing until under accept_bytes */
        _Atomic bool reclaim_failing;
        /* zsw_store_export_orphaned(): disk reads failed in a row, over
         * every owner (its one thread alone touches it). */
        unsigned orphan_disk_failures;
};

struct zsw_owner {
        struct zsw_store *store;
        struct zsw_owner_config cfg;
        pthread_mutex_t lock; /* index, and the order of LRU insertions */
        struct zsw_index *index;
        struct zsw_lru *lru;
        counters_t counters;
        struct zsw_histogram hist[_ZSW_LATENCY_MAX];
        uint64_t id;                   /* creation order, for round-robin walks */
        _Atomic bool reached_limit;    /* refusing until under owner_accept_pages() */
        struct zsw_owner *prev, *next; /* in store->owners */
};

struct zsw_worker {
        struct zsw_store *store;
        struct zsw_compress_ctx *cctx[_ZSW_COMPRESSOR_MAX];
        int level[_ZSW_COMPRESSOR_MAX]; /* of cctx[]: owners may differ */
        struct zsw_decompress_ctx *dctx;
        /* Compressed output of a batch, and one page for disk reads. */
        uint8_t (*scratch)[ZSW_PAGE_SIZE];
};

static const char *const reject_names[_ZSW_REJECT_MAX] = {
        [ZSW_REJECT_ENOMEM] = "enomem",
        [ZSW_REJECT_COMPRESS] = "compress",
        [ZSW_REJECT_POOL] = "pool",
        [ZSW_REJECT_INDEX] = "index",
        [ZSW_REJECT_LIMIT] = "limit",
        [ZSW_REJECT_INCOMPRESSIBLE] = "incompressible",
        [ZSW_REJECT_POOL_LIMIT] = "pool_limit",
        [ZSW_REJECT_WRITEBACK_OFF] = "writeback_off",
        [ZSW_REJECT_RECLAIM_FAIL] = "reclaim_fail",
};

const char *zsw_reject_to_string(enum zsw_reject r) {
        return (unsigned) r < _ZSW_REJECT_MAX ? reject_names[r] : NULL;
}

static void count(_Atomic uint64_t *c, int64_t delta) {
        atomic_fetch_add_explicit(c, (uint64_t) delta, memory_order_relaxed);
}

_Static_assert(ZSW_STORE_PAGE_LOST == ZSW_ENTRY_LOST, "store.h names the entry state");

static bool entry_in_pool(const struct zsw_entry *e) {
        return e->state == ZSW_ENTRY_COMPRESSED || e->state == ZSW_ENTRY_RAW;
}

/* A page kept as it was, in the pool or on disk. */
static bool entry_raw(const struct zsw_entry *e) {
        return e->state == ZSW_ENTRY_RAW ||
               (e->state == ZSW_ENTRY_DISK && e->compressor == ZSW_ENTRY_DISK_RAW);
}

/* Changes of the "stored" counters, summed over a batch and applied with
 * one atomic add per counter: the counters are shared by every thread. */
struct charge {
        int64_t pages, payload, same, lost, incompressible;
};

static void charge_add(struct charge *d, const struct zsw_entry *e, int sign) {
        d->pages += sign;
        d->payload += sign * (int64_t) e->length;
        d->same += sign * (e->state == ZSW_ENTRY_SAME);
        d->lost += sign * (e->state == ZSW_ENTRY_LOST);
        d->incompressible += sign * entry_raw(e);
}

static void charge_apply(counters_t c, struct charge *d) {
        if (d->pages)
                count(&c[C_PAGES], d->pages);
        if (d->payload)
                count(&c[C_PAYLOAD], d->payload);
        if (d->same)
                count(&c[C_SAME], d->same);
        if (d->lost)
                count(&c[C_LOST], d->lost);
        if (d->incompressible)
                count(&c[C_INCOMPRESSIBLE], d->incompressible);
        *d = (struct charge) {};
}

/* Adds (sign 1) or removes (sign -1) one entry. */
static void charge(counters_t c, const struct zsw_entry *e, int sign) {
        struct charge d = {};

        charge_add(&d, e, sign);
        charge_apply(c, &d);
}

/* ---- releasing entries ----------------------------------------------------
 * Entries whose last reference is dropped are collected and freed in bulk:
 * one LRU lock round trip and one pool call per chunk. */

#define RELEASE_CHUNK 64u

struct release {
        struct zsw_owner *owner;
        struct zsw_entry *dead[RELEASE_CHUNK];
        size_t n;
        struct charge uncharge; /* of the owner, for slots dropped */
};

/* An on-disk entry of family lru goes: its sectors and its disk charge. */
static void entry_destroy_disk(struct zsw_store *s, struct zsw_lru *lru, struct zsw_entry *e) {
        if (s->cfg.free_disk)
                s->cfg.free_disk(s->cfg.disk_userdata, e->disk_sector, e->length);
        count(&s->counters[C_DISK_PAGES], -1);
        count(&s->counters[C_DISK_BYTES], -(int64_t) e->length);
        atomic_fetch_sub_explicit(&lru->disk_pages, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&lru->disk_bytes, e->length, memory_order_relaxed);
}

/* Frees entries of family lru that nobody references and that are off
 * every LRU. */
static void entries_destroy(struct zsw_store *s, struct zsw_lru *lru, struct zsw_entry *const *v,
                            size_t n) {
        zsw_handle_t handles[RELEASE_CHUNK];
        struct charge d = {};
        size_t nh = 0;

        /* Handles are read and withdrawn from compaction together, so
         * that the object freed is where the entry's payload is. */
        zsw_rwlock_rdlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
        for (size_t i = 0; i < n; i++)
                if (entry_in_pool(v[i])) {
                        handles[nh++] = v[i]->handle;
                        zsw_pool_unpublish(s->pool, v[i]->handle);
                }
        zsw_rwlock_unlock(&s->pool_lock);
        for (size_t i = 0; i < n; i++) {
                if (v[i]->state == ZSW_ENTRY_DISK)
                        entry_destroy_disk(s, lru, v[i]);
                charge_add(&d, v[i], -1);
        }
        if (nh > 0)
                zsw_pool_free_bulk(s->pool, handles, nh);
        zsw_entry_free_bulk(&s->entries, v, n);
        charge_apply(s->counters, &d);
}

static void release_flush(struct release *rel) {
        bool listed = false;

        if (rel->n == 0) {
                charge_apply(rel->owner->counters, &rel->uncharge);
                return;
        }
        /* Only pool-backed entries go on the LRU. Their links are not read
         * here: a concurrent LRU walk may still be moving a dying entry. */
        for (size_t i = 0; i < rel->n && !listed; i++)
                listed = entry_in_pool(rel->dead[i]);
        if (listed) {
                zsw_mutex_lock(&rel->owner->lru->lock, ZSW_LOCK_LRU);
                for (size_t i = 0; i < rel->n; i++)
                        zsw_lru_del_locked(rel->owner->lru, rel->dead[i]);
                zsw_mutex_unlock(&rel->owner->lru->lock);
        }
        entries_destroy(rel->owner->store, rel->owner->lru, rel->dead, rel->n);
        rel->n = 0;
        charge_apply(rel->owner->counters, &rel->uncharge);
}

/* Drops one reference to e. */
static void release_add(struct release *rel, struct zsw_entry *e) {
        if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
                return;
        rel->dead[rel->n++] = e;
        if (rel->n == RELEASE_CHUNK)
                release_flush(rel);
}

static void entries_release(struct zsw_owner *o, struct zsw_entry *const *v, size_t n) {
        struct release rel = { .owner = o };

        for (size_t i = 0; i < n; i++)
                release_add(&rel, v[i]);
        release_flush(&rel);
}

/* erase_range callback: the slot's reference goes, and o's charge. */
static void drop_slot(void *entry, uint64_t pgno, void *userdata) {
        struct release *rel = userdata;

        charge_add(&rel->uncharge, entry, -1);
        release_add(rel, entry);
}

/* Called with o->lock held. */
static uint64_t invalidate_locked(struct zsw_owner *o, uint64_t start, uint64_t end) {
        struct release rel = { .owner = o };
        size_t n;

        if (end > ZSW_INDEX_MAX_PGNO + 1)
                end = ZSW_INDEX_MAX_PGNO + 1;
        if (start >= end)
                return 0;
        n = zsw_index_erase_range(o->index, start, end, drop_slot, &rel);
        release_flush(&rel);
        count(&o->counters[C_INVALIDATIONS], (int64_t) n);
        count(&o->store->counters[C_INVALIDATIONS], (int64_t) n);
        return n;
}

/* ---- the store batch ------------------------------------------------------ */

struct store_batch {
        struct zsw_worker *w;
        struct zsw_owner *o;
        struct zsw_store *s;
        const uint64_t *pgnos;
        const void *const *pages;
        size_t n;

        struct zsw_entry *entries[ZSW_STORE_BATCH_MAX];
        bool have_entries;
        /* Pages left to compress (positions in the batch), and results. */
        uint8_t comp[ZSW_STORE_BATCH_MAX];
        size_t ncomp;
        uint32_t refused; /* bit i: page i incompressible and rejected */
        /* Pool-backed pages and their handles. */
        uint8_t pooled[ZSW_STORE_BATCH_MAX];
        zsw_handle_t handles[ZSW_STORE_BATCH_MAX];
        size_t npool;
        bool have_handles;
        /* Entries this batch displaced from the index, to release. */
        struct zsw_entry *old[ZSW_STORE_BATCH_MAX];
        size_t nold;
        bool stale_dropped;
        bool wake; /* refused at a limit that writeback can make room under */
};

/* The dictionary of o's family, if it has one yet; it lives as long as o. */
static const struct zsw_dict *family_dict(const struct zsw_owner *o) {
        return atomic_load_explicit(&o->lru->dict, memory_order_acquire);
}

/* Makes d the dictionary of family f unless it has one: then false, and d
 * stays the caller's. */
static bool family_publish_dict(struct zsw_lru *f, struct zsw_dict *d) {
        struct zsw_dict *none = NULL;

        return atomic_compare_exchange_strong_explicit(&f->dict, &none, d, memory_order_release,
                                                       memory_order_relaxed);
}

static int stage_fault(struct store_batch *b, enum zsw_store_stage stage, unsigned page) {
        if (_likely_(!b->s->cfg.fault_inject))
                return 0;
        return b->s->cfg.fault_inject(b->s->cfg.fault_userdata, stage, page);
}

static bool page_same_filled(const void *page, uint64_t *ret_value) {
        const uint64_t *w = page;
        uint64_t v = w[0];

        /* Most pages differ at the end already: check there first. */
        if (w[ZSW_PAGE_SIZE / 8 - 1] != v)
                return false;
        for (size_t i = 0; i < ZSW_PAGE_SIZE / 8; i += 8) {
                uint64_t diff = 0;

                for (size_t j = 0; j < 8; j++)
                        diff |= w[i + j] ^ v;
                if (diff)
                        return false;
        }
        *ret_value = v;
        return true;
}

static void page_fill(void *page, uint64_t value) {
        uint64_t *w = page;

        if (value == 0) {
                memset(page, 0, ZSW_PAGE_SIZE);
                return;
        }
        for (size_t i = 0; i < ZSW_PAGE_SIZE / 8; i++)
                w[i] = value;
}

/* Stage 1: entries for the whole batch; same-filled pages are done here. */
static int batch_init_entries(struct store_batch *b) {
        int r = stage_fault(b, ZSW_STAGE_ENTRIES, 0);

        if (r >= 0)
                r = zsw_entry_alloc_bulk(&b->s->entries, b->entries, b->n);
        if (r < 0)
                return r;
        b->have_entries = true;

        /* The pages are usually cold: start all their misses at once
         * rather than one page after the other. */
        for (size_t i = 0; i < b->n; i++) {
                __builtin_prefetch(b->pages[i]);
                __builtin_prefetch((const uint8_t *) b->pages[i] + ZSW_PAGE_SIZE - 8);
        }
        for (size_t i = 0; i < b->n; i++) {
                struct zsw_entry *e = b->entries[i];

                if (page_same_filled(b->pages[i], &e->value))
                        e->state = ZSW_ENTRY_SAME;
                else
                        b->comp[b->ncomp++] = (uint8_t) i;
        }
        return 0;
}

static int worker_cctx(struct zsw_worker *w, const struct zsw_owner_config *cfg,
                       struct zsw_compress_ctx **ret) {
        struct zsw_compress_ctx **slot = &w->cctx[cfg->compressor];
        int r;

        if (!*slot) {
                r = zsw_compress_ctx_new(cfg->compressor, cfg->level, slot);
                if (r < 0)
                        return r;
                w->level[cfg->compressor] = cfg->level;
        } else if (w->level[cfg->compressor] != cfg->level) {
                r = zsw_compress_ctx_set_level(*slot, cfg->level);
                if (r < 0)
                        return r;
                w->level[cfg->compressor] = cfg->level;
        }
        *ret = *slot;
        return 0;
}

_Static_assert((ZSW_WITH_DICT | (_ZSW_COMPRESSOR_MAX - 1)) < ZSW_ENTRY_DISK_RAW,
               "an entry's 4-bit code holds every compressor with and without a dictionary");

/* A family's dictionary is made of DICT_PAGES of its pages, sampled
 * evenly (a reservoir) from DICT_SAMPLE_BATCHES store batches, one
 * compressible page each, once one of its owners holds DICT_SAMPLE_FROM
 * pages: a dictionary costs 80 KiB (zstd's tables more), which a small
 * process would not win back. Evenly, because what a process gives up
 * first is not what it gives up most: a redis under a budget gave up
 * hash-table pages first, and a dictionary of those did nothing for its
 * values (docs/performance.md). */
#define DICT_SAMPLE_FROM 1024u
#define DICT_SAMPLE_BATCHES 64u
#define DICT_PAGES (ZSW_DICT_MAX / ZSW_PAGE_SIZE)

static uint64_t mix64(uint64_t x) {
        x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
        return x ^ (x >> 31);
}

static bool sample_is_zstd_dict(const uint8_t *p) {
        uint32_t magic;

        memcpy(&magic, p, sizeof(magic));
        return magic == ZSTD_MAGIC_DICTIONARY;
}

static void swap_pages(uint8_t *a, uint8_t *b) {
        uint8_t t[ZSW_PAGE_SIZE];

        memcpy(t, a, ZSW_PAGE_SIZE);
        memcpy(a, b, ZSW_PAGE_SIZE);
        memcpy(b, t, ZSW_PAGE_SIZE);
}

static void family_dict_offer(struct store_batch *b, const void *const *src, const uint32_t *lens) {
        struct zsw_lru *f = b->o->lru;
        struct zsw_dict *d = NULL;
        size_t pick = SIZE_MAX;
        uint64_t slot;

        if (b->s->cfg.no_dict ||
            !zsw_compress_dict_applies(b->o->cfg.compressor, b->o->cfg.level) ||
            atomic_load_explicit(&b->o->counters[C_PAGES], memory_order_relaxed) < DICT_SAMPLE_FROM)
                return;
        /* The middle of the batch's compressible pages. */
        for (size_t k = b->ncomp / 2, n = 0; n < b->ncomp && pick == SIZE_MAX; n++, k++)
                if (lens[k % b->ncomp] > 0)
                        pick = k % b->ncomp;
        if (pick == SIZE_MAX)
                return;
        zsw_mutex_lock(&f->sample_lock, ZSW_LOCK_DICT_SAMPLE);
        if (atomic_load_explicit(&f->dict, memory_order_relaxed) ||
            (!f->sample && !(f->sample = malloc(ZSW_DICT_MAX))))
                goto out;
        slot = f->sample_seen < DICT_PAGES ? f->sample_seen
                                           : mix64(f->sample_seen) % (f->sample_seen + 1);
        if (slot < DICT_PAGES)
                memcpy(f->sample + slot * ZSW_PAGE_SIZE, src[pick], ZSW_PAGE_SIZE);
        if (++f->sample_seen < DICT_SAMPLE_BATCHES)
                goto out;
        /* Content that starts as a zstd dictionary does would be parsed
         * as one: start with a page that does not. */
        for (size_t k = 1; k < DICT_PAGES && sample_is_zstd_dict(f->sample); k++)
                swap_pages(f->sample, f->sample + k * ZSW_PAGE_SIZE);
        if (zsw_dict_new(f->sample, ZSW_DICT_MAX, &d) < 0)
                goto out;
        if (family_publish_dict(f, d))
                d = NULL;
        free(f->sample);
        f->sample = NULL;
out:
        zsw_mutex_unlock(&f->sample_lock);
        zsw_dict_free(d);
}

/* Stage 2: the rest of the batch through one compression context, with
 * the family's dictionary when it has one. The output goes to the
 * worker's scratch; the pool stage copies it, because the final size (and
 * so the pool object) is only known afterwards. */
static int batch_compress(struct store_batch *b) {
        const void *src[ZSW_STORE_BATCH_MAX];
        void *dst[ZSW_STORE_BATCH_MAX];
        uint32_t lens[ZSW_STORE_BATCH_MAX];
        const struct zsw_dict *dict = family_dict(b->o);
        struct zsw_compress_ctx *ctx;
        unsigned code;
        uint64_t t0;
        int r;

        r = stage_fault(b, ZSW_STAGE_COMPRESS, 0);
        if (r < 0 || b->ncomp == 0)
                return r;
        r = worker_cctx(b->w, &b->o->cfg, &ctx);
        if (r < 0)
                return r;
        /* Without zstd's tables for this level (no memory), plain. */
        r = zsw_compress_ctx_set_dict(ctx, dict);
        if (r < 0)
                r = zsw_compress_ctx_set_dict(ctx, NULL);
        code = b->o->cfg.compressor | (r > 0 ? ZSW_WITH_DICT : 0);

        for (size_t k = 0; k < b->ncomp; k++) {
                src[k] = b->pages[b->comp[k]];
                dst[k] = b->w->scratch[k];
        }
        t0 = zsw_now_ns();
        r = zsw_compress_batch(ctx, src, dst, b->ncomp, b->s->cfg.max_compressed, lens);
        if (r < 0)
                return r;
        t0 = (zsw_now_ns() - t0) / b->ncomp;
        zsw_histogram_record_n(&b->o->hist[ZSW_LATENCY_COMPRESS], t0, b->ncomp);
        zsw_histogram_record_n(&b->s->hist[ZSW_LATENCY_COMPRESS], t0, b->ncomp);
        if (!dict)
                family_dict_offer(b, src, lens);

        for (size_t k = 0; k < b->ncomp; k++) {
                struct zsw_entry *e = b->entries[b->comp[k]];

                if (lens[k] > 0) {
                        e->state = ZSW_ENTRY_COMPRESSED;
                        e->compressor = code;
                        e->length = (uint16_t) lens[k];
                } else if (b->s->cfg.reject_incompressible) {
                        b->refused |= UINT32_C(1) << b->comp[k];
                } else {
                        e->state = ZSW_ENTRY_RAW;
                        e->length = ZSW_PAGE_SIZE;
                }
        }
        return 0;
}

/* Stage 3: one bulk pool allocation for every payload, then the copies. */
static int batch_pool(struct store_batch *b) {
        uint32_t sizes[ZSW_STORE_BATCH_MAX];
        const void *from[ZSW_STORE_BATCH_MAX];
        int r;

        for (size_t k = 0; k < b->ncomp; k++) {
                unsigned i = b->comp[k];

                if (b->refused & (UINT32_C(1) << i))
                        continue;
                from[b->npool] =
                        b->entries[i]->state == ZSW_ENTRY_RAW ? b->pages[i] : b->w->scratch[k];
                sizes[b->npool] = b->entries[i]->length;
                b->pooled[b->npool++] = (uint8_t) i;
        }
        r = stage_fault(b, ZSW_STAGE_POOL, 0);
        if (r < 0 || b->npool == 0)
                return r;
        r = zsw_pool_alloc_bulk(b->s->pool, sizes, b->npool, b->handles);
        if (r < 0)
                return r;
        b->have_handles = true;

        for (size_t k = 0; k < b->npool; k++) {
                struct zsw_entry *e = b->entries[b->pooled[k]];

                e->handle = b->handles[k];
                memcpy(zsw_pool_map(b->s->pool, e->handle), from[k], sizes[k]);
        }
        return 0;
}

static bool batch_refused(const struct store_batch *b, size_t i) {
        return b->refused & (UINT32_C(1) << i);
}

/* Stage 4, o->lock held: drop the stale entries at the batch's page
 * numbers (whatever happens next: the caller holds the current content),
 * check the limit, publish. On failure, undo this batch's insertions. */
static void batch_drop_stale(struct store_batch *b) {
        struct charge d = {};

        for (size_t i = 0; i < b->n; i++) {
                struct zsw_entry *old = zsw_index_erase(b->o->index, b->pgnos[i]);

                if (old) {
                        charge_add(&d, old, -1);
                        b->old[b->nold++] = old;
                }
        }
        charge_apply(b->o->counters, &d);
        b->stale_dropped = true;
}

/* Why a store refused at a limit is refused, and whether the shrinker
 * should hear of it. */
static enum zsw_reject limit_reason(struct zsw_owner *o, enum zsw_reject reason, bool *ret_wake) {
        *ret_wake = !o->cfg.no_writeback && o->store->limits.wake;
        if (o->cfg.no_writeback)
                return ZSW_REJECT_WRITEBACK_OFF;
        if (atomic_load_explicit(&o->store->reclaim_failing, memory_order_relaxed))
                return ZSW_REJECT_RECLAIM_FAIL;
        return reason;
}

/* o's stored pages in the pool (same-filled ones take none). Written-back
 * pages are counted per family: exact for an owner alone, an estimate
 * within a fork family. */
static uint64_t owner_pool_pages(struct zsw_owner *o) {
        uint64_t pages = atomic_load_explicit(&o->counters[C_PAGES], memory_order_relaxed);
        uint64_t same = atomic_load_explicit(&o->counters[C_SAME], memory_order_relaxed) +
                        atomic_load_explicit(&o->counters[C_LOST], memory_order_relaxed);
        uint64_t disk = atomic_load_explicit(&o->lru->disk_pages, memory_order_relaxed);

        pages -= MIN(pages, same);
        return pages - MIN(pages, disk);
}

/* Where an owner that reached its limit accepts stores again: its accept
 * threshold, low enough that a whole batch fits after it. */
static uint64_t owner_accept_pages(struct zsw_owner *o) {
        uint64_t max = o->cfg.max_pages, pct = o->store->limits.accept_percent ?: 90;

        return MIN(max * pct / 100, max > ZSW_STORE_BATCH_MAX ? max - ZSW_STORE_BATCH_MAX : 0);
}

/* The owner's limit, with the same hysteresis as the pool's. */
static bool owner_full(struct zsw_owner *o, size_t adding) {
        uint64_t pages = owner_pool_pages(o);

        if (o->cfg.max_pages == 0)
                return false;
        if (pages + adding > o->cfg.max_pages) {
                atomic_store_explicit(&o->reached_limit, true, memory_order_relaxed);
                return true;
        }
        if (pages <= owner_accept_pages(o))
                atomic_store_explicit(&o->reached_limit, false, memory_order_relaxed);
        return atomic_load_explicit(&o->reached_limit, memory_order_relaxed);
}

static int batch_index(struct store_batch *b, enum zsw_reject *ret_reason) {
        struct zsw_owner *o = b->o;
        size_t inserted = 0;
        int r = 0;

        batch_drop_stale(b);
        if (owner_full(o, b->npool)) {
                *ret_reason = limit_reason(o, ZSW_REJECT_LIMIT, &b->wake);
                return -ENOSPC;
        }

        *ret_reason = ZSW_REJECT_INDEX;
        for (size_t i = 0; i < b->n; i++) {
                if (batch_refused(b, i))
                        continue;
                r = stage_fault(b, ZSW_STAGE_INDEX, (unsigned) i);
                if (r >= 0)
                        r = zsw_index_insert(o->index, b->pgnos[i], b->entries[i]);
                if (r < 0)
                        break;
                inserted++;
        }
        if (r >= 0)
                return 0;

        for (size_t i = 0; i < b->n && inserted > 0; i++) {
                if (batch_refused(b, i))
                        continue;
                zsw_index_erase(o->index, b->pgnos[i]);
                inserted--;
        }
        return r;
}

/* Stage 5, o->lock held, cannot fail. */
static void batch_account(struct store_batch *b, size_t stored) {
        struct zsw_entry *lru[ZSW_STORE_BATCH_MAX];
        struct charge d = {}, d2;
        size_t nlru = 0;

        for (size_t i = 0; i < b->n; i++) {
                if (batch_refused(b, i))
                        continue;
                charge_add(&d, b->entries[i], 1);
                if (entry_in_pool(b->entries[i]))
                        lru[nlru++] = b->entries[i];
        }
        d2 = d;
        charge_apply(b->o->counters, &d);
        charge_apply(b->s->counters, &d2);
        count(&b->o->counters[C_STORES], (int64_t) stored);
        count(&b->s->counters[C_STORES], (int64_t) stored);
        if (nlru > 0) {
                zsw_mutex_lock(&b->o->lru->lock, ZSW_LOCK_LRU);
                zsw_lru_add_locked(b->o->lru, lru, nlru);
                zsw_mutex_unlock(&b->o->lru->lock);
        }
}

/* Frees what the batch allocated and has not published. */
static void batch_free_unpublished(struct store_batch *b, bool all) {
        struct zsw_entry *v[ZSW_STORE_BATCH_MAX];
        size_t nv = 0;

        for (size_t i = 0; i < b->n; i++)
                if (all || batch_refused(b, i))
                        v[nv++] = b->entries[i];
        if (all && b->have_handles)
                zsw_pool_free_bulk(b->s->pool, b->handles, b->npool);
        if (b->have_entries)
                zsw_entry_free_bulk(&b->s->entries, v, nv);
}

static int store_batch_abort(struct store_batch *b, enum zsw_reject reason, int r) {
        batch_free_unpublished(b, true);
        if (!b->stale_dropped) {
                /* As if the index stage had run: the caller keeps the pages,
                 * so what o had at their page numbers is out of date. */
                zsw_mutex_lock(&b->o->lock, ZSW_LOCK_OWNER);
                batch_drop_stale(b);
                zsw_mutex_unlock(&b->o->lock);
        }
        entries_release(b->o, b->old, b->nold);
        count(&b->o->counters[C_REJECT + reason], (int64_t) b->n);
        count(&b->s->counters[C_REJECT + reason], (int64_t) b->n);
        return zsw_log_errno(b->s->cfg.log, LOG_DEBUG, r,
                             "Store batch of %zu pages failed (%s): %m", b->n,
                             zsw_reject_to_string(reason));
}

/* The global limit, as zswap_check_limits() does it: full at the limit,
 * and full until the pool is back under the accept threshold. */
static bool pool_full(struct zsw_store *s) {
        struct zsw_pool_stats ps;

        if (s->limits.pool_bytes == 0)
                return false;
        zsw_pool_get_stats(s->pool, &ps);
        if (ps.used_bytes >= s->limits.pool_bytes) {
                count(&s->counters[C_LIMIT_HIT], 1);
                atomic_store_explicit(&s->reached_full, true, memory_order_relaxed);
                return true;
        }
        if (ps.used_bytes <= s->accept_bytes)
                atomic_store_explicit(&s->reached_full, false, memory_order_relaxed);
        return atomic_load_explicit(&s->reached_full, memory_order_relaxed);
}

static int batch_check(const struct store_batch *b) {
        if (b->n == 0 || b->n > ZSW_STORE_BATCH_MAX)
                return -EINVAL;
        for (size_t i = 0; i < b->n; i++) {
                if (b->pgnos[i] > ZSW_INDEX_MAX_PGNO)
                        return -ERANGE;
                for (size_t j = 0; j < i; j++)
                        if (b->pgnos[i] == b->pgnos[j])
                                return -EINVAL;
        }
        return 0;
}

int zsw_store_pages(struct zsw_worker *w, struct zsw_owner *o, const uint64_t *pgnos,
                    const void *const *pages, size_t n, uint32_t *ret_stored) {
        struct store_batch b = {
                .w = w, .o = o, .s = o->store, .pgnos = pgnos, .pages = pages, .n = n
        };
        enum zsw_reject reason;
        uint64_t t0 = zsw_now_ns();
        size_t stored;
        int r;

        r = batch_check(&b);
        if (r < 0)
                return r;

        if (pool_full(b.s)) {
                reason = atomic_load_explicit(&b.s->reclaim_failing, memory_order_relaxed)
                                 ? ZSW_REJECT_RECLAIM_FAIL
                                 : ZSW_REJECT_POOL_LIMIT;
                if (b.s->limits.wake)
                        b.s->limits.wake(b.s->limits.userdata);
                return store_batch_abort(&b, reason, -ENOSPC);
        }
        r = batch_init_entries(&b);
        if (r < 0)
                return store_batch_abort(&b, ZSW_REJECT_ENOMEM, r);
        r = batch_compress(&b);
        if (r < 0)
                return store_batch_abort(&b, r == -ENOMEM ? ZSW_REJECT_ENOMEM : ZSW_REJECT_COMPRESS,
                                         r);
        r = batch_pool(&b);
        if (r < 0)
                return store_batch_abort(&b, ZSW_REJECT_POOL, r);

        stored = n - (size_t) __builtin_popcount(b.refused);
        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        r = batch_index(&b, &reason);
        if (r >= 0) {
                batch_account(&b, stored);
                /* Written and published: compaction may move them now,
                 * before anyone else can reach (and free) them. */
                for (size_t k = 0; k < b.npool; k++)
                        zsw_pool_publish(b.s->pool, &b.entries[b.pooled[k]]->handle);
        }
        zsw_mutex_unlock(&o->lock);
        if (r < 0) {
                if (b.wake)
                        b.s->limits.wake(b.s->limits.userdata);
                return store_batch_abort(&b, reason, r);
        }

        /* Published: only the displaced and refused entries are left. */
        entries_release(o, b.old, b.nold);
        if (b.refused) {
                batch_free_unpublished(&b, false);
                count(&o->counters[C_REJECT + ZSW_REJECT_INCOMPRESSIBLE],
                      __builtin_popcount(b.refused));
                count(&b.s->counters[C_REJECT + ZSW_REJECT_INCOMPRESSIBLE],
                      __builtin_popcount(b.refused));
        }
        t0 = (zsw_now_ns() - t0) / n;
        zsw_histogram_record_n(&o->hist[ZSW_LATENCY_STORE], t0, n);
        zsw_histogram_record_n(&b.s->hist[ZSW_LATENCY_STORE], t0, n);
        if (ret_stored)
                *ret_stored = (uint32_t) (((UINT64_C(1) << n) - 1) & ~(uint64_t) b.refused);
        return (int) stored;
}

/* ---- loads ---------------------------------------------------------------- */

/* A payload on disk: on disk for good (the switch is one way), so the read
 * needs no lock; the caller's reference keeps its sectors allocated. */
static int entry_read_disk(struct zsw_worker *w, const struct zsw_dict *dict, uint64_t sector,
                           uint32_t len, unsigned compressor, void *buf) {
        struct zsw_store *s = w->store;
        uint8_t *tmp = w->scratch[ZSW_STORE_BATCH_MAX];
        int r;

        if (!s->cfg.read_disk)
                return -EIO;
        if (compressor == ZSW_ENTRY_DISK_RAW)
                return s->cfg.read_disk(s->cfg.disk_userdata, sector, len, buf) ?: 1;
        r = s->cfg.read_disk(s->cfg.disk_userdata, sector, len, tmp);
        if (r < 0)
                return r;
        return zsw_decompress(w->dctx, compressor, dict, tmp, len, buf) ?: 1;
}

/* Copies e's page, an entry of o's family, to buf. e is referenced by the
 * caller. Returns 0, or 1 when the page came from disk. */
static int entry_read(struct zsw_worker *w, const struct zsw_owner *o, struct zsw_entry *e,
                      void *buf) {
        struct zsw_store *s = w->store;
        int r = -EINVAL;

        /* Pool memory is freed by the switch to disk, which waits for us. */
        zsw_rwlock_rdlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
        switch (e->state) {
        case ZSW_ENTRY_SAME:
                page_fill(buf, e->value);
                r = 0;
                break;
        case ZSW_ENTRY_RAW:
                memcpy(buf, zsw_pool_map(s->pool, e->handle), ZSW_PAGE_SIZE);
                r = 0;
                break;
        case ZSW_ENTRY_COMPRESSED:
                r = zsw_decompress(w->dctx, e->compressor, family_dict(o),
                                   zsw_pool_map(s->pool, e->handle), e->length, buf);
                break;
        case ZSW_ENTRY_DISK: {
                uint64_t sector = e->disk_sector;
                uint32_t len = e->length;
                unsigned compressor = e->compressor;

                zsw_rwlock_unlock(&s->pool_lock);
                return entry_read_disk(w, family_dict(o), sector, len, compressor, buf);
        }
        case ZSW_ENTRY_LOST:
                r = -ENODATA;
                break;
        }
        zsw_rwlock_unlock(&s->pool_lock);
        return r;
}

int zsw_store_load(struct zsw_worker *w, struct zsw_owner *o, uint64_t pgno, void *buf,
                   unsigned flags) {
        bool exclusive = flags & ZSW_LOAD_EXCLUSIVE;
        uint64_t t0 = zsw_now_ns();
        struct zsw_entry *e;
        int r;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        e = exclusive ? zsw_index_erase(o->index, pgno) : zsw_index_lookup(o->index, pgno);
        if (!e) {
                zsw_mutex_unlock(&o->lock);
                return -ENOENT;
        }
        if (exclusive)
                /* The slot's reference becomes ours. */
                charge(o->counters, e, -1);
        else {
                atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
                atomic_store_explicit(&e->referenced, 1, memory_order_relaxed);
        }
        zsw_mutex_unlock(&o->lock);

        r = entry_read(w, o, e, buf);
        if (r < 0 && exclusive) {
                /* Keep the page for another try rather than lose it. */
                zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
                if (!zsw_index_lookup(o->index, pgno) && zsw_index_insert(o->index, pgno, e) >= 0) {
                        charge(o->counters, e, 1);
                        e = NULL;
                }
                zsw_mutex_unlock(&o->lock);
        }
        if (e)
                entries_release(o, &e, 1);
        if (r == -ENODATA)
                return r; /* lost: no error of ours, the caller says what it does */
        if (r < 0)
                return zsw_log_errno(o->store->cfg.log, LOG_ERR, r,
                                     "Failed to load page 0x%" PRIx64 ": %m", pgno);
        if (r > 0) {
                count(&o->counters[C_DISK_READS], 1);
                count(&o->store->counters[C_DISK_READS], 1);
        }

        t0 = zsw_now_ns() - t0;
        zsw_histogram_record(&o->hist[ZSW_LATENCY_LOAD], t0);
        zsw_histogram_record(&o->store->hist[ZSW_LATENCY_LOAD], t0);
        count(&o->counters[C_LOADS], 1);
        count(&o->store->counters[C_LOADS], 1);
        return 0;
}

/* Where e's payload is on disk, if it is; the switch is one way, so an
 * entry seen on disk stays there while referenced. */
static bool entry_on_disk(struct zsw_store *s, struct zsw_entry *e, uint64_t *ret_sector,
                          uint32_t *ret_len, unsigned *ret_compressor) {
        bool disk;

        zsw_rwlock_rdlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
        disk = e->state == ZSW_ENTRY_DISK;
        if (disk) {
                *ret_sector = e->disk_sector;
                *ret_len = e->length;
                *ret_compressor = e->compressor;
        }
        zsw_rwlock_unlock(&s->pool_lock);
        return disk;
}

/* The disk part of a run: one batched read into the worker's scratch, then
 * each payload into place. Returns how many of the n succeeded, in order. */
static size_t run_read_disk(struct zsw_worker *w, const struct zsw_dict *dict,
                            const uint64_t *sectors, const uint32_t *lens,
                            const unsigned *compressors, void *const *bufs, size_t n) {
        struct zsw_store *s = w->store;
        void *dsts[ZSW_STORE_BATCH_MAX];
        size_t i;

        for (i = 0; i < n; i++)
                dsts[i] = w->scratch[i];
        if (!s->cfg.read_disk_batch ||
            s->cfg.read_disk_batch(s->cfg.disk_userdata, sectors, lens, n, dsts) < 0)
                /* One at a time: a failure then only shortens the run. */
                for (i = 0; i < n; i++)
                        if (!s->cfg.read_disk || s->cfg.read_disk(s->cfg.disk_userdata, sectors[i],
                                                                  lens[i], dsts[i]) < 0)
                                break;
        n = i;
        for (i = 0; i < n; i++) {
                if (compressors[i] == ZSW_ENTRY_DISK_RAW)
                        memcpy(bufs[i], dsts[i], ZSW_PAGE_SIZE);
                else if (zsw_decompress(w->dctx, compressors[i], dict, dsts[i], lens[i], bufs[i]) <
                         0)
                        break;
        }
        return i;
}

int zsw_store_load_run(struct zsw_worker *w, struct zsw_owner *o, uint64_t first, size_t n,
                       void *const *bufs) {
        struct zsw_entry *v[ZSW_STORE_BATCH_MAX];
        uint64_t sectors[ZSW_STORE_BATCH_MAX];
        uint32_t lens[ZSW_STORE_BATCH_MAX];
        unsigned compressors[ZSW_STORE_BATCH_MAX];
        void *disk_bufs[ZSW_STORE_BATCH_MAX];
        size_t got = 0, ok = 0, ndisk = 0, disk_ok, disk_at[ZSW_STORE_BATCH_MAX];
        int r = 0;

        if (first > ZSW_INDEX_MAX_PGNO)
                return 0;
        n = MIN(MIN(n, (size_t) ZSW_STORE_BATCH_MAX), ZSW_INDEX_MAX_PGNO + 1 - first);
        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        for (; got < n; got++) {
                struct zsw_entry *e = zsw_index_lookup(o->index, first + got);

                if (!e)
                        break;
                atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
                atomic_store_explicit(&e->referenced, 1, memory_order_relaxed);
                v[got] = e;
        }
        zsw_mutex_unlock(&o->lock);

        /* Pages in memory first; the run stops at the first that fails. */
        for (; ok < got; ok++) {
                if (entry_on_disk(o->store, v[ok], &sectors[ndisk], &lens[ndisk],
                                  &compressors[ndisk])) {
                        disk_at[ndisk] = ok;
                        disk_bufs[ndisk++] = bufs[ok];
                        continue;
                }
                r = entry_read(w, o, v[ok], bufs[ok]);
                if (r < 0)
                        break;
                /* Switched to disk since we looked: it came from there. */
                if (r > 0) {
                        count(&o->counters[C_DISK_READS], 1);
                        count(&o->store->counters[C_DISK_READS], 1);
                }
        }
        /* Disk pages before the first failure, together. */
        disk_ok = run_read_disk(w, family_dict(o), sectors, lens, compressors, disk_bufs, ndisk);
        if (disk_ok < ndisk) {
                ok = disk_at[disk_ok];
                r = -EIO;
        }
        entries_release(o, v, got);
        count(&o->counters[C_LOADS], (int64_t) ok);
        count(&o->store->counters[C_LOADS], (int64_t) ok);
        count(&o->counters[C_DISK_READS], (int64_t) disk_ok);
        count(&o->store->counters[C_DISK_READS], (int64_t) disk_ok);
        if (ok == 0 && r == -ENODATA)
                return r;
        if (ok == 0 && r < 0)
                return zsw_log_errno(o->store->cfg.log, LOG_ERR, r,
                                     "Failed to load page 0x%" PRIx64 ": %m", first);
        return (int) ok;
}

bool zsw_store_contains(struct zsw_owner *o, uint64_t pgno) {
        bool found;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        found = zsw_index_lookup(o->index, pgno) != NULL;
        zsw_mutex_unlock(&o->lock);
        return found;
}

bool zsw_store_next(struct zsw_owner *o, uint64_t from, uint64_t *ret_pgno) {
        bool found;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        found = zsw_index_next(o->index, from, ret_pgno) != NULL;
        zsw_mutex_unlock(&o->lock);
        return found;
}

uint64_t zsw_store_invalidate(struct zsw_owner *o, uint64_t start, uint64_t n) {
        uint64_t r;

        if (start > ZSW_INDEX_MAX_PGNO || n == 0)
                return 0;
        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        r = invalidate_locked(o, start, start + MIN(n, ZSW_INDEX_MAX_PGNO + 1 - start));
        zsw_mutex_unlock(&o->lock);
        return r;
}

static void forget_slot(void *entry, uint64_t pgno, void *userdata) {
}

/* o->lock held. Inserts the entries of [old, old + n) at new + offset;
 * on failure removes what it inserted. */
static int move_locked(struct zsw_owner *o, uint64_t old, uint64_t new, uint64_t n,
                       uint64_t *ret_moved) {
        uint64_t pgno, moved = 0;
        struct zsw_entry *e;
        int r = 0;

        for (e = zsw_index_next(o->index, old, &pgno); e && pgno < old + n;
             e = zsw_index_after(o->index, pgno, &pgno)) {
                r = zsw_index_insert(o->index, new + (pgno - old), e);
                if (r < 0) {
                        /* The destination was emptied first: all of it is ours. */
                        zsw_index_erase_range(o->index, new, new + n, forget_slot, NULL);
                        return r;
                }
                moved++;
        }
        zsw_index_erase_range(o->index, old, old + n, forget_slot, NULL);
        *ret_moved = moved;
        return 0;
}

/* Checks a move of n pages from old_start to new_start: 1 when there is
 * nothing to move, 0 to go on, -ERANGE past the index, -EINVAL overlapping. */
static int move_check(uint64_t old_start, uint64_t new_start, uint64_t n) {
        if (n == 0 || old_start == new_start)
                return 1;
        if (old_start > ZSW_INDEX_MAX_PGNO + 1 - n || new_start > ZSW_INDEX_MAX_PGNO + 1 - n ||
            n > ZSW_INDEX_MAX_PGNO + 1)
                return -ERANGE;
        if (old_start < new_start + n && new_start < old_start + n)
                return -EINVAL;
        return 0;
}

int zsw_store_move(struct zsw_owner *o, uint64_t old_start, uint64_t new_start, uint64_t n) {
        uint64_t moved = 0;
        int r;

        r = move_check(old_start, new_start, n);
        if (r != 0)
                return r > 0 ? 0 : r;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        invalidate_locked(o, new_start, new_start + n);
        r = move_locked(o, old_start, new_start, n, &moved);
        zsw_mutex_unlock(&o->lock);
        if (r < 0)
                return zsw_log_errno(o->store->cfg.log, LOG_WARNING, r,
                                     "Failed to move %" PRIu64 " pages: %m", n);
        return (int) MIN(moved, (uint64_t) INT32_MAX);
}

int zsw_store_move_rest(struct zsw_owner *o, uint64_t old_start, uint64_t new_start, uint64_t n) {
        uint64_t pgno, moved = 0;
        struct zsw_entry *e;
        bool emptied;
        int r;

        r = move_check(old_start, new_start, n);
        if (r != 0)
                return r > 0 ? 0 : r;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        /* Whether the move had emptied the destination: an entry is at
         * both places (copied), or none is left at the source (all moved).
         * If not, it is emptied now, as the move does first. */
        e = zsw_index_next(o->index, old_start, &pgno);
        emptied = !e || pgno >= old_start + n;
        for (; !emptied && e && pgno < old_start + n; e = zsw_index_after(o->index, pgno, &pgno))
                emptied = zsw_index_lookup(o->index, new_start + (pgno - old_start)) == e;
        if (!emptied)
                invalidate_locked(o, new_start, new_start + n);
        for (e = zsw_index_next(o->index, old_start, &pgno); e && pgno < old_start + n;
             e = zsw_index_after(o->index, pgno, &pgno)) {
                uint64_t to = new_start + (pgno - old_start);

                if (zsw_index_lookup(o->index, to) == e) {
                        /* Copied and not yet dropped at its source: the
                         * entry is at both places, and a loaded index
                         * holds a reference for each. */
                        invalidate_locked(o, pgno, pgno + 1);
                } else {
                        invalidate_locked(o, to, to + 1);
                        r = zsw_index_insert(o->index, to, e);
                        if (r < 0)
                                break;
                        zsw_index_erase_range(o->index, pgno, pgno + 1, forget_slot, NULL);
                }
                moved++;
        }
        zsw_mutex_unlock(&o->lock);
        return r < 0 ? r : (int) MIN(moved, (uint64_t) INT32_MAX);
}

/* ---- writeback interface -------------------------------------------------- */

size_t zsw_store_isolate(struct zsw_owner *o, struct zsw_entry **ret, size_t n) {
        return zsw_lru_isolate(o->lru, ret, n);
}

void zsw_store_putback(struct zsw_owner *o, struct zsw_entry *const *entries, size_t n) {
        struct zsw_entry *dead, *v[RELEASE_CHUNK];
        size_t nv = 0;

        /* Entries still in the pool may move again (see entry_payload). */
        zsw_rwlock_rdlock(&o->store->pool_lock, ZSW_LOCK_STORE_POOL);
        for (size_t i = 0; i < n; i++)
                if (entry_in_pool(entries[i]))
                        zsw_pool_publish(o->store->pool, &entries[i]->handle);
        zsw_rwlock_unlock(&o->store->pool_lock);
        dead = zsw_lru_putback(o->lru, entries, n);

        while (dead) {
                v[nv++] = dead;
                dead = dead->next;
                if (nv == RELEASE_CHUNK || !dead) {
                        for (size_t i = 0; i < nv; i++)
                                v[i]->next = NULL;
                        entries_destroy(o->store, o->lru, v, nv);
                        nv = 0;
                }
        }
}

int zsw_store_entry_payload(struct zsw_store *s, struct zsw_entry *e, const void **ret_data,
                            uint32_t *ret_len, unsigned *ret_code) {
        if (!entry_in_pool(e))
                return -EINVAL;
        /* The write reads the payload without pool_lock: pinned until the
         * switch to disk frees it or zsw_store_putback(). */
        zsw_rwlock_rdlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
        zsw_pool_unpublish(s->pool, e->handle);
        *ret_data = zsw_pool_map(s->pool, e->handle);
        zsw_rwlock_unlock(&s->pool_lock);
        *ret_len = e->length;
        if (e->state == ZSW_ENTRY_RAW)
                return 1;
        *ret_code = e->compressor;
        return 0;
}

/* Locks (or unlocks) every owner of o's family, in list order: the owners
 * that can reach o's entries. Owners pinned by the caller. */
static void family_lock(struct zsw_owner *o, bool lock) {
        for (struct zsw_owner *f = o->store->owners; f; f = f->next)
                if (f->lru == o->lru) {
                        if (lock)
                                zsw_mutex_lock(&f->lock, ZSW_LOCK_OWNER);
                        else
                                zsw_mutex_unlock(&f->lock);
                }
}

size_t zsw_store_writeback_done(struct zsw_owner *o, struct zsw_entry *const *entries,
                                const uint64_t *sectors, size_t n) {
        struct zsw_store *s = o->store;
        zsw_handle_t handles[ZSW_STORE_BATCH_MAX];
        uint64_t moved = 0, bytes = 0;
        size_t done = 0;

        while (done < n) {
                size_t m = MIN(n - done, (size_t) ZSW_STORE_BATCH_MAX), nh = 0;

                family_lock(o, true);
                zsw_rwlock_wrlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
                for (size_t i = done; i < done + m; i++) {
                        struct zsw_entry *e = entries[i];

                        /* Only our reference left: no index slot has it
                         * and none can get it again. Nothing to switch;
                         * the space written must not leak. */
                        if (atomic_load_explicit(&e->refs, memory_order_acquire) == 1) {
                                if (s->cfg.free_disk)
                                        s->cfg.free_disk(s->cfg.disk_userdata, sectors[i],
                                                         e->length);
                                continue;
                        }
                        handles[nh++] = e->handle;
                        zsw_pool_unpublish(s->pool, e->handle);
                        if (e->state == ZSW_ENTRY_RAW)
                                e->compressor = ZSW_ENTRY_DISK_RAW;
                        e->state = ZSW_ENTRY_DISK;
                        e->disk_sector = sectors[i];
                        moved++;
                        bytes += e->length;
                }
                zsw_rwlock_unlock(&s->pool_lock);
                family_lock(o, false);
                /* No reader can reach the old payloads any more. */
                zsw_pool_free_bulk(s->pool, handles, nh);
                done += m;
        }
        /* Charged before our references go: the last one destroys the
         * entry and takes the charge back. */
        count(&s->counters[C_DISK_PAGES], (int64_t) moved);
        count(&s->counters[C_DISK_BYTES], (int64_t) bytes);
        count(&s->counters[C_WRITTEN_BACK], (int64_t) moved);
        count(&o->counters[C_WRITTEN_BACK], (int64_t) moved);
        atomic_fetch_add_explicit(&o->lru->disk_pages, moved, memory_order_relaxed);
        atomic_fetch_add_explicit(&o->lru->disk_bytes, bytes, memory_order_relaxed);
        entries_release(o, entries, n);
        return moved;
}

/* Objects moved per pool_lock hold: loads wait for one step at most. */
#define COMPACT_STEP 64u
/* Free room in slabs below which compaction is not worth a pass. */
#define COMPACT_MIN_SLACK (UINT64_C(1) << 20)
uint64_t zsw_store_compact(struct zsw_store *s, bool force) {
        unsigned cursor = 0;
        struct zsw_pool_stats ps;

        zsw_pool_get_stats(s->pool, &ps);
        if (!force && ps.pool_bytes - MIN(ps.pool_bytes, ps.used_bytes + ps.cached_bytes) <
                              MAX(COMPACT_MIN_SLACK, ps.used_bytes / 64))
                /* The cache of empty slabs is for the churn of the
                 * moment, not for keeps. */
                return zsw_pool_trim(s->pool);

        while (cursor < ZSW_POOL_NR_CLASSES) {
                zsw_rwlock_wrlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
                (void) zsw_pool_compact(s->pool, COMPACT_STEP, &cursor);
                zsw_rwlock_unlock(&s->pool_lock);
        }
        return force ? zsw_pool_shrink(s->pool) : zsw_pool_trim(s->pool);
}

void zsw_store_owners_lock(struct zsw_store *s) {
        zsw_mutex_lock(&s->owners_lock, ZSW_LOCK_OWNERS);
}

void zsw_store_owners_unlock(struct zsw_store *s) {
        zsw_mutex_unlock(&s->owners_lock);
}

struct zsw_owner *zsw_store_owner_next(struct zsw_store *s, uint64_t *cursor) {
        struct zsw_owner *next = NULL, *first = NULL;

        for (struct zsw_owner *o = s->owners; o; o = o->next) {
                if (o->id > *cursor && (!next || o->id < next->id))
                        next = o;
                if (!first || o->id < first->id)
                        first = o;
        }
        next = next ?: first;
        if (next)
                *cursor = next->id;
        return next;
}

int zsw_store_set_limits(struct zsw_store *s, const struct zsw_store_limits *limits) {
        unsigned pct = limits->accept_percent ?: 90;

        if (pct > 100)
                return -EINVAL;
        s->limits = *limits;
        s->limits.accept_percent = pct;
        s->accept_bytes = limits->pool_bytes / 100 * pct + limits->pool_bytes % 100 * pct / 100;
        atomic_store(&s->reached_full, false);
        return 0;
}

void zsw_store_set_reclaim_failing(struct zsw_store *s, bool failing) {
        atomic_store_explicit(&s->reclaim_failing, failing, memory_order_relaxed);
}

bool zsw_store_over_threshold(struct zsw_store *s) {
        struct zsw_pool_stats ps;

        if (s->limits.pool_bytes == 0)
                return false;
        zsw_pool_get_stats(s->pool, &ps);
        return ps.used_bytes > s->accept_bytes;
}

bool zsw_store_owner_may_writeback(struct zsw_owner *o) {
        return !o->cfg.no_writeback;
}

bool zsw_store_owner_over_threshold(struct zsw_owner *o) {
        if (o->cfg.max_pages == 0 || o->cfg.no_writeback)
                return false;
        return atomic_load_explicit(&o->reached_limit, memory_order_relaxed) &&
               owner_pool_pages(o) > owner_accept_pages(o);
}

/* ---- objects and statistics ----------------------------------------------- */

int zsw_store_new(const struct zsw_store_config *config, struct zsw_store **ret) {
        struct zsw_store_config cfg = config ? *config : (struct zsw_store_config) {};
        struct zsw_store *s;
        int r;

        if ((unsigned) cfg.compressor >= _ZSW_COMPRESSOR_MAX || cfg.max_compressed > ZSW_PAGE_SIZE)
                return -EINVAL;
        if (cfg.max_compressed == 0)
                cfg.max_compressed = ZSW_PAGE_SIZE * 7 / 8;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        s->cfg = cfg;
        r = zsw_pool_new(&s->pool);
        if (r < 0) {
                free(s);
                return r;
        }
        zsw_entry_cache_init(&s->entries);
        pthread_mutex_init(&s->owners_lock, NULL);
        {
                pthread_rwlockattr_t a;

                /* The switch to disk is short and rare; loads are many and
                 * must not starve it. */
                pthread_rwlockattr_init(&a);
                pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
                pthread_rwlock_init(&s->pool_lock, &a);
                pthread_rwlockattr_destroy(&a);
        }
        *ret = s;
        return 0;
}

struct zsw_store *zsw_store_free(struct zsw_store *s) {
        if (!s)
                return NULL;
        while (s->owners)
                zsw_store_owner_free(s->owners);
        zsw_pool_free(s->pool);
        zsw_entry_cache_done(&s->entries);
        pthread_mutex_destroy(&s->owners_lock);
        pthread_rwlock_destroy(&s->pool_lock);
        free(s);
        return NULL;
}

int zsw_worker_new(struct zsw_store *s, struct zsw_worker **ret) {
        struct zsw_worker *w = calloc(1, sizeof(*w));
        int r;

        if (!w)
                return -ENOMEM;
        w->store = s;
        w->scratch = aligned_alloc(64, (ZSW_STORE_BATCH_MAX + 1) * ZSW_PAGE_SIZE);
        r = w->scratch ? zsw_decompress_ctx_new(&w->dctx) : -ENOMEM;
        if (r < 0) {
                zsw_worker_free(w);
                return r;
        }
        atomic_fetch_add(&s->workers, 1);
        *ret = w;
        return 0;
}

struct zsw_worker *zsw_worker_free(struct zsw_worker *w) {
        if (!w)
                return NULL;
        for (unsigned c = 0; c < _ZSW_COMPRESSOR_MAX; c++)
                zsw_compress_ctx_free(w->cctx[c]);
        if (w->dctx) {
                zsw_decompress_ctx_free(w->dctx);
                atomic_fetch_sub(&w->store->workers, 1);
        }
        free(w->scratch);
        free(w);
        return NULL;
}

static int owner_alloc(struct zsw_store *s, const struct zsw_owner_config *cfg, struct zsw_lru *lru,
                       struct zsw_owner **ret) {
        struct zsw_owner *o = calloc(1, sizeof(*o));
        int r;

        if (!o)
                return -ENOMEM;
        r = zsw_index_new(&o->index);
        if (r < 0) {
                free(o);
                return r;
        }
        o->store = s;
        o->cfg = *cfg;
        o->lru = lru;
        pthread_mutex_init(&o->lock, NULL);
        *ret = o;
        return 0;
}

static void owner_link(struct zsw_owner *o) {
        struct zsw_store *s = o->store;

        zsw_mutex_lock(&s->owners_lock, ZSW_LOCK_OWNERS);
        o->id = ++s->next_owner_id;
        o->next = s->owners;
        if (s->owners)
                s->owners->prev = o;
        s->owners = o;
        zsw_mutex_unlock(&s->owners_lock);
}

int zsw_store_owner_new(struct zsw_store *s, const struct zsw_owner_config *config,
                        struct zsw_owner **ret) {
        struct zsw_owner_config cfg = config ? *config
                                             : (struct zsw_owner_config) {
                                                       .compressor = s->cfg.compressor,
                                                       .level = s->cfg.level,
                                               };
        struct zsw_compress_ctx *probe = NULL;
        struct zsw_lru *lru;
        struct zsw_owner *o;
        int r;

        /* Refuse a bad compressor or level now rather than on every store. */
        r = zsw_compress_ctx_new(cfg.compressor, cfg.level, &probe);
        if (r < 0)
                return r;
        zsw_compress_ctx_free(probe);
        cfg.level = zsw_compress_level(cfg.compressor, cfg.level);

        r = zsw_lru_new(&lru);
        if (r < 0)
                return r;
        r = owner_alloc(s, &cfg, lru, &o);
        if (r < 0) {
                zsw_lru_unref(lru);
                return r;
        }
        owner_link(o);
        *ret = o;
        return 0;
}

static void owner_destroy(struct zsw_owner *o) {
        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        invalidate_locked(o, 0, ZSW_INDEX_MAX_PGNO + 1);
        zsw_mutex_unlock(&o->lock);
        zsw_index_free(o->index);
        zsw_lru_unref(o->lru);
        pthread_mutex_destroy(&o->lock);
        free(o);
}

struct zsw_owner *zsw_store_owner_free(struct zsw_owner *o) {
        struct zsw_store *s;

        if (!o)
                return NULL;
        s = o->store;
        zsw_mutex_lock(&s->owners_lock, ZSW_LOCK_OWNERS);
        if (o->prev)
                o->prev->next = o->next;
        else
                s->owners = o->next;
        if (o->next)
                o->next->prev = o->prev;
        zsw_mutex_unlock(&s->owners_lock);
        owner_destroy(o);
        return NULL;
}

int zsw_store_owner_clone(struct zsw_owner *parent, struct zsw_owner **ret) {
        struct zsw_owner *child;
        struct zsw_entry *e;
        uint64_t pgno;
        int r;

        r = owner_alloc(parent->store, &parent->cfg, zsw_lru_ref(parent->lru), &child);
        if (r < 0) {
                zsw_lru_unref(parent->lru);
                return r;
        }

        zsw_mutex_lock(&parent->lock, ZSW_LOCK_OWNER);
        for (e = zsw_index_next(parent->index, 0, &pgno); e;
             e = zsw_index_after(parent->index, pgno, &pgno)) {
                r = zsw_index_insert(child->index, pgno, e);
                if (r < 0)
                        break;
                atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
                charge(child->counters, e, 1);
        }
        zsw_mutex_unlock(&parent->lock);
        if (r < 0) {
                owner_destroy(child);
                return zsw_log_errno(parent->store->cfg.log, LOG_ERR, r,
                                     "Failed to clone an owner's index: %m");
        }
        owner_link(child);
        *ret = child;
        return 0;
}

static void stats_fill(counters_t c, struct zsw_store_stats *ret) {
        uint64_t *dst[C_REJECT] = {
                [C_PAGES] = &ret->stored_pages,
                [C_PAYLOAD] = &ret->payload_bytes,
                [C_SAME] = &ret->same_filled_pages,
                [C_LOST] = &ret->lost_pages,
                [C_INCOMPRESSIBLE] = &ret->incompressible_pages,
                [C_STORES] = &ret->stores,
                [C_LOADS] = &ret->loads,
                [C_INVALIDATIONS] = &ret->invalidations,
                [C_DISK_PAGES] = &ret->disk_pages,
                [C_DISK_BYTES] = &ret->disk_bytes,
                [C_WRITTEN_BACK] = &ret->written_back,
                [C_DISK_READS] = &ret->disk_reads,
                [C_LIMIT_HIT] = &ret->pool_limit_hit,
        };

        *ret = (struct zsw_store_stats) {};
        for (unsigned i = 0; i < C_REJECT; i++)
                *dst[i] = atomic_load_explicit(&c[i], memory_order_relaxed);
        for (unsigned i = 0; i < _ZSW_REJECT_MAX; i++)
                ret->rejects[i] = atomic_load_explicit(&c[C_REJECT + i], memory_order_relaxed);
}

static uint64_t owner_meta_bytes(struct zsw_owner *o) {
        uint64_t b;

        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        b = zsw_index_mem_bytes(o->index);
        zsw_mutex_unlock(&o->lock);
        return b;
}

static uint64_t family_dict_bytes(const struct zsw_owner *o) {
        const struct zsw_dict *d = family_dict(o);

        return d ? zsw_dict_memory(d) : 0;
}

void zsw_store_get_stats(struct zsw_store *s, struct zsw_store_stats *ret) {
        struct zsw_store_stats st;
        struct zsw_pool_stats ps;

        stats_fill(s->counters, &st);
        st.payload_bytes -= MIN(st.payload_bytes, st.disk_bytes);
        zsw_pool_get_stats(s->pool, &ps);
        st.pool_bytes = ps.pool_bytes;
        st.pool_used_bytes = ps.used_bytes;
        st.pool_cached_bytes = ps.cached_bytes;
        st.pool_compacted_objects = ps.compacted_objects;
        st.pool_compacted_bytes = ps.compacted_bytes;
        st.meta_bytes = ps.meta_bytes + zsw_entry_cache_bytes(&s->entries);
        zsw_mutex_lock(&s->owners_lock, ZSW_LOCK_OWNERS);
        s->stats_pass++;
        for (struct zsw_owner *o = s->owners; o; o = o->next) {
                /* A family's dictionary once, with the first of its owners. */
                if (o->lru->stats_pass != s->stats_pass) {
                        o->lru->stats_pass = s->stats_pass;
                        st.dict_bytes += family_dict_bytes(o);
                }
                st.meta_bytes += sizeof(*o) + owner_meta_bytes(o);
        }
        st.meta_bytes += st.dict_bytes;
        zsw_mutex_unlock(&s->owners_lock);
        *ret = st;
}

void zsw_store_owner_get_stats(struct zsw_owner *o, struct zsw_store_stats *ret) {
        stats_fill(o->counters, ret);
        ret->disk_pages = MIN(ret->stored_pages,
                              atomic_load_explicit(&o->lru->disk_pages, memory_order_relaxed));
        ret->disk_bytes = MIN(ret->payload_bytes,
                              atomic_load_explicit(&o->lru->disk_bytes, memory_order_relaxed));
        ret->payload_bytes -= ret->disk_bytes;
        ret->dict_bytes = family_dict_bytes(o);
        ret->meta_bytes = sizeof(*o) + owner_meta_bytes(o) + ret->dict_bytes;
}

static void latency_fill(const struct zsw_histogram *h, struct zsw_store_latency *ret) {
        *ret = (struct zsw_store_latency) {
                .p50 = zsw_histogram_percentile(h, 0.50),
                .p95 = zsw_histogram_percentile(h, 0.95),
                .p99 = zsw_histogram_percentile(h, 0.99),
                .count = zsw_histogram_count(h),
        };
}

struct zsw_histogram *zsw_store_histogram(struct zsw_store *s, enum zsw_latency_kind kind) {
        return (unsigned) kind < _ZSW_LATENCY_MAX ? &s->hist[kind] : NULL;
}

void zsw_store_get_latency(struct zsw_store *s, enum zsw_latency_kind kind,
                           struct zsw_store_latency *ret) {
        latency_fill(&s->hist[kind], ret);
}

void zsw_store_owner_get_latency(struct zsw_owner *o, enum zsw_latency_kind kind,
                                 struct zsw_store_latency *ret) {
        latency_fill(&o->hist[kind], ret);
}

/* ---- handing the store to another process ------------------------------ */

static int export_one(struct zsw_store *s, struct zsw_entry *e, uint64_t pgno, void *disk_buf,
                      struct zsw_store_page *ret) {
        struct zsw_store_page p = { .pgno = pgno,
                                    .entry = e,
                                    .state = e->state,
                                    .compressor = e->compressor,
                                    .length = e->length };
        int r;

        switch (e->state) {
        case ZSW_ENTRY_SAME:
                p.value = e->value;
                break;
        case ZSW_ENTRY_LOST:
                break;
        case ZSW_ENTRY_COMPRESSED:
        case ZSW_ENTRY_RAW:
                p.payload = zsw_pool_map(s->pool, e->handle);
                break;
        case ZSW_ENTRY_DISK:
                if (!s->cfg.read_disk)
                        return -EIO;
                r = s->cfg.read_disk(s->cfg.disk_userdata, e->disk_sector, e->length, disk_buf);
                if (r < 0)
                        return r;
                p.payload = disk_buf;
                if (e->compressor == ZSW_ENTRY_DISK_RAW) {
                        p.state = ZSW_ENTRY_RAW;
                        p.compressor = 0;
                } else
                        p.state = ZSW_ENTRY_COMPRESSED;
                break;
        default:
                return -EINVAL;
        }
        *ret = p;
        return 0;
}

/* Disk reads that failed in a row after which an orphaned export reads
 * no more (zsw_store_export_orphaned()). */
#define EXPORT_DISK_FAILURES_MAX 16u

static int owner_export(struct zsw_owner *o,
                        int (*fn)(void *userdata, const struct zsw_store_page *p), void *userdata,
                        bool locked) {
        struct zsw_store *s = o->store;
        void *disk_buf = NULL;
        struct zsw_entry *e;
        uint64_t pgno;
        int r = 0;

        if (s->cfg.read_disk) {
                /* Aligned, for O_DIRECT reads; not from malloc, whose lock
                 * a dead thread may hold when an orphaned store is saved. */
                disk_buf = mmap(NULL, ZSW_PAGE_SIZE, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (disk_buf == MAP_FAILED)
                        return -ENOMEM;
        }
        if (locked) {
                zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
                zsw_rwlock_rdlock(&s->pool_lock, ZSW_LOCK_STORE_POOL);
        }
        for (e = zsw_index_next(o->index, 0, &pgno); e && r >= 0;
             e = zsw_index_after(o->index, pgno, &pgno)) {
                struct zsw_store_page p;

                if (!locked && s->orphan_disk_failures >= EXPORT_DISK_FAILURES_MAX &&
                    e->state == ZSW_ENTRY_DISK)
                        r = -EIO; /* not read again: the disk is dead */
                else
                        r = export_one(s, e, pgno, disk_buf, &p);
                if (r < 0 && !locked && e->state == ZSW_ENTRY_DISK) {
                        /* Orphaned: the others' last chance. */
                        p = (struct zsw_store_page) { .pgno = pgno,
                                                      .entry = e,
                                                      .state = ZSW_ENTRY_LOST };
                        s->orphan_disk_failures++;
                        r = 0;
                } else if (!locked && e->state == ZSW_ENTRY_DISK)
                        s->orphan_disk_failures = 0;
                if (r >= 0)
                        r = fn(userdata, &p);
        }
        if (locked) {
                zsw_rwlock_unlock(&s->pool_lock);
                zsw_mutex_unlock(&o->lock);
        }
        if (disk_buf)
                munmap(disk_buf, ZSW_PAGE_SIZE);
        return r;
}

int zsw_store_export(struct zsw_owner *o, int (*fn)(void *userdata, const struct zsw_store_page *p),
                     void *userdata) {
        return owner_export(o, fn, userdata, true);
}

uint64_t zsw_store_owner_count_orphaned(struct zsw_owner *o) {
        struct zsw_entry *e;
        uint64_t n = 0, pgno;

        for (e = zsw_index_next(o->index, 0, &pgno); e; e = zsw_index_after(o->index, pgno, &pgno))
                n++;
        return n;
}

int zsw_store_export_orphaned(struct zsw_owner *o,
                              int (*fn)(void *userdata, const struct zsw_store_page *p),
                              void *userdata) {
        return owner_export(o, fn, userdata, false);
}

int zsw_store_owner_new_sibling(struct zsw_owner *sibling, struct zsw_owner **ret) {
        struct zsw_owner *o;
        int r;

        r = owner_alloc(sibling->store, &sibling->cfg, zsw_lru_ref(sibling->lru), &o);
        if (r < 0) {
                zsw_lru_unref(sibling->lru);
                return r;
        }
        owner_link(o);
        *ret = o;
        return 0;
}

bool zsw_store_same_family(const struct zsw_owner *a, const struct zsw_owner *b) {
        return a->lru == b->lru;
}

const void *zsw_store_dict(struct zsw_owner *o, size_t *ret_len) {
        const struct zsw_dict *d = family_dict(o);

        return d ? zsw_dict_content(d, ret_len) : NULL;
}

int zsw_store_set_dict(struct zsw_owner *o, const void *content, size_t len) {
        struct zsw_dict *d;
        int r;

        r = zsw_dict_new(content, len, &d);
        if (r < 0)
                return r;
        if (!family_publish_dict(o->lru, d)) {
                zsw_dict_free(d);
                return -EEXIST;
        }
        return 0;
}

static int import_check(const struct zsw_owner *o, const struct zsw_store_page *p) {
        if (p->pgno > ZSW_INDEX_MAX_PGNO)
                return -EINVAL;
        switch (p->state) {
        case ZSW_ENTRY_SAME:
        case ZSW_ENTRY_LOST:
                return p->length == 0 ? 0 : -EINVAL;
        case ZSW_ENTRY_COMPRESSED:
                return p->length == 0 || p->length > ZSW_PAGE_SIZE ||
                                       !zsw_code_valid(p->compressor) ||
                                       (p->compressor & ZSW_WITH_DICT && !family_dict(o)) ||
                                       !p->payload
                               ? -EINVAL
                               : 0;
        case ZSW_ENTRY_RAW:
                return p->length == ZSW_PAGE_SIZE && p->payload ? 0 : -EINVAL;
        default:
                return -EINVAL;
        }
}

/* The new entries of an import batch, made and filled, not published. */
static int import_make(struct zsw_owner *o, const struct zsw_store_page *p,
                       struct zsw_entry *const *share, size_t n, struct zsw_entry **made) {
        struct zsw_store *s = o->store;
        struct zsw_entry *fresh[ZSW_STORE_BATCH_MAX];
        zsw_handle_t handles[ZSW_STORE_BATCH_MAX];
        uint32_t sizes[ZSW_STORE_BATCH_MAX];
        size_t n_new = 0, n_pool = 0, k = 0, h = 0;
        int r;

        for (size_t i = 0; i < n; i++) {
                if (share && share[i])
                        continue;
                r = import_check(o, &p[i]);
                if (r < 0)
                        return r;
                n_new++;
                if (p[i].state == ZSW_ENTRY_COMPRESSED || p[i].state == ZSW_ENTRY_RAW)
                        sizes[n_pool++] = p[i].length;
        }
        r = zsw_entry_alloc_bulk(&s->entries, fresh, n_new);
        if (r < 0)
                return r;
        if (n_pool > 0) {
                r = zsw_pool_alloc_bulk(s->pool, sizes, n_pool, handles);
                if (r < 0) {
                        zsw_entry_free_bulk(&s->entries, fresh, n_new);
                        return r;
                }
        }
        for (size_t i = 0; i < n; i++) {
                struct zsw_entry *e;

                if (share && share[i]) {
                        made[i] = share[i];
                        continue;
                }
                e = made[i] = fresh[k++];
                e->state = p[i].state;
                e->compressor = p[i].state == ZSW_ENTRY_COMPRESSED ? p[i].compressor : 0;
                e->length = p[i].length;
                if (!entry_in_pool(e)) { /* SAME or LOST */
                        e->value = p[i].value;
                        continue;
                }
                e->handle = handles[h++];
                memcpy(zsw_pool_map(s->pool, e->handle), p[i].payload, p[i].length);
        }
        return 0;
}

/* Frees the new entries of a batch that was not published. */
static void import_unmake(struct zsw_store *s, struct zsw_entry *const *share,
                          struct zsw_entry *const *made, size_t n) {
        for (size_t i = 0; i < n; i++) {
                struct zsw_entry *e = made[i];

                if (share && share[i])
                        continue;
                if (entry_in_pool(e))
                        zsw_pool_free_bulk(s->pool, &e->handle, 1);
                zsw_entry_free_bulk(&s->entries, &e, 1);
        }
}

int zsw_store_import_batch(struct zsw_owner *o, const struct zsw_store_page *p,
                           struct zsw_entry *const *share, size_t n,
                           struct zsw_entry **ret_entries) {
        struct zsw_entry *made[ZSW_STORE_BATCH_MAX], *lru[ZSW_STORE_BATCH_MAX];
        struct zsw_store *s = o->store;
        struct charge mine = {}, global = {};
        size_t nlru = 0, i;
        int r = 0;

        if (n == 0 || n > ZSW_STORE_BATCH_MAX)
                return -EINVAL;
        r = import_make(o, p, share, n, made);
        if (r < 0)
                return r;
        zsw_mutex_lock(&o->lock, ZSW_LOCK_OWNER);
        for (i = 0; i < n && r >= 0; i++)
                r = zsw_index_insert(o->index, p[i].pgno, made[i]);
        if (r < 0) {
                /* The slots of this batch go again; the tree is as it was. */
                for (size_t k = 0; k + 1 < i; k++)
                        zsw_index_erase(o->index, p[k].pgno);
                zsw_mutex_unlock(&o->lock);
                import_unmake(s, share, made, n);
                return r;
        }
        for (i = 0; i < n; i++) {
                struct zsw_entry *e = made[i];

                charge_add(&mine, e, 1);
                if (share && share[i]) {
                        atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
                        continue;
                }
                charge_add(&global, e, 1);
                if (entry_in_pool(e)) {
                        /* Reachable from the index now: compaction may
                         * move it, as a stored batch's payloads. */
                        zsw_pool_publish(s->pool, &e->handle);
                        lru[nlru++] = e;
                }
        }
        count(&s->counters[C_STORES], global.pages);
        charge_apply(o->counters, &mine);
        charge_apply(s->counters, &global);
        if (nlru > 0) {
                zsw_mutex_lock(&o->lru->lock, ZSW_LOCK_LRU);
                zsw_lru_add_locked(o->lru, lru, nlru);
                zsw_mutex_unlock(&o->lru->lock);
        }
        zsw_mutex_unlock(&o->lock);
        if (ret_entries)
                memcpy(ret_entries, made, n * sizeof(*made));
        return 0;
}

int zsw_store_import(struct zsw_owner *o, const struct zsw_store_page *p, struct zsw_entry *share,
                     struct zsw_entry **ret_entry) {
        return zsw_store_import_batch(o, p, &share, 1, ret_entry);
}
