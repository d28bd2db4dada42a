/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What the real zswapd (first argument) and zswapctl (second) do when a
 * target does not cooperate: a process that cannot be stopped for ptrace,
 * one that cannot take its pages back when zswapd stops, an unprivileged
 * target while zswapd runs in a network namespace of its own, and clients
 * that hold connections open. Every request made of a daemon that may
 * hang is run under a guard: a hang fails the test instead of blocking it.
 */
#define TEST_NO_MAIN
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/userfaultfd.h>

#include "test.h"
#include "test-cgroups.h"
#include "test-procs.h"
#include "util.h"

#define NOBODY 65534
#define TARGET_SIZE (16u << 20)

static const char *zswapd_path, *zswapctl_path, *frozen_path;

/* Runs zswapctl ARGS; its exit status, output in *out and *err. A zswapctl
 * that does not return within TEST_GUARD_MS fails the test. */
static int ctl(const char *sock, char **out, char **err, const char *const args[]) {
        return run_zswapctl(zswapctl_path, sock, out, err, args);
}

#define CTL(sock, out, err, ...) ctl(sock, out, err, (const char *const[]) { __VA_ARGS__, NULL })

/* ---- the daemon -------------------------------------------------------------- */

struct daemon {
        pid_t pid;
        char dir[64], sock[100], log[128];
};

/* Starts zswapd with an empty configuration, in a network namespace of
 * its own with netns. */
static void daemon_start(struct daemon *d, bool netns) {
        char conf[128];
        int status;

        snprintf(d->dir, sizeof(d->dir), "/tmp/zswapd-test.XXXXXX");
        ASSERT_TRUE(mkdtemp(d->dir));
        ASSERT_OK(chmod(d->dir, 0755));
        snprintf(d->sock, sizeof(d->sock), "%s/ctl.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        guard_log = d->log;
        snprintf(conf, sizeof(conf), "%s/zswapd.conf", d->dir);
        ASSERT_OK(close(open(conf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644)));
        d->pid = fork();
        ASSERT_GE(d->pid, 0);
        if (d->pid == 0) {
                int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                child_setup();
                dup2(fd, STDERR_FILENO);
                if (netns && unshare(CLONE_NEWNET) < 0)
                        _exit(96);
                execl(zswapd_path, zswapd_path, "--socket", d->sock, "--config", d->dir, NULL);
                _exit(98);
        }
        for (;;) {
                if (waitpid(d->pid, &status, WNOHANG) == d->pid)
                        TEST_FAIL("zswapd exited with status %d at start-up; see %s", status,
                                  d->log);
                if (can_connect(d->sock))
                        return;
                usleep(10000);
        }
}

static char *daemon_log(const struct daemon *d) {
        int fd = open(d->log, O_RDONLY | O_CLOEXEC);
        char *s;

        ASSERT_GE(fd, 0);
        s = fd_slurp(fd);
        close(fd);
        return s;
}

/* SIGTERM; the exit status, which must come within TEST_GUARD_MS. */
static int daemon_stop(struct daemon *d) {
        int status;

        ASSERT_OK(kill(d->pid, SIGTERM));
        if (!wait_guarded(d->pid, TEST_GUARD_MS, &status))
                TEST_FAIL("zswapd did not exit after SIGTERM; see %s", d->log);
        d->pid = 0;
        ASSERT_TRUE(WIFEXITED(status));
        return WEXITSTATUS(status);
}

static void daemon_cleanup(struct daemon *d) {
        char cmd[128];

        if (d->pid > 0)
                ASSERT_EQ(daemon_stop(d), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
        ASSERT_EQ(system(cmd), 0);
}

/* ---- targets ------------------------------------------------------------------ */

/* The value of "key" in /proc/PID/file, or its first line with key NULL. */
static char *proc_field(pid_t pid, const char *file, const char *key) {
        char path[384], line[256];
        char *v = NULL;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
        f = fopen(path, "re");
        if (!f)
                return NULL;
        while (!v && fgets(line, sizeof(line), f)) {
                const char *p = line;

                if (key && strncmp(line, key, strlen(key)) != 0)
                        continue;
                p += key ? strlen(key) : 0;
                p += strspn(p, " \t");
                line[strcspn(line, "\n")] = 0;
                v = strdup(p);
        }
        fclose(f);
        return v;
}

/* zswapd-test-frozen, driven over its stdin and stdout. */
struct frozen {
        pid_t pid;
        FILE *in, *out;
        int uffd;
        unsigned long page;
};

static void frozen_start(struct frozen *f, bool thread) {
        int in[2], out[2];
        char line[256];

        ASSERT_OK(pipe2(in, O_CLOEXEC));
        ASSERT_OK(pipe2(out, O_CLOEXEC));
        f->pid = fork();
        ASSERT_GE(f->pid, 0);
        if (f->pid == 0) {
                child_setup();
                dup2(in[0], STDIN_FILENO);
                dup2(out[1], STDOUT_FILENO);
                execl(frozen_path, frozen_path, thread ? "--thread" : NULL, NULL);
                _exit(98);
        }
        close(in[0]);
        close(out[1]);
        f->in = fdopen(in[1], "w");
        f->out = fdopen(out[0], "r");
        ASSERT_TRUE(f->in && f->out);
        ASSERT_TRUE(fgets(line, sizeof(line), f->out));
        ASSERT_EQ(sscanf(line, "ok ready pid=%*d uffd=%d page=%lx", &f->uffd, &f->page), 2);
        /* It is frozen once a thread of it waits on its page. */
        for (int i = 0;; i++) {
                char path[300];
                struct dirent *de;
                bool frozen = false;
                DIR *d;

                snprintf(path, sizeof(path), "/proc/%d/task", f->pid);
                d = opendir(path);
                ASSERT_TRUE(d);
                while (!frozen && (de = readdir(d))) {
                        _cleanup_free_ char *w = NULL;

                        if (de->d_name[0] == '.')
                                continue;
                        snprintf(path, sizeof(path), "task/%s/wchan", de->d_name);
                        w = proc_field(f->pid, path, NULL);
                        frozen = w && strcmp(w, "handle_userfault") == 0;
                }
                closedir(d);
                if (frozen)
                        break;
                if (i == 6000)
                        TEST_FAIL("zswapd-test-frozen %d never waited on its page", f->pid);
                usleep(10000);
        }
}

static char *frozen_say(struct frozen *f, const char *cmd) {
        char line[256];

        if (cmd) {
                ASSERT_GE(fprintf(f->in, "%s\n", cmd), 0);
                ASSERT_EQ(fflush(f->in), 0);
        }
        ASSERT_TRUE(fgets(line, sizeof(line), f->out));
        line[strcspn(line, "\n")] = 0;
        return strdup(line);
}

/* Resolves its page as a userfaultfd handler would: the read(2) then
 * completes with what we put there. */
static void frozen_thaw(struct frozen *f) {
        int pidfd = (int) syscall(SYS_pidfd_open, f->pid, 0), uffd;
        static char src[4096] __attribute__((aligned(4096))) = "thawed";
        struct uffdio_copy copy = { .dst = f->page, .src = (uintptr_t) src, .len = sizeof(src) };

        ASSERT_GE(pidfd, 0);
        uffd = (int) syscall(SYS_pidfd_getfd, pidfd, f->uffd, 0);
        ASSERT_GE(uffd, 0);
        ASSERT_OK(ioctl(uffd, UFFDIO_COPY, &copy));
        close(uffd);
        close(pidfd);
}

static void frozen_exit(struct frozen *f) {
        _cleanup_free_ char *v = frozen_say(f, "verify");
        int status;

        ASSERT_STREQ(v, "ok verified");
        ASSERT_GE(fprintf(f->in, "exit\n"), 0);
        fclose(f->in);
        fclose(f->out);
        ASSERT_EQ(waitpid(f->pid, &status, 0), f->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Neither traced nor stopped, its frozen thread still asleep in its fault:
 * as it was before zswapd tried. */
static void assert_untouched(pid_t pid) {
        _cleanup_free_ char *tracer = proc_field(pid, "status", "TracerPid:");
        _cleanup_free_ char *state = proc_field(pid, "status", "State:");

        ASSERT_STREQ(tracer, "0");
        ASSERT_TRUE(state && state[0] == 'S');
}

static void pid_str(pid_t pid, char buf[static 16]) {
        snprintf(buf, 16, "%d", pid);
}

TEST(frozen_target_is_refused_and_left_as_it_was) {
        _cleanup_free_ char *out = NULL, *err = NULL, *read_line = NULL;
        struct frozen f;
        struct daemon d;
        char pid[16];

        daemon_start(&d, false);
        frozen_start(&f, false);
        pid_str(f.pid, pid);

        /* Its only thread cannot stop: a clear refusal, not a hang. */
        ASSERT_NE(CTL(d.sock, &out, &err, "attach", pid), 0);
        fprintf(stderr, "zswapctl said: %s", err);
        ASSERT_TRUE(strstr(err, pid));
        ASSERT_TRUE(strstr(err, "did not stop"));
        ASSERT_TRUE(strstr(err, "sleeping (S) in handle_userfault in read(2)"));
        free(TAKE_PTR(out));
        free(TAKE_PTR(err));

        /* The daemon answers everybody else. */
        ASSERT_EQ(CTL(d.sock, &out, NULL, "stats"), 0);
        ASSERT_TRUE(strstr(out, "targets: 0"));
        free(TAKE_PTR(out));

        /* Never interrupted: once its fault is resolved its read(2) ends
         * with what we put there, and its memory is as it was. */
        assert_untouched(f.pid);
        frozen_thaw(&f);
        read_line = frozen_say(&f, NULL);
        ASSERT_STREQ(read_line, "ok read thawed");
        frozen_exit(&f);
        daemon_cleanup(&d);
}

TEST(stuck_thread_fails_reclaim_and_loses_nothing) {
        _cleanup_free_ char *out = NULL, *err = NULL, *line = NULL;
        struct frozen f;
        struct daemon d;
        char pid[16];

        daemon_start(&d, false);
        frozen_start(&f, true);
        pid_str(f.pid, pid);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "attach", pid), 0);

        /* One of its threads cannot stop: the round is undone. */
        ASSERT_NE(CTL(d.sock, &out, &err, "reclaim", pid), 0);
        fprintf(stderr, "zswapctl said: %s", err);
        ASSERT_TRUE(strstr(err, "in handle_userfault in read(2)"));
        ASSERT_TRUE(strstr(err, "undone"));
        free(TAKE_PTR(out));
        free(TAKE_PTR(err));
        /* And the next reclaim does not try again at once. */
        ASSERT_NE(CTL(d.sock, NULL, &err, "reclaim", pid), 0);
        ASSERT_TRUE(strstr(err, "next try in"));
        free(TAKE_PTR(err));
        ASSERT_EQ(CTL(d.sock, &out, NULL, "stats", pid), 0);
        ASSERT_TRUE(strstr(out, "targets: 1"));

        assert_untouched(f.pid);
        line = frozen_say(&f, "verify");
        ASSERT_STREQ(line, "ok verified");
        free(TAKE_PTR(line));
        frozen_thaw(&f);
        line = frozen_say(&f, NULL);
        ASSERT_STREQ(line, "ok read thawed");
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "detach", pid), 0);
        frozen_exit(&f);
        daemon_cleanup(&d);
}

/* ---- a target with known content ------------------------------------------------ */

struct target {
        pid_t pid;
        int cmd, res; /* 'v' on cmd: '1' or '0' on res */
};

static uint8_t target_byte(size_t p, size_t i) {
        return (uint8_t) ((p * 2654435761u + i * 97) >> 3) | (i % 64 < 40 ? 0x20 : 0);
}

/* A child of ours holding TARGET_SIZE of known content, in group g (NULL:
 * ours), as uid (0 or NOBODY). */
static void target_start(struct target *t, const struct test_cgroup *g, uid_t uid) {
        int cmd[2], res[2];

        ASSERT_OK(pipe2(cmd, O_CLOEXEC));
        ASSERT_OK(pipe2(res, O_CLOEXEC));
        t->pid = fork();
        ASSERT_GE(t->pid, 0);
        if (t->pid == 0) {
                uint8_t *buf;
                char c;

                child_setup();
                /* EOF on cmd must mean the test is done with it. */
                close(cmd[1]);
                close(res[0]);
                if ((g && test_cgroup_enter(g) < 0) ||
                    (uid && (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)))
                        _exit(1);
                buf = mmap(NULL, TARGET_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
                if (buf == MAP_FAILED)
                        _exit(1);
                for (size_t p = 0; p < TARGET_SIZE / 4096; p++)
                        for (size_t i = 0; i < 4096; i++)
                                buf[p * 4096 + i] = target_byte(p, i);
                if (write(res[1], "r", 1) != 1)
                        _exit(1);
                while (read(cmd[0], &c, 1) == 1 && c == 'v') {
                        bool ok = true;

                        for (size_t p = 0; p < TARGET_SIZE / 4096; p++)
                                for (size_t i = 0; i < 4096; i++)
                                        ok = ok && buf[p * 4096 + i] == target_byte(p, i);
                        if (write(res[1], ok ? "1" : "0", 1) != 1)
                                _exit(1);
                }
                _exit(0);
        }
        close(cmd[0]);
        close(res[1]);
        t->cmd = cmd[1];
        t->res = res[0];
        ASSERT_EQ(read(t->res, (char[1]) {}, 1), 1);
}

static bool target_verify(struct target *t) {
        char c;

        ASSERT_EQ(write(t->cmd, "v", 1), 1);
        ASSERT_EQ(read(t->res, &c, 1), 1);
        return c == '1';
}

static void target_stop(struct target *t) {
        int status;

        close(t->cmd);
        close(t->res);
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static uint64_t stored_pages(const char *sock, pid_t pid) {
        _cleanup_free_ char *out = NULL;
        char p[16];
        const char *s;

        pid_str(pid, p);
        ASSERT_EQ(CTL(sock, &out, NULL, "stats", p, "--json"), 0);
        s = strstr(out, "\"targets\":[");
        ASSERT_TRUE(s);
        s = strstr(s, "\"stored_pages\":");
        ASSERT_TRUE(s);
        return strtoull(s + strlen("\"stored_pages\":"), NULL, 10);
}

/* Memory and swap limited to the group's memory limit, where the kernel
 * accounts swap (memory.memsw.*). */
static void limit_swap_alike(const struct test_cgroup *g) {
        char path[256], buf[64] = "";
        int fd;

        snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", g->v1);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_GT(read(fd, buf, sizeof(buf) - 1), 0);
        close(fd);
        buf[strcspn(buf, "\n")] = 0;
        test_cgroup_write(g->v1, "memory.memsw.limit_in_bytes", buf);
}

TEST(stop_keeps_pages_a_target_cannot_take_back) {
        _cleanup_free_ char *err = NULL;
        struct test_cgroup *g;
        struct target t;
        struct daemon d;
        char pid[16];
        int status;

        if (access(TEST_CGROUP_V1_MEMORY "/cgroup.procs", F_OK) < 0 || !test_cgroups_usable())
                TEST_SKIP("no cgroup v1 memory controller at %s: memory.oom_control, which "
                          "makes UFFDIO_COPY fail at the limit, is v1 only",
                          TEST_CGROUP_V1_MEMORY);
        g = test_cgroup_new(0);
        daemon_start(&d, false);
        target_start(&t, g, 0);
        pid_str(t.pid, pid);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "attach", pid), 0);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "reclaim", pid), 0);
        ASSERT_GT(stored_pages(d.sock, t.pid), 1024);

        /* Its group cannot take the pages back: at its limit (1 MiB over
         * what it uses without them), with the OOM killer off, so that
         * UFFDIO_COPY fails with ENOMEM instead of killing anybody, and
         * nothing to swap out to make room should swap be on (memory and
         * swap limited alike, swappiness 0). */
        test_cgroup_write(g->v1, "memory.swappiness", "0");
        test_cgroup_limit_to_usage(g, 1 << 20);
        limit_swap_alike(g);
        test_cgroup_write(g->v1, "memory.oom_control", "1");
        ASSERT_OK(kill(d.pid, SIGTERM));
        for (int i = 0;; i++) {
                _cleanup_free_ char *log = daemon_log(&d);

                if (waitpid(d.pid, &status, WNOHANG) == d.pid)
                        TEST_FAIL("zswapd exited (status %#x) holding the only copy of the "
                                  "pages of %d; log:\n%s",
                                  status, t.pid, log);
                if (strstr(log, "Cannot give process") && strstr(log, g->name))
                        break;
                if (i == TEST_GUARD_MS / 10)
                        TEST_FAIL("zswapd never said what keeps it; log:\n%s", log);
                usleep(10000);
        }
        /* Still serving it, and saying so; no new work taken. */
        ASSERT_GT(stored_pages(d.sock, t.pid), 0);
        ASSERT_NE(CTL(d.sock, NULL, &err, "attach", "1"), 0);
        ASSERT_TRUE(strstr(err, "stopping"));

        /* Room again: the pages go back at the next try, and zswapd exits. */
        test_cgroup_write(g->v1, "memory.memsw.limit_in_bytes", "-1");
        test_cgroup_write(g->v1, "memory.limit_in_bytes", "-1");
        if (!wait_guarded(d.pid, TEST_GUARD_MS, &status))
                TEST_FAIL("zswapd did not exit once the pages could go back; see %s", d.log);
        d.pid = 0;
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_TRUE(target_verify(&t));
        target_stop(&t);
        daemon_cleanup(&d);
        test_cgroup_free(g);
}

TEST(unprivileged_target_from_a_daemon_in_its_own_network_namespace) {
        _cleanup_free_ char *err = NULL, *uid = NULL;
        struct target t;
        struct daemon d;
        char pid[16];

        if (access("/dev/userfaultfd", R_OK) < 0)
                TEST_SKIP("no /dev/userfaultfd: unprivileged targets cannot be served here");
        daemon_start(&d, true);
        target_start(&t, NULL, NOBODY);
        pid_str(t.pid, pid);
        uid = proc_field(t.pid, "status", "Uid:");
        ASSERT_TRUE(uid);
        ASSERT_EQ(atoi(uid), NOBODY);

        if (CTL(d.sock, NULL, &err, "attach", pid) != 0)
                TEST_FAIL("attach of uid nobody from another network namespace: %s", err);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "reclaim", pid), 0);
        ASSERT_GT(stored_pages(d.sock, t.pid), 1024);
        /* Every page comes back by a fault, then by the detach. */
        ASSERT_TRUE(target_verify(&t));
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "reclaim", pid), 0);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "detach", pid), 0);
        ASSERT_TRUE(target_verify(&t));
        target_stop(&t);
        daemon_cleanup(&d);
}

TEST(idle_connections_never_lock_out_root) {
        _cleanup_free_ char *out = NULL;
        int fds[64];
        struct daemon d;
        char c;

        daemon_start(&d, false);
        /* As many idle connections as zswapd takes, the first one older. */
        fds[0] = connect_seqpacket(d.sock);
        ASSERT_EQ(CTL(d.sock, NULL, NULL, "stats"), 0);
        for (size_t i = 1; i < ARRAY_SIZE(fds); i++)
                fds[i] = connect_seqpacket(d.sock);
        /* zswapctl is served all the same, ... */
        ASSERT_EQ(CTL(d.sock, &out, NULL, "stats"), 0);
        ASSERT_TRUE(strstr(out, "targets: 0"));
        /* ... at the expense of the connection idle longest, which is
         * closed, not reset. */
        ASSERT_EQ(recv(fds[0], &c, 1, 0), 0);
        for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
                close(fds[i]);
        daemon_cleanup(&d);
}

int main(int argc, char **argv) {
        if (argc < 4) {
                fprintf(stderr, "usage: %s ZSWAPD ZSWAPCTL ZSWAPD-TEST-FROZEN [TEST...]\n",
                        argv[0]);
                return EXIT_FAILURE;
        }
        test_pid = getpid();
        zswapd_path = argv[1];
        zswapctl_path = argv[2];
        frozen_path = argv[3];
        if (geteuid() != 0)
                TEST_SKIP("needs root: the daemon ptraces its targets");
        test_guard(150); /* meson's timeout: 180 s */
        return test_run_cases(argc - 3, argv + 3);
}
