/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The test side of zswapd-test-target (tests/target.c): start it, send it
 * commands, read its answers. Included by each test that drives it; needs
 * test.h first.
 */
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define PAGE 4096ul

struct target {
        pid_t pid;
        FILE *in, *out;
        char line[512];
};

/* Starts the target; uid > 0 runs it as that user (and group). */
static _unused_ struct target *target_start_as(const char *extra, uid_t uid) {
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
                if (uid > 0 && (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
                        _exit(126);
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
_printf_(2, 3) static _unused_ const char *cmd(struct target *t, const char *fmt, ...) {
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

static _unused_ const char *cmd_ok(struct target *t, const char *command) {
        const char *r = cmd(t, "%s", command);

        if (strncmp(r, "ok", 2) != 0)
                TEST_FAIL("%s: %s", command, r);
        return r;
}

/* The value of key=... in an answer. */
static _unused_ unsigned long long field(const char *line, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), " %s=", key);
        p = strstr(line, pat);
        if (!p)
                TEST_FAIL("no %s in \"%s\"", key, line);
        return strtoull(p + strlen(pat), NULL, 0);
}

static _unused_ void expect_verify(struct target *t, unsigned long long good,
                                   unsigned long long bad) {
        const char *r = cmd_ok(t, "verify");

        ASSERT_EQ_U(field(r, "good"), good);
        ASSERT_EQ_U(field(r, "bad"), bad);
}

static _unused_ void target_exit(struct target *t) {
        int status;

        cmd_ok(t, "exit");
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        fclose(t->in);
        fclose(t->out);
        free(t);
}

/* Sanitizers catch SIGBUS to report it and abort: the target (built
 * with them too) must die of it as a plain program does. */
static _unused_ void sanitizers_leave_sigbus(void) {
        static const char *const vars[] = { "ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS" };

        for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
                const char *old = getenv(vars[i]);
                char v[1024];

                snprintf(v, sizeof(v), "%s%shandle_sigbus=0", old ?: "", old && *old ? ":" : "");
                ASSERT_OK(setenv(vars[i], v, 1));
        }
}

/* Waits until pid's (only) thread sits in read(2) on its stdin. */
static _unused_ void wait_reading_stdin(pid_t pid) {
        char path[64], line[256] = "";

        snprintf(path, sizeof(path), "/proc/%d/syscall", (int) pid);
        for (int i = 0; i < 60 * 1000; i++) {
                FILE *f = fopen(path, "re");
                long nr = -1;
                unsigned long fd = 1;
                bool reading;

                ASSERT_TRUE(f);
                reading = fgets(line, sizeof(line), f) &&
                          sscanf(line, "%ld 0x%lx", &nr, &fd) == 2 && nr == SYS_read && fd == 0;
                fclose(f);
                if (reading)
                        return;
                usleep(1000);
        }
        TEST_FAIL("process %d never waited in read(0, ...): %s", (int) pid, line);
}

/* Sends the byte a "verify-on-byte" waits for and expects t to die of
 * SIGBUS without an answer (its verify never saw a page, right or
 * wrong); frees t. */
static _unused_ void expect_sigbus_death(struct target *t) {
        int status;

        signal(SIGPIPE, SIG_IGN);
        ASSERT_TRUE(write(fileno(t->in), "x", 1) == 1 || errno == EPIPE);
        ASSERT_TRUE(fgets(t->line, sizeof(t->line), t->out) == NULL);
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFSIGNALED(status));
        ASSERT_EQ(WTERMSIG(status), SIGBUS);
        fclose(t->in);
        fclose(t->out);
        free(t);
}

static _unused_ void poke(pid_t pid, uint64_t addr, const void *data, size_t len) {
        struct iovec l = { (void *) data, len }, r = { (void *) (uintptr_t) addr, len };

        ASSERT_EQ(process_vm_writev(pid, &l, 1, &r, 1, 0), (ssize_t) len);
}

static _unused_ void peek(pid_t pid, uint64_t addr, void *data, size_t len) {
        struct iovec l = { data, len }, r = { (void *) (uintptr_t) addr, len };

        ASSERT_EQ(process_vm_readv(pid, &l, 1, &r, 1, 0), (ssize_t) len);
}

static _unused_ struct target *target_start(const char *extra) {
        return target_start_as(extra, 0);
}
