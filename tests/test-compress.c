/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Compressor backends: round trips on real pages for both algorithms and
 * lz4's LZ4HC levels, the
 * incompressible limit, one decompression context for both algorithms,
 * dictionaries, corrupt input, and argument checks. */
#include <zstd.h>

#include "compress.h"
#include "pool.h"
#include "corpus.h"
#include "test.h"

#define NPAGES 64

static uint8_t pages[NPAGES][ZSW_PAGE_SIZE];
static uint8_t out[NPAGES][ZSW_PAGE_SIZE];
static uint8_t back[ZSW_PAGE_SIZE];

static void load_corpus(void) {
        static bool done;

        if (done)
                return;
        if (corpus_fill(pages, NPAGES, 0, 7) < 0)
                TEST_SKIP("no corpus files on this machine");
        done = true;
}

static void roundtrip(enum zsw_compressor c, int level) {
        struct zsw_compress_ctx *ctx = NULL;
        struct zsw_decompress_ctx *dctx = NULL;
        const void *src[NPAGES];
        void *dst[NPAGES];
        uint32_t lens[NPAGES];
        int done;

        load_corpus();
        ASSERT_OK(zsw_compress_ctx_new(c, level, &ctx));
        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
        ASSERT_EQ(zsw_compress_ctx_compressor(ctx), c);
        for (int i = 0; i < NPAGES; i++) {
                src[i] = pages[i];
                dst[i] = out[i];
        }
        /* Twice through the same context: it must be reusable. */
        for (int round = 0; round < 2; round++) {
                done = zsw_compress_batch(ctx, src, dst, NPAGES, ZSW_PAGE_SIZE, lens);
                ASSERT_GT(done, NPAGES / 2);
                for (int i = 0; i < NPAGES; i++) {
                        if (lens[i] == 0)
                                continue;
                        ASSERT_LE(lens[i], ZSW_PAGE_SIZE);
                        memset(back, 0xaa, sizeof(back));
                        ASSERT_OK(zsw_decompress(dctx, c, NULL, out[i], lens[i], back));
                        ASSERT_MEMEQ(back, pages[i], ZSW_PAGE_SIZE);
                }
        }
        zsw_compress_ctx_free(ctx);
        zsw_decompress_ctx_free(dctx);
}

TEST(lz4_roundtrip) {
        roundtrip(ZSW_COMPRESSOR_LZ4, 0);
}

/* Levels above 1 are LZ4HC's: smaller output for the same decoder. A
 * context that changes levels still makes every page a block of its own
 * (the tables it keeps change which matches it finds, never what a block
 * needs to decode). */
TEST(lz4_levels) {
        struct zsw_compress_ctx *ctx = NULL;
        struct zsw_decompress_ctx *dctx = NULL;
        const void *src[NPAGES];
        void *dst[NPAGES];
        uint32_t lens[NPAGES];
        uint64_t total[2] = {};
        const int levels[] = { 1, 9, 1, 2, 12 };

        roundtrip(ZSW_COMPRESSOR_LZ4, 2);
        roundtrip(ZSW_COMPRESSOR_LZ4, 12);
        ASSERT_OK(zsw_compress_ctx_new(ZSW_COMPRESSOR_LZ4, 1, &ctx));
        for (int i = 0; i < NPAGES; i++) {
                src[i] = pages[i];
                dst[i] = out[i];
        }
        for (size_t k = 0; k < ARRAY_SIZE(levels); k++) {
                ASSERT_OK(zsw_compress_ctx_set_level(ctx, levels[k]));
                ASSERT_GT(zsw_compress_batch(ctx, src, dst, NPAGES, ZSW_PAGE_SIZE, lens), 0);
                for (int i = 0; i < NPAGES; i++) {
                        total[levels[k] > 1] += lens[i] ?: ZSW_PAGE_SIZE;
                        if (lens[i] == 0)
                                continue;
                        /* A new decoder each time: no history at all. */
                        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
                        memset(back, 0xaa, sizeof(back));
                        ASSERT_OK(zsw_decompress(dctx, ZSW_COMPRESSOR_LZ4, NULL, out[i], lens[i],
                                                 back));
                        ASSERT_MEMEQ(back, pages[i], ZSW_PAGE_SIZE);
                        dctx = zsw_decompress_ctx_free(dctx);
                }
        }
        /* Two passes at level 1, three above it. */
        ASSERT_LT(total[1] / 3, total[0] / 2);
        ASSERT_ERRNO(zsw_compress_ctx_set_level(ctx, 13), EINVAL);
        ASSERT_EQ(zsw_compress_level(ZSW_COMPRESSOR_LZ4, 0), 1);
        ASSERT_EQ(zsw_compress_level(ZSW_COMPRESSOR_ZSTD, 0), 3);
        ASSERT_ERRNO(zsw_compress_level(ZSW_COMPRESSOR_LZ4, -1), EINVAL);
        zsw_compress_ctx_free(ctx);
}

TEST(zstd_roundtrip_levels) {
        roundtrip(ZSW_COMPRESSOR_ZSTD, 1);
        roundtrip(ZSW_COMPRESSOR_ZSTD, 3);
        roundtrip(ZSW_COMPRESSOR_ZSTD, 9);
}

/* Pages of zstd output do not compress again: real incompressible data. */
static void make_incompressible(uint8_t *page) {
        static uint8_t big[NPAGES * ZSW_PAGE_SIZE];
        size_t r;

        load_corpus();
        r = ZSTD_compress(big, sizeof(big), pages, sizeof(pages), 19);
        ASSERT_FALSE(ZSTD_isError(r));
        ASSERT_GE(r, ZSW_PAGE_SIZE + 64);
        memcpy(page, big + 64, ZSW_PAGE_SIZE);
}

TEST(limit_reports_incompressible) {
        static uint8_t noise[ZSW_PAGE_SIZE];
        struct zsw_decompress_ctx *dctx = NULL;

        make_incompressible(noise);
        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
        for (unsigned k = 0; k < 3; k++) {
                /* lz4, LZ4HC, zstd */
                enum zsw_compressor c = k < 2 ? ZSW_COMPRESSOR_LZ4 : ZSW_COMPRESSOR_ZSTD;
                struct zsw_compress_ctx *ctx = NULL;
                const void *src[3] = { pages[0], noise, pages[1] };
                void *dst[3] = { out[0], out[1], out[2] };
                uint32_t lens[3], full[3];

                ASSERT_OK(zsw_compress_ctx_new(c, k == 1 ? 9 : 0, &ctx));
                ASSERT_EQ(zsw_compress_batch(ctx, src, dst, 3, ZSW_PAGE_SIZE, full), 2);
                ASSERT_EQ_U(full[1], 0);
                ASSERT_GT(full[0], 0);

                /* A limit just below a page's size makes it incompressible,
                 * and a little above it fits (lz4 keeps a safety margin of a
                 * few bytes when the output room is limited). */
                ASSERT_EQ(zsw_compress_batch(ctx, src, dst, 3, full[0] - 1, lens), lens[2] > 0);
                ASSERT_EQ_U(lens[0], 0);
                ASSERT_EQ(zsw_compress_batch(ctx, src, dst, 1, full[0] + 16, lens), 1);
                ASSERT_EQ_U(lens[0], full[0]);
                ASSERT_OK(zsw_decompress(dctx, c, NULL, out[0], lens[0], back));
                ASSERT_MEMEQ(back, pages[0], ZSW_PAGE_SIZE);

                ASSERT_ERRNO(zsw_compress_batch(ctx, src, dst, 1, 0, lens), EINVAL);
                ASSERT_ERRNO(zsw_compress_batch(ctx, src, dst, 1, ZSW_PAGE_SIZE + 1, lens), EINVAL);
                zsw_compress_ctx_free(ctx);
        }
        zsw_decompress_ctx_free(dctx);
}

TEST(one_decompress_ctx_for_both) {
        struct zsw_compress_ctx *lz4 = NULL, *zstd = NULL;
        struct zsw_decompress_ctx *dctx = NULL;
        const void *src[1];
        void *dst[2] = { out[0], out[1] };
        uint32_t l1, l2;

        load_corpus();
        ASSERT_OK(zsw_compress_ctx_new(ZSW_COMPRESSOR_LZ4, 0, &lz4));
        ASSERT_OK(zsw_compress_ctx_new(ZSW_COMPRESSOR_ZSTD, 3, &zstd));
        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
        for (int i = 0; i < 8; i++) {
                src[0] = pages[i];
                ASSERT_EQ(zsw_compress_batch(lz4, src, &dst[0], 1, ZSW_PAGE_SIZE, &l1), 1);
                ASSERT_EQ(zsw_compress_batch(zstd, src, &dst[1], 1, ZSW_PAGE_SIZE, &l2), 1);
                ASSERT_OK(zsw_decompress(dctx, ZSW_COMPRESSOR_ZSTD, NULL, out[1], l2, back));
                ASSERT_MEMEQ(back, pages[i], ZSW_PAGE_SIZE);
                ASSERT_OK(zsw_decompress(dctx, ZSW_COMPRESSOR_LZ4, NULL, out[0], l1, back));
                ASSERT_MEMEQ(back, pages[i], ZSW_PAGE_SIZE);
                /* The wrong algorithm or a truncated payload is caught. */
                ASSERT_ERRNO(zsw_decompress(dctx, ZSW_COMPRESSOR_ZSTD, NULL, out[0], l1, back),
                             EBADMSG);
                ASSERT_ERRNO(zsw_decompress(dctx, ZSW_COMPRESSOR_LZ4, NULL, out[0], l1 / 2, back),
                             EBADMSG);
                ASSERT_ERRNO(zsw_decompress(dctx, ZSW_COMPRESSOR_ZSTD, NULL, out[1], l2 - 1, back),
                             EBADMSG);
        }
        ASSERT_ERRNO(zsw_decompress(dctx, ZSW_COMPRESSOR_LZ4, NULL, out[0], 0, back), EBADMSG);
        ASSERT_ERRNO(zsw_decompress(dctx, _ZSW_COMPRESSOR_MAX, NULL, out[0], 10, back), EINVAL);
        zsw_compress_ctx_free(lz4);
        zsw_compress_ctx_free(zstd);
        zsw_decompress_ctx_free(dctx);
}

/* A dictionary made of pages 0..15: those pages compress to almost
 * nothing with it (each is in it whole: 19-129 bytes here), which shows
 * it is used; every page decodes with it, and a payload coded with it is
 * refused without. */
TEST(dictionary) {
        static const struct {
                enum zsw_compressor c;
                int level;
                bool used;
        } cases[] = {
                { ZSW_COMPRESSOR_LZ4, 1, true },
                { ZSW_COMPRESSOR_ZSTD, 1, true },
                { ZSW_COMPRESSOR_ZSTD, 3, true },
                { ZSW_COMPRESSOR_LZ4, 2, false }, /* LZ4HC: plain payloads */
        };
        const unsigned in_dict = ZSW_DICT_MAX / ZSW_PAGE_SIZE;
        struct zsw_decompress_ctx *dctx = NULL;
        struct zsw_dict *d = NULL;
        const void *src[NPAGES];
        void *dst[NPAGES];
        uint32_t lens[NPAGES];
        uint64_t mem;

        load_corpus();
        ASSERT_OK(zsw_dict_new(pages, ZSW_DICT_MAX, &d));
        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
        mem = zsw_dict_memory(d);
        ASSERT_GE(mem, ZSW_DICT_MAX);
        for (int i = 0; i < NPAGES; i++) {
                src[i] = pages[i];
                dst[i] = out[i];
        }
        for (size_t k = 0; k < ARRAY_SIZE(cases); k++) {
                struct zsw_compress_ctx *ctx = NULL;
                unsigned code;
                int r;

                ASSERT_OK(zsw_compress_ctx_new(cases[k].c, cases[k].level, &ctx));
                r = zsw_compress_ctx_set_dict(ctx, d);
                ASSERT_EQ(r, cases[k].used);
                code = cases[k].c | (r > 0 ? ZSW_WITH_DICT : 0);
                ASSERT_GT(zsw_compress_batch(ctx, src, dst, NPAGES, ZSW_PAGE_SIZE, lens),
                          NPAGES / 2);
                for (unsigned i = 0; i < NPAGES; i++) {
                        if (lens[i] == 0)
                                continue;
                        /* lz4 reaches back 64 KiB - 1 from a page's first
                         * byte: it uses the dictionary's last 15 pages. */
                        if (cases[k].used && i < in_dict &&
                            (cases[k].c != ZSW_COMPRESSOR_LZ4 || i >= 1))
                                ASSERT_LT(lens[i], ZSW_PAGE_SIZE / 16);
                        memset(back, 0xaa, sizeof(back));
                        ASSERT_OK(zsw_decompress(dctx, code, d, out[i], lens[i], back));
                        ASSERT_MEMEQ(back, pages[i], ZSW_PAGE_SIZE);
                }
                if (cases[k].used) {
                        ASSERT_ERRNO(zsw_decompress(dctx, code, NULL, out[0], lens[0], back),
                                     EINVAL);
                        /* A level change unsets the dictionary: page 1,
                         * which is in it, then decodes without it. */
                        ASSERT_OK(zsw_compress_ctx_set_level(ctx, cases[k].level));
                        ASSERT_EQ(zsw_compress_batch(ctx, &src[1], dst, 1, ZSW_PAGE_SIZE, lens), 1);
                        ASSERT_OK(zsw_decompress(dctx, cases[k].c, NULL, out[0], lens[0], back));
                        ASSERT_MEMEQ(back, pages[1], ZSW_PAGE_SIZE);
                }
                zsw_compress_ctx_free(ctx);
        }
        /* zstd's tables were made on first use, and counted. */
        ASSERT_GT(zsw_dict_memory(d), mem);
        ASSERT_TRUE(zsw_code_valid(ZSW_COMPRESSOR_ZSTD | ZSW_WITH_DICT));
        ASSERT_FALSE(zsw_code_valid(2));
        ASSERT_FALSE(zsw_code_valid(15));
        ASSERT_ERRNO(zsw_decompress(dctx, 2, d, out[0], 10, back), EINVAL);
        zsw_dict_free(d);
        ASSERT_ERRNO(zsw_dict_new(pages, 0, &d), EINVAL);
        ASSERT_ERRNO(zsw_dict_new(pages, ZSW_DICT_MAX + 1, &d), EINVAL);
        ASSERT_TRUE(zsw_dict_free(NULL) == NULL);
        zsw_decompress_ctx_free(dctx);
}

TEST(names_and_arguments) {
        struct zsw_compress_ctx *ctx = NULL;

        ASSERT_STREQ(zsw_compressor_to_string(ZSW_COMPRESSOR_LZ4), "lz4");
        ASSERT_STREQ(zsw_compressor_to_string(ZSW_COMPRESSOR_ZSTD), "zstd");
        ASSERT_TRUE(zsw_compressor_to_string(_ZSW_COMPRESSOR_MAX) == NULL);
        ASSERT_EQ(zsw_compressor_from_string("zstd"), ZSW_COMPRESSOR_ZSTD);
        ASSERT_EQ(zsw_compressor_from_string("lz4"), ZSW_COMPRESSOR_LZ4);
        ASSERT_ERRNO(zsw_compressor_from_string("gzip"), EINVAL);
        ASSERT_ERRNO(zsw_compressor_from_string(NULL), EINVAL);
        ASSERT_ERRNO(zsw_compress_ctx_new(_ZSW_COMPRESSOR_MAX, 0, &ctx), EINVAL);
        ASSERT_ERRNO(zsw_compress_ctx_new(ZSW_COMPRESSOR_ZSTD, 99, &ctx), EINVAL);
        ASSERT_ERRNO(zsw_compress_ctx_new(ZSW_COMPRESSOR_ZSTD, -1, &ctx), EINVAL);
        ASSERT_TRUE(ctx == NULL);
        ASSERT_OK(zsw_compress_ctx_new(ZSW_COMPRESSOR_ZSTD, 3, &ctx));
        ASSERT_ERRNO(zsw_compress_ctx_set_level(ctx, 99), EINVAL);
        ASSERT_OK(zsw_compress_ctx_set_level(ctx, 19));
        ctx = zsw_compress_ctx_free(ctx);
        ASSERT_TRUE(zsw_compress_ctx_free(NULL) == NULL);
        ASSERT_TRUE(zsw_decompress_ctx_free(NULL) == NULL);
}
