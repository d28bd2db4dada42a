/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page compressors behind one small backend interface.
 *
 * The store compresses a whole batch of pages through one compression
 * context that belongs to the storing thread (contexts are reused, never
 * allocated per page, and never shared between threads, so compression
 * needs no lock). A page whose compressed form would exceed a caller-given
 * limit is reported as incompressible with length 0 instead of being
 * compressed to completion into a larger buffer.
 *
 * Decompression contexts belong to loading threads and decode any
 * algorithm: entries record the algorithm they were compressed with, and
 * owners in one store may use different compressors.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "page.h"
#include "util.h"

enum zsw_compressor {
        ZSW_COMPRESSOR_LZ4 = 0,
        ZSW_COMPRESSOR_ZSTD = 1,
        _ZSW_COMPRESSOR_MAX,
        ZSW_COMPRESSOR_DEFAULT = ZSW_COMPRESSOR_LZ4,
};

/* Levels: lz4 1 (LZ4's fast mode) to 12 (2 and up: LZ4HC at that level,
 * some 2x the time to store for 4-8% less memory; the decoder is the
 * same, so faults cost the same); zstd 1 to 19. */
#define ZSW_LZ4_LEVEL_DEFAULT 1
#define ZSW_LZ4_LEVEL_MAX 12
#define ZSW_ZSTD_LEVEL_DEFAULT 3
#define ZSW_ZSTD_LEVEL_MAX 19

/* The level that level means for c (0: c's default), or -EINVAL. */
int zsw_compress_level(enum zsw_compressor c, int level);

/* "lz4" / "zstd"; NULL for an unknown value. */
const char *zsw_compressor_to_string(enum zsw_compressor c);
/* Returns the compressor named s, or -EINVAL. */
int zsw_compressor_from_string(const char *s);

struct zsw_compress_ctx;
struct zsw_decompress_ctx;

/* A compression context for one thread, at level (as for
 * zsw_compress_level()). -EINVAL for an unknown compressor or level,
 * -ENOMEM. */
int zsw_compress_ctx_new(enum zsw_compressor c, int level, struct zsw_compress_ctx **ret);
struct zsw_compress_ctx *zsw_compress_ctx_free(struct zsw_compress_ctx *ctx);
enum zsw_compressor zsw_compress_ctx_compressor(const struct zsw_compress_ctx *ctx);

/* Changes the level of the next batches (same rules as for _new()); the
 * context's memory is reused, so switching between owners is cheap. */
int zsw_compress_ctx_set_level(struct zsw_compress_ctx *ctx, int level);

/*
 * Compresses n pages of ZSW_PAGE_SIZE bytes: page i from src[i] into dst[i]
 * (ZSW_PAGE_SIZE bytes of room each). ret_lens[i] receives the compressed
 * length, at most max_len (1 <= max_len <= ZSW_PAGE_SIZE), or 0 when the
 * page does not fit in max_len (lz4 may also give up on a page that would
 * fit with a few bytes to spare): the page is incompressible and dst[i]
 * holds garbage. Returns how many pages compressed (>= 0), or a negative errno
 * when the compressor itself failed (then ret_lens is undefined).
 */
int zsw_compress_batch(struct zsw_compress_ctx *ctx, const void *const *src, void *const *dst,
                       size_t n, uint32_t max_len, uint32_t *ret_lens);

int zsw_decompress_ctx_new(struct zsw_decompress_ctx **ret);
struct zsw_decompress_ctx *zsw_decompress_ctx_free(struct zsw_decompress_ctx *ctx);

/* Decompresses len bytes at src, compressed with c, into the ZSW_PAGE_SIZE
 * bytes at dst. -EBADMSG when src does not decode to exactly one page,
 * -EINVAL for an unknown compressor, -ENOMEM. */
int zsw_decompress(struct zsw_decompress_ctx *ctx, enum zsw_compressor c, const void *src,
                   uint32_t len, void *dst);

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_compress_ctx *, zsw_compress_ctx_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_decompress_ctx *, zsw_decompress_ctx_free);
