/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Compressor backends: lz4 and zstd behind struct backend. A backend
 * compresses a whole batch with one state, so a backend that can overlap
 * pages (a hardware queue, a SIMD codec) has the batch to work with; the
 * software backends run the pages one after the other on a warm state.
 *
 * The output room handed to the library is the incompressible limit
 * itself, so a page that does not shrink enough stops the compressor as
 * soon as the output would overflow, instead of being compressed to the
 * end and thrown away.
 */
#include <errno.h>
#include <lz4.h>
#include <lz4hc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "compress.h"
#include "pool.h"
#include "util.h"

/* The tables of a dictionary are made once and then only read: lz4's
 * stream is loaded at creation and copied into a context for each page
 * (LZ4's documented way to reuse a dictionary through its stable API);
 * zstd's are made on first use, per level for compression. */
struct zsw_dict {
        uint8_t *content;
        size_t len;
        /* lz4 reaches back 65535 bytes from the page's start at most: it
         * uses the content's last lz4_len bytes, a page less than 64 KiB. */
        size_t lz4_len;
        LZ4_stream_t lz4;
        pthread_mutex_t lock;                        /* making zstd's tables */
        void *_Atomic cdict[ZSW_ZSTD_LEVEL_MAX + 1]; /* ZSTD_CDict per level */
        void *_Atomic ddict;                         /* ZSTD_DDict */
        _Atomic uint64_t memory;
};

struct backend {
        const char *name;
        int (*state_new)(int level, void **ret);
        void (*state_free)(void *state);
        /* dict: NULL, or one set_dict accepted for this level. */
        int (*compress_batch)(void *state, int level, const struct zsw_dict *dict,
                              const void *const *src, void *const *dst, size_t n, uint32_t max_len,
                              uint32_t *ret_lens);
        /* Whether this level compresses with a dictionary (making what it
         * needs: < 0 on failure). */
        int (*set_dict)(int level, const struct zsw_dict *dict);
        int (*decompress)(void **dstate, const struct zsw_dict *dict, const void *src, uint32_t len,
                          void *dst);
        void (*dstate_free)(void *dstate);
};

struct zsw_compress_ctx {
        const struct backend *backend;
        enum zsw_compressor compressor;
        int level;
        const struct zsw_dict *dict; /* used by the next batches, or NULL */
        void *state;
};

struct zsw_decompress_ctx {
        /* Per backend, created on first use: most loaders see one algorithm. */
        void *state[_ZSW_COMPRESSOR_MAX];
};

/* ---- lz4 ---------------------------------------------------------------- */

/* LZ4HC's state is 256 KiB: made on the first batch at a level above 1. */
struct lz4_state {
        LZ4_stream_t fast;
        LZ4_streamHC_t *hc;
};

static int lz4_state_new(int level, void **ret) {
        /* LZ4_stream_t is a documented, statically sized union. */
        struct lz4_state *s = calloc(1, sizeof(*s));

        if (!s)
                return -ENOMEM;
        LZ4_initStream(&s->fast, sizeof(s->fast));
        *ret = s;
        return 0;
}

static void lz4_state_free(void *state) {
        struct lz4_state *s = state;

        if (s)
                free(s->hc);
        free(s);
}

static int lz4_compress_batch(void *state, int level, const struct zsw_dict *dict,
                              const void *const *src, void *const *dst, size_t n, uint32_t max_len,
                              uint32_t *ret_lens) {
        struct lz4_state *s = state;
        int done = 0;

        if (level > ZSW_LZ4_LEVEL_DEFAULT && !s->hc) {
                s->hc = malloc(sizeof(*s->hc));
                if (!s->hc)
                        return -ENOMEM;
                LZ4_initStreamHC(s->hc, sizeof(*s->hc));
        }
        for (size_t i = 0; i < n; i++) {
                int r;

                /* A fast reset keeps the hash table and only moves its base:
                 * a full one would clear 16 KiB (256 KiB for LZ4HC) per
                 * page, a sizeable share of compressing 4 KiB. Without a
                 * dictionary the output is plain LZ4 block data, which
                 * both modes share: LZ4HC costs only the store. */
                if (level > ZSW_LZ4_LEVEL_DEFAULT) {
                        LZ4_resetStreamHC_fast(s->hc, level);
                        r = LZ4_compress_HC_continue(s->hc, src[i], dst[i], ZSW_PAGE_SIZE,
                                                     (int) max_len);
                } else {
                        if (dict)
                                memcpy(&s->fast, &dict->lz4, sizeof(s->fast));
                        else
                                LZ4_resetStream_fast(&s->fast);
                        r = LZ4_compress_fast_continue(&s->fast, src[i], dst[i], ZSW_PAGE_SIZE,
                                                       (int) max_len, 1);
                }
                ret_lens[i] = r > 0 ? (uint32_t) r : 0;
                done += r > 0;
        }
        return done;
}

static int lz4_set_dict(int level, const struct zsw_dict *dict) {
        return zsw_compress_dict_applies(ZSW_COMPRESSOR_LZ4, level);
}

static int lz4_decompress(void **dstate, const struct zsw_dict *dict, const void *src, uint32_t len,
                          void *dst) {
        int r = dict ? LZ4_decompress_safe_usingDict(src, dst, (int) len, ZSW_PAGE_SIZE,
                                                     (const char *) dict->content + dict->len -
                                                             dict->lz4_len,
                                                     (int) dict->lz4_len)
                     : LZ4_decompress_safe(src, dst, (int) len, ZSW_PAGE_SIZE);

        return r == (int) ZSW_PAGE_SIZE ? 0 : -EBADMSG;
}

static const struct backend backend_lz4 = {
        .name = "lz4",
        .state_new = lz4_state_new,
        .state_free = lz4_state_free,
        .compress_batch = lz4_compress_batch,
        .set_dict = lz4_set_dict,
        .decompress = lz4_decompress,
};

/* ---- zstd --------------------------------------------------------------- */

static int zstd_state_new(int level, void **ret) {
        ZSTD_CCtx *c = ZSTD_createCCtx();

        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

static void zstd_state_free(void *state) {
        ZSTD_freeCCtx(state);
}

static int zstd_compress_batch(void *state, int level, const struct zsw_dict *dict,
                               const void *const *src, void *const *dst, size_t n, uint32_t max_len,
                               uint32_t *ret_lens) {
        ZSTD_CDict *cdict =
                dict ? atomic_load_explicit(&dict->cdict[level], memory_order_acquire) : NULL;
        int done = 0;

        for (size_t i = 0; i < n; i++) {
                /* Parameters are derived from the known 4 KiB source size
                 * (and the dictionary's), which keeps the tables small and
                 * the context warm. */
                size_t r = cdict ? ZSTD_compress_usingCDict(state, dst[i], max_len, src[i],
                                                            ZSW_PAGE_SIZE, cdict)
                                 : ZSTD_compressCCtx(state, dst[i], max_len, src[i], ZSW_PAGE_SIZE,
                                                     level);

                if (ZSTD_isError(r)) {
                        if (ZSTD_getErrorCode(r) != ZSTD_error_dstSize_tooSmall)
                                return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation
                                               ? -ENOMEM
                                               : -EIO;
                        ret_lens[i] = 0;
                        continue;
                }
                ret_lens[i] = (uint32_t) r;
                done++;
        }
        return done;
}

/* zstd's tables of a dictionary: made by make() once (other threads wait
 * for it), then only read. */
typedef void *table_make_fn(struct zsw_dict *d, int level);
typedef size_t table_size_fn(const void *table);

static int dict_table(struct zsw_dict *d, void *_Atomic *slot, table_make_fn *make, int level,
                      table_size_fn *size) {
        void *t;

        if (atomic_load_explicit(slot, memory_order_acquire))
                return 0;
        pthread_mutex_lock(&d->lock);
        t = atomic_load_explicit(slot, memory_order_relaxed);
        if (!t) {
                t = make(d, level);
                if (t) {
                        atomic_fetch_add_explicit(&d->memory, size(t), memory_order_relaxed);
                        atomic_store_explicit(slot, t, memory_order_release);
                }
        }
        pthread_mutex_unlock(&d->lock);
        return t ? 0 : -ENOMEM;
}

static void *zstd_cdict_make(struct zsw_dict *d, int level) {
        return ZSTD_createCDict(d->content, d->len, level);
}

static size_t zstd_cdict_size(const void *t) {
        return ZSTD_sizeof_CDict(t);
}

static void *zstd_ddict_make(struct zsw_dict *d, int level) {
        return ZSTD_createDDict(d->content, d->len);
}

static size_t zstd_ddict_size(const void *t) {
        return ZSTD_sizeof_DDict(t);
}

static int zstd_set_dict(int level, const struct zsw_dict *dict) {
        /* The tables are made lazily, but the dictionary itself is not
         * changed: its content is fixed at creation. */
        struct zsw_dict *d = (struct zsw_dict *) dict;
        int r = dict_table(d, &d->cdict[level], zstd_cdict_make, level, zstd_cdict_size);

        return r < 0 ? r : 1;
}

static int zstd_decompress(void **dstate, const struct zsw_dict *dict, const void *src,
                           uint32_t len, void *dst) {
        ZSTD_DDict *ddict = NULL;
        size_t r;

        if (!*dstate) {
                *dstate = ZSTD_createDCtx();
                if (!*dstate)
                        return -ENOMEM;
        }
        if (dict) {
                struct zsw_dict *d = (struct zsw_dict *) dict;

                if (dict_table(d, &d->ddict, zstd_ddict_make, 0, zstd_ddict_size) < 0)
                        return -ENOMEM;
                ddict = atomic_load_explicit(&d->ddict, memory_order_acquire);
        }
        r = ddict ? ZSTD_decompress_usingDDict(*dstate, dst, ZSW_PAGE_SIZE, src, len, ddict)
                  : ZSTD_decompressDCtx(*dstate, dst, ZSW_PAGE_SIZE, src, len);
        return !ZSTD_isError(r) && r == ZSW_PAGE_SIZE ? 0 : -EBADMSG;
}

static void zstd_dstate_free(void *dstate) {
        ZSTD_freeDCtx(dstate);
}

static const struct backend backend_zstd = {
        .name = "zstd",
        .state_new = zstd_state_new,
        .state_free = zstd_state_free,
        .compress_batch = zstd_compress_batch,
        .set_dict = zstd_set_dict,
        .decompress = zstd_decompress,
        .dstate_free = zstd_dstate_free,
};

/* ---- interface ---------------------------------------------------------- */

static const struct backend *const backends[_ZSW_COMPRESSOR_MAX] = {
        [ZSW_COMPRESSOR_LZ4] = &backend_lz4,
        [ZSW_COMPRESSOR_ZSTD] = &backend_zstd,
};

const char *zsw_compressor_to_string(enum zsw_compressor c) {
        return (unsigned) c < _ZSW_COMPRESSOR_MAX ? backends[c]->name : NULL;
}

int zsw_compressor_from_string(const char *s) {
        for (unsigned c = 0; c < _ZSW_COMPRESSOR_MAX; c++)
                if (s && strcmp(s, backends[c]->name) == 0)
                        return (int) c;
        return -EINVAL;
}

int zsw_compress_level(enum zsw_compressor c, int level) {
        switch (c) {
        case ZSW_COMPRESSOR_LZ4:
                if (level == 0)
                        return ZSW_LZ4_LEVEL_DEFAULT;
                return level >= 1 && level <= ZSW_LZ4_LEVEL_MAX ? level : -EINVAL;
        case ZSW_COMPRESSOR_ZSTD:
                if (level == 0)
                        return ZSW_ZSTD_LEVEL_DEFAULT;
                return level >= 1 && level <= MIN(ZSTD_maxCLevel(), ZSW_ZSTD_LEVEL_MAX) ? level
                                                                                        : -EINVAL;
        default:
                return -EINVAL;
        }
}

int zsw_compress_ctx_new(enum zsw_compressor c, int level, struct zsw_compress_ctx **ret) {
        struct zsw_compress_ctx *ctx;
        int r;

        if ((unsigned) c >= _ZSW_COMPRESSOR_MAX)
                return -EINVAL;
        level = zsw_compress_level(c, level);
        if (level < 0)
                return level;

        ctx = calloc(1, sizeof(*ctx));
        if (!ctx)
                return -ENOMEM;
        ctx->backend = backends[c];
        ctx->compressor = c;
        ctx->level = level;
        r = ctx->backend->state_new(level, &ctx->state);
        if (r < 0) {
                free(ctx);
                return r;
        }
        *ret = ctx;
        return 0;
}

struct zsw_compress_ctx *zsw_compress_ctx_free(struct zsw_compress_ctx *ctx) {
        if (ctx) {
                ctx->backend->state_free(ctx->state);
                free(ctx);
        }
        return NULL;
}

enum zsw_compressor zsw_compress_ctx_compressor(const struct zsw_compress_ctx *ctx) {
        return ctx->compressor;
}

int zsw_compress_ctx_set_level(struct zsw_compress_ctx *ctx, int level) {
        level = zsw_compress_level(ctx->compressor, level);
        if (level < 0)
                return level;
        ctx->level = level;
        ctx->dict = NULL;
        return 0;
}

bool zsw_compress_dict_applies(enum zsw_compressor c, int level) {
        return c != ZSW_COMPRESSOR_LZ4 || zsw_compress_level(c, level) == ZSW_LZ4_LEVEL_DEFAULT;
}

int zsw_compress_ctx_set_dict(struct zsw_compress_ctx *ctx, const struct zsw_dict *dict) {
        int r = dict ? ctx->backend->set_dict(ctx->level, dict) : 0;

        ctx->dict = r > 0 ? dict : NULL;
        return r;
}

int zsw_compress_batch(struct zsw_compress_ctx *ctx, const void *const *src, void *const *dst,
                       size_t n, uint32_t max_len, uint32_t *ret_lens) {
        if (max_len < 1 || max_len > ZSW_PAGE_SIZE)
                return -EINVAL;
        return ctx->backend->compress_batch(ctx->state, ctx->level, ctx->dict, src, dst, n, max_len,
                                            ret_lens);
}


int zsw_decompress_ctx_new(struct zsw_decompress_ctx **ret) {
        struct zsw_decompress_ctx *ctx = calloc(1, sizeof(*ctx));

        if (!ctx)
                return -ENOMEM;
        *ret = ctx;
        return 0;
}

struct zsw_decompress_ctx *zsw_decompress_ctx_free(struct zsw_decompress_ctx *ctx) {
        if (!ctx)
                return NULL;
        for (unsigned c = 0; c < _ZSW_COMPRESSOR_MAX; c++)
                if (ctx->state[c] && backends[c]->dstate_free)
                        backends[c]->dstate_free(ctx->state[c]);
        free(ctx);
        return NULL;
}

bool zsw_code_valid(unsigned code) {
        return (unsigned) ZSW_CODE_COMPRESSOR(code) < _ZSW_COMPRESSOR_MAX &&
               (code & ~(ZSW_WITH_DICT | 3u)) == 0;
}

int zsw_decompress(struct zsw_decompress_ctx *ctx, unsigned code, const struct zsw_dict *dict,
                   const void *src, uint32_t len, void *dst) {
        enum zsw_compressor c = ZSW_CODE_COMPRESSOR(code);

        if (!zsw_code_valid(code) || (code & ZSW_WITH_DICT && !dict))
                return -EINVAL;
        if (len == 0 || len > ZSW_PAGE_SIZE)
                return -EBADMSG;
        return backends[c]->decompress(&ctx->state[c], code & ZSW_WITH_DICT ? dict : NULL, src, len,
                                       dst);
}

int zsw_dict_new(const void *content, size_t len, struct zsw_dict **ret) {
        struct zsw_dict *d;

        if (len < 1 || len > ZSW_DICT_MAX)
                return -EINVAL;
        d = calloc(1, sizeof(*d));
        if (!d || !(d->content = malloc(len))) {
                free(d);
                return -ENOMEM;
        }
        memcpy(d->content, content, len);
        d->len = len;
        LZ4_initStream(&d->lz4, sizeof(d->lz4));
        d->lz4_len = MIN(len, (size_t) (65536 - ZSW_PAGE_SIZE));
        LZ4_loadDict(&d->lz4, (const char *) d->content + len - d->lz4_len, (int) d->lz4_len);
        pthread_mutex_init(&d->lock, NULL);
        atomic_init(&d->memory, sizeof(*d) + len);
        *ret = d;
        return 0;
}

struct zsw_dict *zsw_dict_free(struct zsw_dict *d) {
        if (!d)
                return NULL;
        for (size_t i = 0; i < ARRAY_SIZE(d->cdict); i++)
                ZSTD_freeCDict(atomic_load_explicit(&d->cdict[i], memory_order_relaxed));
        ZSTD_freeDDict(atomic_load_explicit(&d->ddict, memory_order_relaxed));
        pthread_mutex_destroy(&d->lock);
        free(d->content);
        free(d);
        return NULL;
}

const void *zsw_dict_content(const struct zsw_dict *d, size_t *ret_len) {
        *ret_len = d->len;
        return d->content;
}

uint64_t zsw_dict_memory(const struct zsw_dict *d) {
        return atomic_load_explicit(&d->memory, memory_order_relaxed);
}
