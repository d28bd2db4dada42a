/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The store driven by random operations against a reference model that
 * says, for every owner and page number, which page content (kind, tag)
 * it must hold: batched stores (with replacements), shared and exclusive
 * loads, range invalidation, clone, mremap moves, owner frees, isolation
 * and putback. Every load is checked byte for byte, every owner's page
 * count after every operation, and the global count of distinct entries
 * (which checks the reference counting of shared entries).
 */
#include "store-helpers.h"

#define MAX_OWNERS 6
#define DENSE 1024u
#define SPARSE 64u
#define SLOTS (DENSE + SPARSE)

struct content {
        uint8_t kind; /* 0: absent, else enum page_kind + 1 */
        uint64_t tag;
};

struct model_owner {
        struct zsw_owner *o;
        struct content slot[SLOTS];
};

static struct model_owner owners[MAX_OWNERS];
static uint64_t rng_state, next_tag = 1;

static uint64_t rnd(void) {
        uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static unsigned below(unsigned n) {
        return (unsigned) (rnd() % n);
}

static uint64_t slot_pgno(unsigned slot) {
        if (slot < DENSE)
                return slot;
        /* Spread over the 47-bit space, the last one at the very top. */
        return slot == SLOTS - 1
                       ? ZSW_INDEX_MAX_PGNO
                       : (uint64_t) (slot - DENSE + 1) * 0x1f3a5b7c9ull % ZSW_INDEX_MAX_PGNO;
}

static int pick_owner(void) {
        for (int tries = 0; tries < 32; tries++) {
                int i = (int) below(MAX_OWNERS);

                if (owners[i].o)
                        return i;
        }
        for (int i = 0; i < MAX_OWNERS; i++)
                if (owners[i].o)
                        return i;
        return -1;
}

static uint64_t model_count(const struct model_owner *m) {
        uint64_t n = 0;

        for (unsigned s = 0; s < SLOTS; s++)
                n += m->slot[s].kind != 0;
        return n;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static void check_counts(struct zsw_store *s, bool global) {
        static uint64_t tags[MAX_OWNERS * SLOTS];
        struct zsw_store_stats st;
        size_t n = 0, distinct = 0;

        for (int i = 0; i < MAX_OWNERS; i++) {
                if (!owners[i].o)
                        continue;
                zsw_store_owner_get_stats(owners[i].o, &st);
                ASSERT_EQ_U(st.stored_pages, model_count(&owners[i]));
                for (unsigned k = 0; k < SLOTS; k++)
                        if (owners[i].slot[k].kind)
                                tags[n++] = owners[i].slot[k].tag;
        }
        if (!global)
                return;
        qsort(tags, n, sizeof(tags[0]), cmp_u64);
        for (size_t k = 0; k < n; k++)
                distinct += k == 0 || tags[k] != tags[k - 1];
        zsw_store_get_stats(s, &st);
        ASSERT_EQ_U(st.stored_pages, distinct);
}

static void op_store(struct zsw_worker *w, int oi) {
        static uint8_t bufs[ZSW_STORE_BATCH_MAX][ZSW_PAGE_SIZE];
        const void *pages[ZSW_STORE_BATCH_MAX];
        uint64_t pgnos[ZSW_STORE_BATCH_MAX];
        struct content c[ZSW_STORE_BATCH_MAX];
        unsigned slots[ZSW_STORE_BATCH_MAX], n = 1 + below(ZSW_STORE_BATCH_MAX),
                                             base = below(SLOTS);
        uint32_t mask = 0;
        int r;

        /* Mostly runs of neighbours, as eviction produces them. */
        for (unsigned i = 0; i < n; i++) {
                unsigned s = below(4) ? (base + i) % SLOTS : below(SLOTS);
                bool dup = false;

                for (unsigned j = 0; j < i; j++)
                        dup |= slots[j] == s;
                if (dup) {
                        n = i;
                        break;
                }
                slots[i] = s;
                pgnos[i] = slot_pgno(s);
                c[i].kind = (uint8_t) (1 + (below(10) < 6 ? PAGE_DATA : below(_PAGE_KIND_MAX)));
                c[i].tag = next_tag++;
                make_page(bufs[i], c[i].kind - 1, c[i].tag);
                pages[i] = bufs[i];
        }
        r = zsw_store_pages(w, owners[oi].o, pgnos, pages, n, &mask);
        ASSERT_OK(r);
        for (unsigned i = 0; i < n; i++)
                owners[oi].slot[slots[i]] = (mask & (1u << i)) ? c[i] : (struct content) {};
        ASSERT_EQ(r, __builtin_popcount(mask));
}

static void op_load(struct zsw_worker *w, int oi, bool exclusive) {
        unsigned s = below(SLOTS);
        struct content *c = &owners[oi].slot[s];
        uint8_t buf[ZSW_PAGE_SIZE];
        int r;

        r = zsw_store_load(w, owners[oi].o, slot_pgno(s), buf, exclusive ? ZSW_LOAD_EXCLUSIVE : 0);
        if (!c->kind) {
                ASSERT_EQ(r, -ENOENT);
                return;
        }
        ASSERT_OK(r);
        assert_page(buf, c->kind - 1, c->tag);
        if (exclusive)
                *c = (struct content) {};
}

static void op_invalidate(int oi) {
        unsigned a = below(SLOTS), len = 1 + below(below(4) ? 64 : SLOTS);
        uint64_t start = slot_pgno(a), n, expect = 0;

        /* A dense range, or a sparse slot's page alone. */
        n = a < DENSE ? MIN(len, DENSE - a) : 1;
        for (unsigned s = a; s < a + n; s++) {
                expect += owners[oi].slot[s].kind != 0;
                owners[oi].slot[s] = (struct content) {};
        }
        ASSERT_EQ_U(zsw_store_invalidate(owners[oi].o, start, n), expect);
}

static void op_move(int oi) {
        unsigned n = 1 + below(128), from = below(DENSE - n + 1), to = below(DENSE - n + 1);
        struct content moved[128];
        uint64_t expect = 0;
        int r;

        r = zsw_store_move(owners[oi].o, from, to, n);
        if (from != to && from < to + n && to < from + n) {
                ASSERT_EQ(r, -EINVAL);
                return;
        }
        ASSERT_OK(r);
        if (from == to)
                return;
        for (unsigned i = 0; i < n; i++) {
                moved[i] = owners[oi].slot[from + i];
                expect += moved[i].kind != 0;
                owners[oi].slot[from + i] = (struct content) {};
        }
        for (unsigned i = 0; i < n; i++)
                owners[oi].slot[to + i] = moved[i];
        ASSERT_EQ_U((uint64_t) r, expect);
}

static void op_clone(int oi) {
        for (int i = 0; i < MAX_OWNERS; i++) {
                if (owners[i].o)
                        continue;
                ASSERT_OK(zsw_store_owner_clone(owners[oi].o, &owners[i].o));
                memcpy(owners[i].slot, owners[oi].slot, sizeof(owners[i].slot));
                return;
        }
}

static void op_isolate(struct zsw_worker *w, int oi) {
        struct zsw_entry *iso[64];
        size_t n = zsw_store_isolate(owners[oi].o, iso, 1 + below(64));

        /* The writeback tier would write them now; they stay loadable. */
        for (int k = 0; k < 4; k++)
                op_load(w, oi, below(2));
        zsw_store_putback(owners[oi].o, iso, n);
}

static void run(uint64_t seed, unsigned ops, const struct zsw_store_config *cfg) {
        struct zsw_store *s;
        struct zsw_worker *w;
        struct zsw_store_stats st;

        helpers_init();
        rng_state = seed;
        memset(owners, 0, sizeof(owners));
        ASSERT_OK(zsw_store_new(cfg, &s));
        ASSERT_OK(zsw_worker_new(s, &w));
        ASSERT_OK(zsw_store_owner_new(s, NULL, &owners[0].o));

        for (unsigned i = 0; i < ops; i++) {
                int oi = pick_owner(), dice = (int) below(100);

                if (oi < 0) {
                        ASSERT_OK(zsw_store_owner_new(s, NULL, &owners[0].o));
                        continue;
                }
                if (dice < 35)
                        op_store(w, oi);
                else if (dice < 52)
                        op_load(w, oi, false);
                else if (dice < 70)
                        op_load(w, oi, true);
                else if (dice < 78)
                        op_invalidate(oi);
                else if (dice < 85)
                        op_move(oi);
                else if (dice < 89)
                        op_clone(oi);
                else if (dice < 91) {
                        owners[oi].o = zsw_store_owner_free(owners[oi].o);
                        memset(owners[oi].slot, 0, sizeof(owners[oi].slot));
                } else
                        op_isolate(w, oi);
                check_counts(s, i % 8 == 0);
        }

        /* Every page of every owner, then an empty store. */
        for (int oi = 0; oi < MAX_OWNERS; oi++)
                for (unsigned k = 0; owners[oi].o && k < SLOTS; k++) {
                        uint8_t buf[ZSW_PAGE_SIZE];
                        struct content *c = &owners[oi].slot[k];
                        int r = zsw_store_load(w, owners[oi].o, slot_pgno(k), buf, 0);

                        if (!c->kind) {
                                ASSERT_EQ(r, -ENOENT);
                                continue;
                        }
                        ASSERT_OK(r);
                        assert_page(buf, c->kind - 1, c->tag);
                }
        for (int oi = 0; oi < MAX_OWNERS; oi++)
                owners[oi].o = zsw_store_owner_free(owners[oi].o);
        zsw_store_get_stats(s, &st);
        ASSERT_EQ_U(st.stored_pages, 0);
        ASSERT_EQ_U(st.payload_bytes, 0);
        ASSERT_EQ_U(st.same_filled_pages, 0);
        ASSERT_EQ_U(st.incompressible_pages, 0);
        zsw_worker_free(w);
        zsw_store_free(s);
}

TEST(model_lz4) {
        run(1, 15000, NULL);
        run(2, 15000, NULL);
}

TEST(model_zstd_reject_incompressible) {
        struct zsw_store_config cfg = { .compressor = ZSW_COMPRESSOR_ZSTD,
                                        .level = 3,
                                        .reject_incompressible = true };

        run(3, 15000, &cfg);
}

TEST(model_low_threshold) {
        struct zsw_store_config cfg = { .max_compressed = 1024 };

        run(4, 15000, &cfg);
}
