/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The store pipeline stage by stage: same-filled and incompressible pages,
 * every rollback path (failures injected in each stage, the limit, an
 * index failure in the middle of a batch), replacement, shared and
 * exclusive loads, clone, move, invalidation, isolation for writeback,
 * a corrupt payload, and the counters. */
#include "entry.h"
#include "store-helpers.h"

struct fault {
        int stage; /* -1: none */
        unsigned page;
        int error;
        unsigned hits;
};

static struct fault fault = { .stage = -1 };

static int inject(void *userdata, enum zsw_store_stage stage, unsigned page) {
        struct fault *f = userdata;

        if ((int) stage != f->stage || page != f->page)
                return 0;
        f->hits++;
        return -f->error;
}

struct env {
        struct zsw_store *s;
        struct zsw_worker *w;
        struct zsw_owner *o;
};

static void env_new(struct env *e, const struct zsw_store_config *cfg) {
        struct zsw_store_config c = cfg ? *cfg : (struct zsw_store_config) {};

        helpers_init();
        c.fault_inject = inject;
        c.fault_userdata = &fault;
        fault = (struct fault) { .stage = -1 };
        ASSERT_OK(zsw_store_new(&c, &e->s));
        ASSERT_OK(zsw_worker_new(e->s, &e->w));
        ASSERT_OK(zsw_store_owner_new(e->s, NULL, &e->o));
}

static void env_free(struct env *e) {
        zsw_worker_free(e->w);
        zsw_store_free(e->s); /* frees the owners too */
}

/* Stores pages (kind[i], tag = pgno[i]) at pgno[i]. */
static int store(struct env *e, struct zsw_owner *o, const uint64_t *pgnos,
                 const enum page_kind *kinds, size_t n, uint32_t *ret_mask) {
        static uint8_t bufs[ZSW_STORE_BATCH_MAX][ZSW_PAGE_SIZE];
        const void *pages[ZSW_STORE_BATCH_MAX];

        for (size_t i = 0; i < n; i++) {
                make_page(bufs[i], kinds[i], pgnos[i]);
                pages[i] = bufs[i];
        }
        return zsw_store_pages(e->w, o, pgnos, pages, n, ret_mask);
}

static int store_run(struct env *e, struct zsw_owner *o, uint64_t first, size_t n,
                     enum page_kind kind) {
        uint64_t pgnos[ZSW_STORE_BATCH_MAX];
        enum page_kind kinds[ZSW_STORE_BATCH_MAX];

        for (size_t i = 0; i < n; i++) {
                pgnos[i] = first + i;
                kinds[i] = kind;
        }
        return store(e, o, pgnos, kinds, n, NULL);
}

static void check_load(struct env *e, struct zsw_owner *o, uint64_t pgno, enum page_kind kind,
                       unsigned flags) {
        uint8_t buf[ZSW_PAGE_SIZE];

        ASSERT_OK(zsw_store_load(e->w, o, pgno, buf, flags));
        assert_page(buf, kind, pgno);
}

static struct zsw_store_stats stats(struct env *e) {
        struct zsw_store_stats st;

        zsw_store_get_stats(e->s, &st);
        return st;
}

TEST(mixed_batch_roundtrip) {
        struct env e;
        uint64_t pgnos[8] = { 0, 1, 2, 3, 100, 1000, ZSW_INDEX_MAX_PGNO, 77777777 };
        enum page_kind kinds[8] = { PAGE_DATA, PAGE_ZERO, PAGE_SAME, PAGE_NOISE,
                                    PAGE_DATA, PAGE_DATA, PAGE_DATA, PAGE_ZERO };
        uint32_t mask = 0;
        struct zsw_store_stats st;

        env_new(&e, NULL);
        ASSERT_EQ(store(&e, e.o, pgnos, kinds, 8, &mask), 8);
        ASSERT_EQ_U(mask, 0xff);
        st = stats(&e);
        ASSERT_EQ_U(st.stored_pages, 8);
        ASSERT_EQ_U(st.same_filled_pages, 3);
        ASSERT_EQ_U(st.incompressible_pages, 1);
        ASSERT_EQ_U(st.stores, 8);
        ASSERT_GT(st.payload_bytes, ZSW_PAGE_SIZE);     /* the raw page at least */
        ASSERT_LT(st.payload_bytes, 4 * ZSW_PAGE_SIZE); /* data pages compressed */
        ASSERT_GE(st.pool_bytes, st.payload_bytes);
        for (int i = 0; i < 8; i++)
                check_load(&e, e.o, pgnos[i], kinds[i], 0);
        /* Shared loads keep; exclusive loads remove. */
        for (int i = 0; i < 8; i++)
                check_load(&e, e.o, pgnos[i], kinds[i], ZSW_LOAD_EXCLUSIVE);
        for (int i = 0; i < 8; i++)
                ASSERT_FALSE(zsw_store_contains(e.o, pgnos[i]));
        st = stats(&e);
        ASSERT_EQ_U(st.stored_pages, 0);
        ASSERT_EQ_U(st.payload_bytes, 0);
        ASSERT_EQ_U(st.same_filled_pages, 0);
        ASSERT_EQ_U(st.incompressible_pages, 0);
        ASSERT_EQ_U(st.loads, 16);
        env_free(&e);
}

TEST(same_filled_take_no_pool_memory) {
        struct env e;
        uint8_t buf[ZSW_PAGE_SIZE];

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_ZERO), 32);
        ASSERT_EQ(store_run(&e, e.o, 32, 32, PAGE_SAME), 32);
        ASSERT_EQ_U(stats(&e).pool_bytes, 0);
        ASSERT_EQ_U(stats(&e).payload_bytes, 0);
        ASSERT_EQ_U(stats(&e).same_filled_pages, 64);
        /* Not on the LRU: nothing to write back. */
        {
                struct zsw_entry *iso[4];
                ASSERT_EQ(zsw_store_isolate(e.o, iso, 4), 0);
        }
        memset(buf, 0x5a, sizeof(buf));
        ASSERT_OK(zsw_store_load(e.w, e.o, 5, buf, 0));
        assert_page(buf, PAGE_ZERO, 5);
        check_load(&e, e.o, 40, PAGE_SAME, 0);
        ASSERT_ERRNO(zsw_store_load(e.w, e.o, 64, buf, 0), ENOENT);
        env_free(&e);
}

TEST(incompressible_refused_by_setting) {
        struct zsw_store_config cfg = { .reject_incompressible = true };
        uint64_t pgnos[4] = { 10, 11, 12, 13 };
        enum page_kind kinds[4] = { PAGE_DATA, PAGE_NOISE, PAGE_ZERO, PAGE_NOISE };
        uint32_t mask = 0;
        struct env e;

        env_new(&e, &cfg);
        /* An older copy at 11 is stale once 11 is stored again, stored or not. */
        ASSERT_EQ(store_run(&e, e.o, 11, 1, PAGE_DATA), 1);
        ASSERT_EQ(store(&e, e.o, pgnos, kinds, 4, &mask), 2);
        ASSERT_EQ_U(mask, 0x5);
        ASSERT_TRUE(zsw_store_contains(e.o, 10));
        ASSERT_FALSE(zsw_store_contains(e.o, 11));
        ASSERT_TRUE(zsw_store_contains(e.o, 12));
        ASSERT_FALSE(zsw_store_contains(e.o, 13));
        ASSERT_EQ_U(stats(&e).rejects[ZSW_REJECT_INCOMPRESSIBLE], 2);
        ASSERT_EQ_U(stats(&e).stored_pages, 2);
        ASSERT_EQ_U(stats(&e).incompressible_pages, 0);
        check_load(&e, e.o, 10, PAGE_DATA, 0);
        check_load(&e, e.o, 12, PAGE_ZERO, 0);

        /* A batch of nothing but incompressible pages stores nothing. */
        ASSERT_EQ(store_run(&e, e.o, 200, 3, PAGE_NOISE), 0);
        ASSERT_EQ_U(stats(&e).stored_pages, 2);
        env_free(&e);
}

TEST(threshold_setting) {
        /* With a tiny limit, data pages are kept raw. */
        struct zsw_store_config cfg = { .max_compressed = 64 };
        struct env e;

        env_new(&e, &cfg);
        ASSERT_EQ(store_run(&e, e.o, 0, 4, PAGE_DATA), 4);
        ASSERT_EQ_U(stats(&e).incompressible_pages, 4);
        ASSERT_EQ_U(stats(&e).payload_bytes, 4 * ZSW_PAGE_SIZE);
        check_load(&e, e.o, 2, PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        env_free(&e);
        cfg.max_compressed = ZSW_PAGE_SIZE + 1;
        ASSERT_ERRNO(zsw_store_new(&cfg, &e.s), EINVAL);
}

/* Stores a batch with a failure injected and checks that nothing of it
 * stayed, that the counters are as before plus the reject, and that the
 * pages stored before are intact. */
static void rollback_case(int stage, unsigned page, int error, enum zsw_reject reason) {
        uint64_t pgnos[32];
        enum page_kind kinds[32];
        struct zsw_store_stats before, after;
        struct env e;

        env_new(&e, NULL);
        /* Survivors: 0..31, and 64..95 which the failing batch overlaps. */
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, e.o, 64, 32, PAGE_NOISE), 32);
        for (int i = 0; i < 32; i++) {
                /* 80..111: half replace stored pages, half are new. */
                pgnos[i] = 80 + i;
                kinds[i] = (enum page_kind)(i % _PAGE_KIND_MAX);
        }
        before = stats(&e);

        fault = (struct fault) { .stage = stage, .page = page, .error = error };
        ASSERT_ERRNO(store(&e, e.o, pgnos, kinds, 32, NULL), error);
        ASSERT_EQ(fault.hits, 1);

        after = stats(&e);
        /* The 16 old pages at 80..95 were stale and are gone; nothing new. */
        ASSERT_EQ_U(after.stored_pages, before.stored_pages - 16);
        ASSERT_EQ_U(after.payload_bytes, before.payload_bytes - 16 * ZSW_PAGE_SIZE);
        ASSERT_EQ_U(after.incompressible_pages, before.incompressible_pages - 16);
        ASSERT_EQ_U(after.stores, before.stores);
        ASSERT_EQ_U(after.rejects[reason], before.rejects[reason] + 32);
        for (int i = 0; i < 32; i++)
                ASSERT_FALSE(zsw_store_contains(e.o, pgnos[i]));
        for (int i = 0; i < 32; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, 0);
        for (int i = 64; i < 80; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_NOISE, 0);

        /* The same batch goes through once the failure is gone, and
         * exclusive loads of everything leave an empty store. */
        fault.stage = -1;
        ASSERT_EQ(store(&e, e.o, pgnos, kinds, 32, NULL), 32);
        for (int i = 0; i < 32; i++)
                check_load(&e, e.o, pgnos[i], kinds[i], ZSW_LOAD_EXCLUSIVE);
        ASSERT_EQ(zsw_store_invalidate(e.o, 0, 1000), 48);
        after = stats(&e);
        ASSERT_EQ_U(after.stored_pages, 0);
        ASSERT_EQ_U(after.payload_bytes, 0);
        env_free(&e);
}

TEST(rollback_entries_stage) {
        rollback_case(ZSW_STAGE_ENTRIES, 0, ENOMEM, ZSW_REJECT_ENOMEM);
}

TEST(rollback_compress_stage) {
        rollback_case(ZSW_STAGE_COMPRESS, 0, EIO, ZSW_REJECT_COMPRESS);
}

TEST(rollback_pool_stage) {
        rollback_case(ZSW_STAGE_POOL, 0, ENOMEM, ZSW_REJECT_POOL);
}

TEST(rollback_index_stage_first_middle_last) {
        rollback_case(ZSW_STAGE_INDEX, 0, ENOMEM, ZSW_REJECT_INDEX);
        rollback_case(ZSW_STAGE_INDEX, 17, ENOMEM, ZSW_REJECT_INDEX);
        rollback_case(ZSW_STAGE_INDEX, 31, ENOMEM, ZSW_REJECT_INDEX);
}

TEST(rollback_limit) {
        struct zsw_owner_config oc = { .compressor = ZSW_COMPRESSOR_ZSTD,
                                       .level = 3,
                                       .max_pages = 40 };
        struct zsw_owner *o;
        struct env e;

        env_new(&e, NULL);
        ASSERT_OK(zsw_store_owner_new(e.s, &oc, &o));
        ASSERT_EQ(store_run(&e, o, 0, 32, PAGE_DATA), 32);
        ASSERT_ERRNO(store_run(&e, o, 100, 9, PAGE_DATA), ENOSPC);
        ASSERT_EQ_U(stats(&e).rejects[ZSW_REJECT_LIMIT], 9);
        ASSERT_EQ_U(stats(&e).stored_pages, 32);
        ASSERT_FALSE(zsw_store_contains(o, 100));
        /* Replacing pages does not grow the owner. */
        ASSERT_EQ(store_run(&e, o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, o, 100, 8, PAGE_DATA), 8);
        check_load(&e, o, 105, PAGE_DATA, 0);
        check_load(&e, o, 3, PAGE_DATA, 0);
        /* The other owner is not limited. */
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, e.o, 32, 32, PAGE_DATA), 32);
        env_free(&e);
}

TEST(bad_arguments) {
        uint64_t dup[2] = { 5, 5 }, far[1] = { ZSW_INDEX_MAX_PGNO + 1 };
        enum page_kind kinds[2] = { PAGE_DATA, PAGE_DATA };
        struct zsw_owner_config bad = { .compressor = ZSW_COMPRESSOR_ZSTD, .level = 50 };
        struct zsw_owner *o;
        struct env e;

        env_new(&e, NULL);
        ASSERT_ERRNO(store(&e, e.o, dup, kinds, 2, NULL), EINVAL);
        ASSERT_ERRNO(store(&e, e.o, far, kinds, 1, NULL), ERANGE);
        ASSERT_ERRNO(store(&e, e.o, dup, kinds, 0, NULL), EINVAL);
        ASSERT_ERRNO(zsw_store_owner_new(e.s, &bad, &o), EINVAL);
        ASSERT_EQ_U(stats(&e).stored_pages, 0);
        env_free(&e);
}

TEST(replace_frees_old) {
        uint8_t buf[ZSW_PAGE_SIZE];
        struct env e;

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 7, 1, PAGE_NOISE), 1);
        ASSERT_EQ_U(stats(&e).payload_bytes, ZSW_PAGE_SIZE);
        ASSERT_EQ(store_run(&e, e.o, 7, 1, PAGE_ZERO), 1);
        ASSERT_EQ_U(stats(&e).stored_pages, 1);
        ASSERT_EQ_U(stats(&e).payload_bytes, 0);
        ASSERT_EQ_U(stats(&e).incompressible_pages, 0);
        ASSERT_OK(zsw_store_load(e.w, e.o, 7, buf, 0));
        assert_page(buf, PAGE_ZERO, 7);
        env_free(&e);
}

TEST(owners_with_different_compressors) {
        struct zsw_owner_config zc = { .compressor = ZSW_COMPRESSOR_ZSTD, .level = 3 };
        struct zsw_owner *z;
        struct zsw_store_stats sz, sl;
        struct env e;

        env_new(&e, NULL);
        ASSERT_OK(zsw_store_owner_new(e.s, &zc, &z));
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, z, 0, 32, PAGE_DATA), 32);
        zsw_store_owner_get_stats(e.o, &sl);
        zsw_store_owner_get_stats(z, &sz);
        ASSERT_EQ_U(sl.stored_pages, 32);
        ASSERT_EQ_U(sz.stored_pages, 32);
        /* zstd compresses these pages better than lz4. */
        ASSERT_LT(sz.payload_bytes, sl.payload_bytes);
        for (int i = 0; i < 32; i++) {
                check_load(&e, z, (uint64_t) i, PAGE_DATA, 0);
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, 0);
        }

        /* The same worker honours each owner's level: after a level 19
         * owner, a level 3 owner compresses as level 3 again. */
        {
                struct zsw_owner_config hc = { .compressor = ZSW_COMPRESSOR_ZSTD, .level = 19 };
                struct zsw_store_stats sh, sz2;
                struct zsw_owner *h, *z2;

                ASSERT_OK(zsw_store_owner_new(e.s, &hc, &h));
                ASSERT_OK(zsw_store_owner_new(e.s, &zc, &z2));
                ASSERT_EQ(store_run(&e, h, 0, 32, PAGE_DATA), 32);
                ASSERT_EQ(store_run(&e, z2, 0, 32, PAGE_DATA), 32);
                zsw_store_owner_get_stats(h, &sh);
                zsw_store_owner_get_stats(z2, &sz2);
                ASSERT_LT(sh.payload_bytes, sz.payload_bytes);
                ASSERT_EQ_U(sz2.payload_bytes, sz.payload_bytes);
                check_load(&e, h, 7, PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        }
        env_free(&e);
}

TEST(clone_shares_then_diverges) {
        struct zsw_owner *child;
        struct zsw_store_stats st, cs;
        uint8_t buf[ZSW_PAGE_SIZE];
        struct env e;

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, e.o, 1 << 20, 16, PAGE_SAME), 16);
        ASSERT_OK(zsw_store_owner_clone(e.o, &child));
        st = stats(&e);
        ASSERT_EQ_U(st.stored_pages, 48); /* shared, counted once */
        zsw_store_owner_get_stats(child, &cs);
        ASSERT_EQ_U(cs.stored_pages, 48);

        /* The child takes its pages; the parent keeps its own. */
        for (int i = 0; i < 32; i++)
                check_load(&e, child, (uint64_t) i, PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        ASSERT_EQ_U(stats(&e).stored_pages, 48);
        for (int i = 0; i < 32; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, 0);
        /* The parent drops its pages: the child's copies stay. */
        ASSERT_EQ(zsw_store_invalidate(e.o, 1 << 20, 16), 16);
        check_load(&e, child, (1 << 20) + 3, PAGE_SAME, 0);
        ASSERT_ERRNO(zsw_store_load(e.w, e.o, (1 << 20) + 3, buf, 0), ENOENT);
        /* A store in the parent does not reach the child. */
        ASSERT_EQ(store_run(&e, e.o, 0, 1, PAGE_ZERO), 1);
        ASSERT_FALSE(zsw_store_contains(child, 0));
        /* Freeing the parent leaves the child whole. */
        zsw_store_owner_free(e.o);
        e.o = NULL;
        ASSERT_EQ_U(stats(&e).stored_pages, 16);
        for (int i = 0; i < 16; i++)
                check_load(&e, child, (1 << 20) + (uint64_t) i, PAGE_SAME, 0);
        zsw_store_owner_free(child);
        ASSERT_EQ_U(stats(&e).stored_pages, 0);
        ASSERT_EQ_U(stats(&e).payload_bytes, 0);
        env_free(&e);
}

/* Pages [from, from + n) of PAGE_DATA are at [to, to + n) alone. */
static void check_moved(struct env *e, uint64_t from, uint64_t to, uint64_t n) {
        for (uint64_t i = 0; i < n; i++) {
                uint8_t buf[ZSW_PAGE_SIZE];

                ASSERT_FALSE(zsw_store_contains(e->o, from + i));
                ASSERT_OK(zsw_store_load(e->w, e->o, to + i, buf, 0));
                assert_page(buf, PAGE_DATA, from + i);
        }
}

static int note_entry(void *userdata, const struct zsw_store_page *p) {
        const void **v = userdata;

        if (p->pgno >= 100 && p->pgno < 108)
                v[p->pgno - 100] = p->entry;
        return 0;
}

/* A move cut short (a dead zswapd's; engine-load.c applies it again):
 * pages 100-101 moved whole, 102 copied and not yet dropped at its
 * source, 103-107 not moved, a stale page at 1005. The rest of the move
 * leaves each page at its destination once, with its content. */
TEST(move_rest_finishes_a_move_cut_short) {
        const void *entries[8] = {};
        struct env e;

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 100, 8, PAGE_DATA), 8);
        ASSERT_EQ(store_run(&e, e.o, 1005, 1, PAGE_NOISE), 1);
        ASSERT_OK(zsw_store_export(e.o, note_entry, entries));
        for (uint64_t i = 0; i < 3; i++) {
                struct zsw_store_page p = { .pgno = 1000 + i };

                ASSERT_OK(zsw_store_import(e.o, &p, (struct zsw_entry *) entries[i], NULL));
                if (i < 2)
                        ASSERT_EQ(zsw_store_invalidate(e.o, 100 + i, 1), 1);
        }
        ASSERT_EQ(zsw_store_move_rest(e.o, 100, 1000, 8), 6);
        ASSERT_EQ_U(stats(&e).stored_pages, 8);
        check_moved(&e, 100, 1000, 8);
        /* Nothing left to move: nothing changes. */
        ASSERT_EQ(zsw_store_move_rest(e.o, 100, 1000, 8), 0);
        ASSERT_EQ_U(stats(&e).stored_pages, 8);

        /* Cut before any copy: the destination goes first, as in the
         * move, also where the source has nothing (1204). */
        ASSERT_EQ(store_run(&e, e.o, 200, 4, PAGE_DATA), 4);
        ASSERT_EQ(store_run(&e, e.o, 1201, 1, PAGE_NOISE), 1);
        ASSERT_EQ(store_run(&e, e.o, 1204, 1, PAGE_NOISE), 1);
        ASSERT_EQ(zsw_store_move_rest(e.o, 200, 1200, 5), 4);
        ASSERT_FALSE(zsw_store_contains(e.o, 1204));
        check_moved(&e, 200, 1200, 4);
        ASSERT_EQ_U(stats(&e).stored_pages, 12);
        env_free(&e);
}

TEST(move_and_invalidate) {
        struct env e;

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 100, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, e.o, 1000, 4, PAGE_NOISE), 4);
        /* The destination's old content goes. */
        ASSERT_EQ(zsw_store_move(e.o, 100, 1000, 10), 10);
        ASSERT_EQ_U(stats(&e).stored_pages, 32);
        ASSERT_EQ_U(stats(&e).incompressible_pages, 0);
        for (uint64_t i = 0; i < 10; i++) {
                uint8_t buf[ZSW_PAGE_SIZE];

                ASSERT_FALSE(zsw_store_contains(e.o, 100 + i));
                ASSERT_OK(zsw_store_load(e.w, e.o, 1000 + i, buf, 0));
                assert_page(buf, PAGE_DATA, 100 + i);
        }
        check_load(&e, e.o, 110, PAGE_DATA, 0);
        ASSERT_ERRNO(zsw_store_move(e.o, 100, 105, 10), EINVAL);
        ASSERT_ERRNO(zsw_store_move(e.o, ZSW_INDEX_MAX_PGNO, 0, 2), ERANGE);
        ASSERT_EQ(zsw_store_move(e.o, 5000, 6000, 100), 0);

        /* Invalidation counts only what was there, far ranges included. */
        ASSERT_EQ(zsw_store_invalidate(e.o, 0, ZSW_INDEX_MAX_PGNO + 1), 32);
        ASSERT_EQ(zsw_store_invalidate(e.o, ZSW_INDEX_MAX_PGNO, UINT64_MAX), 0);
        ASSERT_EQ_U(stats(&e).invalidations, 36);
        ASSERT_EQ_U(stats(&e).stored_pages, 0);
        env_free(&e);
}

TEST(isolate_second_chance_and_putback) {
        struct zsw_entry *iso[64];
        uint8_t buf[ZSW_PAGE_SIZE];
        struct zsw_decompress_ctx *dctx;
        struct env e;
        size_t n;

        env_new(&e, NULL);
        ASSERT_OK(zsw_decompress_ctx_new(&dctx));
        ASSERT_EQ(store_run(&e, e.o, 0, 16, PAGE_DATA), 16); /* oldest */
        ASSERT_EQ(store_run(&e, e.o, 16, 16, PAGE_DATA), 16);
        ASSERT_EQ(store_run(&e, e.o, 32, 8, PAGE_ZERO), 8); /* not listed */
        /* Touch 0..7: they get a second chance. */
        for (int i = 0; i < 8; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, 0);

        n = zsw_store_isolate(e.o, iso, 8);
        ASSERT_EQ(n, 8);
        for (size_t k = 0; k < n; k++) {
                const void *data;
                uint32_t len;
                unsigned c;
                uint64_t tag;

                ASSERT_EQ(zsw_store_entry_payload(e.s, iso[k], &data, &len, &c), 0);
                ASSERT_OK(zsw_decompress(dctx, c, NULL, data, len, buf));
                /* 8..15: the coldest that were not touched. */
                memcpy(&tag, buf + 8, sizeof(tag));
                ASSERT_GE(tag, 8);
                ASSERT_LT(tag, 16);
                assert_page(buf, PAGE_DATA, tag);
        }
        /* Loads keep working on isolated entries; an invalidated isolated
         * entry lives until put back. */
        check_load(&e, e.o, 9, PAGE_DATA, 0);
        ASSERT_EQ(zsw_store_invalidate(e.o, 8, 4), 4);
        ASSERT_EQ_U(stats(&e).stored_pages, 40);
        zsw_store_putback(e.o, iso, n);
        ASSERT_EQ_U(stats(&e).stored_pages, 36);

        /* Everything listed can be isolated now; the bits were spent. */
        n = zsw_store_isolate(e.o, iso, 64);
        ASSERT_EQ(n, 28);
        zsw_store_putback(e.o, iso, n);
        for (int i = 12; i < 32; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        zsw_decompress_ctx_free(dctx);
        env_free(&e);
}

TEST(corrupt_payload_is_reported_and_kept) {
        struct zsw_entry *iso[1];
        uint8_t buf[ZSW_PAGE_SIZE];
        const void *data;
        uint32_t len;
        unsigned c;
        struct env e;

        env_new(&e, NULL);
        ASSERT_EQ(store_run(&e, e.o, 3, 1, PAGE_DATA), 1);
        ASSERT_EQ(zsw_store_isolate(e.o, iso, 1), 1);
        ASSERT_EQ(zsw_store_entry_payload(e.s, iso[0], &data, &len, &c), 0);
        /* Truncate the lz4 stream: the first token claims more than is there. */
        memset((void *) data, 0xff, len);
        zsw_store_putback(e.o, iso, 1);
        ASSERT_ERRNO(zsw_store_load(e.w, e.o, 3, buf, ZSW_LOAD_EXCLUSIVE), EBADMSG);
        ASSERT_TRUE(zsw_store_contains(e.o, 3));
        ASSERT_ERRNO(zsw_store_load(e.w, e.o, 3, buf, 0), EBADMSG);
        ASSERT_EQ_U(stats(&e).stored_pages, 1);
        env_free(&e);
}

TEST(latency_and_counters) {
        struct zsw_store_latency l;
        struct zsw_store_stats os;
        struct env e;

        env_new(&e, NULL);
        for (int b = 0; b < 8; b++)
                ASSERT_EQ(store_run(&e, e.o, (uint64_t) b * 32, 32, PAGE_DATA), 32);
        for (int i = 0; i < 100; i++)
                check_load(&e, e.o, (uint64_t) i, PAGE_DATA, 0);
        zsw_store_get_latency(e.s, ZSW_LATENCY_STORE, &l);
        ASSERT_EQ_U(l.count, 256);
        ASSERT_GT(l.p50, 0);
        ASSERT_LE(l.p50, l.p95);
        ASSERT_LE(l.p95, l.p99);
        zsw_store_get_latency(e.s, ZSW_LATENCY_COMPRESS, &l);
        ASSERT_EQ_U(l.count, 256);
        zsw_store_owner_get_latency(e.o, ZSW_LATENCY_LOAD, &l);
        ASSERT_EQ_U(l.count, 100);
        zsw_store_owner_get_stats(e.o, &os);
        ASSERT_EQ_U(os.stores, 256);
        ASSERT_EQ_U(os.loads, 100);
        ASSERT_GT(os.meta_bytes, 0);
        ASSERT_GT(stats(&e).meta_bytes, 256 * 40);
        ASSERT_STREQ(zsw_reject_to_string(ZSW_REJECT_POOL), "pool");
        env_free(&e);
}

/* What a re-exec hands over (engine-state.c): export each owner of a
 * family (into a copy, as the state is written: an export's callback must
 * not call into the store), import into a fresh store, shared entries
 * shared again. */
struct handover {
        struct zsw_store_page pages[64];
        uint8_t payloads[64][ZSW_PAGE_SIZE];
        size_t n_pages;
        const void *from[128];
        struct zsw_entry *made[128];
        size_t n;
};

static int export_page(void *userdata, const struct zsw_store_page *p) {
        struct handover *h = userdata;

        ASSERT_LT(h->n_pages, ARRAY_SIZE(h->pages));
        h->pages[h->n_pages] = *p;
        memcpy(h->payloads[h->n_pages], p->payload ?: h->payloads[h->n_pages], p->length);
        h->pages[h->n_pages].payload = h->payloads[h->n_pages];
        h->n_pages++;
        return 0;
}

static void handover(struct handover *h, struct zsw_owner *from, struct zsw_owner *to) {
        h->n_pages = 0;
        ASSERT_OK(zsw_store_export(from, export_page, h));
        for (size_t k = 0; k < h->n_pages; k++) {
                const struct zsw_store_page *p = &h->pages[k];
                struct zsw_entry *share = NULL, *e;

                for (size_t i = 0; i < h->n; i++)
                        if (h->from[i] == p->entry)
                                share = h->made[i];
                ASSERT_OK(zsw_store_import(to, p, share, &e));
                if (share)
                        continue;
                ASSERT_LT(h->n, ARRAY_SIZE(h->from));
                h->from[h->n] = p->entry;
                h->made[h->n++] = e;
        }
}

TEST(export_import_keeps_pages_and_sharing) {
        struct zsw_store_stats a, b, oa, ob;
        struct zsw_owner *child, *to_parent, *to_child;
        static struct handover h;
        struct env e, f;

        env_new(&e, NULL);
        env_new(&f, NULL);
        ASSERT_EQ(store_run(&e, e.o, 0, 32, PAGE_DATA), 32);
        ASSERT_EQ(store_run(&e, e.o, 1 << 20, 16, PAGE_SAME), 16);
        ASSERT_EQ(store_run(&e, e.o, 5000, 4, PAGE_NOISE), 4);
        ASSERT_OK(zsw_store_owner_clone(e.o, &child));
        ASSERT_EQ(store_run(&e, child, 0, 1, PAGE_ZERO), 1); /* the child's own */

        to_parent = f.o;
        ASSERT_OK(zsw_store_owner_new_sibling(to_parent, &to_child));
        ASSERT_TRUE(zsw_store_same_family(to_parent, to_child));
        handover(&h, e.o, to_parent);
        handover(&h, child, to_child);
        ASSERT_EQ_U(h.n, 53); /* 52 shared or the parent's, 1 the child's */

        zsw_store_get_stats(e.s, &a);
        zsw_store_get_stats(f.s, &b);
        ASSERT_EQ_U(b.stored_pages, a.stored_pages);
        ASSERT_EQ_U(b.payload_bytes, a.payload_bytes);
        ASSERT_EQ_U(b.same_filled_pages, a.same_filled_pages);
        ASSERT_EQ_U(b.incompressible_pages, a.incompressible_pages);
        zsw_store_owner_get_stats(child, &oa);
        zsw_store_owner_get_stats(to_child, &ob);
        ASSERT_EQ_U(ob.stored_pages, oa.stored_pages);

        check_load(&f, to_child, 0, PAGE_ZERO, 0);
        check_load(&f, to_parent, 0, PAGE_DATA, 0);
        for (int i = 1; i < 32; i++)
                check_load(&f, to_child, (uint64_t) i, PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        /* The child's exclusive loads left the parent its copies. */
        for (int i = 1; i < 32; i++)
                check_load(&f, to_parent, (uint64_t) i, PAGE_DATA, 0);
        for (int i = 0; i < 16; i++)
                check_load(&f, to_parent, (1 << 20) + (uint64_t) i, PAGE_SAME, 0);
        for (int i = 0; i < 4; i++)
                check_load(&f, to_child, 5000 + (uint64_t) i, PAGE_NOISE, 0);

        /* A page it has, and a malformed one, are refused. */
        ASSERT_ERRNO(
                zsw_store_import(to_parent, &(struct zsw_store_page) { .pgno = 0 }, NULL, NULL),
                EEXIST);
        ASSERT_ERRNO(zsw_store_import(to_parent,
                                      &(struct zsw_store_page) { .pgno = 999,
                                                                 .state = ZSW_ENTRY_COMPRESSED },
                                      NULL, NULL),
                     EINVAL);
        ASSERT_FALSE(zsw_store_contains(to_parent, 999));
        env_free(&e);
        env_free(&f);
}

/* Stores data pages first..first+n (tags = page numbers) in batches. */
static void store_data(struct env *e, struct zsw_owner *o, uint64_t first, size_t n) {
        for (size_t k = 0; k < n; k += ZSW_STORE_BATCH_MAX)
                ASSERT_EQ(store_run(e, o, first + k, MIN(n - k, (size_t) ZSW_STORE_BATCH_MAX),
                                    PAGE_DATA),
                          (int) MIN(n - k, (size_t) ZSW_STORE_BATCH_MAX));
}

/* A family gets a dictionary of 16 pages sampled from 64 batches stored
 * once an owner holds 1024 pages; pages stored after it are coded with
 * it: the dictionary's own pages, stored again, take a fraction of what
 * they took before it. They load back exactly, in a clone too, and cross
 * an export once the receiving family has the same dictionary (refused
 * before). A store without dictionaries makes none. */
TEST(dictionary_per_family) {
        struct zsw_store_config plain = { .no_dict = true };
        uint64_t tags[ZSW_DICT_MAX / ZSW_PAGE_SIZE], before, mid, after;
        struct zsw_owner *child;
        static struct handover h;
        const uint8_t *content;
        size_t len, n = ZSW_DICT_MAX / ZSW_PAGE_SIZE;
        struct env e, f, g;

        env_new(&e, NULL);
        env_new(&f, NULL);
        env_new(&g, &plain);
        store_data(&e, e.o, 0, 1024);
        store_data(&e, e.o, 1024, 63 * ZSW_STORE_BATCH_MAX);
        ASSERT_TRUE(zsw_store_dict(e.o, &len) == NULL);
        store_data(&e, e.o, 1024 + 63 * ZSW_STORE_BATCH_MAX, ZSW_STORE_BATCH_MAX);
        content = zsw_store_dict(e.o, &len);
        ASSERT_TRUE(content != NULL);
        ASSERT_EQ_U(len, ZSW_DICT_MAX);
        store_data(&g, g.o, 0, 1024 + 64 * ZSW_STORE_BATCH_MAX);
        ASSERT_TRUE(zsw_store_dict(g.o, &len) == NULL);

        /* Each page of it is a data page, its tag (= page number) in
         * its second word; sampled after the first 1024. */
        for (size_t i = 0; i < n; i++) {
                memcpy(&tags[i], content + i * ZSW_PAGE_SIZE + 8, sizeof(tags[i]));
                ASSERT_GE(tags[i], 1024);
                ASSERT_LT(tags[i], 1024 + 64 * ZSW_STORE_BATCH_MAX);
        }
        before = stats(&e).payload_bytes;
        for (size_t i = 0; i < n; i++)
                ASSERT_EQ(zsw_store_invalidate(e.o, tags[i], 1), 1);
        mid = stats(&e).payload_bytes;
        for (size_t i = 0; i < n; i++)
                ASSERT_EQ(store_run(&e, e.o, tags[i], 1, PAGE_DATA), 1);
        after = stats(&e).payload_bytes;
        ASSERT_LT(after - mid, (before - mid) / 4);
        ASSERT_GE(stats(&e).meta_bytes, ZSW_DICT_MAX);

        ASSERT_OK(zsw_store_owner_clone(e.o, &child));
        ASSERT_TRUE(zsw_store_dict(child, &len) == content);
        for (size_t i = 0; i < n; i++) {
                check_load(&e, child, tags[i], PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
                check_load(&e, e.o, tags[i], PAGE_DATA, 0);
        }
        zsw_store_owner_free(child);

        /* Across an export: only the dictionary's pages left, coded with it. */
        ASSERT_GT(zsw_store_invalidate(e.o, 0, ZSW_INDEX_MAX_PGNO + 1), 0);
        for (size_t i = 0; i < n; i++)
                ASSERT_EQ(store_run(&e, e.o, tags[i], 1, PAGE_DATA), 1);
        h.n = h.n_pages = 0;
        ASSERT_OK(zsw_store_export(e.o, export_page, &h));
        ASSERT_EQ_U(h.n_pages, n);
        ASSERT_ERRNO(zsw_store_import(f.o, &h.pages[0], NULL, NULL), EINVAL);
        ASSERT_FALSE(zsw_store_contains(f.o, h.pages[0].pgno));
        ASSERT_OK(zsw_store_set_dict(f.o, content, ZSW_DICT_MAX));
        ASSERT_ERRNO(zsw_store_set_dict(f.o, content, ZSW_DICT_MAX), EEXIST);
        handover(&h, e.o, f.o);
        for (size_t i = 0; i < n; i++)
                check_load(&f, f.o, tags[i], PAGE_DATA, ZSW_LOAD_EXCLUSIVE);
        ASSERT_EQ_U(stats(&f).stored_pages, 0);
        env_free(&e);
        env_free(&f);
        env_free(&g);
}

/* Invalidating three pages in four leaves every slab a quarter full;
 * compaction gives the sparse slabs back, down to at most one slab of
 * free room per size class, and every page left loads back exactly. */
TEST(compaction_after_churn) {
        enum { N = 16384, SLAB_MAX = 16 * ZSW_PAGE_SIZE };
        struct zsw_store_stats before, after;
        uint64_t slack_before, slack_after;
        struct env e;

        env_new(&e, NULL);
        for (uint64_t p = 0; p < N; p += ZSW_STORE_BATCH_MAX)
                ASSERT_EQ(store_run(&e, e.o, p, ZSW_STORE_BATCH_MAX, PAGE_DATA),
                          ZSW_STORE_BATCH_MAX);
        for (uint64_t p = 0; p < N; p++)
                if (p % 4 != 0)
                        ASSERT_EQ(zsw_store_invalidate(e.o, p, 1), 1);
        before = stats(&e);
        slack_before = before.pool_bytes - before.pool_used_bytes - before.pool_cached_bytes;
        ASSERT_GT(slack_before, (uint64_t) ZSW_POOL_NR_CLASSES * SLAB_MAX);

        ASSERT_GT(zsw_store_compact(e.s, true), 0);
        after = stats(&e);
        ASSERT_EQ_U(after.pool_used_bytes, before.pool_used_bytes);
        ASSERT_EQ_U(after.pool_cached_bytes, 0);
        slack_after = after.pool_bytes - after.pool_used_bytes;
        ASSERT_LE(slack_after, (uint64_t) ZSW_POOL_NR_CLASSES * SLAB_MAX);
        ASSERT_LE(slack_after, slack_before / 4);
        ASSERT_GT(after.pool_compacted_objects, 0);
        /* What went back: the slabs compaction emptied, and the cache. */
        ASSERT_EQ_U(after.pool_bytes,
                    before.pool_bytes - before.pool_cached_bytes - after.pool_compacted_bytes);

        for (uint64_t p = 0; p < N; p++)
                if (p % 4 == 0)
                        check_load(&e, e.o, p, PAGE_DATA, p % 8 ? 0 : ZSW_LOAD_EXCLUSIVE);
        env_free(&e);
}
