/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the tests of zswapd's binaries share (test-daemon, test-lifecycle,
 * test-reexec; test-control for its socket): children that die with the
 * test, a program run with its output captured and a deadline,
 * connections to a control socket.
 * Header-only, like test-cgroups.h.
 */
#pragma once

#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "util.h"

/* A program that takes longer than this has hung (the daemon's own
 * deadlines are a few seconds). */
#define TEST_GUARD_MS 60000

/* The test process, set first thing in main(). */
static pid_t test_pid;

/* Prints what every descendant of pid waits in: each thread's name, wait
 * channel and kernel stack. */
static inline void dump_waits(pid_t pid, int depth) {
        DIR *dir = opendir("/proc");
        struct dirent *de;

        if (!dir || depth > 8)
                goto out;
        while ((de = readdir(dir))) {
                char path[320], line[512];
                pid_t child = atoi(de->d_name), ppid = 0;
                DIR *tasks;
                FILE *f;

                if (child <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/stat", child);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(line, sizeof(line), f) && strrchr(line, ')'))
                        sscanf(strrchr(line, ')') + 2, "%*c %d", &ppid);
                fclose(f);
                if (ppid != pid)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task", child);
                tasks = opendir(path);
                while (tasks && (de = readdir(tasks))) {
                        static const char *const files[] = { "comm", "wchan", "stack" };

                        if (de->d_name[0] == '.')
                                continue;
                        fprintf(stderr, "--- process %d, thread %s:\n", child, de->d_name);
                        for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
                                snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", child,
                                         de->d_name, files[i]);
                                f = fopen(path, "re");
                                while (f && fgets(line, sizeof(line), f))
                                        fprintf(stderr, "  %s", line);
                                if (f)
                                        fclose(f);
                                fputc('\n', stderr);
                        }
                }
                if (tasks)
                        closedir(tasks);
                dump_waits(child, depth + 1);
        }
out:
        if (dir)
                closedir(dir);
}

/* The log of the daemon under test, printed when the guard fires. */
static const char *guard_log;

static inline void guard_fired(int sig) {
        char line[512];
        FILE *f;

        (void) sig;
        fprintf(stderr, "the test hangs; what its processes wait in:\n");
        dump_waits(test_pid, 0);
        f = guard_log ? fopen(guard_log, "re") : NULL;
        if (f) {
                fprintf(stderr, "--- %s:\n", guard_log);
                while (fgets(line, sizeof(line), f))
                        fputs(line, stderr);
                fclose(f);
        }
        abort();
}

/* A case that has not ended after seconds fails, showing what hangs
 * (before meson's timeout, which shows nothing). The test hangs for good
 * by then: nothing here needs to be safe against the code it interrupts. */
static inline void test_guard(unsigned seconds) {
        signal(SIGALRM, guard_fired);
        alarm(seconds);
}

/* In a child of the test: nothing outlives a test that aborts, even one
 * that aborted before this child got here. */
static inline void child_setup(void) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != test_pid)
                _exit(97);
}

/* A seekable file's whole content (a memfd's, a log's), NUL-terminated. */
static inline char *fd_slurp(int fd) {
        off_t len = lseek(fd, 0, SEEK_END);
        char *s = malloc(len + 1);

        ASSERT_TRUE(s);
        ASSERT_EQ(pread(fd, s, len, 0), len);
        s[len] = 0;
        return s;
}

/* Waits for pid for up to ms; false (and pid killed) if it did not end. */
static inline bool wait_guarded(pid_t pid, int ms, int *ret_status) {
        for (int i = 0; i < ms; i += 10) {
                pid_t p = waitpid(pid, ret_status, WNOHANG);

                ASSERT_GE(p, 0);
                if (p == pid)
                        return true;
                usleep(10000);
        }
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, ret_status, 0), pid);
        return false;
}

/* Runs argv as uid (0, or another that setresuid() accepts); returns its
 * exit status, with stdout and stderr in *out and *err when those are not
 * NULL. A program that does not end within TEST_GUARD_MS fails the test:
 * a zswapctl that waits for good means a daemon that hangs. */
static inline int run_as(uid_t uid, char **out, char **err, const char *const argv[]) {
        int ofd = memfd_create("out", MFD_CLOEXEC), efd = memfd_create("err", MFD_CLOEXEC);
        int status;
        pid_t pid;

        ASSERT_GE(ofd, 0);
        ASSERT_GE(efd, 0);
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                child_setup();
                dup2(ofd, STDOUT_FILENO);
                dup2(efd, STDERR_FILENO);
                if (uid != 0 && (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
                        _exit(99);
                execv(argv[0], (char *const *) argv);
                _exit(98);
        }
        if (!wait_guarded(pid, TEST_GUARD_MS, &status)) {
                char cmd[512] = "";

                for (size_t i = 0; argv[i] && strlen(cmd) < sizeof(cmd) / 2; i++)
                        snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), " %s", argv[i]);
                TEST_FAIL("%s did not return within %d s: the daemon hangs", cmd + 1,
                          TEST_GUARD_MS / 1000);
        }
        ASSERT_TRUE(WIFEXITED(status));
        if (out)
                *out = fd_slurp(ofd);
        if (err)
                *err = fd_slurp(efd);
        close(ofd);
        close(efd);
        return WEXITSTATUS(status);
}

/* Whether something listens on path. Never waits: a listener that does
 * not accept (a rescue task, a daemon not serving yet) has a full backlog
 * after a few calls, where a blocking connect() would wait for good. */
static inline bool can_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        bool ok;

        ASSERT_GE(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        ok = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0 || errno == EAGAIN;
        close(fd);
        return ok;
}

static inline int connect_seqpacket(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

        ASSERT_GE(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)));
        return fd;
}

/* Runs zswapctl (the binary at zswapctl) with -s sock and args, as run_as()
 * does for root. */
static inline int run_zswapctl(const char *zswapctl, const char *sock, char **out, char **err,
                               const char *const args[]) {
        const char *argv[16] = { zswapctl, "-s", sock };
        size_t n = 3;

        for (size_t i = 0; args[i]; i++) {
                ASSERT_LT(n, sizeof(argv) / sizeof(argv[0]) - 1);
                argv[n++] = args[i];
        }
        return run_as(0, out, err, argv);
}
