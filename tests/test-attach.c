/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Attach and serve on real processes, case by case: zswapd-test-target
 * keeps a checksum of every page, the engine evicts its memory, and the
 * target then touches it in every way that matters (racing threads, fork,
 * mremap, munmap, its own MADV_DONTNEED, a read(2) into an evicted buffer,
 * exec, exit, as an unprivileged user) and verifies every byte. A third
 * party workload (stress-ng --vm with its own verification) is reclaimed
 * while it runs.
 */
#include <poll.h>
#include <sys/stat.h>

#include "engine.h"
#include "test.h"
#include "target-client.h"

static const struct zsw_log test_log = { .fn = test_log_stderr, .max_priority = LOG_INFO };

static struct zsw_engine *engine_start(unsigned prefetch) {
        struct zsw_engine_config cfg = { .prefetch_window = prefetch, .log = &test_log };
        struct zsw_engine *e;

        if (geteuid() != 0)
                TEST_SKIP("needs root for ptrace and userfaultfd");
        ASSERT_OK(zsw_engine_new(&cfg, &e));
        return e;
}

static uint64_t reclaim_all(struct zsw_engine *e, pid_t pid) {
        struct zsw_reclaim_result res = {};
        struct zsw_engine_error err = {};

        if (zsw_engine_reclaim(e, pid, UINT64_MAX, &res, &err) < 0)
                TEST_FAIL("reclaim of %d: %s", pid, err.message);
        return res.evicted_pages;
}

static struct target *attached_target(struct zsw_engine *e, const char *fill, uid_t uid) {
        struct target *t = target_start_as("--synthetic", uid);
        struct zsw_engine_error err = {};

        cmd_ok(t, fill);
        if (zsw_engine_attach(e, t->pid, &err) < 0)
                TEST_FAIL("attach: %s", err.message);
        return t;
}

/* Waits until the engine serves N targets: progress, not time (the
 * reaper looks four times a second, and at once on an exit it is told
 * of); the minute only bounds a reaper that never looks. */
static void wait_targets(struct zsw_engine *e, uint64_t n) {
        struct zsw_engine_stats s;

        for (int i = 0; i < 1200; i++) {
                ASSERT_OK(zsw_engine_get_stats(e, &s));
                if (s.targets == n)
                        break;
                usleep(50 * 1000);
        }
        ASSERT_EQ(s.targets, n);
}

static void wait_forgotten(struct zsw_engine *e) {
        struct zsw_engine_stats s;

        wait_targets(e, 0);
        ASSERT_OK(zsw_engine_get_stats(e, &s));
        ASSERT_EQ(s.stored_pages, 0);
}

TEST(writer_threads_race_eviction) {
        struct zsw_engine *e = engine_start(8);
        struct target *t = attached_target(e, "fill 64 10", 0);
        struct zsw_target_stats ts;
        uint64_t evicted = 0;

        cmd_ok(t, "threads 2");
        for (int i = 0; i < 8; i++)
                evicted += reclaim_all(e, t->pid);
        cmd_ok(t, "stop");
        ASSERT_GT(evicted, 0);
        ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &ts));
        fprintf(stderr, "evicted %" PRIu64 ", aborted by writes %" PRIu64 ", faults %" PRIu64 "\n",
                evicted, ts.evict_aborted, ts.faults);
        expect_verify(t, 64 * 256, 0);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(fork_after_eviction) {
        struct zsw_engine *e = engine_start(8);
        struct target *t = attached_target(e, "fill 16 10", 0);
        const char *r;

        ASSERT_GT(reclaim_all(e, t->pid), 16 * 256 / 2);
        r = cmd_ok(t, "fork-verify");
        ASSERT_EQ(field(r, "bad"), 0);
        ASSERT_EQ(field(r, "good"), 16 * 256);
        expect_verify(t, 16 * 256, 0);
        /* Evict again and fork again: the child reads through the clone. */
        ASSERT_GT(reclaim_all(e, t->pid), 0);
        r = cmd_ok(t, "fork-verify");
        ASSERT_EQ(field(r, "bad"), 0);
        /* The children exited, named by the reaper or not (one gone
         * before the reaper looked): only the parent is left. */
        wait_targets(e, 1);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(mremap_moves_entries) {
        struct zsw_engine *e = engine_start(0);
        struct target *t = attached_target(e, "fill 8 0", 0);

        ASSERT_GT(reclaim_all(e, t->pid), 0);
        cmd_ok(t, "mremap 0");
        expect_verify(t, 8 * 256, 0);
        ASSERT_GT(reclaim_all(e, t->pid), 0);
        cmd_ok(t, "mremap 0");
        ASSERT_OK(zsw_engine_detach(e, t->pid, NULL));
        expect_verify(t, 8 * 256, 0);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(munmap_and_dontneed_drop_entries) {
        struct zsw_engine *e = engine_start(0);
        struct target *t = attached_target(e, "fill 8 0", 0);
        struct zsw_target_stats before, after;

        /* Everything eligible is evicted, the target's heap and stack (and
         * a sanitizer's shadow) too: count what the munmap takes away. */
        ASSERT_EQ(reclaim_all(e, t->pid) >= 8 * 256, true);
        ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &before));
        cmd_ok(t, "munmap-half");
        ASSERT_OK(zsw_engine_get_target_stats(e, t->pid, &after));
        /* At least the unmapped half (a sanitizer's allocator may drop
         * pages of its own meanwhile). */
        ASSERT_GE(before.stored_pages - after.stored_pages, 8 * 256 / 2);
        /* The target's own DONTNEED: those pages must read as zeros now,
         * not as what we had stored. */
        cmd_ok(t, "dontneed 10 100");
        expect_verify(t, 8 * 256 / 2, 0);
        ASSERT_GT(reclaim_all(e, t->pid), 0);
        cmd_ok(t, "dontneed 0 300");
        expect_verify(t, 8 * 256 / 2, 0);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(kernel_mode_fault_through_pipe) {
        struct zsw_engine *e = engine_start(0);
        struct target *t = attached_target(e, "fill 4 0", 0);

        ASSERT_GT(reclaim_all(e, t->pid), 0);
        cmd_ok(t, "pipe-read 7");
        cmd_ok(t, "pipe-read 500");
        expect_verify(t, 4 * 256, 0);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(unprivileged_target) {
        struct zsw_engine *e = engine_start(8);
        struct target *t = attached_target(e, "fill 8 10", 65534);

        ASSERT_GT(reclaim_all(e, t->pid), 8 * 256 / 2);
        cmd_ok(t, "pipe-read 3");
        expect_verify(t, 8 * 256, 0);
        ASSERT_GT(reclaim_all(e, t->pid), 0);
        ASSERT_OK(zsw_engine_detach(e, t->pid, NULL));
        expect_verify(t, 8 * 256, 0);
        target_exit(t);
        zsw_engine_free(e);
}

TEST(exec_and_exit_free_everything) {
        struct zsw_engine *e = engine_start(0);
        struct target *t = attached_target(e, "fill 8 0", 0);
        const char *r;

        ASSERT_GT(reclaim_all(e, t->pid), 0);
        r = cmd(t, "exec");
        ASSERT_EQ(strncmp(r, "ok ready", 8), 0);
        wait_forgotten(e);
        target_exit(t);

        t = attached_target(e, "fill 8 0", 0);
        ASSERT_GT(reclaim_all(e, t->pid), 0);
        target_exit(t);
        wait_forgotten(e);
        zsw_engine_free(e);
}

TEST(detach_restores_bytes_and_resident_size) {
        struct zsw_engine *e = engine_start(0);
        struct target *t = attached_target(e, "fill 32 0", 0);
        unsigned long long before, evicted, after;

        before = field(cmd_ok(t, "rss"), "rss_kb");
        ASSERT_GT(reclaim_all(e, t->pid), 32 * 256 * 9 / 10);
        evicted = field(cmd_ok(t, "rss"), "rss_kb");
        ASSERT_LT(evicted, before / 4);
        ASSERT_OK(zsw_engine_detach(e, t->pid, NULL));
        after = field(cmd_ok(t, "rss"), "rss_kb");
        ASSERT_GE(after, before * 95 / 100);
        expect_verify(t, 32 * 256, 0);
        target_exit(t);
        zsw_engine_free(e);
}

/* The children of pid, the stress-ng workers. */
static size_t children_of(pid_t pid, pid_t *out, size_t max) {
        char path[64];
        size_t n = 0;
        FILE *f;
        int c;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
        f = fopen(path, "re");
        if (!f)
                return 0;
        while (n < max && fscanf(f, "%d", &c) == 1)
                out[n++] = c;
        fclose(f);
        return n;
}

TEST(stress_ng_vm_verifies_under_repeated_reclaim) {
        const char *stress = "/usr/bin/stress-ng";
        struct zsw_engine *e;
        pid_t pid, workers[8];
        size_t n = 0;
        uint64_t evicted = 0;
        int status;

        if (access(stress, X_OK) < 0)
                TEST_SKIP("stress-ng is not installed (apt-get install stress-ng)");
        e = engine_start(8);
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execl(stress, stress, "--vm", "2", "--vm-bytes", "64M", "--vm-keep", "--verify",
                      "--timeout", "12s", "--quiet", (char *) NULL);
                _exit(127);
        }
        /* stress-ng's vm workers fork the process that holds the memory:
         * attach to the grandchildren. */
        for (int i = 0; i < 100 && n < 2; i++) {
                pid_t kids[8];
                size_t k;

                usleep(50 * 1000);
                k = children_of(pid, kids, ARRAY_SIZE(kids));
                n = 0;
                for (size_t j = 0; j < k; j++)
                        n += children_of(kids[j], workers + n, ARRAY_SIZE(workers) - n);
        }
        ASSERT_GE(n, 1);
        usleep(500 * 1000);
        for (size_t i = 0; i < n; i++)
                ASSERT_OK(zsw_engine_attach(e, workers[i], NULL));
        for (int round = 0; round < 20; round++) {
                for (size_t i = 0; i < n; i++) {
                        struct zsw_reclaim_result res = {};

                        if (zsw_engine_reclaim(e, workers[i], UINT64_MAX, &res, NULL) >= 0)
                                evicted += res.evicted_pages;
                }
                usleep(200 * 1000);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        fprintf(stderr, "stress-ng exited %d after %" PRIu64 " pages were evicted under it\n",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1, evicted);
        fprintf(stderr, "%zu workers attached\n", n);
        /* stress-ng exits non-zero when its verification found a bad byte. */
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_GT(evicted, 0);
        zsw_engine_free(e);
}

TEST(target_killed_in_the_middle_of_faults) {
        struct zsw_engine *e = engine_start(8);
        struct target *t = attached_target(e, "fill 64 0", 0);
        int status;

        ASSERT_GT(reclaim_all(e, t->pid), 0);
        cmd_ok(t, "threads 2");
        /* Its threads fault pages back in as fast as we serve them; kill it
         * under our feet, in the middle of faults and of a reclaim. */
        fputs("verify\n", t->in);
        fflush(t->in);
        usleep(20 * 1000);
        ASSERT_OK(kill(t->pid, SIGKILL));
        zsw_engine_reclaim(e, t->pid, UINT64_MAX, NULL, NULL);
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFSIGNALED(status));
        wait_forgotten(e);
        fclose(t->in);
        fclose(t->out);
        free(t);
        zsw_engine_free(e);
}
