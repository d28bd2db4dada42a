/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The writeback tier inside the engine, on a real process: a pool limit far
 * below what zswapd-test-target fills, so most of its evicted pages go to
 * the swapfile; the target then verifies every page's checksum, its faults
 * served from disk, in itself and in a fork child reading through the
 * clone; detach puts the rest back.
 */
#include <sys/stat.h>

#include "engine.h"
#include "test.h"
#include "target-client.h"

static void log_stderr(void *userdata, int priority, const char *file, int line,
                       const char *func, const char *format, va_list ap) {
        if (priority > LOG_WARNING)
                return;
        fprintf(stderr, "<%d> %s:%d: ", priority, file, line);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
}

static const struct zsw_log test_log = { .fn = log_stderr, .max_priority = LOG_DEBUG };

TEST(target_pages_through_the_swapfile) {
        char dir[] = "/var/tmp/test-engine-writeback-XXXXXX";
        struct zsw_engine_config cfg = {
                .prefetch_window = 8,
                .pool_limit_bytes = 1 << 20,
                .writeback = true,
                .swapfile_max_bytes = 256 << 20,
                .log = &test_log,
        };
        const uint64_t pages = 32 * 256;
        struct zsw_engine_error err = {};
        struct zsw_target_stats ts = {};
        struct zsw_engine_stats es;
        struct zsw_engine *e;
        struct target *t;
        const char *r;

        if (geteuid() != 0)
                TEST_SKIP("needs root for ptrace and userfaultfd");
        ASSERT_TRUE(mkdtemp(dir));
        cfg.swapfile = dir;
        ASSERT_OK(zsw_engine_new(&cfg, &e));
        t = target_start("--synthetic");
        cmd_ok(t, "fill 32 10");
        if (zsw_engine_attach(e, t->pid, &err) < 0)
                TEST_FAIL("attach: %s", err.message);

        /* Refused at the limit, the rest of a round stays in the target:
         * reclaim again while the shrinker makes room. */
        for (int i = 0; i < 200 && ts.stored_pages < pages * 9 / 10; i++) {
                struct zsw_reclaim_result res;

                if (zsw_engine_reclaim(e, t->pid, UINT64_MAX, &res, &err) < 0)
                        TEST_FAIL("reclaim: %s", err.message);
                ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
                if (res.refused_pages > 0)
                        usleep(10 * 1000);
        }
        ASSERT_GE(ts.stored_pages, pages * 9 / 10);
        ASSERT_GT(ts.disk_pages, pages / 2);
        ASSERT_GT(ts.refused_pool_limit, 0);
        ASSERT_OK(zsw_engine_get_stats(e, &es));
        ASSERT_GT(es.pool_limit_hit, 0);
        ASSERT_GT(es.shrink_wakeups, 0);
        ASSERT_GE(es.written_back_pages, ts.disk_pages);
        ASSERT_GE(es.written_back_pages, 16 * es.write_requests);
        ASSERT_GT(es.disk_bytes_in_use, 0);

        /* A fork child reads through the clone first (shared loads), then
         * the target itself takes its pages back. */
        r = cmd_ok(t, "fork-verify");
        ASSERT_EQ(field(r, "bad"), 0);
        ASSERT_EQ(field(r, "good"), pages);
        expect_verify(t, pages, 0);
        ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
        ASSERT_GT(ts.disk_reads, 0);
        ASSERT_OK(zsw_engine_detach(e, t->pid, NULL));
        expect_verify(t, pages, 0);
        ASSERT_OK(zsw_engine_get_stats(e, &es));
        ASSERT_EQ_U(es.disk_pages, 0);
        ASSERT_EQ_U(es.disk_bytes_in_use, 0);
        target_exit(t);
        zsw_engine_free(e);
        ASSERT_OK(rmdir(dir));
}
