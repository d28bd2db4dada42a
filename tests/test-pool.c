/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <lz4.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"
#include "pool.h"
#include "test.h"
#include "util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* Sanitizers shadow every byte written and reserve terabytes of address
 * space: RSS growth and address-space limits mean something else. */
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_pool *, zsw_pool_free);
#define _cleanup_pool_ _cleanup_(zsw_pool_freep)

static uint64_t rng_next(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static uint32_t round_class(uint32_t size) {
        return DIV_ROUND_UP(size, ZSW_POOL_CLASS_STEP) * ZSW_POOL_CLASS_STEP;
}

/* Every byte of an object depends on its tag and position, so an overlap
 * between two objects or a wrong mapping shows up in verify. */
static void fill(void *p, uint32_t size, uint64_t tag) {
        uint8_t *b = p;

        for (uint32_t i = 0; i < size; i++)
                b[i] = (uint8_t) ((tag * 131) ^ (i * 7) ^ (tag >> 8) ^ (i >> 8));
}

static bool verify(const void *p, uint32_t size, uint64_t tag) {
        const uint8_t *b = p;

        for (uint32_t i = 0; i < size; i++)
                if (b[i] != (uint8_t) ((tag * 131) ^ (i * 7) ^ (tag >> 8) ^ (i >> 8)))
                        return false;
        return true;
}

static void assert_empty(struct zsw_pool *pool) {
        struct zsw_pool_stats st;

        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.objects, 0);
        ASSERT_EQ_U(st.used_bytes, 0);
}

/* Nothing left of the pool's memory: every slab and arena given back. */
static void assert_all_released(struct zsw_pool *pool) {
        struct zsw_pool_stats st;

        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.pool_bytes, 0);
        ASSERT_EQ_U(st.mapped_bytes, 0);
        ASSERT_EQ_U(st.cached_bytes, 0);
        ASSERT_EQ_U(st.slabs, 0);
}

TEST(bulk_round_trip_every_class_edge) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 1000 };
        uint32_t sizes[N];
        zsw_handle_t h[N];
        struct zsw_pool_stats st;
        uint64_t used = 0, seed = 1;

        ASSERT_OK(zsw_pool_new(&pool));
        /* Both edges of every class, then random sizes. */
        for (unsigned i = 0; i < N; i++) {
                if (i < 256)
                        sizes[i] = (i / 2 + 1) * ZSW_POOL_CLASS_STEP - (i % 2 ? 0 : 31);
                else
                        sizes[i] = 1 + rng_next(&seed) % ZSW_POOL_MAX_OBJECT;
                used += round_class(sizes[i]);
        }
        ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes, N, h));
        for (unsigned i = 0; i < N; i++) {
                ASSERT_NE(h[i], 0);
                fill(zsw_pool_map(pool, h[i]), sizes[i], i);
        }
        for (unsigned i = 0; i < N; i++)
                ASSERT_TRUE(verify(zsw_pool_map(pool, h[i]), sizes[i], i));

        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.objects, N);
        ASSERT_EQ_U(st.used_bytes, used);
        ASSERT_GE(st.pool_bytes, st.used_bytes);
        ASSERT_GT(st.slabs, 0);
        ASSERT_GT(st.meta_bytes, 0);

        /* Free every other one (0 handles are skipped), check the rest
         * survived, then reuse the holes. */
        for (unsigned i = 0; i < N; i += 2) {
                zsw_pool_free_bulk(pool, &h[i], 1);
                h[i] = 0;
        }
        for (unsigned i = 1; i < N; i += 2)
                ASSERT_TRUE(verify(zsw_pool_map(pool, h[i]), sizes[i], i));
        zsw_pool_free_bulk(pool, h, N);
        assert_empty(pool);
}

static uint64_t rss_anon_bytes(void) {
        _cleanup_free_ char *line = NULL;
        size_t len = 0;
        uint64_t kb = UINT64_MAX;
        FILE *f = fopen("/proc/self/status", "re");

        ASSERT_TRUE(f);
        while (getline(&line, &len, f) > 0)
                if (sscanf(line, "RssAnon: %" SCNu64 " kB", &kb) == 1)
                        break;
        fclose(f);
        ASSERT_NE(kb, UINT64_MAX);
        return kb * 1024;
}

/* pool_bytes claims to be what the pool really took from the system: its
 * slabs, populated as they are carved out of 2 MiB arenas, and the current
 * arena's rest. That is the growth of the process's anonymous RSS, within
 * the slack of the kernel's per-CPU counters and the heap's bookkeeping. */
TEST(pool_bytes_are_the_resident_memory) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 20000 };
        static uint32_t sizes[N];
        static zsw_handle_t h[N];
        struct zsw_pool_stats st;
        uint64_t seed = 11, rss0, rss1;

        ASSERT_OK(zsw_pool_new(&pool));
        for (unsigned i = 0; i < N; i++)
                sizes[i] = round_class(700 + rng_next(&seed) % 2800);
        rss0 = rss_anon_bytes();
        for (unsigned i = 0; i < N; i += 32)
                ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes + i, MIN(32u, N - i), h + i));
        for (unsigned i = 0; i < N; i++)
                fill(zsw_pool_map(pool, h[i]), sizes[i], i);
        rss1 = rss_anon_bytes();
        zsw_pool_get_stats(pool, &st);

        fprintf(stderr,
                "pool_bytes %" PRIu64 " KiB, mapped %" PRIu64 " KiB, RssAnon grew %" PRIu64
                " KiB\n",
                st.pool_bytes >> 10, st.mapped_bytes >> 10, (rss1 - rss0) >> 10);
        ASSERT_LE(st.mapped_bytes, st.pool_bytes);
        ASSERT_LT(st.pool_bytes - st.mapped_bytes, 2u << 20); /* the arena's rest */
        ASSERT_LE(st.pool_bytes, rss1 - rss0 + (512 << 10));
        if (!SANITIZED)
                ASSERT_LE(rss1 - rss0, st.pool_bytes + st.meta_bytes + (512 << 10));
        zsw_pool_free_bulk(pool, h, N);
        assert_empty(pool);
}

/* A slab that empties stays cached (below the bound) and is reused as is:
 * no new mapping, and objects carved from it anew are intact. */
TEST(emptied_slabs_are_reused) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 256 };
        uint32_t sizes[N];
        zsw_handle_t h[N];
        struct zsw_pool_stats full, freed, again;

        ASSERT_OK(zsw_pool_new(&pool));
        for (unsigned i = 0; i < N; i++)
                sizes[i] = 1500 + (i % 3) * 300;
        ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes, N, h));
        for (unsigned i = 0; i < N; i++)
                fill(zsw_pool_map(pool, h[i]), sizes[i], i);
        zsw_pool_get_stats(pool, &full);
        zsw_pool_free_bulk(pool, h, N);
        zsw_pool_get_stats(pool, &freed);
        ASSERT_EQ_U(freed.cached_bytes, full.pool_bytes);
        ASSERT_EQ_U(freed.slabs, full.slabs);

        ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes, N, h));
        for (unsigned i = 0; i < N; i++)
                fill(zsw_pool_map(pool, h[N - 1 - i]), sizes[N - 1 - i], i);
        for (unsigned i = 0; i < N; i++)
                ASSERT_TRUE(verify(zsw_pool_map(pool, h[N - 1 - i]), sizes[N - 1 - i], i));
        zsw_pool_get_stats(pool, &again);
        /* Only the arena's rest is cached: every slab came back. */
        ASSERT_EQ_U(again.cached_bytes, again.pool_bytes - again.mapped_bytes);
        ASSERT_EQ_U(again.slabs, full.slabs);
        ASSERT_EQ_U(again.mapped_bytes, full.mapped_bytes);
        ASSERT_EQ_U(again.pool_bytes, full.pool_bytes);
        zsw_pool_free_bulk(pool, h, N);
        ASSERT_EQ_U(zsw_pool_shrink(pool), again.pool_bytes);
        zsw_pool_get_stats(pool, &again);
        ASSERT_EQ_U(again.slabs, 0);
}

/* A class with no cached slab of its length cuts a longer cached one:
 * memory already backed, at the same address, no new mapping. Sizes:
 * 3000 B objects (class 3008) take 14-page slabs, 2048 B ones 1-page
 * slabs. */
TEST(longer_cached_slab_is_cut) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        uint32_t big[4] = { 3000, 3000, 3000, 3000 }, small[2] = { 2048, 2048 };
        zsw_handle_t h[4];
        struct zsw_pool_stats before, after;
        uint8_t *slab;

        ASSERT_OK(zsw_pool_new(&pool));
        ASSERT_OK(zsw_pool_alloc_bulk(pool, big, 4, h));
        slab = zsw_pool_map(pool, h[0]);
        zsw_pool_free_bulk(pool, h, 4);
        zsw_pool_get_stats(pool, &before);

        ASSERT_OK(zsw_pool_alloc_bulk(pool, small, 2, h));
        for (unsigned i = 0; i < 2; i++) {
                uint8_t *p = zsw_pool_map(pool, h[i]);

                ASSERT_TRUE(p >= slab && p + 2048 <= slab + ZSW_PAGE_SIZE);
                fill(p, 2048, i);
        }
        for (unsigned i = 0; i < 2; i++)
                ASSERT_TRUE(verify(zsw_pool_map(pool, h[i]), 2048, i));
        zsw_pool_get_stats(pool, &after);
        ASSERT_EQ_U(after.mapped_bytes, before.mapped_bytes);
        ASSERT_EQ_U(after.pool_bytes, before.pool_bytes);
        ASSERT_EQ_U(after.cached_bytes, before.cached_bytes - ZSW_PAGE_SIZE);
        ASSERT_EQ_U(after.slabs, before.slabs + 1); /* the rest, cached on its own */

        /* The next slab of the class is cut from that rest. */
        ASSERT_OK(zsw_pool_alloc_bulk(pool, small, 2, h + 2));
        for (unsigned i = 2; i < 4; i++) {
                uint8_t *p = zsw_pool_map(pool, h[i]);

                ASSERT_TRUE(p >= slab + ZSW_PAGE_SIZE && p + 2048 <= slab + 2 * ZSW_PAGE_SIZE);
                fill(p, 2048, i);
        }
        for (unsigned i = 0; i < 4; i++)
                ASSERT_TRUE(verify(zsw_pool_map(pool, h[i]), 2048, i));
        zsw_pool_get_stats(pool, &after);
        ASSERT_EQ_U(after.mapped_bytes, before.mapped_bytes);
        ASSERT_EQ_U(after.slabs, before.slabs + 2);
        zsw_pool_free_bulk(pool, h, 4);
        ASSERT_EQ_U(zsw_pool_shrink(pool), after.pool_bytes);
        assert_all_released(pool);
}

/* Trims keep what the churn of the moment reuses: a slab cached since
 * the last trim stays, one unused across a whole trim interval goes, and
 * an idle pool (nothing taken since the last trim) gives everything back. */
TEST(trim_keeps_the_reserve_in_use) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        uint32_t a[2] = { 2048, 2048 }, b[4] = { 3000, 3000, 3000, 3000 };
        zsw_handle_t ha[2], hb[4];
        struct zsw_pool_stats st;

        ASSERT_OK(zsw_pool_new(&pool));
        ASSERT_OK(zsw_pool_alloc_bulk(pool, a, 2, ha));
        ASSERT_OK(zsw_pool_alloc_bulk(pool, b, 4, hb));
        zsw_pool_free_bulk(pool, ha, 2);
        zsw_pool_free_bulk(pool, hb, 4);
        /* Both slabs came since the last trim (none yet): kept. */
        ASSERT_EQ_U(zsw_pool_trim(pool), 0);
        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.mapped_bytes, 15u * ZSW_PAGE_SIZE);

        /* The 1-page slab is reused and comes back; the 14-page one sat
         * in the cache a whole interval and goes. */
        ASSERT_OK(zsw_pool_alloc_bulk(pool, a, 2, ha));
        zsw_pool_free_bulk(pool, ha, 2);
        ASSERT_EQ_U(zsw_pool_trim(pool), 14u * ZSW_PAGE_SIZE);
        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.mapped_bytes, ZSW_PAGE_SIZE);

        /* Nothing taken since: idle, all of it goes, the arena's rest too. */
        ASSERT_EQ_U(zsw_pool_trim(pool), st.pool_bytes);
        assert_all_released(pool);
}

TEST(invalid_size_allocates_nothing) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        uint32_t sizes[40];
        zsw_handle_t h[40], keep;
        struct zsw_pool_stats before, after;
        uint32_t one = 100;

        ASSERT_OK(zsw_pool_new(&pool));
        ASSERT_OK(zsw_pool_alloc_bulk(pool, &one, 1, &keep));
        fill(zsw_pool_map(pool, keep), one, 99);
        zsw_pool_get_stats(pool, &before);

        for (unsigned i = 0; i < 40; i++)
                sizes[i] = 64 + i * 97;
        for (uint32_t bad = 0; bad <= 1; bad++) {
                sizes[20] = bad ? ZSW_POOL_MAX_OBJECT + 1 : 0;
                memset(h, 0xaa, sizeof(h));
                ASSERT_ERRNO(zsw_pool_alloc_bulk(pool, sizes, 40, h), EINVAL);
                for (unsigned i = 0; i < 40; i++)
                        ASSERT_EQ_U(h[i], UINT64_C(0xaaaaaaaaaaaaaaaa));
                zsw_pool_get_stats(pool, &after);
                ASSERT_EQ_U(after.objects, before.objects);
                ASSERT_EQ_U(after.used_bytes, before.used_bytes);
                ASSERT_EQ_U(after.pool_bytes, before.pool_bytes);
        }
        ASSERT_TRUE(verify(zsw_pool_map(pool, keep), one, 99));
        zsw_pool_free_bulk(pool, &keep, 1);
        assert_empty(pool);
        /* An empty batch is a no-op. */
        ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes, 0, h));
}

/* The rollback after a failing mmap in the middle of a batch, made real by
 * an address-space limit. A child takes the limit so the rest of the
 * binary keeps its own. */
static void enomem_child(void) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 4096 };
        static uint32_t sizes[N];
        static zsw_handle_t h[N];
        struct zsw_pool_stats before, after;
        struct rlimit rl;
        uint32_t small = 500;
        zsw_handle_t keep;

        ASSERT_OK(zsw_pool_new(&pool));
        ASSERT_OK(zsw_pool_alloc_bulk(pool, &small, 1, &keep));
        fill(zsw_pool_map(pool, keep), small, 5);
        zsw_pool_get_stats(pool, &before);

        /* Mixed classes, 16 MiB of 4096-byte objects (one page slab each),
         * more than the limit leaves room for. */
        for (unsigned i = 0; i < N; i++)
                sizes[i] = i % 2 ? ZSW_POOL_MAX_OBJECT : 200 + i % 1000;
        ASSERT_OK(getrlimit(RLIMIT_AS, &rl));
        rl.rlim_cur = 0;
        {
                FILE *f = fopen("/proc/self/statm", "re");
                unsigned long vm_pages;

                ASSERT_TRUE(f);
                ASSERT_EQ(fscanf(f, "%lu", &vm_pages), 1);
                fclose(f);
                rl.rlim_cur = (vm_pages + 1024) * 4096ul; /* 4 MiB of headroom */
        }
        ASSERT_OK(setrlimit(RLIMIT_AS, &rl));

        memset(h, 0, sizeof(h));
        ASSERT_ERRNO(zsw_pool_alloc_bulk(pool, sizes, N, h), ENOMEM);
        for (unsigned i = 0; i < N; i++)
                ASSERT_EQ_U(h[i], 0);
        zsw_pool_get_stats(pool, &after);
        ASSERT_EQ_U(after.objects, before.objects);
        ASSERT_EQ_U(after.used_bytes, before.used_bytes);
        zsw_pool_shrink(pool);
        zsw_pool_get_stats(pool, &after);
        ASSERT_EQ_U(after.slabs, 1);

        /* Still usable, and the survivor is intact. */
        ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes, 64, h));
        zsw_pool_free_bulk(pool, h, 64);
        ASSERT_TRUE(verify(zsw_pool_map(pool, keep), small, 5));
        zsw_pool_free_bulk(pool, &keep, 1);
        assert_empty(pool);
}

TEST(mmap_failure_mid_batch_rolls_back) {
        pid_t pid;
        int status;

        if (SANITIZED) {
                fprintf(stderr, "skipped under a sanitizer: RLIMIT_AS cannot work\n");
                return;
        }
        pid = fork();
        ASSERT_OK(pid);
        if (pid == 0) {
                enomem_child();
                _exit(0);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
}

static bool is_mapped(void *p) {
        unsigned char vec;
        uintptr_t page = (uintptr_t) p & ~(uintptr_t) (ZSW_PAGE_SIZE - 1);

        if (mincore((void *) page, ZSW_PAGE_SIZE, &vec) == 0)
                return true;
        ASSERT_EQ(errno, ENOMEM);
        return false;
}

TEST(emptied_slabs_return_to_system) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 20000 };
        static uint32_t sizes[N];
        static zsw_handle_t h[N];
        static void *addr[N];
        struct zsw_pool_stats st;
        uint64_t seed = 7;
        unsigned still;

        ASSERT_OK(zsw_pool_new(&pool));
        for (unsigned i = 0; i < N; i++)
                sizes[i] = 700 + rng_next(&seed) % 2800;
        for (unsigned i = 0; i < N; i += 32)
                ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes + i, MIN(32u, N - i), h + i));
        for (unsigned i = 0; i < N; i++) {
                addr[i] = zsw_pool_map(pool, h[i]);
                fill(addr[i], sizes[i], i);
                ASSERT_TRUE(is_mapped(addr[i]));
        }
        zsw_pool_get_stats(pool, &st);
        ASSERT_GT(st.pool_bytes, (uint64_t) N * 700);

        /* Free in a shuffled order, in batches. */
        for (unsigned i = N - 1; i > 0; i--) {
                unsigned j = rng_next(&seed) % (i + 1);
                zsw_handle_t t = h[i];
                void *a = addr[i];

                h[i] = h[j], h[j] = t;
                addr[i] = addr[j], addr[j] = a;
        }
        for (unsigned i = 0; i < N; i += 32)
                zsw_pool_free_bulk(pool, h + i, MIN(32u, N - i));
        assert_empty(pool);

        /* What stays is the cache of empty slabs, within its bound (2 MiB
         * once the pool is small), and the arena's uncarved rest. */
        zsw_pool_get_stats(pool, &st);
        ASSERT_EQ_U(st.cached_bytes, st.pool_bytes);
        ASSERT_LE(st.mapped_bytes, 2u << 20);
        ASSERT_LT(st.pool_bytes - st.mapped_bytes, 2u << 20);
        still = 0;
        for (unsigned i = 0; i < N; i++)
                still += is_mapped(addr[i]);
        ASSERT_LE(still, N / 10);

        ASSERT_EQ_U(zsw_pool_shrink(pool), st.pool_bytes);
        assert_all_released(pool);
        for (unsigned i = 0; i < N; i++)
                ASSERT_FALSE(is_mapped(addr[i]));
}

/* Slab bytes per payload byte. */
static uint64_t mapped(struct zsw_pool *pool) {
        struct zsw_pool_stats st;

        zsw_pool_get_stats(pool, &st);
        return st.mapped_bytes;
}

/* Pool bytes against payload bytes for what the store really keeps: lz4
 * output of realistic pages (zero pages never reach the pool; pages that
 * do not shrink are kept raw), full, after a seeded half was freed, and
 * after the holes were refilled. The corpus depends on the machine's files,
 * so the verdicts are the allocator's guarantees for whatever sizes came,
 * and the ratios are printed as figures. */
TEST(fragmentation_on_realistic_sizes) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { PAGES = 16384 };
        _cleanup_free_ uint8_t *pages = malloc((size_t) PAGES * ZSW_PAGE_SIZE);
        _cleanup_free_ uint32_t *sizes = calloc(PAGES, sizeof(uint32_t));
        _cleanup_free_ zsw_handle_t *h = calloc(PAGES, sizeof(zsw_handle_t));
        char out[LZ4_COMPRESSBOUND(ZSW_PAGE_SIZE)];
        bool class_used[ZSW_POOL_MAX_OBJECT / ZSW_POOL_CLASS_STEP] = {};
        uint64_t payload = 0, rounded = 0, seed = 3, full, holed, refilled, payload_full;
        uint64_t payload_holed, meta_empty;
        unsigned n = 0, classes = 0;
        struct zsw_pool_stats st;

        ASSERT_TRUE(pages && sizes && h);
        if (corpus_fill(pages, PAGES, 0, 42) < 0)
                TEST_SKIP("too few readable files for the corpus");
        ASSERT_OK(zsw_pool_new(&pool));
        zsw_pool_get_stats(pool, &st);
        meta_empty = st.meta_bytes;

        for (unsigned i = 0; i < PAGES; i++) {
                const char *src = (const char *) pages + (size_t) i * ZSW_PAGE_SIZE;
                int c = LZ4_compress_default(src, out, ZSW_PAGE_SIZE, sizeof(out));
                unsigned cls;

                ASSERT_GT(c, 0);
                sizes[n++] = c < (int) ZSW_PAGE_SIZE ? (uint32_t) c : ZSW_PAGE_SIZE;
                payload += sizes[n - 1];
                cls = (sizes[n - 1] - 1) / ZSW_POOL_CLASS_STEP;
                rounded += (uint64_t) (cls + 1) * ZSW_POOL_CLASS_STEP;
                classes += !class_used[cls];
                class_used[cls] = true;
        }
        for (unsigned i = 0; i < n; i += 32)
                ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes + i, MIN(32u, n - i), h + i));
        full = mapped(pool);
        payload_full = payload;

        for (unsigned i = 0; i < n; i++)
                if (rng_next(&seed) % 2) {
                        zsw_pool_free_bulk(pool, &h[i], 1);
                        payload -= sizes[i];
                        h[i] = 0;
                }
        holed = mapped(pool);
        payload_holed = payload;
        ASSERT_LT(payload_holed, payload_full);
        for (unsigned i = 0; i < n; i++)
                if (!h[i]) {
                        ASSERT_OK(zsw_pool_alloc_bulk(pool, &sizes[i], 1, &h[i]));
                        payload += sizes[i];
                }
        refilled = mapped(pool);
        zsw_pool_get_stats(pool, &st);
        fprintf(stderr,
                "pages %u, mean object %.0f B, %u classes: slab bytes/payload full %.4f, "
                "half freed %.4f, refilled %.4f; pool metadata %.1f B/object, "
                "%.1f B/slab over an empty pool's\n",
                n, (double) payload / n, classes, (double) full / (double) payload_full,
                (double) holed / (double) payload_holed, (double) refilled / (double) payload,
                (double) st.meta_bytes / (double) st.objects,
                (double) (st.meta_bytes - meta_empty) / (double) st.slabs);

        /* Objects take their class size, no more. */
        ASSERT_EQ_U(st.used_bytes, rounded);
        ASSERT_EQ_U(st.objects, n);
        /* A class's slab length leaves the smallest tail of 1..16 pages, so
         * less than an object per 16 pages: under 1/16 of the slab. Filled
         * in order, a class has at most one slab not full. */
        ASSERT_LE(full, rounded * 16 / 15 + (uint64_t) classes * 16 * ZSW_PAGE_SIZE);
        /* Freeing maps nothing. */
        ASSERT_LE(holed, full);
        /* Allocation fills the partial slabs before it carves a new one, so
         * the same objects again need no more slabs than before. */
        ASSERT_LE(refilled, full);
        /* Bookkeeping is a descriptor, a table slot and a released-id slot
         * per slab (under 96 B) and one 8-byte cell per object slot (where
         * the object's owner keeps its handle); an object's free-list link
         * lives in the object itself. A slab's free slots fit in its unused
         * bytes, at least a class step each; one table chunk is 32 KiB. */
        ASSERT_LE(st.meta_bytes - meta_empty,
                  st.slabs * 96 +
                          (st.objects + (refilled - st.used_bytes) / ZSW_POOL_CLASS_STEP) * 8 +
                          (64u << 10));

        /* The payload survives the churn, checked through lz4. */
        for (unsigned i = 0; i < n; i++) {
                const uint8_t *src = pages + (size_t) i * ZSW_PAGE_SIZE;
                void *obj = zsw_pool_map(pool, h[i]);

                if (sizes[i] == ZSW_PAGE_SIZE)
                        memcpy(obj, src, ZSW_PAGE_SIZE);
                else
                        ASSERT_EQ(LZ4_compress_default((const char *) src, obj, ZSW_PAGE_SIZE,
                                                       (int) sizes[i]),
                                  (int) sizes[i]);
        }
        for (unsigned i = 0; i < n; i++) {
                const uint8_t *src = pages + (size_t) i * ZSW_PAGE_SIZE;
                uint8_t back[ZSW_PAGE_SIZE];
                const void *obj = zsw_pool_map(pool, h[i]);

                if (sizes[i] == ZSW_PAGE_SIZE)
                        memcpy(back, obj, ZSW_PAGE_SIZE);
                else
                        ASSERT_EQ(LZ4_decompress_safe(obj, (char *) back, (int) sizes[i],
                                                      ZSW_PAGE_SIZE),
                                  (int) ZSW_PAGE_SIZE);
                ASSERT_EQ_U(corpus_page_sum(back), corpus_page_sum(src));
        }
        zsw_pool_free_bulk(pool, h, n);
        assert_empty(pool);
}

struct stress_arg {
        struct zsw_pool *pool;
        unsigned id;
};

#define STRESS_ROUNDS 3000
#define STRESS_LIVE 16
#define STRESS_BATCH 32

static void *stress_thread(void *p) {
        struct stress_arg *a = p;
        static __thread uint32_t sizes[STRESS_LIVE][STRESS_BATCH];
        static __thread zsw_handle_t h[STRESS_LIVE][STRESS_BATCH];
        uint64_t seed = a->id * 1000003u;

        memset(h, 0, sizeof(h));
        for (unsigned r = 0; r < STRESS_ROUNDS; r++) {
                unsigned slot = r % STRESS_LIVE;
                unsigned n = 1 + rng_next(&seed) % STRESS_BATCH;

                /* Verify and free the batch that lived STRESS_LIVE rounds. */
                for (unsigned i = 0; i < STRESS_BATCH && h[slot][i]; i++)
                        ASSERT_TRUE(verify(zsw_pool_map(a->pool, h[slot][i]), sizes[slot][i],
                                           ((uint64_t) a->id << 40) | (slot << 8) | i));
                zsw_pool_free_bulk(a->pool, h[slot], STRESS_BATCH);
                memset(h[slot], 0, sizeof(h[slot]));

                for (unsigned i = 0; i < n; i++)
                        sizes[slot][i] = 1 + rng_next(&seed) % ZSW_POOL_MAX_OBJECT;
                ASSERT_OK(zsw_pool_alloc_bulk(a->pool, sizes[slot], n, h[slot]));
                for (unsigned i = 0; i < n; i++)
                        fill(zsw_pool_map(a->pool, h[slot][i]), sizes[slot][i],
                             ((uint64_t) a->id << 40) | (slot << 8) | i);
                if (r % 500 == 0)
                        zsw_pool_shrink(a->pool);
        }
        for (unsigned s = 0; s < STRESS_LIVE; s++)
                zsw_pool_free_bulk(a->pool, h[s], STRESS_BATCH);
        return NULL;
}

TEST(threads_alloc_free_stress) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { T = 4 };
        pthread_t th[T];
        struct stress_arg args[T];
        struct zsw_pool_stats st;

        ASSERT_OK(zsw_pool_new(&pool));
        for (unsigned t = 0; t < T; t++) {
                args[t] = (struct stress_arg) { pool, t + 1 };
                ASSERT_EQ(pthread_create(&th[t], NULL, stress_thread, &args[t]), 0);
        }
        /* Reading the counters meanwhile must be safe. */
        for (unsigned i = 0; i < 1000; i++)
                zsw_pool_get_stats(pool, &st);
        for (unsigned t = 0; t < T; t++)
                ASSERT_EQ(pthread_join(th[t], NULL), 0);
        assert_empty(pool);
        zsw_pool_shrink(pool);
        assert_all_released(pool);
}

/* Runs compaction passes until one moves nothing, then gives the emptied
 * slabs back. */
static void compact_all(struct zsw_pool *pool) {
        size_t moved;

        do {
                unsigned cursor = 0;

                moved = 0;
                while (cursor < ZSW_POOL_NR_CLASSES)
                        moved += zsw_pool_compact(pool, 64, &cursor);
        } while (moved > 0);
        zsw_pool_shrink(pool);
}

/* Frees that leave every slab a quarter full leave the pool four times
 * the size of its objects; compaction brings it back to at most one
 * slab of slack per class, moving only published objects, and every
 * payload reads back exactly through its rewritten handle. */
TEST(compaction_empties_sparse_slabs) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { N = 8192, NCLS = 5, SLAB_MAX = 16 * ZSW_PAGE_SIZE };
        static uint32_t sizes[N];
        static zsw_handle_t cell[N];
        struct zsw_pool_stats before, after;
        zsw_handle_t pinned_h[NCLS];
        const void *pinned_p[NCLS];
        unsigned npinned = 0;

        ASSERT_OK(zsw_pool_new(&pool));
        for (unsigned i = 0; i < N; i++)
                sizes[i] = 1000 + (i % NCLS) * 600 + (i % 7);
        for (unsigned i = 0; i < N; i += 256)
                ASSERT_OK(zsw_pool_alloc_bulk(pool, sizes + i, MIN(256u, N - i), cell + i));
        for (unsigned i = 0; i < N; i++) {
                fill(zsw_pool_map(pool, cell[i]), sizes[i], i);
                /* A few objects stay unpublished, as a store batch's before
                 * its index stage or a payload under write: they must not
                 * move. */
                if (i % 997 == 0 && npinned < NCLS) {
                        pinned_h[npinned] = cell[i];
                        pinned_p[npinned++] = zsw_pool_map(pool, cell[i]);
                        continue;
                }
                zsw_pool_publish(pool, &cell[i]);
        }
        /* Keep every fourth object (and the pinned ones). */
        for (unsigned i = 0; i < N; i++)
                if (i % 4 != 0 && i % 997 != 0) {
                        zsw_pool_unpublish(pool, cell[i]);
                        zsw_pool_free_bulk(pool, &cell[i], 1);
                        cell[i] = 0;
                }
        zsw_pool_shrink(pool);
        zsw_pool_get_stats(pool, &before);
        /* The premise: frees alone give almost nothing back. */
        ASSERT_GT(before.mapped_bytes, 3 * before.used_bytes);

        compact_all(pool);
        zsw_pool_get_stats(pool, &after);
        ASSERT_EQ_U(after.objects, before.objects);
        ASSERT_EQ_U(after.used_bytes, before.used_bytes);
        ASSERT_GT(after.compacted_objects, 0);
        ASSERT_EQ_U(after.compacted_bytes, before.mapped_bytes - after.mapped_bytes);
        /* At most one slab of free room per class, plus the slabs the
         * pinned objects keep. */
        ASSERT_LE(after.mapped_bytes, after.used_bytes + (NCLS + npinned) * SLAB_MAX);
        ASSERT_EQ_U(after.pool_bytes, after.mapped_bytes);

        for (unsigned i = 0; i < N; i++)
                if (cell[i])
                        ASSERT_TRUE(verify(zsw_pool_map(pool, cell[i]), sizes[i], i));
        for (unsigned k = 0; k < npinned; k++)
                ASSERT_TRUE(zsw_pool_map(pool, pinned_h[k]) == pinned_p[k]);
        for (unsigned i = 0; i < N; i++)
                if (cell[i]) {
                        zsw_pool_unpublish(pool, cell[i]);
                        zsw_pool_free_bulk(pool, &cell[i], 1);
                }
        assert_empty(pool);
}

/* The protocol of the store, under threads: owners read payloads and
 * handles under a read lock, withdraw an object (unpublish) under it
 * before freeing it or reading it unlocked, and compaction runs under the
 * write lock. Every payload must read back exactly, and an object read
 * unlocked after being withdrawn must not change under the reader. */
#define CSTRESS_SLOTS 512u
#define CSTRESS_OPS 20000u

struct cstress_arg {
        struct zsw_pool *pool;
        pthread_rwlock_t *lock;
        uint64_t seed;
        zsw_handle_t cell[CSTRESS_SLOTS]; /* compaction rewrites them */
        bool live[CSTRESS_SLOTS];
        uint32_t size[CSTRESS_SLOTS];
        uint64_t tag[CSTRESS_SLOTS];
};

static void *cstress_thread(void *p) {
        struct cstress_arg *a = p;
        uint64_t rng = a->seed;

        for (unsigned op = 0; op < CSTRESS_OPS; op++) {
                unsigned s = (unsigned) (rng_next(&rng) % CSTRESS_SLOTS);
                unsigned what = (unsigned) (rng_next(&rng) % 8);

                if (!a->live[s]) {
                        a->size[s] = 64 + (uint32_t) (rng_next(&rng) % 3000);
                        a->tag[s] = (a->seed << 32) | op;
                        ASSERT_OK(zsw_pool_alloc_bulk(a->pool, &a->size[s], 1, &a->cell[s]));
                        fill(zsw_pool_map(a->pool, a->cell[s]), a->size[s], a->tag[s]);
                        zsw_pool_publish(a->pool, &a->cell[s]);
                        a->live[s] = true;
                } else if (what < 3) {
                        zsw_handle_t h;

                        pthread_rwlock_rdlock(a->lock);
                        h = a->cell[s];
                        zsw_pool_unpublish(a->pool, h);
                        pthread_rwlock_unlock(a->lock);
                        zsw_pool_free_bulk(a->pool, &h, 1);
                        a->live[s] = false;
                } else if (what < 6) {
                        pthread_rwlock_rdlock(a->lock);
                        ASSERT_TRUE(
                                verify(zsw_pool_map(a->pool, a->cell[s]), a->size[s], a->tag[s]));
                        pthread_rwlock_unlock(a->lock);
                } else {
                        const void *m;

                        pthread_rwlock_rdlock(a->lock);
                        zsw_pool_unpublish(a->pool, a->cell[s]);
                        m = zsw_pool_map(a->pool, a->cell[s]);
                        pthread_rwlock_unlock(a->lock);
                        /* Withdrawn: stays put while others churn. */
                        for (unsigned k = 0; k < 4; k++) {
                                sched_yield();
                                ASSERT_TRUE(verify(m, a->size[s], a->tag[s]));
                        }
                        pthread_rwlock_rdlock(a->lock);
                        zsw_pool_publish(a->pool, &a->cell[s]);
                        pthread_rwlock_unlock(a->lock);
                }
        }
        for (unsigned s = 0; s < CSTRESS_SLOTS; s++)
                if (a->live[s]) {
                        zsw_handle_t h;

                        pthread_rwlock_rdlock(a->lock);
                        h = a->cell[s];
                        ASSERT_TRUE(verify(zsw_pool_map(a->pool, h), a->size[s], a->tag[s]));
                        zsw_pool_unpublish(a->pool, h);
                        pthread_rwlock_unlock(a->lock);
                        zsw_pool_free_bulk(a->pool, &h, 1);
                }
        return NULL;
}

struct compactor_arg {
        struct zsw_pool *pool;
        pthread_rwlock_t *lock;
        atomic_bool stop;
};

static void *compactor_thread(void *p) {
        struct compactor_arg *c = p;
        unsigned cursor = 0;

        while (!atomic_load(&c->stop)) {
                pthread_rwlock_wrlock(c->lock);
                zsw_pool_compact(c->pool, 16, &cursor);
                pthread_rwlock_unlock(c->lock);
                if (cursor >= ZSW_POOL_NR_CLASSES) {
                        cursor = 0;
                        zsw_pool_shrink(c->pool);
                }
        }
        return NULL;
}

TEST(threads_race_compaction) {
        _cleanup_pool_ struct zsw_pool *pool = NULL;
        enum { T = 3 };
        static struct cstress_arg args[T];
        struct compactor_arg comp = {};
        pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
        pthread_t th[T], ct;

        ASSERT_OK(zsw_pool_new(&pool));
        comp.pool = pool;
        comp.lock = &lock;
        ASSERT_EQ(pthread_create(&ct, NULL, compactor_thread, &comp), 0);
        for (unsigned t = 0; t < T; t++) {
                args[t] = (struct cstress_arg) { .pool = pool, .lock = &lock, .seed = t + 1 };
                ASSERT_EQ(pthread_create(&th[t], NULL, cstress_thread, &args[t]), 0);
        }
        for (unsigned t = 0; t < T; t++)
                ASSERT_EQ(pthread_join(th[t], NULL), 0);
        atomic_store(&comp.stop, true);
        ASSERT_EQ(pthread_join(ct, NULL), 0);
        assert_empty(pool);
        pthread_rwlock_destroy(&lock);
}
