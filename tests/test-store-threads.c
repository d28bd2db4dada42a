/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Several threads storing, loading, invalidating, moving and isolating on
 * the same owners at once, while another thread clones those owners and
 * reads the clones, another reads statistics and another compacts the
 * pool. Each worker thread has its own page numbers in every owner and
 * checks them exactly against its own model; the clone reader cannot know
 * which version of a page it sees, so pages carry their page number and a
 * checksum and it checks those.
 * Run under ThreadSanitizer by CI (suite 'threads').
 */
#include <pthread.h>
#include <stdatomic.h>

#include "store-helpers.h"

#define OWNERS 3
#define WORKERS 4
#define RANGE 256u
#define OPS 2500

static struct zsw_store *store;
static struct zsw_owner *owners[OWNERS];
static atomic_bool stop;

static uint64_t sum_tail(const uint8_t *page) {
        uint64_t h = 0xcbf29ce484222325ull;

        for (size_t i = 24; i < ZSW_PAGE_SIZE; i += 8) {
                uint64_t w;

                memcpy(&w, page + i, 8);
                h = (h ^ w) * 0x100000001b3ull;
        }
        return h;
}

static uint64_t fnv(const void *p, size_t n) {
        const uint8_t *b = p;
        uint64_t h = 0xcbf29ce484222325ull;

        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 0x100000001b3ull;
        return h;
}

/* A page that proves what it is: page number, tag, checksum of the rest. */
static void make_checked(uint8_t *page, uint64_t pgno, uint64_t tag) {
        uint64_t head[3];

        make_page(page, PAGE_DATA, tag);
        head[0] = pgno;
        head[1] = tag;
        head[2] = sum_tail(page);
        memcpy(page, head, sizeof(head));
}

static void assert_checked(const uint8_t *page, uint64_t pgno) {
        uint64_t head[3];

        memcpy(head, page, sizeof(head));
        ASSERT_EQ_U(head[0], pgno);
        ASSERT_EQ_U(head[2], sum_tail(page));
}

struct worker_arg {
        unsigned id;
        uint64_t rng;
        uint64_t tags[OWNERS][RANGE]; /* 0: absent */
};

static uint64_t rnd(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static uint64_t base_of(unsigned id) {
        return (uint64_t) id * 100000 + 7;
}

static void worker_store(struct worker_arg *a, struct zsw_worker *w, unsigned oi) {
        static _Thread_local uint8_t bufs[ZSW_STORE_BATCH_MAX][ZSW_PAGE_SIZE];
        const void *pages[ZSW_STORE_BATCH_MAX];
        uint64_t pgnos[ZSW_STORE_BATCH_MAX], tags[ZSW_STORE_BATCH_MAX];
        unsigned n = 1 + (unsigned) (rnd(&a->rng) % ZSW_STORE_BATCH_MAX);
        unsigned first = (unsigned) (rnd(&a->rng) % (RANGE - n + 1));

        for (unsigned i = 0; i < n; i++) {
                pgnos[i] = base_of(a->id) + first + i;
                tags[i] = (rnd(&a->rng) | 1) & 0xffffffffffffull;
                make_checked(bufs[i], pgnos[i], tags[i]);
                pages[i] = bufs[i];
        }
        ASSERT_EQ(zsw_store_pages(w, owners[oi], pgnos, pages, n, NULL), (int) n);
        for (unsigned i = 0; i < n; i++)
                a->tags[oi][first + i] = tags[i];
}

static void worker_load(struct worker_arg *a, struct zsw_worker *w, unsigned oi, bool exclusive) {
        unsigned k = (unsigned) (rnd(&a->rng) % RANGE);
        uint64_t pgno = base_of(a->id) + k, tag;
        uint8_t buf[ZSW_PAGE_SIZE];
        int r = zsw_store_load(w, owners[oi], pgno, buf, exclusive ? ZSW_LOAD_EXCLUSIVE : 0);

        if (!a->tags[oi][k]) {
                ASSERT_EQ(r, -ENOENT);
                return;
        }
        ASSERT_OK(r);
        assert_checked(buf, pgno);
        memcpy(&tag, buf + 8, 8);
        ASSERT_EQ_U(tag, a->tags[oi][k]);
        if (exclusive)
                a->tags[oi][k] = 0;
}

static void worker_invalidate(struct worker_arg *a, unsigned oi) {
        unsigned first = (unsigned) (rnd(&a->rng) % RANGE), n = 1 + (unsigned) (rnd(&a->rng) % 16);
        uint64_t expect = 0;

        n = MIN(n, RANGE - first);
        for (unsigned k = first; k < first + n; k++) {
                expect += a->tags[oi][k] != 0;
                a->tags[oi][k] = 0;
        }
        ASSERT_EQ_U(zsw_store_invalidate(owners[oi], base_of(a->id) + first, n), expect);
}

/* Moves the lower half of the range to the upper half or back; the moved
 * pages carry their old page number, so they are rewritten after. */
static void worker_move(struct worker_arg *a, struct zsw_worker *w, unsigned oi) {
        unsigned half = RANGE / 2, from = rnd(&a->rng) & 1 ? 0 : half, to = half - from;
        uint8_t buf[ZSW_PAGE_SIZE];
        uint64_t tag;

        ASSERT_OK(zsw_store_move(owners[oi], base_of(a->id) + from, base_of(a->id) + to, half));
        for (unsigned k = 0; k < half; k++) {
                a->tags[oi][to + k] = a->tags[oi][from + k];
                a->tags[oi][from + k] = 0;
        }
        for (unsigned k = 0; k < half; k++) {
                if (!a->tags[oi][to + k])
                        continue;
                ASSERT_OK(zsw_store_load(w, owners[oi], base_of(a->id) + to + k, buf,
                                         ZSW_LOAD_EXCLUSIVE));
                assert_checked(buf, base_of(a->id) + from + k);
                memcpy(&tag, buf + 8, 8);
                ASSERT_EQ_U(tag, a->tags[oi][to + k]);
                a->tags[oi][to + k] = 0;
        }
}

static void *worker_main(void *p) {
        struct worker_arg *a = p;
        struct zsw_worker *w;

        ASSERT_OK(zsw_worker_new(store, &w));
        for (int i = 0; i < OPS; i++) {
                unsigned oi = (unsigned) (rnd(&a->rng) % OWNERS),
                         dice = (unsigned) (rnd(&a->rng) % 100);

                if (dice < 40)
                        worker_store(a, w, oi);
                else if (dice < 65)
                        worker_load(a, w, oi, false);
                else if (dice < 88)
                        worker_load(a, w, oi, true);
                else if (dice < 95)
                        worker_invalidate(a, oi);
                else if (dice < 97)
                        worker_move(a, w, oi);
                else {
                        struct zsw_entry *iso[16];
                        size_t n = zsw_store_isolate(owners[oi], iso, 16);
                        const void *data[16];
                        uint32_t len[16];
                        uint64_t sum[16];

                        /* As the writeback tier does: payloads read
                         * without a lock must not move meanwhile. */
                        for (size_t k = 0; k < n; k++) {
                                unsigned c;

                                ASSERT_GE(zsw_store_entry_payload(store, iso[k], &data[k], &len[k],
                                                                  &c),
                                          0);
                                sum[k] = fnv(data[k], len[k]);
                        }
                        worker_load(a, w, oi, false);
                        for (size_t k = 0; k < n; k++)
                                ASSERT_EQ_U(fnv(data[k], len[k]), sum[k]);
                        zsw_store_putback(owners[oi], iso, n);
                }
        }
        /* Everything this thread still has is there, exactly. */
        for (unsigned oi = 0; oi < OWNERS; oi++)
                for (unsigned k = 0; k < RANGE; k++) {
                        uint8_t buf[ZSW_PAGE_SIZE];
                        uint64_t tag;
                        int r = zsw_store_load(w, owners[oi], base_of(a->id) + k, buf, 0);

                        if (!a->tags[oi][k]) {
                                ASSERT_EQ(r, -ENOENT);
                                continue;
                        }
                        ASSERT_OK(r);
                        memcpy(&tag, buf + 8, 8);
                        ASSERT_EQ_U(tag, a->tags[oi][k]);
                }
        zsw_worker_free(w);
        return NULL;
}

/* Clones owners while they change, and checks that the clones hold
 * intact pages at the right page numbers. */
static void *cloner_main(void *p) {
        struct zsw_worker *w;
        uint64_t rng = 99;

        ASSERT_OK(zsw_worker_new(store, &w));
        while (!atomic_load(&stop)) {
                struct zsw_owner *child;
                unsigned oi = (unsigned) (rnd(&rng) % OWNERS);

                ASSERT_OK(zsw_store_owner_clone(owners[oi], &child));
                for (unsigned id = 0; id < WORKERS; id++)
                        for (unsigned k = 0; k < RANGE; k += 1 + (unsigned) (rnd(&rng) % 8)) {
                                uint8_t buf[ZSW_PAGE_SIZE];
                                uint64_t pgno = base_of(id) + k;
                                int r = zsw_store_load(w, child, pgno, buf,
                                                       rnd(&rng) & 1 ? ZSW_LOAD_EXCLUSIVE : 0);

                                if (r == -ENOENT)
                                        continue;
                                ASSERT_OK(r);
                                /* Moved pages keep the page number they were
                                 * made for: either half of the range. */
                                if (((const uint64_t *) (const void *) buf)[0] != pgno)
                                        pgno = base_of(id) + (k + RANGE / 2) % RANGE;
                                assert_checked(buf, pgno);
                        }
                zsw_store_owner_free(child);
        }
        zsw_worker_free(w);
        return NULL;
}

static void *compactor_main(void *p) {
        while (!atomic_load(&stop))
                (void) zsw_store_compact(store, true);
        return NULL;
}

static void *stats_main(void *p) {
        while (!atomic_load(&stop)) {
                struct zsw_store_stats st;
                struct zsw_store_latency l;

                zsw_store_get_stats(store, &st);
                zsw_store_get_latency(store, ZSW_LATENCY_LOAD, &l);
                for (unsigned oi = 0; oi < OWNERS; oi++)
                        zsw_store_owner_get_stats(owners[oi], &st);
        }
        return NULL;
}

TEST(threads_on_shared_owners) {
        static struct worker_arg args[WORKERS];
        pthread_t workers[WORKERS], cloner, reader, compactor;
        struct zsw_store_stats st;
        struct zsw_owner_config zc = { .compressor = ZSW_COMPRESSOR_ZSTD, .level = 1 };

        helpers_init();
        ASSERT_OK(zsw_store_new(NULL, &store));
        for (unsigned oi = 0; oi < OWNERS; oi++)
                ASSERT_OK(zsw_store_owner_new(store, oi == 1 ? &zc : NULL, &owners[oi]));
        for (unsigned i = 0; i < WORKERS; i++) {
                args[i].id = i;
                args[i].rng = 1000 + i;
                ASSERT_EQ(pthread_create(&workers[i], NULL, worker_main, &args[i]), 0);
        }
        ASSERT_EQ(pthread_create(&cloner, NULL, cloner_main, NULL), 0);
        ASSERT_EQ(pthread_create(&reader, NULL, stats_main, NULL), 0);
        ASSERT_EQ(pthread_create(&compactor, NULL, compactor_main, NULL), 0);
        for (unsigned i = 0; i < WORKERS; i++)
                ASSERT_EQ(pthread_join(workers[i], NULL), 0);
        atomic_store(&stop, true);
        ASSERT_EQ(pthread_join(cloner, NULL), 0);
        ASSERT_EQ(pthread_join(reader, NULL), 0);
        ASSERT_EQ(pthread_join(compactor, NULL), 0);

        /* The counters agree with the models once everyone has stopped. */
        for (unsigned oi = 0; oi < OWNERS; oi++) {
                uint64_t want = 0;

                for (unsigned i = 0; i < WORKERS; i++)
                        for (unsigned k = 0; k < RANGE; k++)
                                want += args[i].tags[oi][k] != 0;
                zsw_store_owner_get_stats(owners[oi], &st);
                ASSERT_EQ_U(st.stored_pages, want);
        }
        for (unsigned oi = 0; oi < OWNERS; oi++)
                owners[oi] = zsw_store_owner_free(owners[oi]);
        zsw_store_get_stats(store, &st);
        ASSERT_EQ_U(st.stored_pages, 0);
        ASSERT_EQ_U(st.payload_bytes, 0);
        store = zsw_store_free(store);
}
