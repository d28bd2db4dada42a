/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Page ages on real processes: a child with a hot half it writes and a
 * cold half it never touches; reclaim with a minimum age must take the
 * cold half and leave the hot one; a page faulted back in is not taken
 * again before it has aged twice the minimum; refaults count pages we took that
 * came back, never first touches; pages written at every scan are
 * protected again less and less often. Scans are asked for explicitly
 * (age_interval_ms = UINT32_MAX) and the test sleeps for the minimum age
 * between them, so no assertion depends on how fast the machine is.
 */
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "age.h"
#include "corpus.h"
#include "engine.h"
#include "test.h"
#include "test-child.h"
#include "uffd.h"

#define PAGE ZSW_PAGE_SIZE
#define MIN_AGE_MS 200u

/* The child's memory: buf, a hot half then a cold half, npages pages
 * (set before the fork: the test reads it too), and what 'm' maps. */
static uint8_t *buf, *fresh;
static uint64_t *sums;
static size_t npages;

static size_t verify_all(void) {
        size_t bad = 0;

        for (size_t i = 0; i < npages; i++)
                if (corpus_page_sum(buf + i * PAGE) != sums[i])
                        bad++;
        return bad;
}

/* 'a' address of the buffer, 'w' write every hot page (the same byte
 * back: contents stay, the write counts), 'W' every page, 'r' read every hot page, 'v'
 * verify all, 'm' map 1 MiB more (untouched), 't' write every page of
 * it. */
static uint64_t child_command(char c, int reply) {
        uint64_t sum = 0;

        switch (c) {
        case 'a':
                return (uint64_t) (uintptr_t) buf;
        case 'w':
        case 'W':
                for (size_t i = 0; i < (c == 'W' ? npages : npages / 2); i++)
                        ((volatile uint8_t *) buf)[i * PAGE + 7] = buf[i * PAGE + 7];
                return 0;
        case 'r':
                for (size_t i = 0; i < npages / 2; i++)
                        sum += ((volatile uint8_t *) buf)[i * PAGE + 7];
                return sum;
        case 'v':
                return verify_all();
        case 'm':
                fresh = mmap(NULL, 256 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
                if (fresh == MAP_FAILED)
                        _exit(3);
                return (uint64_t) (uintptr_t) fresh;
        case 't':
                for (size_t i = 0; i < 256; i++)
                        fresh[i * PAGE] = (uint8_t) i;
                return 0;
        }
        return 0;
}

static int child_setup(void) {
        buf = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        sums = calloc(npages, sizeof(uint64_t));
        if (buf == MAP_FAILED || !sums || corpus_fill(buf, npages, 0, 7) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < npages; i++)
                sums[i] = corpus_page_sum(buf + i * PAGE);
        return 0;
}

/* Waits until the child is set up: some tests attach at once. */
static struct test_child child_start(size_t mib) {
        npages = mib * 256;
        return test_child_start(child_setup, child_command, true);
}

/* Resident pages of the child in [start, start + n pages). */
static uint64_t present(pid_t pid, uint64_t start, size_t n) {
        struct page_region runs[64];
        uint64_t pos = start, end = start + n * PAGE, count = 0;
        char path[64];
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        while (pos < end) {
                struct pm_scan_arg arg = {
                        .size = sizeof(arg),
                        .start = pos,
                        .end = end,
                        .vec = (uint64_t) (uintptr_t) runs,
                        .vec_len = ARRAY_SIZE(runs),
                        .category_mask = PAGE_IS_PRESENT,
                        .return_mask = PAGE_IS_PRESENT,
                };
                int k = ioctl(fd, PAGEMAP_SCAN, &arg);

                ASSERT_GE(k, 0);
                for (int i = 0; i < k; i++)
                        count += (runs[i].end - runs[i].start) / PAGE;
                ASSERT_GT(arg.walk_end, pos);
                pos = arg.walk_end;
        }
        close(fd);
        return count;
}

static const struct zsw_log test_log = { .fn = test_log_stderr, .max_priority = LOG_INFO };

/* No prefetch: every page that comes back is a fault of its own. No
 * cost budget: what a scan protects again depends on how fast the
 * machine served the faults before it, which would make what the tests
 * below see depend on the machine's load; the backoff test keeps it. */
static struct zsw_engine *engine_start_budget(uint32_t age_interval_ms, uint32_t cost_percent) {
        return test_engine_new(&(struct zsw_engine_config) { .age_interval_ms = age_interval_ms,
                                                             .age_cost_percent = cost_percent,
                                                             .log = &test_log });
}

static struct zsw_engine *engine_start(uint32_t age_interval_ms) {
        return engine_start_budget(age_interval_ms, 100);
}

static void sleep_ms(unsigned ms) {
        struct timespec ts = { ms / 1000, (long) (ms % 1000) * 1000000 };

        while (nanosleep(&ts, &ts) < 0)
                ;
}

static struct zsw_reclaim_result reclaim(struct zsw_engine *e, pid_t pid, uint64_t min_age_ms) {
        struct zsw_reclaim_request req = { .max_bytes = UINT64_MAX, .min_cold_age_ms = min_age_ms };
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res = {};

        if (zsw_engine_reclaim_cold(e, pid, &req, &res, &err) < 0)
                TEST_FAIL("reclaim: %s", err.message);
        return res;
}

static struct zsw_target_stats stats(struct zsw_engine *e, pid_t pid) {
        struct zsw_target_stats s;

        ASSERT_OK(zsw_engine_get_target_stats(e, pid, &s));
        return s;
}

TEST(written_half_stays_cold_half_goes) {
        struct test_child ch = child_start(8);
        struct zsw_engine *e = engine_start(UINT32_MAX);
        uint64_t hot = test_child_ask(&ch, 'a'), cold = hot + npages / 2 * PAGE;
        size_t half = npages / 2;
        struct zsw_reclaim_result res;
        struct zsw_target_stats s;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, NULL));
        /* Nothing is old before two scans have watched it. */
        res = reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(res.evicted_pages, 0);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        res = reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(res.evicted_pages, 0);

        /* The scan protected every page: each write to the hot half is
         * seen, once per page. */
        s = stats(e, ch.pid);
        test_child_ask(&ch, 'w');
        ASSERT_GE(stats(e, ch.pid).wp_faults - s.wp_faults, half);
        sleep_ms(MIN_AGE_MS);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        test_child_ask(&ch, 'w');
        s = stats(e, ch.pid);
        ASSERT_EQ(s.age_scans, 2);
        ASSERT_GE(s.age_present_pages, npages);
        ASSERT_GE(s.age_idle_pages, half);
        ASSERT_GT(s.age_table_bytes, 0);
        /* About a byte per resident page. */
        ASSERT_LT(s.age_table_bytes, 2 * s.age_present_pages + 65536);
        fprintf(stderr,
                "age scan: %" PRIu64 " present, %" PRIu64 " idle, %" PRIu64 " protected, %" PRIu64
                " us, table %" PRIu64 " bytes\n",
                s.age_present_pages, s.age_idle_pages, s.age_protected_pages,
                s.age_scan_ns_last / 1000, s.age_table_bytes);

        res = reclaim(e, ch.pid, MIN_AGE_MS);
        fprintf(stderr, "min age %u ms: evicted %" PRIu64 ", cold %" PRIu64 "\n", MIN_AGE_MS,
                res.evicted_pages, res.cold_pages);
        ASSERT_EQ(present(ch.pid, hot, half), half);
        ASSERT_EQ(present(ch.pid, cold, half), 0);
        ASSERT_GE(res.evicted_pages, half);
        ASSERT_GE(res.cold_pages, half);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);

        /* Without a minimum age the hot half goes too: the age is what
         * kept it. */
        res = reclaim(e, ch.pid, 0);
        ASSERT_EQ(present(ch.pid, hot, half), 0);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);

        /* Detached with every page write-protected by a scan: writes go
         * through as if we had never been there. */
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        ASSERT_GE(stats(e, ch.pid).age_protected_pages, half);
        ASSERT_OK(zsw_engine_detach(e, ch.pid, NULL));
        test_child_ask(&ch, 'W');
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_stop(&ch);
        zsw_engine_free(e);
}

TEST(faulted_in_pages_are_not_taken_again_within_the_age) {
        struct test_child ch = child_start(4);
        struct zsw_engine *e = engine_start(UINT32_MAX);
        uint64_t hot = test_child_ask(&ch, 'a');
        size_t half = npages / 2;
        struct zsw_target_stats s0, s1;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, NULL));
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        sleep_ms(MIN_AGE_MS);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));

        /* Reads leave no trace this kernel shows user space (no accessed
         * bit without page_idle or MGLRU): a page only read is as old as
         * an untouched one, and goes. */
        test_child_ask(&ch, 'r');
        (void) reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(present(ch.pid, hot, half), 0);

        /* Reading it again brings it back: each page one refault (and
         * a few of the child's own: its stack went too). */
        s0 = stats(e, ch.pid);
        test_child_ask(&ch, 'r');
        s1 = stats(e, ch.pid);
        ASSERT_GE(s1.refaults - s0.refaults, half);
        ASSERT_LE(s1.refaults - s0.refaults, half + 16);
        ASSERT_EQ(s1.zero_faults, s0.zero_faults);

        /* Faulted in just now: not taken, before the next scan nor after. */
        (void) reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(present(ch.pid, hot, half), half);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        (void) reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(present(ch.pid, hot, half), half);

        /* A page that came back counts half its age: unused for the
         * minimum age is not enough any more... */
        sleep_ms(MIN_AGE_MS);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        (void) reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(present(ch.pid, hot, half), half);

        /* ...twice the minimum is. Heat keeps a page that came back
         * within a second of its eviction hot for twice the minimum age
         * after its refault, which the sleeps above only just cover (the
         * last pages read came back after the first): this sleep alone
         * covers it. */
        sleep_ms(2 * MIN_AGE_MS);
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        (void) reclaim(e, ch.pid, MIN_AGE_MS);
        ASSERT_EQ(present(ch.pid, hot, half), 0);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_stop(&ch);
        zsw_engine_free(e);
}

/* A page the target writes all the time costs a WP fault each time a
 * scan protects it: a hot page is protected again less and less often,
 * at one scan in 4, then in 8, so N scans cost each hot page at most
 * 3 + N / 8 faults (at scan 1, one of the next 4, then one in 8),
 * against N if every scan protected it again. The child writes its hot half between any two
 * scans and answers once every write went through, so the count does
 * not depend on timing; the cost budget (the default one here) can only
 * lower it. */
#define BACKOFF_SCANS 64u

TEST(pages_written_at_every_scan_back_off) {
        struct test_child ch = child_start(8);
        struct zsw_engine *e = engine_start_budget(UINT32_MAX, 0);
        uint64_t hot = test_child_ask(&ch, 'a');
        size_t half = npages / 2;
        struct zsw_target_stats s0, s;
        uint64_t faults, others, written;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, NULL));
        /* What the child's own stack and data cost (more under a
         * sanitizer, whose runtime writes pages of its own): the same
         * scans, the child answering without writing its pages. */
        s0 = stats(e, ch.pid);
        for (unsigned i = 0; i < BACKOFF_SCANS; i++) {
                ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
                test_child_ask(&ch, 'a');
        }
        s = stats(e, ch.pid);
        others = s.wp_faults - s0.wp_faults;
        s0 = s;
        for (unsigned i = 0; i < BACKOFF_SCANS; i++) {
                ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
                test_child_ask(&ch, 'w');
        }
        s = stats(e, ch.pid);
        faults = s.wp_faults - s0.wp_faults;
        fprintf(stderr,
                "%u scans, %zu hot pages: %" PRIu64 " WP faults (%.2f per page and scan), "
                "%" PRIu64 " written pages left unprotected by the last scan, "
                "%.1f ms of the child's time by the fault threads' count; "
                "%" PRIu64 " WP faults without the hot writes\n",
                BACKOFF_SCANS, half, faults, (double) faults / half / BACKOFF_SCANS,
                s.age_unprotected_pages, s.age_wp_fault_ns / 1e6, others);
        /* The first scan protected every page: each hot one was written
         * once after it. Pages written between scans are the hot half and,
         * under a sanitizer, its shadow (as many again under TSan), which
         * the last scan left unprotected but for one in 8; the child's
         * other pages cost no more than without the hot writes, but for a
         * few it writes only then. */
        written = MAX((uint64_t) half, s.age_unprotected_pages * 8 / 7);
        ASSERT_GE(faults, half);
        ASSERT_LE(faults, (written + 64) * (3 + BACKOFF_SCANS / 8) + others);
        /* No eviction ran: every WP fault was an age scan's, and each
         * took some service time. */
        ASSERT_EQ(s.age_wp_faults - s0.age_wp_faults, faults);
        ASSERT_GT(s.age_wp_fault_ns, 0);
        ASSERT_GE(s.age_cost_ns, s.age_wp_fault_ns);

        /* Written since, or left unprotected: young, never taken. */
        (void) reclaim(e, ch.pid, 1);
        ASSERT_EQ(present(ch.pid, hot, half), half);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_stop(&ch);
        zsw_engine_free(e);
}

TEST(first_touches_are_not_refaults) {
        struct test_child ch = child_start(1);
        struct zsw_engine *e = engine_start(UINT32_MAX);
        struct zsw_target_stats s0, s1;
        uint64_t fresh_at;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, NULL));
        fresh_at = test_child_ask(&ch, 'm');
        /* The scan registers the new mapping: its first touches come to
         * us as zero-fill faults. */
        ASSERT_OK(zsw_engine_age_scan(e, ch.pid, NULL));
        s0 = stats(e, ch.pid);
        test_child_ask(&ch, 't');
        s1 = stats(e, ch.pid);
        ASSERT_GE(s1.zero_faults - s0.zero_faults, 256);
        ASSERT_EQ(s1.refaults, s0.refaults);
        ASSERT_EQ(present(ch.pid, fresh_at, 256), 256);

        /* Taken and touched again: now they are refaults. */
        (void) reclaim(e, ch.pid, 0);
        ASSERT_EQ(present(ch.pid, fresh_at, 256), 0);
        test_child_ask(&ch, 't');
        s0 = stats(e, ch.pid);
        ASSERT_GE(s0.refaults - s1.refaults, 256);
        ASSERT_EQ(test_child_ask(&ch, 'v'), 0);
        test_child_stop(&ch);
        zsw_engine_free(e);
}

/* The cost budget, on the age table alone: the budget's input is the
 * faults' count and service time, given here, not measured, so that the
 * verdict does not depend on the machine. The memory is the test's own,
 * write-protected with WP_ASYNC (the kernel lets a write through and
 * clears the protection itself; PAGEMAP_SCAN sees it written), which
 * needs no fault thread. */
#define BUDGET_PAGES 512u

TEST(cost_budget_leaves_written_pages_unprotected) {
        uint8_t *mem = mmap(NULL, BUDGET_PAGES * PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        struct zsw_range range = { (uint64_t) (uintptr_t) mem,
                                   (uint64_t) (uintptr_t) mem + BUDGET_PAGES * PAGE };
        /* Ten seconds of faults against a bucket of 1% of a minute: in
         * debt for as long as the test could take (a minute of the share
         * pays it back). */
        struct zsw_age_cost none = { 0, 0, 1 }, dear = { 1000, 10 * UINT64_C(1000000000), 1 };
        struct zsw_age_scan_stats st;
        struct zsw_age *a;
        int uffd, pagemap;

        ASSERT_TRUE(mem != MAP_FAILED);
        for (size_t i = 0; i < BUDGET_PAGES; i++)
                mem[i * PAGE] = 1;
        uffd = zsw_uffd_new(0);
        ASSERT_GE(uffd, 0);
        ASSERT_OK(zsw_uffd_api(uffd, UFFD_FEATURE_WP_ASYNC, NULL));
        ASSERT_OK(zsw_uffd_register(uffd, range.start, range.end - range.start,
                                    UFFDIO_REGISTER_MODE_WP, NULL));
        pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        ASSERT_GE(pagemap, 0);
        ASSERT_OK(zsw_age_new(&a));

        /* New pages are protected whatever the budget: each cost its
         * first touch already. */
        ASSERT_OK(zsw_age_scan(a, pagemap, uffd, &range, 1, &none, &st));
        ASSERT_EQ_U(st.present_pages, BUDGET_PAGES);
        ASSERT_EQ_U(st.protected_pages, BUDGET_PAGES);

        /* Written, and the faults cost more than the bucket holds: no
         * written page is protected again, the backoff's floor rises, and
         * every page stays young (nothing written is old). */
        for (size_t i = 0; i < BUDGET_PAGES; i++)
                mem[i * PAGE] = 2;
        ASSERT_OK(zsw_age_scan(a, pagemap, uffd, &range, 1, &dear, &st));
        ASSERT_EQ_U(st.protected_pages, 0);
        ASSERT_EQ_U(st.unprotected_pages, BUDGET_PAGES);
        ASSERT_EQ_U(st.rearm_floor, 1);
        ASSERT_EQ_U(zsw_age_count(a, 1), 0);

        /* No new faults, still in debt: left unprotected, they read as
         * written again, and stay young. */
        ASSERT_OK(zsw_age_scan(a, pagemap, uffd, &range, 1, &dear, &st));
        ASSERT_EQ_U(st.protected_pages, 0);
        ASSERT_EQ_U(st.unprotected_pages, BUDGET_PAGES);
        ASSERT_EQ_U(zsw_age_count(a, 1), 0);

        /* Without a budget the same table protects them again, as far as
         * the backoff lets it: the budget alone held them back. */
        ASSERT_OK(zsw_age_scan(a, pagemap, uffd, &range, 1, NULL, &st));
        ASSERT_GT(st.protected_pages, 0);
        ASSERT_EQ_U(st.protected_pages + st.unprotected_pages, BUDGET_PAGES);

        zsw_age_free(a);
        close(pagemap);
        close(uffd);
        ASSERT_EQ(munmap(mem, BUDGET_PAGES * PAGE), 0);
}

TEST(engine_scans_on_its_own) {
        struct test_child ch = child_start(1);
        struct zsw_engine *e = engine_start(20);
        struct zsw_target_stats s;

        ASSERT_OK(zsw_engine_attach(e, ch.pid, NULL));
        /* No scans before somebody asks for ages: the first reclaim with
         * a minimum age starts them (and finds nothing old yet). */
        sleep_ms(200);
        ASSERT_EQ(stats(e, ch.pid).age_scans, 0);
        ASSERT_EQ(reclaim(e, ch.pid, 60000).evicted_pages, 0);
        /* Progress, not timing: wait (up to a minute) for two scans. */
        for (unsigned i = 0; i < 600; i++) {
                s = stats(e, ch.pid);
                if (s.age_scans >= 2)
                        break;
                sleep_ms(100);
        }
        ASSERT_GE(s.age_scans, 2);
        ASSERT_GE(s.age_present_pages, npages);
        ASSERT_GT(s.age_scan_ns_total, 0);
        test_child_stop(&ch);
        zsw_engine_free(e);
}
