/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Page contents for the store tests: real pages from the corpus, stamped
 * so that every (tag) gives a distinct page, plus same-filled and
 * incompressible pages. */
#pragma once

#include <lz4.h>
#include <string.h>
#include <zstd.h>

#include "corpus.h"
#include "store.h"
#include "test.h"

#define CORPUS_PAGES 256

static uint8_t corpus[CORPUS_PAGES][ZSW_PAGE_SIZE];
static uint8_t noise[8][ZSW_PAGE_SIZE];

/* Candidates for the corpus: the machine's files give some pages that do
 * not compress (a compressed section, a packed archive), and which ones
 * changes as packages come and go. Tests count on data pages compressing,
 * so only pages that lz4 halves are kept. */
#define CANDIDATE_PAGES (4 * CORPUS_PAGES)

static inline void helpers_init(void) {
        static uint8_t big[CANDIDATE_PAGES * ZSW_PAGE_SIZE];
        static bool done;
        char out[LZ4_COMPRESSBOUND(ZSW_PAGE_SIZE)];
        size_t r, kept = 0;

        if (done)
                return;
        done = true;
        if (corpus_fill(big, CANDIDATE_PAGES, 0, 42) < 0)
                TEST_SKIP("no corpus files on this machine");
        for (size_t i = 0; i < CANDIDATE_PAGES && kept < CORPUS_PAGES; i++) {
                const char *page = (const char *) big + i * ZSW_PAGE_SIZE;
                int len = LZ4_compress_default(page, out, ZSW_PAGE_SIZE, sizeof(out));

                if (len > 0 && len <= (int) ZSW_PAGE_SIZE / 2)
                        memcpy(corpus[kept++], page, ZSW_PAGE_SIZE);
        }
        if (kept < CORPUS_PAGES)
                TEST_SKIP("only %zu of %u corpus pages compress to half", kept, CANDIDATE_PAGES);
        /* zstd output does not compress again: real incompressible bytes. */
        r = ZSTD_compress(big, sizeof(big), corpus, sizeof(corpus), 9);
        ASSERT_FALSE(ZSTD_isError(r));
        ASSERT_GE(r, sizeof(noise) + 4096);
        memcpy(noise, big + 4096, sizeof(noise));
}

enum page_kind { PAGE_DATA, PAGE_ZERO, PAGE_SAME, PAGE_NOISE, _PAGE_KIND_MAX };

/* Writes the page for (kind, tag). Data pages are corpus pages with the tag
 * written into their first bytes (they stay compressible and distinct). */
static inline void make_page(void *buf, enum page_kind kind, uint64_t tag) {
        uint64_t *w = buf;

        switch (kind) {
        case PAGE_DATA:
                memcpy(buf, corpus[tag % CORPUS_PAGES], ZSW_PAGE_SIZE);
                w[0] ^= tag * 0x9e3779b97f4a7c15ull;
                w[1] = tag;
                /* A corpus page may be same-filled (zeros): the tag
                 * makes it a data page. */
                w[ZSW_PAGE_SIZE / 8 - 1] = ~tag;
                break;
        case PAGE_ZERO:
                memset(buf, 0, ZSW_PAGE_SIZE);
                break;
        case PAGE_SAME:
                for (size_t i = 0; i < ZSW_PAGE_SIZE / 8; i++)
                        w[i] = tag | 1;
                break;
        case PAGE_NOISE:
                memcpy(buf, noise[tag % 8], ZSW_PAGE_SIZE);
                w[0] ^= tag;
                break;
        default:
                abort();
        }
}

static inline void assert_page(const void *buf, enum page_kind kind, uint64_t tag) {
        uint8_t want[ZSW_PAGE_SIZE];

        make_page(want, kind, tag);
        if (memcmp(buf, want, ZSW_PAGE_SIZE) != 0)
                TEST_FAIL("page (kind %d, tag %" PRIu64 ") differs", kind, tag);
}
