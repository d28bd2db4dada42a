/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Drives zswapd-test-target alone (no daemon): every command answers as
 * documented, its verification passes on untouched memory and, crucially,
 * fails when a page is corrupted from outside with process_vm_writev. The
 * integration tests rely on that verify to prove the daemon lost nothing.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "target-client.h"

TEST(verify_detects_outside_corruption) {
        struct target *t = target_start("--synthetic");
        const char *r = cmd_ok(t, "fill 4 10");
        uint64_t addr = field(r, "addr");
        char byte;

        ASSERT_EQ(field(r, "pages"), 1024);
        expect_verify(t, 1024, 0);
        peek(t->pid, addr + 77 * PAGE + 100, &byte, 1);
        byte ^= 1;
        poke(t->pid, addr + 77 * PAGE + 100, &byte, 1);
        r = cmd_ok(t, "verify");
        ASSERT_EQ(field(r, "bad"), 1);
        ASSERT_EQ(field(r, "first_bad"), 77);
        /* Rewriting the page through the target repairs it. */
        cmd_ok(t, "write 77 5");
        expect_verify(t, 1024, 0);
        ASSERT_EQ(strncmp(cmd(t, "write 5000 1"), "error", 5), 0);
        ASSERT_EQ(strncmp(cmd(t, "frobnicate"), "error", 5), 0);
        target_exit(t);
}

TEST(corpus_content_and_dontneed_reads_zero) {
        struct target *t = target_start(NULL);
        const char *r = cmd_ok(t, "fill 2 20");
        uint64_t addr = field(r, "addr");
        static char page[PAGE], zero[PAGE];

        expect_verify(t, 512, 0);
        cmd_ok(t, "dontneed 10 5");
        expect_verify(t, 512, 0);
        peek(t->pid, addr + 12 * PAGE, page, PAGE);
        ASSERT_MEMEQ(page, zero, PAGE);
        ASSERT_EQ(strncmp(cmd(t, "dontneed 510 5"), "error", 5), 0);
        target_exit(t);
}

TEST(threads_fork_mremap_pipe_munmap_exec) {
        struct target *t = target_start("--synthetic");
        uint64_t addr = field(cmd_ok(t, "fill 8"), "addr"), moved;
        const char *r;

        cmd_ok(t, "threads 3");
        for (int i = 0; i < 3; i++)
                expect_verify(t, 2048, 0);
        r = cmd_ok(t, "fork-verify");
        ASSERT_EQ(field(r, "good"), 2048);
        ASSERT_EQ(field(r, "bad"), 0);
        moved = field(cmd_ok(t, "mremap 0"), "addr");
        ASSERT_NE(moved, addr);
        expect_verify(t, 2048, 0);
        r = cmd_ok(t, "stop");
        ASSERT_GT(field(r, "writes"), 0);
        expect_verify(t, 2048, 0);

        cmd_ok(t, "pipe-read 3");
        expect_verify(t, 2048, 0);
        ASSERT_EQ(field(cmd_ok(t, "munmap-half"), "pages"), 1024);
        expect_verify(t, 1024, 0);
        ASSERT_GT(field(cmd_ok(t, "rss"), "rss_kb"), 4096);

        /* A fresh image: no buffer any more. */
        ASSERT_EQ(strncmp(cmd(t, "exec"), "ok ready pid=", 13), 0);
        ASSERT_EQ(strncmp(cmd(t, "verify"), "error", 5), 0);
        target_exit(t);
}
