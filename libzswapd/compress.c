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
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "compress.h"
#include "pool.h"
#include "util.h"

struct backend {
        const char *name;
        int (*state_new)(int level, void **ret);
        void (*state_free)(void *state);
        int (*compress_batch)(void *state, int level, const void *const *src, void *const *dst,
                              size_t n, uint32_t max_len, uint32_t *ret_lens);
        int (*decompress)(void **dstate, const void *src, uint32_t len, void *dst);
        void (*dstate_free)(void *dstate);
};

struct zsw_compress_ctx {
        const struct backend *backend;
        enum zsw_compressor compressor;
        int level;
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

static int lz4_compress_batch(void *state, int level, const void *const *src, void *const *dst,
                              size_t n, uint32_t max_len, uint32_t *ret_lens) {
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
                        LZ4_resetStream_fast(&s->fast);
                        r = LZ4_compress_fast_continue(&s->fast, src[i], dst[i], ZSW_PAGE_SIZE,
                                                       (int) max_len, 1);
                }
                ret_lens[i] = r > 0 ? (uint32_t) r : 0;
                done += r > 0;
        }
        return done;
}

static int lz4_decompress(void **dstate, const void *src, uint32_t len, void *dst) {
        int r = LZ4_decompress_safe(src, dst, (int) len, ZSW_PAGE_SIZE);

        return r == (int) ZSW_PAGE_SIZE ? 0 : -EBADMSG;
}

static const struct backend backend_lz4 = {
        .name = "lz4",
        .state_new = lz4_state_new,
        .state_free = lz4_state_free,
        .compress_batch = lz4_compress_batch,
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

static int zstd_compress_batch(void *state, int level, const void *const *src, void *const *dst,
                               size_t n, uint32_t max_len, uint32_t *ret_lens) {
        int done = 0;

        for (size_t i = 0; i < n; i++) {
                /* Parameters are derived from the known 4 KiB source size,
                 * which keeps the tables small and the context warm. */
                size_t r = ZSTD_compressCCtx(state, dst[i], max_len, src[i], ZSW_PAGE_SIZE, level);

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

static int zstd_decompress(void **dstate, const void *src, uint32_t len, void *dst) {
        size_t r;

        if (!*dstate) {
                *dstate = ZSTD_createDCtx();
                if (!*dstate)
                        return -ENOMEM;
        }
        r = ZSTD_decompressDCtx(*dstate, dst, ZSW_PAGE_SIZE, src, len);
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
        return 0;
}

int zsw_compress_batch(struct zsw_compress_ctx *ctx, const void *const *src, void *const *dst,
                       size_t n, uint32_t max_len, uint32_t *ret_lens) {
        if (max_len < 1 || max_len > ZSW_PAGE_SIZE)
                return -EINVAL;
        return ctx->backend->compress_batch(ctx->state, ctx->level, src, dst, n, max_len, ret_lens);
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

int zsw_decompress(struct zsw_decompress_ctx *ctx, enum zsw_compressor c, const void *src,
                   uint32_t len, void *dst) {
        if ((unsigned) c >= _ZSW_COMPRESSOR_MAX)
                return -EINVAL;
        if (len == 0 || len > ZSW_PAGE_SIZE)
                return -EBADMSG;
        return backends[c]->decompress(&ctx->state[c], src, len, dst);
}
