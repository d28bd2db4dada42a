/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The writeback tier inside the engine, on a real process: a pool limit far
 * below what zswapd-test-target fills, so most of its evicted pages go to
 * the swapfile; the target then verifies every page's checksum, its faults
 * served from disk, in itself and in a fork child reading through the
 * clone; detach puts the rest back.
 */
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "engine.h"
#include "test.h"
#include "target-client.h"
#include "test-disk.h"

static _Atomic unsigned sigbus_logged;

static void log_stderr(void *userdata, int priority, const char *file, int line, const char *func,
                       const char *format, va_list ap) {
        if (priority > LOG_WARNING)
                return;
        if (priority <= LOG_ERR && strstr(format, "SIGBUS"))
                atomic_fetch_add(&sigbus_logged, 1);
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

        /* Every page back through faults, byte for byte; detach puts
         * the rest back, and no sector is left allocated. */
        expect_verify(t, pages, 0);
        ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
        ASSERT_GT(ts.disk_reads, 0);
        ASSERT_OK(zsw_engine_detach(e, t->pid, NULL));
        expect_verify(t, pages, 0);
        ASSERT_OK(zsw_engine_get_stats(e, &es));
        ASSERT_EQ_U(es.stored_pages, 0);
        ASSERT_EQ_U(es.disk_pages, 0);
        ASSERT_EQ_U(es.disk_bytes_in_use, 0);

        /* Attached again: a fork child reads through the clone (shared
         * loads of disk entries), then the target itself. */
        if (zsw_engine_attach(e, t->pid, &err) < 0)
                TEST_FAIL("attach: %s", err.message);
        ts = (struct zsw_target_stats) {};
        for (int i = 0; i < 200 && ts.disk_pages < pages / 2; i++) {
                struct zsw_reclaim_result res;

                if (zsw_engine_reclaim(e, t->pid, UINT64_MAX, &res, &err) < 0)
                        TEST_FAIL("reclaim: %s", err.message);
                ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
                if (res.refused_pages > 0)
                        usleep(10 * 1000);
        }
        ASSERT_GE(ts.disk_pages, pages / 2);
        r = cmd_ok(t, "fork-verify");
        ASSERT_EQ(field(r, "bad"), 0);
        ASSERT_EQ(field(r, "good"), pages);
        expect_verify(t, pages, 0);
        target_exit(t);
        zsw_engine_free(e);
        ASSERT_OK(rmdir(dir));
}

/*
 * The disk dies under written-back pages: the faulting thread gets SIGBUS,
 * as on a kernel swap read error, never other bytes, and the log says so.
 * (The page is poisoned: SIGBUS for a user access, EFAULT for the kernel's
 * own, never a fault retried forever.)
 */
TEST(read_error_kills_with_sigbus) {
        char dir[] = "/var/tmp/test-engine-writeback-XXXXXX";
        struct zsw_engine_config cfg = {
                .pool_limit_bytes = 256 << 10,
                .writeback = true,
                .swapfile_max_bytes = 32 << 20,
                .log = &test_log,
        };
        struct zsw_engine_error err = {};
        struct zsw_target_stats ts = {};
        struct zsw_engine *e;
        struct target *t;
        int fd;

        if (geteuid() != 0)
                TEST_SKIP("needs root for ptrace and userfaultfd");
        /* Before the engine starts threads: unshare needs one thread. */
        test_private_mounts();
        ASSERT_TRUE(mkdtemp(dir));
        if (!test_ext4_on_loop(dir)) {
                rmdir(dir);
                TEST_SKIP("no loop device with ext4 here");
        }
        cfg.swapfile = dir;
        ASSERT_OK(zsw_engine_new(&cfg, &e));
        sanitizers_leave_sigbus();
        t = target_start("--synthetic");
        cmd_ok(t, "fill 8 0");
        if (zsw_engine_attach(e, t->pid, &err) < 0)
                TEST_FAIL("attach: %s", err.message);
        for (int i = 0; i < 200 && ts.disk_pages < 8 * 256 / 2; i++) {
                struct zsw_reclaim_result res;

                if (zsw_engine_reclaim(e, t->pid, UINT64_MAX, &res, &err) < 0)
                        TEST_FAIL("reclaim: %s", err.message);
                ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
                if (res.refused_pages > 0)
                        usleep(10 * 1000);
        }
        ASSERT_GE(ts.disk_pages, 8 * 256 / 2);

        /* The target's own memory (stdin's buffer, a sanitizer's
         * state) may be on disk too: it takes the next command, and is
         * back in read(2), while the disk still reads, so that only its
         * walk of the buffer, a user access, meets the dead disk. */
        ASSERT_TRUE(strncmp(cmd_ok(t, "verify-on-byte"), "ok waiting", 10) == 0);
        wait_reading_stdin(t->pid);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        test_ext4_shutdown(fd);
        close(fd);

        /* A sanitizer's own thread may meet the dead disk first: then the
         * target is gone already, of the same SIGBUS. */
        expect_sigbus_death(t);
        ASSERT_GT(atomic_load(&sigbus_logged), 0);
        zsw_engine_free(e);
        ASSERT_OK(umount(dir));
        ASSERT_OK(rmdir(dir));
}
