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
 *
 * A dictionary is content that pages like the ones to store have in
 * common (JSON keys, words, allocator headers): each page is still its own
 * block, compressed as if it followed the dictionary, and decodes only
 * with the same dictionary. Pages of one program share far more with each
 * other than a 4 KiB block can find in itself: on a redis heap of 1000-byte
 * values lz4 takes 0.58 of the page alone and 0.49 after 64 KiB of the
 * heap's own pages (docs/performance.md).
 */
#pragma once

#include <stdbool.h>
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
struct zsw_dict;

/* What a payload records of how it was compressed: the compressor, with
 * ZSW_WITH_DICT added when it was compressed after its dictionary. */
#define ZSW_WITH_DICT 4u
#define ZSW_CODE_COMPRESSOR(code) ((enum zsw_compressor)((code) & ~ZSW_WITH_DICT))
/* Whether code is one that zsw_decompress() knows. */
bool zsw_code_valid(unsigned code);

/* A dictionary holds at most this much content (lz4 looks back 64 KiB
 * from a page's first byte, so it uses the last 60 KiB of it). */
#define ZSW_DICT_MAX (64u * 1024)

/* A dictionary of the len bytes at content (1 <= len <= ZSW_DICT_MAX,
 * copied). It never changes and may be used by any number of threads at
 * once; it must outlive every payload compressed with it. -EINVAL, -ENOMEM. */
int zsw_dict_new(const void *content, size_t len, struct zsw_dict **ret);
struct zsw_dict *zsw_dict_free(struct zsw_dict *d);
const void *zsw_dict_content(const struct zsw_dict *d, size_t *ret_len);
/* Bytes the dictionary takes: its content and its tables. */
uint64_t zsw_dict_memory(const struct zsw_dict *d);

/* A compression context for one thread, at level (as for
 * zsw_compress_level()). -EINVAL for an unknown compressor or level,
 * -ENOMEM. */
int zsw_compress_ctx_new(enum zsw_compressor c, int level, struct zsw_compress_ctx **ret);
struct zsw_compress_ctx *zsw_compress_ctx_free(struct zsw_compress_ctx *ctx);
enum zsw_compressor zsw_compress_ctx_compressor(const struct zsw_compress_ctx *ctx);

/* Changes the level of the next batches (same rules as for _new()) and
 * unsets the dictionary; the context's memory is reused, so switching
 * between owners is cheap. */
int zsw_compress_ctx_set_level(struct zsw_compress_ctx *ctx, int level);

/* The dictionary of the next batches (NULL: none), until the next call or
 * level change. Returns whether the context uses it (then its payloads
 * are coded compressor + ZSW_WITH_DICT): lz4's fast mode and zstd do;
 * LZ4HC does not (loading a
 * dictionary into its 256 KiB state for every page costs more than the
 * page), so its payloads are plain. -ENOMEM when zstd's tables for this
 * level could not be made. */
int zsw_compress_ctx_set_dict(struct zsw_compress_ctx *ctx, const struct zsw_dict *dict);
/* Whether c at level (as for zsw_compress_level()) compresses with a
 * dictionary when given one. */
bool zsw_compress_dict_applies(enum zsw_compressor c, int level);

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

/* Decompresses len bytes at src, compressed as code says (a compressor,
 * with ZSW_WITH_DICT after dict), into the ZSW_PAGE_SIZE bytes at dst.
 * -EBADMSG when src does not decode to exactly one page, -EINVAL for an
 * unknown code or a code with ZSW_WITH_DICT and no dict, -ENOMEM. */
int zsw_decompress(struct zsw_decompress_ctx *ctx, unsigned code, const struct zsw_dict *dict,
                   const void *src, uint32_t len, void *dst);

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_compress_ctx *, zsw_compress_ctx_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_decompress_ctx *, zsw_decompress_ctx_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_dict *, zsw_dict_free);
