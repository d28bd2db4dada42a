/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "index.h"
#include "test.h"
#include "util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_index *, zsw_index_free);
#define _cleanup_index_ _cleanup_(zsw_index_freep)

static uint64_t rng_next(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* A distinct non-NULL entry per page number. */
static void *tag(uint64_t pgno) {
        return (void *) (uintptr_t) ((pgno << 4) | 0x9);
}

/* The reference model: page numbers in a sorted array. */
struct ref {
        uint64_t *keys;
        size_t n, cap;
};

static size_t ref_lower_bound(const struct ref *r, uint64_t key) {
        size_t lo = 0, hi = r->n;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (r->keys[mid] < key)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static bool ref_has(const struct ref *r, uint64_t key) {
        size_t i = ref_lower_bound(r, key);

        return i < r->n && r->keys[i] == key;
}

static void ref_insert(struct ref *r, uint64_t key) {
        size_t i = ref_lower_bound(r, key);

        if (r->n == r->cap) {
                r->cap = MAX((size_t) 1024, r->cap * 2);
                r->keys = realloc(r->keys, r->cap * sizeof(uint64_t));
                ASSERT_TRUE(r->keys);
        }
        memmove(r->keys + i + 1, r->keys + i, (r->n - i) * sizeof(uint64_t));
        r->keys[i] = key;
        r->n++;
}

static void ref_erase_range(struct ref *r, uint64_t start, uint64_t end) {
        size_t a = ref_lower_bound(r, start), b = ref_lower_bound(r, end);

        memmove(r->keys + a, r->keys + b, (r->n - b) * sizeof(uint64_t));
        r->n -= b - a;
}

/* Page numbers as a 47-bit address space has them: a few dense clusters
 * (text, heap, mmap area, stack) across the whole range, and stray pages
 * anywhere. */
static uint64_t random_pgno(uint64_t *seed) {
        static const uint64_t bases[] = {
                0x400,                       /* text at 4 MiB */
                0x55555555ull,               /* PIE heap */
                0x7f0000000ull,              /* mmap area */
                ZSW_INDEX_MAX_PGNO - 0x3000, /* stack, top of the range */
        };
        uint64_t r = rng_next(seed);

        if (r % 8 == 0)
                return rng_next(seed) & ZSW_INDEX_MAX_PGNO;
        return bases[r % ARRAY_SIZE(bases)] + (r >> 32) % 4096;
}

struct collect {
        uint64_t last;
        size_t n;
        bool ordered;
};

static void collect_fn(void *entry, uint64_t pgno, void *userdata) {
        struct collect *c = userdata;

        ASSERT_TRUE(entry == tag(pgno));
        if (c->n > 0 && pgno <= c->last)
                c->ordered = false;
        c->last = pgno;
        c->n++;
}

static void check_against_ref(const struct zsw_index *idx, const struct ref *r) {
        uint64_t pgno = 0;
        size_t i = 0;

        ASSERT_EQ_U(zsw_index_count(idx), r->n);
        for (void *e = zsw_index_next(idx, 0, &pgno); e;
             e = pgno < ZSW_INDEX_MAX_PGNO ? zsw_index_next(idx, pgno + 1, &pgno) : NULL) {
                ASSERT_LT(i, r->n);
                ASSERT_EQ_U(pgno, r->keys[i]);
                ASSERT_TRUE(e == tag(pgno));
                i++;
        }
        ASSERT_EQ_U(i, r->n);
}

TEST(random_ops_against_reference) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        _cleanup_free_ uint64_t *keys_owner = NULL;
        struct ref r = {};
        uint64_t seed = 2026;

        ASSERT_OK(zsw_index_new(&idx));
        for (unsigned op = 0; op < 200000; op++) {
                uint64_t k = random_pgno(&seed), got;
                unsigned what = rng_next(&seed) % 100;
                void *e;

                if (what < 45) {
                        int ret = zsw_index_insert(idx, k, tag(k));

                        if (ref_has(&r, k))
                                ASSERT_EQ(ret, -EEXIST);
                        else {
                                ASSERT_OK(ret);
                                ref_insert(&r, k);
                        }
                } else if (what < 70) {
                        e = zsw_index_erase(idx, k);
                        if (ref_has(&r, k)) {
                                ASSERT_TRUE(e == tag(k));
                                ref_erase_range(&r, k, k + 1);
                        } else
                                ASSERT_TRUE(e == NULL);
                } else if (what < 85) {
                        ASSERT_TRUE(zsw_index_lookup(idx, k) == (ref_has(&r, k) ? tag(k) : NULL));
                } else if (what < 98) {
                        size_t i = ref_lower_bound(&r, k);

                        got = UINT64_MAX;
                        e = zsw_index_next(idx, k, &got);
                        if (i < r.n) {
                                ASSERT_TRUE(e == tag(r.keys[i]));
                                ASSERT_EQ_U(got, r.keys[i]);
                        } else {
                                ASSERT_TRUE(e == NULL);
                                ASSERT_EQ_U(got, UINT64_MAX);
                        }
                } else {
                        uint64_t end = k + rng_next(&seed) % 5000;
                        size_t expect = ref_lower_bound(&r, end) - ref_lower_bound(&r, k);
                        struct collect c = { .ordered = true };

                        ASSERT_EQ_U(zsw_index_erase_range(idx, k, end, collect_fn, &c), expect);
                        ASSERT_EQ_U(c.n, expect);
                        ASSERT_TRUE(c.ordered);
                        ref_erase_range(&r, k, end);
                }
                if (op % 20000 == 0)
                        check_against_ref(idx, &r);
        }
        check_against_ref(idx, &r);
        ASSERT_GT(r.n, 1000);
        keys_owner = r.keys;

        /* Erase one by one: every node goes with its last entry. */
        for (size_t i = 0; i < r.n; i++)
                ASSERT_TRUE(zsw_index_erase(idx, r.keys[i]) == tag(r.keys[i]));
        ASSERT_EQ_U(zsw_index_count(idx), 0);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);
        ASSERT_TRUE(zsw_index_next(idx, 0, NULL) == NULL);
}

TEST(insert_errors_and_limits) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        uint64_t got = 0;
        size_t node;

        ASSERT_OK(zsw_index_new(&idx));
        ASSERT_ERRNO(zsw_index_insert(idx, ZSW_INDEX_MAX_PGNO + 1, tag(1)), ERANGE);
        ASSERT_ERRNO(zsw_index_insert(idx, UINT64_MAX, tag(1)), ERANGE);
        ASSERT_ERRNO(zsw_index_insert(idx, 5, NULL), EINVAL);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);

        ASSERT_OK(zsw_index_insert(idx, 0, tag(0)));
        node = zsw_index_mem_bytes(idx) / 6;
        ASSERT_GT(node, 64 * sizeof(void *));
        ASSERT_OK(zsw_index_insert(idx, ZSW_INDEX_MAX_PGNO, tag(ZSW_INDEX_MAX_PGNO)));
        ASSERT_ERRNO(zsw_index_insert(idx, 0, tag(7)), EEXIST);
        ASSERT_TRUE(zsw_index_lookup(idx, 0) == tag(0));
        ASSERT_TRUE(zsw_index_lookup(idx, ZSW_INDEX_MAX_PGNO) == tag(ZSW_INDEX_MAX_PGNO));
        ASSERT_TRUE(zsw_index_lookup(idx, ZSW_INDEX_MAX_PGNO + 1) == NULL);
        ASSERT_TRUE(zsw_index_lookup(idx, 1) == NULL);
        ASSERT_TRUE(zsw_index_erase(idx, ZSW_INDEX_MAX_PGNO + 1) == NULL);
        ASSERT_TRUE(zsw_index_erase(idx, 64) == NULL);
        ASSERT_EQ_U(zsw_index_count(idx), 2);

        ASSERT_TRUE(zsw_index_next(idx, ZSW_INDEX_MAX_PGNO, &got) == tag(ZSW_INDEX_MAX_PGNO));
        ASSERT_EQ_U(got, ZSW_INDEX_MAX_PGNO);
        got = 42;
        ASSERT_TRUE(zsw_index_next(idx, ZSW_INDEX_MAX_PGNO + 1, &got) == NULL);
        ASSERT_EQ_U(got, 42);
        /* Two single-entry paths: six nodes each, the root shared. */
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 11 * node);
        ASSERT_EQ_U(zsw_index_erase_range(idx, 5, 5, NULL, NULL), 0);
        ASSERT_EQ_U(zsw_index_erase_range(idx, 9, 3, NULL, NULL), 0);
        ASSERT_EQ_U(zsw_index_erase_range(idx, 0, UINT64_MAX, NULL, NULL), 2);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);
}

TEST(next_walks_in_order_across_node_edges) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        static const uint64_t keys[] = {
                0,
                1,
                63,
                64,
                65,
                4095,
                4096,
                262143,
                262144,
                (UINT64_C(1) << 30) - 1,
                UINT64_C(1) << 30,
                UINT64_C(1) << 35,
                ZSW_INDEX_MAX_PGNO - 64,
                ZSW_INDEX_MAX_PGNO,
        };
        uint64_t got;
        size_t i = 0;

        ASSERT_OK(zsw_index_new(&idx));
        /* Insert in reverse so the order comes from the tree. */
        for (size_t k = ARRAY_SIZE(keys); k-- > 0;)
                ASSERT_OK(zsw_index_insert(idx, keys[k], tag(keys[k])));
        for (void *e = zsw_index_next(idx, 0, &got); e;
             e = got < ZSW_INDEX_MAX_PGNO ? zsw_index_next(idx, got + 1, &got) : NULL) {
                ASSERT_EQ_U(got, keys[i]);
                ASSERT_TRUE(e == tag(got));
                i++;
        }
        ASSERT_EQ_U(i, ARRAY_SIZE(keys));
        /* From between keys, the next one up. */
        for (size_t k = 1; k < ARRAY_SIZE(keys); k++) {
                ASSERT_TRUE(zsw_index_next(idx, keys[k - 1] + 1, &got) == tag(keys[k]));
                ASSERT_EQ_U(got, keys[k]);
        }
}

/* Few entries spread over the whole 2^36 range: erasing the range must visit
 * only the paths to them (a walk over its length would never finish), call
 * back in ascending order, respect the bounds, and free every node. */
TEST(erase_range_huge_sparse) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        enum { N = 1000 };
        struct ref r = {};
        _cleanup_free_ uint64_t *keys_owner = NULL;
        uint64_t seed = 77, a, b;
        struct collect c = { .ordered = true };
        size_t expect;

        ASSERT_OK(zsw_index_new(&idx));
        while (r.n < N) {
                uint64_t k = rng_next(&seed) & ZSW_INDEX_MAX_PGNO;

                if (!ref_has(&r, k)) {
                        ASSERT_OK(zsw_index_insert(idx, k, tag(k)));
                        ref_insert(&r, k);
                }
        }
        keys_owner = r.keys;

        /* Bounds: [a, b) with entries on both edges and just outside. */
        a = r.keys[100];
        b = r.keys[900];
        ASSERT_OK(zsw_index_insert(idx, a - 1, tag(a - 1)));
        ASSERT_OK(zsw_index_insert(idx, b - 1, tag(b - 1)));
        ref_insert(&r, a - 1);
        ref_insert(&r, b - 1);
        keys_owner = r.keys;
        expect = ref_lower_bound(&r, b) - ref_lower_bound(&r, a);
        ASSERT_EQ_U(zsw_index_erase_range(idx, a, b, collect_fn, &c), expect);
        ASSERT_EQ_U(c.n, expect);
        ASSERT_TRUE(c.ordered);
        ASSERT_TRUE(zsw_index_lookup(idx, a - 1) == tag(a - 1));
        ASSERT_TRUE(zsw_index_lookup(idx, a) == NULL);
        ASSERT_TRUE(zsw_index_lookup(idx, b - 1) == NULL);
        ASSERT_TRUE(zsw_index_lookup(idx, b) == tag(b));
        ref_erase_range(&r, a, b);
        check_against_ref(idx, &r);

        /* The rest, over the whole key space and beyond. */
        c = (struct collect) { .ordered = true };
        ASSERT_EQ_U(zsw_index_erase_range(idx, 0, UINT64_MAX, collect_fn, &c), r.n);
        ASSERT_EQ_U(c.n, r.n);
        ASSERT_TRUE(c.ordered);
        ASSERT_EQ_U(zsw_index_count(idx), 0);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);
}

/* Metadata per page: dense runs share their leaves, sparse pages pay for
 * their own path; both go back to nothing. */
TEST(memory_follows_content) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        size_t dense, node;

        ASSERT_OK(zsw_index_new(&idx));
        ASSERT_OK(zsw_index_insert(idx, 12345, tag(12345)));
        node = zsw_index_mem_bytes(idx) / 6;
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 6 * node);
        ASSERT_TRUE(zsw_index_erase(idx, 12345) == tag(12345));
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);

        for (uint64_t p = 0; p < 65536; p++)
                ASSERT_OK(zsw_index_insert(idx, 0x7f0000000ull + p, tag(p)));
        dense = zsw_index_mem_bytes(idx);
        fprintf(stderr, "dense: %.2f bytes of index per page\n", (double) dense / 65536);
        /* 1024 leaves, 16 + 1 + 1 + 1 + 1 inner nodes. */
        ASSERT_EQ_U(dense, (1024 + 16 + 4) * node);
        /* Sparse: one page per 2^12, each needs its own leaf and parent;
         * 16 + 2 nodes above them, the root is shared. */
        for (uint64_t p = 0; p < 1024; p++)
                ASSERT_OK(zsw_index_insert(idx, p << 12, tag(p)));
        ASSERT_EQ_U(zsw_index_mem_bytes(idx) - dense, (1024 * 2 + 16 + 2) * node);

        ASSERT_EQ_U(zsw_index_erase_range(idx, 0x7f0000000ull, 0x7f0000000ull + 65536, NULL, NULL),
                    65536);
        ASSERT_EQ_U(zsw_index_erase_range(idx, 0, 1u << 22, NULL, NULL), 1024);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);
}

/* Allocation failure part way down a new path must leave no empty node
 * behind; made real by an address-space limit in a child. */
static void enomem_child(void) {
        _cleanup_index_ struct zsw_index *idx = NULL;
        struct rlimit rl;
        uint64_t seed = 5, k;
        unsigned long vm_pages;
        size_t inserted = 0;
        FILE *f;
        int r;

        ASSERT_OK(zsw_index_new(&idx));
        f = fopen("/proc/self/statm", "re");
        ASSERT_TRUE(f);
        ASSERT_EQ(fscanf(f, "%lu", &vm_pages), 1);
        fclose(f);
        ASSERT_OK(getrlimit(RLIMIT_AS, &rl));
        rl.rlim_cur = (vm_pages + 2048) * 4096ul;
        ASSERT_OK(setrlimit(RLIMIT_AS, &rl));

        for (;;) {
                k = rng_next(&seed) & ZSW_INDEX_MAX_PGNO;
                r = zsw_index_insert(idx, k, tag(k));
                if (r == -ENOMEM)
                        break;
                /* A key drawn twice: how many fit before the limit (and
                 * so whether one repeats) is the allocator's business. */
                if (r == -EEXIST)
                        continue;
                ASSERT_OK(r);
                inserted++;
        }
        ASSERT_GT(inserted, 0);
        ASSERT_EQ_U(zsw_index_count(idx), inserted);
        ASSERT_TRUE(zsw_index_lookup(idx, k) == NULL);
        ASSERT_EQ_U(zsw_index_erase_range(idx, 0, UINT64_MAX, NULL, NULL), inserted);
        ASSERT_EQ_U(zsw_index_mem_bytes(idx), 0);
}

/* gcc defines __SANITIZE_ADDRESS__; clang 14 only answers __has_feature(). */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define INDEX_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define INDEX_TEST_SANITIZED 1
#endif

TEST(enomem_leaves_no_empty_nodes) {
#ifdef INDEX_TEST_SANITIZED
        /* Their allocators abort at the address-space limit rather than
         * return NULL. */
        fprintf(stderr, "skipped under a sanitizer\n");
        return;
#endif
        pid_t pid = fork();
        int status;

        ASSERT_OK(pid);
        if (pid == 0) {
                enomem_child();
                _exit(0);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
}
