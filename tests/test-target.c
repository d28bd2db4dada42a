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
#include "util.h"

#define PAGE 4096ul

struct target {
        pid_t pid;
        FILE *in, *out;
        char line[512];
};

static struct target *target_start(const char *extra) {
        const char *path = getenv("ZSWAPD_TEST_TARGET");
        struct target *t = calloc(1, sizeof(*t));
        int to[2], from[2];

        if (!path)
                TEST_SKIP("ZSWAPD_TEST_TARGET not set (run under meson test)");
        ASSERT_TRUE(t);
        ASSERT_OK(pipe2(to, O_CLOEXEC));
        ASSERT_OK(pipe2(from, O_CLOEXEC));
        t->pid = fork();
        ASSERT_GE(t->pid, 0);
        if (t->pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (dup2(to[0], 0) < 0 || dup2(from[1], 1) < 0)
                        _exit(127);
                execl(path, path, "--seed", "42", extra, (char *) NULL);
                _exit(127);
        }
        close(to[0]);
        close(from[1]);
        t->in = fdopen(to[1], "we");
        t->out = fdopen(from[0], "re");
        ASSERT_TRUE(t->in && t->out);
        ASSERT_TRUE(fgets(t->line, sizeof(t->line), t->out));
        ASSERT_EQ(strncmp(t->line, "ok ready pid=", 13), 0);
        return t;
}

/* Sends one command and returns its one-line answer. */
_printf_(2, 3) static const char *cmd(struct target *t, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vfprintf(t->in, fmt, ap);
        va_end(ap);
        fputc('\n', t->in);
        fflush(t->in);
        ASSERT_TRUE(fgets(t->line, sizeof(t->line), t->out));
        t->line[strcspn(t->line, "\n")] = 0;
        return t->line;
}

static const char *cmd_ok(struct target *t, const char *command) {
        const char *r = cmd(t, "%s", command);

        if (strncmp(r, "ok", 2) != 0)
                TEST_FAIL("%s: %s", command, r);
        return r;
}

/* The value of key=... in an answer. */
static unsigned long long field(const char *line, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), " %s=", key);
        p = strstr(line, pat);
        if (!p)
                TEST_FAIL("no %s in \"%s\"", key, line);
        return strtoull(p + strlen(pat), NULL, 0);
}

static void expect_verify(struct target *t, unsigned long long good, unsigned long long bad) {
        const char *r = cmd_ok(t, "verify");

        ASSERT_EQ_U(field(r, "good"), good);
        ASSERT_EQ_U(field(r, "bad"), bad);
}

static void target_exit(struct target *t) {
        int status;

        cmd_ok(t, "exit");
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        fclose(t->in);
        fclose(t->out);
        free(t);
}

static void poke(pid_t pid, uint64_t addr, const void *data, size_t len) {
        struct iovec l = { (void *) data, len }, r = { (void *) (uintptr_t) addr, len };

        ASSERT_EQ(process_vm_writev(pid, &l, 1, &r, 1, 0), (ssize_t) len);
}

static void peek(pid_t pid, uint64_t addr, void *data, size_t len) {
        struct iovec l = { data, len }, r = { (void *) (uintptr_t) addr, len };

        ASSERT_EQ(process_vm_readv(pid, &l, 1, &r, 1, 0), (ssize_t) len);
}

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
