/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page heat (heat.c) and the order it gives eviction: pages that came back
 * by a fault stay while colder pages exist, on a real process.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"
#include "engine.h"
#include "evict.h"
#include "heat.h"
#include "target-internal.h"
#include "test.h"
#include "test-child.h"

#define PAGE ZSW_PAGE_SIZE
#define SEC 1000000000ull

TEST(never_used_is_cold) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        ASSERT_FALSE(zsw_heat_is_hot(h, 12345, UINT64_MAX, 100 * SEC));
        ASSERT_EQ(zsw_heat_touched(h), 0);
        zsw_heat_free(h);
}

TEST(a_use_is_hot_until_cold_ns_passed) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        zsw_heat_touch(h, 1000, 1, 50 * SEC);
        ASSERT_TRUE(zsw_heat_is_hot(h, 1000, 10 * SEC, 51 * SEC));
        ASSERT_TRUE(zsw_heat_is_hot(h, 1000, 10 * SEC, 59 * SEC));
        ASSERT_FALSE(zsw_heat_is_hot(h, 1000, 10 * SEC, 61 * SEC));
        /* No horizon: nothing is hot. */
        ASSERT_FALSE(zsw_heat_is_hot(h, 1000, 0, 51 * SEC));
        /* A later use moves the stamp. */
        zsw_heat_touch(h, 1000, 1, 60 * SEC);
        ASSERT_TRUE(zsw_heat_is_hot(h, 1000, 10 * SEC, 61 * SEC));
        zsw_heat_free(h);
}

/* Takes page p and then n other pages (far from p). */
static void take_then(struct zsw_heat *h, uint64_t p, uint64_t n) {
        zsw_heat_taken(h, p, 1);
        zsw_heat_taken(h, 1000000, n);
}

TEST(a_refault_soon_after_eviction_ages_slower) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        zsw_heat_set_resident(h, 1000);
        /* Back after 999 others went (under one resident set): level 1,
         * its idle time halves. */
        take_then(h, 100, 999);
        zsw_heat_touch(h, 100, 1, 10 * SEC);
        ASSERT_TRUE(zsw_heat_is_hot(h, 100, SEC + SEC / 2, 12 * SEC));
        /* A page back at the same time but after a whole resident set
         * went is idle by then: its level did not move. */
        take_then(h, 200, 1000);
        zsw_heat_touch(h, 200, 1, 10 * SEC);
        ASSERT_FALSE(zsw_heat_is_hot(h, 200, SEC + SEC / 2, 12 * SEC));
        /* Back after more than 32 resident sets: the level falls. */
        take_then(h, 100, 32001);
        ASSERT_FALSE(zsw_heat_is_hot(h, 100, UINT64_MAX, 21 * SEC));
        zsw_heat_touch(h, 100, 1, 80 * SEC);
        ASSERT_FALSE(zsw_heat_is_hot(h, 100, SEC + SEC / 2, 82 * SEC));
        zsw_heat_free(h);
}

TEST(a_refault_before_the_resident_size_is_known_keeps_its_level) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        take_then(h, 100, 1);
        zsw_heat_touch(h, 100, 1, 10 * SEC);
        ASSERT_FALSE(zsw_heat_is_hot(h, 100, SEC + SEC / 2, 12 * SEC));
        zsw_heat_free(h);
}

TEST(a_use_heats_its_own_page_alone) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        /* Across a chunk border (512 pages) too. */
        zsw_heat_touch(h, 511, 1, 5 * SEC);
        ASSERT_TRUE(zsw_heat_is_hot(h, 511, SEC, 5 * SEC));
        ASSERT_FALSE(zsw_heat_is_hot(h, 510, SEC, 5 * SEC));
        ASSERT_FALSE(zsw_heat_is_hot(h, 512, SEC, 5 * SEC));
        ASSERT_FALSE(zsw_heat_is_hot(h, 0, SEC, 5 * SEC));
        zsw_heat_free(h);
}

TEST(many_chunks_keep_their_stamps) {
        struct zsw_heat *h;

        ASSERT_OK(zsw_heat_new(&h));
        /* 5000 chunks spread over the address space: the table grows
         * many times; every stamp must stay where it was put. */
        for (uint64_t i = 0; i < 5000; i++)
                zsw_heat_touch(h, i * 7919 * 512 + i % 512, 1, (i + 1) * SEC);
        for (uint64_t i = 0; i < 5000; i++) {
                uint64_t p = i * 7919 * 512 + i % 512;

                ASSERT_TRUE(zsw_heat_is_hot(h, p, SEC, (i + 1) * SEC));
                ASSERT_FALSE(zsw_heat_is_hot(h, p, SEC, (i + 2) * SEC + 1));
        }
        ASSERT_EQ(zsw_heat_touched(h), 5000);
        ASSERT_GE(zsw_heat_bytes(h), 5000 * 512 * 4);
        zsw_heat_free(h);
}

/* The child: one mapping of 2 * HALF pages. The first half (low
 * addresses) is filled at setup; 'a' reads it all, 'b' fills the second
 * half, 'p' answers how many pages of the first half are present, 'v'
 * verifies both. */
#define HALF 2048u
#define DISCARDS 8u

static uint8_t *buf;
static uint64_t sums[2 * HALF];
static bool second_filled;

static uint64_t present_of_first_half(void) {
        int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        uint64_t pm[HALF], n = 0;

        if (fd < 0 || pread(fd, pm, sizeof(pm), (off_t) ((uintptr_t) buf / PAGE * 8)) != sizeof(pm))
                _exit(6);
        close(fd);
        for (size_t i = 0; i < HALF; i++)
                n += (pm[i] >> 63) & 1;
        return n;
}

static uint64_t child_command(char c, int reply) {
        uint64_t bad = 0;

        switch (c) {
        case 'a':
                for (size_t i = 0; i < HALF; i++)
                        bad += corpus_page_sum(buf + i * PAGE) != sums[i];
                return bad;
        case 'b':
                if (corpus_fill(buf + (size_t) HALF * PAGE, HALF, 0, 7) < 0)
                        _exit(5);
                for (size_t i = HALF; i < 2 * HALF; i++)
                        sums[i] = corpus_page_sum(buf + i * PAGE);
                second_filled = true;
                return 0;
        case 'p':
                return present_of_first_half();
        case 'r': {
                /* Pairs of neighbours at scattered places: each pair's
                 * second fault looks like the start of a stream that
                 * never goes on. */
                uint64_t x = 0x2545f4914f6cdd1dull;

                for (size_t k = 0; k < 400; k++) {
                        size_t i;

                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        i = (size_t) (x % (HALF / 16)) * 16;
                        bad += corpus_page_sum(buf + i * PAGE) != sums[i];
                        bad += corpus_page_sum(buf + (i + 1) * PAGE) != sums[i + 1];
                }
                return bad;
        }
        case 'e':
                /* Every other page of the first half comes back. */
                for (size_t i = 0; i < HALF; i += 2)
                        bad += corpus_page_sum(buf + i * PAGE) != sums[i];
                return bad;
        case 's':
                for (size_t i = 0; i < HALF; i++)
                        bad += corpus_page_sum(buf + i * PAGE) != sums[i];
                return bad;
        case 'z':
                /* The second half alternates: even pages written, odd
                 * ones read (the zero page, which no drop takes or
                 * bridges). */
                for (size_t i = HALF; i < 2 * HALF; i++) {
                        if (i % 2)
                                bad += buf[i * PAGE + 7] != 0;
                        else
                                memset(buf + i * PAGE, (int) (i % 251) + 1, PAGE);
                        sums[i] = corpus_page_sum(buf + i * PAGE);
                }
                second_filled = true;
                return bad;
        case 'm': {
                /* How many mappings it has. */
                static char maps[1 << 16];
                int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
                uint64_t lines = 0;
                ssize_t n;

                if (fd < 0)
                        _exit(6);
                while ((n = read(fd, maps, sizeof(maps))) > 0)
                        for (ssize_t i = 0; i < n; i++)
                                lines += maps[i] == '\n';
                close(fd);
                return lines;
        }
        case 'd':
                /* Its own discard of written pages, one call each: they
                 * read zeros now, whoever holds their content. */
                for (size_t i = HALF; i < HALF + 2 * DISCARDS; i += 2) {
                        if (madvise(buf + i * PAGE, PAGE, MADV_DONTNEED) < 0)
                                _exit(7);
                        sums[i] = corpus_page_sum(buf + (HALF + 1) * PAGE);
                        bad += buf[i * PAGE] != 0;
                }
                return bad;
        case 'v':
                for (size_t i = 0; i < (second_filled ? 2 : 1) * HALF; i++)
                        bad += corpus_page_sum(buf + i * PAGE) != sums[i];
                return bad;
        }
        return 0;
}

static int child_setup(void) {
        buf = mmap(NULL, 2 * HALF * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
        if (buf == MAP_FAILED || corpus_fill(buf, HALF, 0, 3) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < HALF; i++)
                sums[i] = corpus_page_sum(buf + i * PAGE);
        return 0;
}

static const struct zsw_log test_log = { .fn = test_log_stderr, .max_priority = LOG_INFO };

/* Pages that came back by a fault (the first half, read after a reclaim)
 * are not taken while pages never seen in use (the second half, filled
 * after) are there to take, although the first half comes first in
 * address order. */
/* Stops are counted with their length: the long ones apart, the
 * distribution in buckets of at most 12.5%. */
TEST(stops_are_counted_by_length) {
        struct zsw_target *t = target_new(getpid(), &test_log);
        uint64_t ms = 1000000;

        ASSERT_TRUE(t);
        for (int i = 0; i < 8; i++)
                target_count_stop_ns(t, 2 * ms);
        target_count_stop_ns(t, 20 * ms);
        target_count_stop_ns(t, 6 * ms);
        target_count_stop_ns(t, 5 * ms);
        ASSERT_EQ(atomic_load(&t->stops), 11);
        ASSERT_EQ(atomic_load(&t->stops_long), 2);
        ASSERT_EQ(atomic_load(&t->stop_ns_max), 20 * ms);
        ASSERT_EQ(atomic_load(&t->stopped_ns), 47 * ms);
        ASSERT_GE(zsw_histogram_percentile(&t->stop_hist, 0.5), 2 * ms - ms / 8);
        ASSERT_LE(zsw_histogram_percentile(&t->stop_hist, 0.5), 3 * ms);
        ASSERT_GE(zsw_histogram_percentile(&t->stop_hist, 0.99), 20 * ms - 20 * ms / 8);
        target_free(t);
}

TEST(refaulted_pages_stay_while_colder_ones_exist) {
        struct test_child ch = test_child_start(child_setup, child_command, true);
        struct zsw_engine *e = test_engine_new(&(struct zsw_engine_config) { .log = &test_log });
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};
        struct zsw_target_stats st;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, &err));
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_GE(res.evicted_pages, HALF);
        ASSERT_EQ(test_child_ask(&ch, 'p'), 0);
        /* Read: every page of the first half comes back by a fault. */
        ASSERT_EQ(test_child_ask(&ch, 'a'), 0);
        ASSERT_EQ(test_child_ask(&ch, 'p'), HALF);
        ASSERT_EQ(test_child_ask(&ch, 'b'), 0);

        res = (struct zsw_reclaim_result) {};
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, (uint64_t) HALF * PAGE, &res, &err));
        ASSERT_EQ(res.evicted_pages, HALF);
        ASSERT_EQ(test_child_ask(&ch, 'p'), HALF);
        ASSERT_OK(zsw_engine_get_target_stats(e, ch.pid, &st));
        ASSERT_GE(st.heat_uses, HALF);
        ASSERT_GE(st.stops, 2);
        ASSERT_GE(st.stopped_ns, st.stop_ns_max);
        ASSERT_GT(st.stop_ns_p50, 0);
        ASSERT_LE(st.stop_ns_p50, st.stop_ns_p99);
        ASSERT_LE(st.stop_ns_p99, st.stop_ns_max);
        ASSERT_LE(st.stops_over_5ms, st.stops);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_finish(&ch, e);
}

#define GAP_PAGES 64u

static uint8_t *gap_buf;

static int gap_setup(void) {
        gap_buf = mmap(NULL, GAP_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (gap_buf == MAP_FAILED)
                return -ENOMEM;
        memset(gap_buf, 0x5a, GAP_PAGES * PAGE);
        return 0;
}

static uint64_t gap_command(char c, int reply) {
        (void) c;
        (void) reply;
        return (uint64_t) (uintptr_t) gap_buf;
}

/* The regions evict_next_round() takes from the child's 64 pages. */
static int gap_round(int pagemap, struct zsw_heat *h, uint64_t base, uint64_t cold_ns, uint64_t now,
                     struct zsw_page_run *regions) {
        uint64_t cursor = base;
        int n = evict_next_round(pagemap, h, cold_ns, now, &cursor, base + GAP_PAGES * PAGE,
                                 GAP_PAGES, regions, GAP_PAGES);

        ASSERT_GE(n, 0);
        return n;
}

/* A round takes the warm pages of short gaps between cold ones, so that
 * its drop is one range, but never hot ones. The child's pages come in
 * blocks of eight: 0-4 never used (cold), 5-7 used 20 s ago (warm). */
TEST(a_round_joins_cold_pages_across_warm_gaps) {
        struct test_child ch = test_child_start(gap_setup, gap_command, true);
        uint64_t base = test_child_ask(&ch, 'a'), now = 1000 * SEC, pg = base / PAGE;
        struct zsw_page_run regions[GAP_PAGES];
        char path[64];
        struct zsw_heat *h;
        int pagemap;

        if (geteuid() != 0)
                TEST_SKIP("needs root to scan another process's pagemap");
        snprintf(path, sizeof(path), "/proc/%d/pagemap", ch.pid);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(pagemap, 0);
        ASSERT_OK(zsw_heat_new(&h));
        for (uint64_t b = 0; b < GAP_PAGES; b += 8)
                zsw_heat_touch(h, pg + b + 5, 3, now - 20 * SEC);

        /* Idle for 60 s: the cold pages, joined across the gaps (used 20
         * s ago, a third of that), up to the last cold page. */
        ASSERT_EQ(gap_round(pagemap, h, base, 60 * SEC, now, regions), 1);
        ASSERT_EQ(regions[0].start, base);
        ASSERT_EQ(regions[0].end, base + (GAP_PAGES - 3) * PAGE);
        /* Idle for 100 s: an eighth of that is 12.5 s, the gaps join
         * still (a quarter, 25 s, would not). */
        ASSERT_EQ(gap_round(pagemap, h, base, 100 * SEC, now, regions), 1);
        ASSERT_EQ(regions[0].end, base + (GAP_PAGES - 3) * PAGE);
        /* Idle for 200 s: the gaps are hot at an eighth of that. */
        ASSERT_EQ(gap_round(pagemap, h, base, 200 * SEC, now, regions), (int) GAP_PAGES / 8);
        for (unsigned b = 0; b < GAP_PAGES / 8; b++)
                ASSERT_EQ(regions[b].end, base + (b * 8 + 5) * PAGE);
        /* A page in use now splits the round at its gap. */
        zsw_heat_touch(h, pg + 2 * 8 + 6, 1, now);
        ASSERT_EQ(gap_round(pagemap, h, base, 60 * SEC, now, regions), 2);
        ASSERT_EQ(regions[0].end, base + (2 * 8 + 5) * PAGE);
        ASSERT_EQ(regions[1].start, base + 3 * 8 * PAGE);
        ASSERT_EQ(regions[1].end, base + (GAP_PAGES - 3) * PAGE);

        zsw_heat_free(h);
        close(pagemap);
        test_child_stop(&ch);
}

static unsigned prefetch_now(struct zsw_engine *e, pid_t pid) {
        struct zsw_target_stats st;

        ASSERT_OK(zsw_engine_get_target_stats(e, pid, &st));
        return st.prefetch_window_now;
}

/* Prefetch that does not pay stops; a stream brings it back. */
TEST(prefetch_follows_what_pays) {
        struct test_child ch = test_child_start(child_setup, child_command, true);
        struct zsw_engine *e = test_engine_new(
                &(struct zsw_engine_config) { .prefetch_window = 8, .log = &test_log });
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};

        ASSERT_OK(zsw_engine_attach(e, ch.pid, &err));
        ASSERT_EQ(prefetch_now(e, ch.pid), 8);
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_EQ(test_child_ask(&ch, 'r'), 0);
        ASSERT_EQ(prefetch_now(e, ch.pid), 0);

        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_EQ(test_child_ask(&ch, 's'), 0);
#ifndef __SANITIZE_THREAD__
        /* Under ThreadSanitizer its runtime's own faults on the child's
         * other evicted pages come between the stream's, which is then no
         * stream to the target's one prefetch state. */
        ASSERT_EQ(prefetch_now(e, ch.pid), 8);
#endif
        test_child_finish(&ch, e);
}

/* Pages taken between pages taken before: the drop joins them across the
 * gaps (round_bridge()); every page must read right afterwards, also the
 * gap pages, whose entries the drop must leave alone. */
TEST(a_drop_across_evicted_gaps_keeps_every_page) {
        struct test_child ch = test_child_start(child_setup, child_command, true);
        struct zsw_engine *e = test_engine_new(&(struct zsw_engine_config) { .log = &test_log });
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};

        ASSERT_OK(zsw_engine_attach(e, ch.pid, &err));
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_EQ(test_child_ask(&ch, 'e'), 0);
        ASSERT_EQ(test_child_ask(&ch, 'p'), HALF / 2);
        /* Everything: whatever else the child has present (a sanitizer's
         * runtime has much) cannot leave part of the half behind. */
        res = (struct zsw_reclaim_result) {};
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_GE(res.evicted_pages, HALF / 2);
        ASSERT_EQ(test_child_ask(&ch, 'p'), 0);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_finish(&ch, e);
}

/* A drop of many ranges (written pages between zero pages, which are
 * never joined) makes the target wait for no UFFD_EVENT_REMOVE round
 * trip: guard markers zap them (evict.c's round_zap()). A MADV_DONTNEED
 * drop raised one per range, over 1,000 here. The target's own DONTNEED
 * afterwards still raises its REMOVEs, and its pages read zeros. */
TEST(a_drop_makes_the_target_wait_for_no_remove_event) {
        struct test_child ch = test_child_start(child_setup, child_command, true);
        struct zsw_engine *e = test_engine_new(&(struct zsw_engine_config) { .log = &test_log });
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};
        struct zsw_target_stats st;
        uint64_t before;

        ASSERT_EQ(test_child_ask(&ch, 'z'), 0);
        ASSERT_OK(zsw_engine_attach(e, ch.pid, &err));
        ASSERT_OK(zsw_engine_get_target_stats(e, ch.pid, &st));
        before = st.remove_events;
        ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
        ASSERT_GE(res.evicted_pages, HALF + HALF / 2);
        ASSERT_OK(zsw_engine_get_target_stats(e, ch.pid, &st));
        /* Not 0: a sanitizer's runtime in the child may discard memory
         * of its own; our drop raised HALF / 2 with DONTNEED. */
        ASSERT_LT(st.remove_events - before, HALF / 8);
        before = st.remove_events;
        ASSERT_EQ(test_child_ask(&ch, 'd'), 0);
        ASSERT_OK(zsw_engine_get_target_stats(e, ch.pid, &st));
        ASSERT_GE(st.remove_events - before, DISCARDS);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_finish(&ch, e);
}

/* Rounds leave the target's mappings as they found them: a drop that
 * split a mapping at each range (UFFDIO_UNREGISTER of the ranges does)
 * and did not merge it back would add up to two mappings per range and
 * round, until vm.max_map_count refuses the target's own mmap. */
TEST(rounds_leave_the_mappings_as_they_were) {
        struct test_child ch = test_child_start(child_setup, child_command, true);
        struct zsw_engine *e = test_engine_new(&(struct zsw_engine_config) { .log = &test_log });
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};
        uint64_t maps;

        ASSERT_EQ(test_child_ask(&ch, 'z'), 0);
        ASSERT_OK(zsw_engine_attach(e, ch.pid, &err));
        maps = test_child_ask(&ch, 'm');
        for (int i = 0; i < 8; i++) {
                ASSERT_OK(zsw_engine_reclaim(e, ch.pid, UINT64_MAX, &res, &err));
                /* Every page back: the next drop is again the written
                 * pages between the zero pages, ~1,000 ranges. */
                ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
                ASSERT_EQ(test_child_ask(&ch, 'm'), maps);
        }
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_finish(&ch, e);
}
