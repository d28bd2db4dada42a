/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Integration tests of the real zswapd and zswapctl binaries (their paths
 * are the first two arguments): each case starts a daemon on a socket of
 * its own and talks to it through zswapctl or raw requests. Targets are
 * children of this test holding a buffer of known content that they verify
 * on request, so every byte is checked after the engine has had it.
 */
#define TEST_NO_MAIN
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "page.h"
#include "test.h"
#include "test-cgroups.h"
#include "test-procs.h"
#include "util.h"

#define NOBODY 65534
#define TARGET_SIZE (32u << 20)
/* One page in 16 of a target is zeros, which may come back as the shared
 * zero page that VmRSS does not count. */
#define TARGET_NONZERO (TARGET_SIZE / 16 * 15)

static const char *zswapd_path, *zswapctl_path;

/* ---- processes ----------------------------------------------------------- */

#define CTL_ARGS(sock, ...) ((const char *const[]) { zswapctl_path, "-s", sock, __VA_ARGS__, NULL })
#define ctl(out, err, sock, ...) run_as(0, out, err, CTL_ARGS(sock, __VA_ARGS__))

/* ---- the daemon ------------------------------------------------------------ */

struct daemon {
        pid_t pid;
        char dir[64];
        char sock[100];
        char log[128];
};

/* Starts zswapd on sock; returns its pid once it listens, or 0 if it
 * exited (status in *ret_status). With must_fail, waits for it to exit
 * instead: another daemon may be listening on sock. */
static pid_t spawn_daemon(const char *sock, const char *log, bool must_fail, int *ret_status) {
        pid_t pid = fork();

        ASSERT_GE(pid, 0);
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                child_setup();
                dup2(fd, STDERR_FILENO);
                if (getenv("ZSWAPD_TEST_CONFIG"))
                        execl(zswapd_path, zswapd_path, "--socket", sock, "--config",
                              getenv("ZSWAPD_TEST_CONFIG"), NULL);
                else
                        execl(zswapd_path, zswapd_path, "--socket", sock, NULL);
                _exit(98);
        }
        if (must_fail) {
                ASSERT_EQ(waitpid(pid, ret_status, 0), pid);
                return 0;
        }
        /* Waits for the socket, for as long as the daemon lives. */
        for (;;) {
                if (waitpid(pid, ret_status, WNOHANG) == pid)
                        return 0;
                if (can_connect(sock))
                        return pid;
                usleep(10000);
        }
}

static void daemon_start_at(struct daemon *d, const char *sub) {
        int status;

        snprintf(d->dir, sizeof(d->dir), "/tmp/zswapd-test.XXXXXX");
        ASSERT_TRUE(mkdtemp(d->dir));
        ASSERT_OK(chmod(d->dir, 0755));
        snprintf(d->sock, sizeof(d->sock), "%s/%s", d->dir, sub);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        d->pid = spawn_daemon(d->sock, d->log, false, &status);
        if (d->pid == 0)
                TEST_FAIL("zswapd exited with status %d at start-up; see %s", status, d->log);
}

static void daemon_start(struct daemon *d) {
        daemon_start_at(d, "ctl.sock");
}

/* Sends sig and returns the daemon's exit status. */
static int daemon_stop(struct daemon *d, int sig) {
        int status;

        ASSERT_OK(kill(d->pid, sig));
        ASSERT_EQ(waitpid(d->pid, &status, 0), d->pid);
        d->pid = 0;
        if (!WIFEXITED(status))
                TEST_FAIL("zswapd killed by signal %d; see %s", WTERMSIG(status), d->log);
        return WEXITSTATUS(status);
}

static void daemon_cleanup(struct daemon *d) {
        char cmd[256];

        if (d->pid > 0)
                ASSERT_EQ(daemon_stop(d, SIGTERM), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", d->dir);
        ASSERT_EQ(system(cmd), 0);
}

/* One raw request, one reply; the reply as a string. */
static char *raw_request(const char *sock, const char *msg, size_t len) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        char *buf = calloc(1, 1 << 20);
        ssize_t n;

        ASSERT_GE(fd, 0);
        ASSERT_TRUE(buf);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_EQ(send(fd, msg, len, MSG_NOSIGNAL), (ssize_t) len);
        n = recv(fd, buf, (1 << 20) - 1, 0);
        ASSERT_GT(n, 0);
        close(fd);
        return buf;
}

static char *request(const char *sock, const char *msg) {
        return raw_request(sock, msg, strlen(msg));
}

/* ---- targets ----------------------------------------------------------------- */

struct target {
        pid_t pid;
        int cmd; /* 'v': verify, answered '1' or '0' on res */
        int res;
};

/* Text-like, compressible content with a zero page now and then, all of it
 * a function of the page number. */
static void target_fill(uint8_t *buf, size_t size, bool check, bool *ok) {
        size_t page = ZSW_PAGE_SIZE;

        for (size_t p = 0; p < size / page; p++) {
                uint64_t x = p * 0x9e3779b97f4a7c15ull + 1;
                uint8_t *pg = buf + p * page;

                for (size_t i = 0; i < page; i++) {
                        uint8_t v;

                        if (p % 16 == 5)
                                v = 0;
                        else if (i % 64 < 40)
                                v = "the quick brown fox jumps over a lazy dog"[i % 40];
                        else {
                                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                                v = 'a' + x % 26;
                        }
                        if (!check)
                                pg[i] = v;
                        else if (pg[i] != v)
                                *ok = false;
                }
        }
}

/* When set, targets start inside this group. */
static const struct test_cgroup *target_cgroup;

static void target_start(struct target *t) {
        int cmd[2], res[2];

        ASSERT_OK(pipe2(cmd, O_CLOEXEC));
        ASSERT_OK(pipe2(res, O_CLOEXEC));
        t->pid = fork();
        ASSERT_GE(t->pid, 0);
        if (t->pid == 0) {
                uint8_t *buf;
                char c;

                child_setup();
                if (target_cgroup && test_cgroup_enter(target_cgroup) < 0)
                        _exit(1);
                /* Only its own ends of its own pipes: EOF on cmd must mean
                 * the test is done with this target. */
                if (dup2(cmd[0], 100) < 0 || dup2(res[1], 101) < 0)
                        _exit(1);
                cmd[0] = 100;
                res[1] = 101;
                close_range(3, 99, 0);
                close_range(102, ~0u, 0);
                buf = mmap(NULL, TARGET_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
                if (buf == MAP_FAILED)
                        _exit(1);
                target_fill(buf, TARGET_SIZE, false, NULL);
                if (write(res[1], "r", 1) != 1)
                        _exit(1);
                /* Blocked in read(2) while the daemon attaches and reclaims. */
                while (read(cmd[0], &c, 1) == 1 && c == 'v') {
                        bool ok = true;

                        target_fill(buf, TARGET_SIZE, true, &ok);
                        if (write(res[1], ok ? "1" : "0", 1) != 1)
                                _exit(1);
                }
                _exit(0);
        }
        close(cmd[0]);
        close(res[1]);
        t->cmd = cmd[1];
        t->res = res[0];
        ASSERT_EQ(read(t->res, (char[1]) {}, 1), 1); /* filled */
}

static bool target_verify(struct target *t) {
        char c;

        ASSERT_EQ(write(t->cmd, "v", 1), 1);
        ASSERT_EQ(read(t->res, &c, 1), 1);
        ASSERT_TRUE(c == '1' || c == '0');
        return c == '1';
}

static void target_stop(struct target *t) {
        int status;

        close(t->cmd);
        close(t->res);
        ASSERT_EQ(waitpid(t->pid, &status, 0), t->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static uint64_t rss_bytes(pid_t pid) {
        char path[64], line[256];
        uint64_t kb = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %" SCNu64, &kb) == 1)
                        break;
        fclose(f);
        return kb * 1024;
}

/* ---- JSON: checked for structure, fields read by name ------------------------ */

static const char *json_skip_ws(const char *p) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
                p++;
        return p;
}

/* Returns the end of the value starting at p, or NULL if it is not JSON. */
static const char *json_value(const char *p, unsigned depth) {
        p = json_skip_ws(p);
        if (depth > 16)
                return NULL;
        if (*p == '{' || *p == '[') {
                char close = *p == '{' ? '}' : ']';

                p = json_skip_ws(p + 1);
                if (*p == close)
                        return p + 1;
                for (;;) {
                        if (close == '}') {
                                p = json_value(p, depth + 1);
                                if (!p || p[-1] != '"')
                                        return NULL;
                                p = json_skip_ws(p);
                                if (*p++ != ':')
                                        return NULL;
                        }
                        p = json_value(p, depth + 1);
                        if (!p)
                                return NULL;
                        p = json_skip_ws(p);
                        if (*p == close)
                                return p + 1;
                        if (*p++ != ',')
                                return NULL;
                }
        }
        if (*p == '"') {
                for (p++; *p != '"'; p++) {
                        if (!*p || (unsigned char) *p < 0x20)
                                return NULL;
                        if (*p == '\\' && !*++p)
                                return NULL;
                }
                return p + 1;
        }
        if (!strncmp(p, "null", 4) || !strncmp(p, "true", 4))
                return p + 4;
        if (!strncmp(p, "false", 5))
                return p + 5;
        if (*p == '-' || (*p >= '0' && *p <= '9')) {
                char *end;

                strtod(p, &end);
                return end;
        }
        return NULL;
}

static void assert_json(const char *s) {
        const char *end = json_value(s, 0);

        if (!end || *json_skip_ws(end))
                TEST_FAIL("not one JSON value: %s", s);
}

/* The number after "key": in s, which must be there. */
static uint64_t json_u64(const char *s, const char *key) {
        char pat[64];
        const char *p;

        snprintf(pat, sizeof(pat), "\"%s\":", key);
        p = strstr(s, pat);
        if (!p)
                TEST_FAIL("no field %s in %s", key, s);
        return strtoull(p + strlen(pat), NULL, 10);
}

static const char *const target_fields[] = {
        "pid",           "resident_bytes", "stored_pages",
        "payload_bytes", "pool_bytes",     "same_filled_pages",
        "lost_pages",    "evicted_pages",  "evict_aborted",
        "faults",        "zero_faults",    "prefetched_pages",
        "prefetch_hits", "fault_ns_p50",   "fault_ns_p95",
        "fault_ns_p99",  "refaults",       "wp_faults",
        "scans",         "idle_pages",     "table_bytes",
        "scan_ns_total", "stopped_ns",     "max_ns",
        "p50_ns",        "p99_ns",         "over_5ms",
        "attached_ns",   "uses",           "prefetch_window_now",
};
static const char *const global_fields[] = {
        "targets",
        "stored_pages",
        "payload_bytes",
        "pool_bytes",
        "same_filled_pages",
        "lost_pages",
        "incompressible_pages",
        "faults",
        "evicted_pages",
        "evict_aborted",
        "fault_ns_p50",
        "fault_ns_p95",
        "fault_ns_p99",
        "refaults",
        "wp_faults",
        "age_scan_ns",
        "stops",
        "stopped_ns",
};

/* Checks `stats --json` and returns the part about pid (NULL: absent). */
static const char *stats_target(const char *json, pid_t pid) {
        const char *targets, *t;
        char pat[32];

        assert_json(json);
        ASSERT_TRUE(strncmp(json, "{\"global\":{", 11) == 0);
        targets = strstr(json, "\"targets\":[");
        ASSERT_TRUE(targets);
        for (size_t i = 0; i < ARRAY_SIZE(global_fields); i++)
                (void) json_u64(json, global_fields[i]);
        snprintf(pat, sizeof(pat), "{\"pid\":%d,", pid);
        t = strstr(targets, pat);
        if (t)
                for (size_t i = 0; i < ARRAY_SIZE(target_fields); i++)
                        (void) json_u64(t, target_fields[i]);
        return t;
}

/* ---- tests that need no engine behaviour --------------------------------------- */

TEST(zswapd_arguments) {
        _cleanup_free_ char *out = NULL, *err = NULL;

        ASSERT_EQ(run_as(0, &out, &err, (const char *const[]) { zswapd_path, "--help", NULL }), 0);
        ASSERT_TRUE(strstr(out, "--socket"));
        free(out), free(err);
        ASSERT_EQ(run_as(0, &out, &err, (const char *const[]) { zswapd_path, "--version", NULL }),
                  0);
        ASSERT_TRUE(strstr(out, "zswapd "));
        free(out), free(err);
        ASSERT_NE(run_as(0, &out, &err, (const char *const[]) { zswapd_path, "--bogus", NULL }), 0);
        ASSERT_TRUE(strstr(err, "bogus"));
        free(out), free(err);
        ASSERT_NE(run_as(0, &out, &err, (const char *const[]) { zswapd_path, "extra", NULL }), 0);
        ASSERT_TRUE(strstr(err, "error: ") && strstr(err, "takes no arguments"));
        free(out), free(err);
        ASSERT_NE(run_as(0, &out, &err,
                         (const char *const[]) { zswapd_path, "-s", "rel.sock", NULL }),
                  0);
        ASSERT_TRUE(strstr(err, "absolute path"));
        free(out), free(err);
        ASSERT_NE(run_as(0, &out, &err,
                         (const char *const[]) { zswapd_path, "-s", "/tmp/x.sock", "-c",
                                                 "/nonexistent.conf", NULL }),
                  0);
        ASSERT_TRUE(strstr(err, "/nonexistent.conf"));
}

TEST(zswapctl_arguments) {
        /* Each is refused before any connection: the socket does not exist. */
        static const char *const cases[][5] = {
                { "bogus" },
                { "attach" },
                { "attach", "abc" },
                { "attach", "0" },
                { "attach", "-5" },
                { "attach", "1", "2" },
                { "detach" },
                { "reclaim", "1", "--bytes", "12X" },
                { "reclaim", "1", "--bytes", "0" },
                { "reclaim", "1", "--all", "--bytes", "1M" },
                { "stats", "1", "2" },
                { "reclaim", "1", "--min-age", "soon" },
                { "stats", "--min-age", "1s" },
                { "attach", "1", "--all" },
                { "stats", "--bytes", "1K" },
                { "--bogus" },
                { "reclaim", "1", "--bytes" },
                { "-x", "stats" },
        };
        const char *none = "/nonexistent/zswapd.sock";

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_free_ char *out = NULL, *err = NULL;
                const char *argv[9] = { zswapctl_path, "-s", none };

                memcpy(argv + 3, cases[i], sizeof(cases[i]));
                ASSERT_NE(run_as(0, &out, &err, argv), 0);
                ASSERT_STREQ(out, "");
                if (strncmp(err, "zswapctl: ", 10) != 0)
                        TEST_FAIL("case %zu: unexpected error output: %s", i, err);
                ASSERT_FALSE(strstr(err, "cannot connect"));
                ASSERT_TRUE(strchr(err, '\n') == err + strlen(err) - 1); /* one line */
        }
}

TEST(zswapctl_without_daemon) {
        _cleanup_free_ char *out = NULL, *err = NULL;

        ASSERT_NE(ctl(&out, &err, "/nonexistent/zswapd.sock", "stats"), 0);
        ASSERT_TRUE(strstr(err, "cannot connect to /nonexistent/zswapd.sock"));
        ASSERT_TRUE(strstr(err, "is zswapd running?"));
        ASSERT_TRUE(strstr(err, "systemctl start zswapd"));
        free(out), free(err);

        ASSERT_OK(setenv("ZSWAPD_SOCKET", "/nonexistent/from-env.sock", 1));
        ASSERT_NE(run_as(0, &out, &err, (const char *const[]) { zswapctl_path, "stats", NULL }), 0);
        unsetenv("ZSWAPD_SOCKET");
        ASSERT_TRUE(strstr(err, "cannot connect to /nonexistent/from-env.sock"));
}

TEST(socket_setup_and_second_daemon) {
        _cleanup_free_ char *reply = NULL;
        struct daemon d;
        struct stat st;
        char log2[160], dir[160];
        int status;

        /* The socket's directory is created 0755, the socket 0600. */
        daemon_start_at(&d, "run/zswapd/ctl.sock");
        ASSERT_OK(stat(d.sock, &st));
        ASSERT_TRUE(S_ISSOCK(st.st_mode));
        ASSERT_EQ(st.st_mode & 07777, 0600);
        snprintf(dir, sizeof(dir), "%s/run/zswapd", d.dir);
        ASSERT_OK(stat(dir, &st));
        ASSERT_EQ(st.st_mode & 07777, 0755);

        /* A second daemon on the same socket refuses to start... */
        snprintf(log2, sizeof(log2), "%s/log2", d.dir);
        ASSERT_EQ(spawn_daemon(d.sock, log2, true, &status), 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
        /* ...and leaves the first one serving. */
        reply = request(d.sock, "stats json");
        ASSERT_TRUE(strncmp(reply, "ok\n{", 4) == 0);

        ASSERT_EQ(daemon_stop(&d, SIGTERM), 0);
        ASSERT_ERRNO(stat(d.sock, &st) < 0 ? -errno : 0, ENOENT);
        daemon_cleanup(&d);
}

TEST(stale_socket_replaced_other_file_kept) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char path[100], dir[64] = "/tmp/zswapd-test.XXXXXX", log[128];
        struct stat st;
        int fd, status;
        pid_t pid;

        /* A socket left by a dead daemon: bound, nobody listening. */
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/ctl.sock", dir);
        snprintf(log, sizeof(log), "%s/log", dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        close(fd);
        pid = spawn_daemon(path, log, false, &status);
        ASSERT_GT(pid, 0);
        ASSERT_OK(kill(pid, SIGTERM));
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

        /* Anything else at the path is not the daemon's to remove. */
        fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        close(fd);
        ASSERT_EQ(spawn_daemon(path, log, true, &status), 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
        ASSERT_OK(stat(path, &st));
        ASSERT_TRUE(S_ISREG(st.st_mode));
        unlink(path);
        unlink(log);
        ASSERT_OK(rmdir(dir));
}

TEST(malformed_requests_change_nothing) {
        static const char *const bad[] = {
                "\n",
                "frobnicate",
                "attach",
                "attach abc",
                "attach 0",
                "attach -1",
                "attach 01",
                "attach 1 2",
                "attach 99999999999",
                "detach",
                "reclaim 1",
                "reclaim 1 some",
                "reclaim 1 bytes",
                "reclaim 1 bytes 0",
                "reclaim 1 bytes -4",
                "reclaim 1 bytes 1K",
                "reclaim 1 all 5",
                "stats 1 2",
                "stats x",
                "json",
                "attach\t1",
                "a b c d e f g h",
                "stats 1 json json",
        };
        char big[1000];
        struct daemon d;
        int fd;

        daemon_start(&d);
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                _cleanup_free_ char *reply = request(d.sock, bad[i]);

                if (strncmp(reply, "error EINVAL\nmalformed request: ", 32) != 0)
                        TEST_FAIL("request '%s' got: %s", bad[i], reply);
        }
        /* A NUL inside a request. */
        {
                _cleanup_free_ char *reply = raw_request(d.sock, "stats\0 1", 8);
                ASSERT_TRUE(strncmp(reply, "error EINVAL\n", 13) == 0);
        }
        memset(big, 'a', sizeof(big));
        {
                _cleanup_free_ char *reply = raw_request(d.sock, big, sizeof(big));
                ASSERT_TRUE(strncmp(reply, "error EMSGSIZE\n", 15) == 0);
        }

        /* Clients that vanish before or after asking are harmless. The
         * attach names the daemon itself, which it refuses on any machine
         * (PID 1 would be attached where it can be traced). */
        for (int i = 0; i < 3; i++) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                char attach[32];
                const char *req = attach;

                snprintf(attach, sizeof(attach), "attach %d", d.pid);
                if (i == 1)
                        req = "stats";
                fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d.sock);
                ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)));
                if (i > 0)
                        ASSERT_GT(send(fd, req, strlen(req), 0), 0);
                close(fd);
        }

        {
                _cleanup_free_ char *reply = request(d.sock, "stats json");

                ASSERT_TRUE(strncmp(reply, "ok\n", 3) == 0);
                (void) stats_target(reply + 3, 1);
                ASSERT_EQ(json_u64(reply, "targets"), 0);
                ASSERT_TRUE(strstr(reply, "\"targets\":[]"));
        }
        daemon_cleanup(&d);
}

TEST(non_root_clients_refused) {
        _cleanup_free_ char *out = NULL, *err = NULL;
        const char *argv[6] = { NULL, "-s", NULL, "stats" };
        char ctl_copy[160];
        struct daemon d;
        int status;
        pid_t pid;

        daemon_start(&d);
        /* A copy nobody can run wherever the build tree is. */
        snprintf(ctl_copy, sizeof(ctl_copy), "cp %s %s/zswapctl", zswapctl_path, d.dir);
        ASSERT_EQ(system(ctl_copy), 0);
        snprintf(ctl_copy, sizeof(ctl_copy), "%s/zswapctl", d.dir);
        argv[0] = ctl_copy;
        argv[2] = d.sock;

        /* The socket is 0600: the file system refuses first. */
        ASSERT_NE(run_as(NOBODY, &out, &err, argv), 0);
        if (!strstr(err, "Permission denied") || !strstr(err, "run zswapctl as root"))
                TEST_FAIL("unexpected: %s", err);
        free(out), free(err);

        /* With the socket opened up, the daemon's own peer check refuses. */
        ASSERT_OK(chmod(d.sock, 0666));
        argv[3] = "attach";
        argv[4] = "1";
        ASSERT_NE(run_as(NOBODY, &out, &err, argv), 0);
        if (!strstr(err, "only root may control zswapd"))
                TEST_FAIL("unexpected: %s", err);

        /* The raw reply names the errno. */
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                _cleanup_free_ char *reply = NULL;

                child_setup();
                if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
                        _exit(2);
                reply = request(d.sock, "stats");
                _exit(strncmp(reply, "error EPERM\n", 12) == 0 ? 0 : 1);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        daemon_cleanup(&d);
}

TEST(signals) {
        _cleanup_free_ char *reply = NULL;
        struct daemon d;

        daemon_start(&d);
        /* SIGHUP reloads and keeps serving. */
        ASSERT_OK(kill(d.pid, SIGHUP));
        reply = request(d.sock, "stats");
        ASSERT_TRUE(strncmp(reply, "ok\n", 3) == 0);
        ASSERT_EQ(daemon_stop(&d, SIGINT), 0);
        daemon_cleanup(&d);

        daemon_start(&d);
        ASSERT_EQ(daemon_stop(&d, SIGTERM), 0);
        ASSERT_FALSE(can_connect(d.sock));
        daemon_cleanup(&d);
}

/* Waits for a notification datagram that contains what. */
static void expect_notify(int fd, const char *what) {
        char buf[4096];

        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t n;

                /* A generous bound, so that a daemon that never sends fails
                 * the test instead of hanging it. */
                if (poll(&p, 1, 60000) != 1)
                        TEST_FAIL("no %s from zswapd", what);
                n = recv(fd, buf, sizeof(buf) - 1, 0);
                ASSERT_GT(n, 0);
                buf[n] = 0;
                if (strstr(buf, what))
                        return;
        }
}

TEST(systemd_notify_watchdog_and_journal_prefixes) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char notify[100], stream[64], conf[128], path[128];
        _cleanup_free_ char *log = NULL;
        struct daemon d;
        struct stat st;
        int fd, lfd;

        snprintf(d.dir, sizeof(d.dir), "/tmp/zswapd-test.XXXXXX");
        ASSERT_TRUE(mkdtemp(d.dir));
        snprintf(d.sock, sizeof(d.sock), "%s/ctl.sock", d.dir);
        snprintf(d.log, sizeof(d.log), "%s/log", d.dir);
        snprintf(notify, sizeof(notify), "%s/notify", d.dir);
        snprintf(conf, sizeof(conf), "%s/zswapd.conf", d.dir);

        /* What systemd would set up: a notification socket, a watchdog, and
         * stderr connected to the journal (here: a file it names). */
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", notify);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        lfd = open(d.log, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(lfd, 0);
        ASSERT_OK(fstat(lfd, &st));
        close(lfd);
        snprintf(stream, sizeof(stream), "%llu:%llu", (unsigned long long) st.st_dev,
                 (unsigned long long) st.st_ino);
        lfd = open(conf, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        close(lfd);
        ASSERT_OK(setenv("NOTIFY_SOCKET", notify, 1));
        ASSERT_OK(setenv("WATCHDOG_USEC", "200000", 1));
        ASSERT_OK(setenv("JOURNAL_STREAM", stream, 1));
        ASSERT_OK(setenv("ZSWAPD_TEST_CONFIG", conf, 1));
        d.pid = spawn_daemon(d.sock, d.log, false, (int[1]) {});
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("JOURNAL_STREAM");
        unsetenv("ZSWAPD_TEST_CONFIG");
        ASSERT_GT(d.pid, 0);

        expect_notify(fd, "READY=1");
        expect_notify(fd, "STATUS=Serving 0 targets");
        expect_notify(fd, "WATCHDOG=1");
        ASSERT_OK(kill(d.pid, SIGHUP));
        expect_notify(fd, "RELOADING=1");
        expect_notify(fd, "READY=1");
        ASSERT_EQ(daemon_stop(&d, SIGTERM), 0);
        expect_notify(fd, "STOPPING=1");
        close(fd);

        lfd = open(d.log, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(lfd, 0);
        log = fd_slurp(lfd);
        close(lfd);
        if (!strstr(log, "<6>zswapd ") || strstr(log, "\nerror: "))
                TEST_FAIL("expected priority prefixes in: %s", log);
        snprintf(path, sizeof(path), "<5>Received SIGHUP");
        ASSERT_TRUE(strstr(log, path));
        daemon_cleanup(&d);
}

/* ---- with the engine at work ------------------------------------------------------- */

static char *ctl_ok(const char *sock, const char *const argv[]) {
        char *out = NULL, *err = NULL;

        if (run_as(0, &out, &err, argv) != 0)
                TEST_FAIL("zswapctl %s %s failed: %s", argv[3], argv[4] ?: "", err);
        ASSERT_STREQ(err, "");
        free(err);
        return out;
}

/* Every thread of the daemon, those the engine made for a target too, runs
 * with the shortest scheduler slice (where the kernel keeps one). */
TEST(threads_run_with_the_shortest_slice) {
        char pid_s[16], path[64];
        DIR *dir;
        struct dirent *de;
        struct daemon d;
        struct target t;
        uint64_t slice = 0;
        unsigned threads = 0;
        pid_t probe;
        int status;

        /* Does this kernel keep a custom slice? Asked in a child. */
        probe = fork();
        ASSERT_GE(probe, 0);
        if (probe == 0) {
                bool kept = zsw_sched_set_slice(ZSW_SCHED_SLICE_MIN_NS) == 0 &&
                            zsw_sched_get_slice(0, &slice) == 0 && slice == ZSW_SCHED_SLICE_MIN_NS;
                _exit(kept ? 0 : 1);
        }
        ASSERT_EQ(waitpid(probe, &status, 0), probe);
        if (status != 0) {
                fprintf(stderr, "this kernel keeps no custom slice (Linux < 6.12): not checked\n");
                return;
        }

        daemon_start(&d);
        target_start(&t);
        snprintf(pid_s, sizeof(pid_s), "%d", t.pid);
        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "attach", pid_s)));
        snprintf(path, sizeof(path), "/proc/%d/task", d.pid);
        dir = opendir(path);
        ASSERT_TRUE(dir);
        while ((de = readdir(dir))) {
                pid_t tid = (pid_t) strtol(de->d_name, NULL, 10);

                if (tid <= 0)
                        continue;
                ASSERT_OK(zsw_sched_get_slice(tid, &slice));
                ASSERT_EQ(slice, ZSW_SCHED_SLICE_MIN_NS);
                threads++;
        }
        closedir(dir);
        ASSERT_GE(threads, 3u); /* main, reclaim, a fault thread at least */
        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "detach", pid_s)));
        ASSERT_TRUE(target_verify(&t));
        target_stop(&t);
        daemon_cleanup(&d);
}

TEST(attach_reclaim_stats_detach) {
        _cleanup_free_ char *out = NULL;
        char pid_s[16];
        struct daemon d;
        struct target t;
        const char *ts;
        uint64_t rss_full, rss;

        daemon_start(&d);
        target_start(&t);
        snprintf(pid_s, sizeof(pid_s), "%d", t.pid);
        rss_full = rss_bytes(t.pid);
        ASSERT_GE(rss_full, TARGET_SIZE);

        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "attach", pid_s)));
        ASSERT_TRUE(target_verify(&t));

        /* Attached a moment ago: no page has been watched for an hour. */
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "reclaim", pid_s, "--min-age", "1h", "--json"));
        assert_json(out);
        ASSERT_EQ(json_u64(out, "evicted_pages"), 0);
        ASSERT_EQ(json_u64(out, "min_age_ms"), 3600000);
        free(out);

        /* A bounded reclaim takes at most what was asked. */
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "reclaim", pid_s, "--bytes", "4M", "--json"));
        assert_json(out);
        ASSERT_GT(json_u64(out, "evicted_pages"), 0);
        ASSERT_LE(json_u64(out, "evicted_pages") * ZSW_PAGE_SIZE, 4u << 20);
        free(out);

        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "reclaim", pid_s, "--all", "--json"));
        assert_json(out);
        ASSERT_GE(json_u64(out, "evicted_pages") * ZSW_PAGE_SIZE, TARGET_SIZE / 2);
        free(out);
        rss = rss_bytes(t.pid);
        ASSERT_LT(rss, rss_full - TARGET_SIZE / 2);

        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", "--json"));
        ts = stats_target(out, t.pid);
        ASSERT_TRUE(ts);
        ASSERT_EQ(json_u64(out, "targets"), 1);
        ASSERT_GE(json_u64(ts, "stored_pages") * ZSW_PAGE_SIZE, TARGET_SIZE / 2);
        ASSERT_GT(json_u64(ts, "pool_bytes"), 0);
        ASSERT_LT(json_u64(ts, "pool_bytes"), json_u64(ts, "stored_pages") * ZSW_PAGE_SIZE);
        free(out);

        /* Every byte comes back through faults... */
        ASSERT_TRUE(target_verify(&t));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", pid_s, "--json"));
        ASSERT_GT(json_u64(stats_target(out, t.pid), "faults"), 0);
        /* Those faults brought back pages we took: refaults. */
        ASSERT_GT(json_u64(stats_target(out, t.pid), "refaults"), 0);
        free(out);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", pid_s));
        ASSERT_TRUE(strstr(out, "RATIO") && strstr(out, "MiB"));
        ASSERT_TRUE(strstr(out, "pool: ") && strstr(out, "bookkeeping: "));
        free(out);

        /* ...and through detach, after another reclaim. */
        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "reclaim", pid_s)));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "detach", pid_s));
        ASSERT_TRUE(strstr(out, "detached"));
        ASSERT_GE(rss_bytes(t.pid), TARGET_NONZERO);
        ASSERT_TRUE(target_verify(&t));
        free(out);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", "--json"));
        ASSERT_FALSE(stats_target(out, t.pid));

        target_stop(&t);
        daemon_cleanup(&d);
}

static void expect_error(const char *sock, const char *req, const char *name) {
        _cleanup_free_ char *reply = request(sock, req);
        char want[64];

        snprintf(want, sizeof(want), "error %s\n", name);
        if (strncmp(reply, want, strlen(want)) != 0 || strlen(reply) <= strlen(want) + 1)
                TEST_FAIL("'%s': expected %s with a message, got: %s", req, name, reply);
}

TEST(attach_refusals) {
        _cleanup_free_ char *out = NULL, *err = NULL;
        char req[64], pid_s[16];
        struct daemon d;
        struct target t, traced;
        pid_t gone, zombie;
        int status;

        daemon_start(&d);
        target_start(&t);

        /* No such process: a child that has been reaped. */
        gone = fork();
        ASSERT_GE(gone, 0);
        if (gone == 0)
                _exit(0);
        ASSERT_EQ(waitpid(gone, &status, 0), gone);
        snprintf(pid_s, sizeof(pid_s), "%d", gone);
        ASSERT_NE(ctl(&out, &err, d.sock, "attach", pid_s), 0);
        ASSERT_TRUE(strstr(err, "no such process") || strstr(err, "No such process"));
        free(out), free(err);
        snprintf(req, sizeof(req), "attach %d", gone);
        expect_error(d.sock, req, "ESRCH");

        /* A kernel thread. */
        ASSERT_NE(ctl(&out, &err, d.sock, "attach", "2"), 0);
        ASSERT_TRUE(strncmp(err, "zswapctl: cannot attach to 2: ", 30) == 0);
        expect_error(d.sock, "attach 2", "EPERM");
        free(out);

        /* The daemon itself. */
        snprintf(req, sizeof(req), "attach %d", d.pid);
        expect_error(d.sock, req, "EINVAL");

        /* A zombie. */
        zombie = fork();
        ASSERT_GE(zombie, 0);
        if (zombie == 0)
                _exit(0);
        ASSERT_OK(waitid(P_PID, zombie, &(siginfo_t) {}, WEXITED | WNOWAIT));
        snprintf(req, sizeof(req), "attach %d", zombie);
        expect_error(d.sock, req, "EINVAL");
        ASSERT_EQ(waitpid(zombie, &status, 0), zombie);

        /* Traced by somebody else: this test. */
        target_start(&traced);
        ASSERT_OK(ptrace(PTRACE_SEIZE, traced.pid, 0, 0));
        snprintf(req, sizeof(req), "attach %d", traced.pid);
        expect_error(d.sock, req, "EBUSY");
        ASSERT_OK(kill(traced.pid, SIGKILL));
        ASSERT_EQ(waitpid(traced.pid, &status, 0), traced.pid);

        /* Twice; and requests for a target that is not attached. */
        snprintf(req, sizeof(req), "detach %d", t.pid);
        expect_error(d.sock, req, "ENOENT");
        snprintf(req, sizeof(req), "reclaim %d all", t.pid);
        expect_error(d.sock, req, "ENOENT");
        snprintf(req, sizeof(req), "stats %d json", t.pid);
        expect_error(d.sock, req, "ENOENT");
        snprintf(req, sizeof(req), "attach %d", t.pid);
        out = request(d.sock, req);
        ASSERT_TRUE(strncmp(out, "ok\n", 3) == 0);
        expect_error(d.sock, req, "EALREADY");
        ASSERT_TRUE(target_verify(&t));

        target_stop(&t);
        daemon_cleanup(&d);
}

TEST(sigterm_puts_every_page_back) {
        _cleanup_free_ char *out = NULL;
        char pid_s[16];
        struct daemon d;
        struct target t;

        daemon_start(&d);
        target_start(&t);
        snprintf(pid_s, sizeof(pid_s), "%d", t.pid);

        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "attach", pid_s)));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "reclaim", pid_s, "--json"));
        ASSERT_GE(json_u64(out, "evicted_pages") * ZSW_PAGE_SIZE, TARGET_SIZE / 2);
        ASSERT_LT(rss_bytes(t.pid), TARGET_SIZE / 2);

        ASSERT_EQ(daemon_stop(&d, SIGTERM), 0);
        /* Resident again before the target touches anything. */
        ASSERT_GE(rss_bytes(t.pid), TARGET_NONZERO);
        ASSERT_TRUE(target_verify(&t));

        target_stop(&t);
        daemon_cleanup(&d);
}


/* ---- policies: the service on real cgroups ---------------------------------------- */

/* Every zswapd.conf here ends with this: the daemon backs every policy off
 * when /proc/pressure/memory crosses its threshold, and that file counts
 * the stalls of every process on the machine (other suites' thrash and
 * benchmarks included). None of these tests is about it, so it is set
 * where only a machine whose every task stalled for 10 s would reach it
 * (a policy that names no PressureThreshold of its own takes it for its
 * group too); the pressure test gives its policy a threshold of its own. */
#define QUIET_SYSTEM_PRESSURE "[Pressure]\nThreshold=full 100%/10s\n"

/* A configuration directory: zswapd.conf with debug logging, and one
 * policy file whose text is set (and reset) with policy_write(). */
struct confdir {
        char dir[64];
        char policy[128];
};

static void confdir_new(struct confdir *c, const char *global) {
        char path[128];
        int fd;

        snprintf(c->dir, sizeof(c->dir), "/tmp/zswapd-test-conf.XXXXXX");
        ASSERT_TRUE(mkdtemp(c->dir));
        snprintf(path, sizeof(path), "%s/zswapd.conf", c->dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, global, strlen(global)), (ssize_t) strlen(global));
        ASSERT_EQ(write(fd, QUIET_SYSTEM_PRESSURE, strlen(QUIET_SYSTEM_PRESSURE)),
                  (ssize_t) strlen(QUIET_SYSTEM_PRESSURE));
        close(fd);
        snprintf(path, sizeof(path), "%s/policy.d", c->dir);
        ASSERT_OK(mkdir(path, 0755));
        snprintf(c->policy, sizeof(c->policy), "%s/policy.d/50-test.conf", c->dir);
}

_printf_(2, 3) static void policy_write(struct confdir *c, const char *fmt, ...) {
        char text[1024];
        va_list ap;
        int fd, n;

        va_start(ap, fmt);
        n = vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        fd = open(c->policy, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, text, n), n);
        close(fd);
}

static void confdir_remove(struct confdir *c) {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", c->dir);
        ASSERT_EQ(system(cmd), 0);
}

static void daemon_start_config(struct daemon *d, const char *config) {
        ASSERT_OK(setenv("ZSWAPD_TEST_CONFIG", config, 1));
        daemon_start(d);
        unsetenv("ZSWAPD_TEST_CONFIG");
}

/* The part of `targets --json` about pid, or NULL. */
static const char *targets_entry(const char *json, pid_t pid) {
        char pat[32];

        assert_json(json);
        snprintf(pat, sizeof(pat), "{\"pid\":%d,", pid);
        return strstr(json, pat);
}

/* Waits, for as long as a slow machine may need but boundedly, until the
 * policy has taken at least min_pages from pid. */
static uint64_t wait_evicted(const char *sock, pid_t pid, uint64_t min_pages) {
        for (int i = 0; i < 600; i++) {
                _cleanup_free_ char *out = ctl_ok(sock, CTL_ARGS(sock, "targets", "--json"));
                const char *t = targets_entry(out, pid);

                if (t && strncmp(strstr(t, "\"policy\":"), "\"policy\":\"50-test\"", 18) == 0 &&
                    json_u64(t, "evicted_pages") >= min_pages)
                        return json_u64(t, "evicted_pages");
                usleep(100000);
        }
        TEST_FAIL("the policy took fewer than %" PRIu64 " pages from %d", min_pages, pid);
}

static char *read_log(const struct daemon *d) {
        int fd = open(d->log, O_RDONLY | O_CLOEXEC);
        char *s;

        ASSERT_GE(fd, 0);
        s = fd_slurp(fd);
        close(fd);
        return s;
}

TEST(config_errors_refuse_start) {
        _cleanup_free_ char *out = NULL, *err = NULL;
        struct confdir c;
        char file[128];

        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c, "[Match]\nCgroupPath=/x\n\n[Policy]\nMemoryBudget=12X\n");
        ASSERT_NE(run_as(0, &out, &err,
                         (const char *const[]) { zswapd_path, "-s", "/tmp/zswapd-never.sock", "-c",
                                                 c.dir, NULL }),
                  0);
        if (!strstr(err, "policy.d/50-test.conf:5") || !strstr(err, "Refusing to start"))
                TEST_FAIL("expected file:line and a refusal in: %s", err);
        free(TAKE_PTR(out)), free(TAKE_PTR(err));

        confdir_remove(&c);

        /* A bad global file, named with -c FILE. */
        confdir_new(&c, "[Daemon]\nLogLevel=loud\n");
        snprintf(file, sizeof(file), "%s/zswapd.conf", c.dir);
        ASSERT_NE(run_as(0, &out, &err,
                         (const char *const[]) { zswapd_path, "-s", "/tmp/zswapd-never.sock", "-c",
                                                 file, NULL }),
                  0);
        if (!strstr(err, "zswapd.conf:2"))
                TEST_FAIL("expected zswapd.conf:2 in: %s", err);
        ASSERT_FALSE(can_connect("/tmp/zswapd-never.sock"));
        confdir_remove(&c);
}

/* The whole service: a policy matching a cgroup of the test's own attaches
 * to the target started there and reclaims from it on its own; every byte
 * comes back; a bad reload keeps the policy; disabling it by reload gives
 * the target back and reclaim stops. */
TEST(policy_attach_reclaim_reload) {
        _cleanup_free_ char *out = NULL, *err = NULL;
        char why[256];
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target t;
        uint64_t evicted;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\nMaxReclaimRate=256M/s\n"
                     "RefaultLimit=infinity\n",
                     g->name);
        target_cgroup = g;
        target_start(&t);
        target_cgroup = NULL;
        daemon_start_config(&d, c.dir);

        evicted = wait_evicted(d.sock, t.pid, 1024);
        fprintf(stderr, "policy took %" PRIu64 " pages\n", evicted);
        ASSERT_TRUE(target_verify(&t));

        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "policies", "--json"));
        assert_json(out);
        ASSERT_TRUE(strstr(out, "\"name\":\"50-test\"") && strstr(out, g->name));
        ASSERT_GT(json_u64(out, "reclaimed_bytes"), 0);
        free(TAKE_PTR(out));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "status"));
        ASSERT_TRUE(strstr(out, "50-test") && strstr(out, "POLICY") && strstr(out, "PID"));
        free(TAKE_PTR(out));
        /* Why the policy took it: the key and its pattern. */
        snprintf(why, sizeof(why), "\"match\":[{\"key\":\"CgroupPath\",\"pattern\":\"%s\"}]",
                 g->name);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
        if (!strstr(targets_entry(out, t.pid), why))
                TEST_FAIL("no %s in %s", why, out);
        free(TAKE_PTR(out));
        snprintf(why, sizeof(why), "CgroupPath=%s", g->name);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets"));
        ASSERT_TRUE(strstr(out, "MATCH") && strstr(out, why));
        free(TAKE_PTR(out));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "top", "-n", "2", "-d", "0.1"));
        ASSERT_TRUE(strstr(out, "50-test") && strstr(strstr(out, "50-test") + 1, "zswapd:"));
        free(TAKE_PTR(out));

        /* A bad reload is refused with the file and line; the policy stays. */
        policy_write(&c, "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=soon\n", g->name);
        ASSERT_NE(ctl(&out, &err, d.sock, "reload"), 0);
        if (!strstr(err, "50-test.conf:4") || !strstr(err, "kept the running configuration"))
                TEST_FAIL("expected file:line in: %s", err);
        free(TAKE_PTR(out)), free(TAKE_PTR(err));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
        ASSERT_TRUE(targets_entry(out, t.pid));
        free(TAKE_PTR(out));

        /* Disabled: detached, every page back, nothing taken any more. */
        policy_write(&c, "[Match]\nCgroupPath=%s\n[Policy]\nEnabled=no\n", g->name);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "reload"));
        ASSERT_TRUE(strstr(out, "reloaded"));
        free(TAKE_PTR(out));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
        ASSERT_FALSE(targets_entry(out, t.pid));
        free(TAKE_PTR(out));
        ASSERT_GE(rss_bytes(t.pid), TARGET_NONZERO);
        ASSERT_TRUE(target_verify(&t));
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", "--json"));
        evicted = json_u64(out, "evicted_pages");
        free(TAKE_PTR(out));
        usleep(2500000); /* two more control periods, and a rescan */
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", "--json"));
        ASSERT_EQ_U(json_u64(out, "evicted_pages"), evicted);
        ASSERT_EQ(json_u64(out, "targets"), 0);
        free(TAKE_PTR(out));

        target_stop(&t);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

/* MinColdAge=1s: the daemon age-scans the target (every second) and its
 * policy takes the pages untouched for a second once two scans have seen
 * them; the target's stats show the scans. */
TEST(policy_takes_pages_unused_for_min_cold_age) {
        _cleanup_free_ char *out = NULL, *log = NULL;
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target t;
        const char *te;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=1s\nMaxReclaimRate=256M/s\n"
                     "RefaultLimit=infinity\n",
                     g->name);
        target_cgroup = g;
        target_start(&t);
        target_cgroup = NULL;
        daemon_start_config(&d, c.dir);

        ASSERT_GE(wait_evicted(d.sock, t.pid, 1024), 1024);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "stats", "--json"));
        te = stats_target(out, t.pid);
        ASSERT_TRUE(te && strstr(te, "\"age\":{"));
        ASSERT_GE(json_u64(strstr(te, "\"age\":{"), "scans"), 2);
        free(TAKE_PTR(out));
        ASSERT_TRUE(target_verify(&t));
        log = read_log(&d);
        ASSERT_TRUE(strstr(log, "Age scan of"));

        target_stop(&t);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

/* MemoryBudget=50%: the policy reclaims until the group uses half of what
 * it used when first seen, less the margin under its low mark (1/16 of the
 * budget, policy.c), and holds there. The checks between periods take
 * part (they alone log "near or over budget"). */
TEST(budget_is_reached_and_held) {
        _cleanup_free_ char *out = NULL, *log = NULL;
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target t;
        uint64_t usage, budget, evicted;
        int i;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\nMemoryBudget=50%%\n"
                     "MaxReclaimRate=8M/s\nRefaultLimit=infinity\n",
                     g->name);
        target_cgroup = g;
        target_start(&t);
        target_cgroup = NULL;
        daemon_start_config(&d, c.dir);

        for (i = 0; i < 600; i++) {
                out = ctl_ok(d.sock, CTL_ARGS(d.sock, "policies", "--json"));
                if (strstr(out, "\"decision\":\"at budget\""))
                        break;
                free(TAKE_PTR(out));
                usleep(100000);
        }
        if (!out)
                TEST_FAIL("the policy never reached its budget; see %s", d.log);
        usage = json_u64(out, "usage_bytes");
        budget = json_u64(out, "budget_bytes");
        fprintf(stderr, "at budget: usage %" PRIu64 " KiB, budget %" PRIu64 " KiB\n", usage / 1024,
                budget / 1024);
        ASSERT_LE(usage, budget - budget / 16);
        free(TAKE_PTR(out));

        /* Held: an idle target under its budget loses nothing more. */
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
        evicted = json_u64(targets_entry(out, t.pid), "evicted_pages");
        free(TAKE_PTR(out));
        usleep(2500000);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
        ASSERT_EQ_U(json_u64(targets_entry(out, t.pid), "evicted_pages"), evicted);
        ASSERT_GT(evicted, 0);
        ASSERT_TRUE(target_verify(&t));
        log = read_log(&d);
        ASSERT_TRUE(strstr(log, "near or over budget (") != NULL);

        target_stop(&t);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

/* ---- the budget against a fast writer ------------------------------------------ */

/* A child that maps size bytes of fresh memory, says 'r', writes every
 * page of it as fast as it can on 'g' (each page a function of its
 * number), says 'd', then checks them on each 'v' as a target does. */
static void writer_start(struct target *w, size_t size) {
        int cmd[2], res[2];

        ASSERT_OK(pipe2(cmd, O_CLOEXEC));
        ASSERT_OK(pipe2(res, O_CLOEXEC));
        w->pid = fork();
        ASSERT_GE(w->pid, 0);
        if (w->pid == 0) {
                uint8_t *buf;
                char c;

                child_setup();
                if (target_cgroup && test_cgroup_enter(target_cgroup) < 0)
                        _exit(1);
                close(cmd[1]);
                close(res[0]);
                buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (buf == MAP_FAILED || write(res[1], "r", 1) != 1)
                        _exit(1);
                if (read(cmd[0], &c, 1) != 1 || c != 'g')
                        _exit(1);
                for (size_t p = 0; p < size / ZSW_PAGE_SIZE; p++) {
                        memset(buf + p * ZSW_PAGE_SIZE, (int) (p * 31 + 7) & 0xff, ZSW_PAGE_SIZE);
                        memcpy(buf + p * ZSW_PAGE_SIZE, &p, sizeof(p));
                }
                if (write(res[1], "d", 1) != 1)
                        _exit(1);
                while (read(cmd[0], &c, 1) == 1 && c == 'v') {
                        bool ok = true;

                        for (size_t p = 0; p < size / ZSW_PAGE_SIZE && ok; p++) {
                                const uint8_t *pg = buf + p * ZSW_PAGE_SIZE;

                                ok = memcmp(pg, &p, sizeof(p)) == 0 &&
                                     pg[sizeof(p)] == ((p * 31 + 7) & 0xff) &&
                                     pg[ZSW_PAGE_SIZE - 1] == ((p * 31 + 7) & 0xff);
                        }
                        if (write(res[1], ok ? "1" : "0", 1) != 1)
                                _exit(1);
                }
                _exit(0);
        }
        close(cmd[0]);
        close(res[1]);
        w->cmd = cmd[1];
        w->res = res[0];
        ASSERT_EQ(read(w->res, (char[1]) {}, 1), 1); /* mapped */
}

static void writer_go(struct target *w) {
        ASSERT_EQ(write(w->cmd, "g", 1), 1);
}

/* Waits until the writer has written every page. */
static void writer_wait_done(struct target *w) {
        char c;

        ASSERT_EQ(read(w->res, &c, 1), 1);
        ASSERT_EQ(c, 'd');
}

/* The group's memory counter: usage now, or its peak since the last
 * reset (v1 memory.max_usage_in_bytes, v2 memory.peak). */
static uint64_t group_memory(const struct test_cgroup *g, bool peak) {
        char path[256], buf[64] = "";
        unsigned long long v = 0;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", g->v1[0] ? g->v1 : g->v2,
                 g->v1[0] ? (peak ? "memory.max_usage_in_bytes" : "memory.usage_in_bytes")
                          : (peak ? "memory.peak" : "memory.current"));
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_GT(read(fd, buf, sizeof(buf) - 1), 0);
        close(fd);
        ASSERT_EQ(sscanf(buf, "%llu", &v), 1);
        return v;
}

/* A figure of the first-touch hold of pid, from `stats PID --json`. */
static uint64_t hold_figure(const char *sock, pid_t pid, const char *key) {
        _cleanup_free_ char *out = NULL;
        char pid_s[16];
        const char *t;

        snprintf(pid_s, sizeof(pid_s), "%d", pid);
        out = ctl_ok(sock, CTL_ARGS(sock, "stats", pid_s, "--json"));
        t = stats_target(out, pid);
        ASSERT_TRUE(t);
        t = strstr(t, "\"hold\":{");
        ASSERT_TRUE(t);
        return json_u64(t, key);
}

/* Whether `zswapctl stats PID` shows the hold's line. */
static bool hold_text_shown(const char *sock, pid_t pid) {
        _cleanup_free_ char *out = NULL;
        char pid_s[16];

        snprintf(pid_s, sizeof(pid_s), "%d", pid);
        out = ctl_ok(sock, CTL_ARGS(sock, "stats", pid_s));
        return strstr(out, "memory budget hold: ") && strstr(out, " faults held (");
}

/* A policy with an absolute budget of budget bytes on the group, started,
 * and returning once it holds pid's first touches at that budget. */
static void budget_daemon_start(struct daemon *d, struct confdir *c, const struct test_cgroup *g,
                                uint64_t budget, const char *rate, pid_t pid) {
        char pid_s[16];

        snprintf(pid_s, sizeof(pid_s), "%d", pid);
        confdir_new(c, "[Daemon]\nLogLevel=debug\n");
        policy_write(c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\nMemoryBudget=%" PRIu64 "\n"
                     "MaxReclaimRate=%s\nRefaultLimit=infinity\nPressureThreshold=some 100%%/10s\n",
                     g->name, budget, rate);
        daemon_start_config(d, c->dir);
        for (int i = 0; i < 600; i++) {
                _cleanup_free_ char *out = ctl_ok(d->sock, CTL_ARGS(d->sock, "targets", "--json"));

                if (targets_entry(out, pid) && hold_figure(d->sock, pid, "limit_bytes") == budget)
                        return;
                usleep(50000);
        }
        TEST_FAIL("the policy never held %d's first touches at its budget; see %s", pid, d->log);
}

/* A writer that fills fresh memory as fast as it can, four times its
 * budget's room, stays within 5% of the budget: its first touches at the
 * budget wait until reclaim has made room (the hold), so the peak does not
 * depend on how fast the writer runs against reclaim. The peak is the
 * group's own counter, the one the hold reads. */
TEST(budget_holds_against_a_fast_writer) {
        const size_t size = 128u << 20;
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target w;
        uint64_t budget, peak;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        if (!g->v1[0])
                TEST_SKIP("needs a v1 memory group, whose peak can be reset (v2's memory.peak "
                          "counts from the group's start)");
        target_cgroup = g;
        writer_start(&w, size);
        target_cgroup = NULL;
        budget = group_memory(g, false) + (32u << 20);
        budget_daemon_start(&d, &c, g, budget, "infinity", w.pid);
        /* Attached (its mapping registered): every first touch from now
         * on is the engine's to hold. */
        test_cgroup_write(g->v1, "memory.max_usage_in_bytes", "0");
        writer_go(&w);
        writer_wait_done(&w);
        peak = group_memory(g, true);
        fprintf(stderr,
                "budget %" PRIu64 " KiB, peak %" PRIu64 " KiB, %" PRIu64 " faults held, "
                "%" PRIu64 " of them let go at the bound\n",
                budget / 1024, peak / 1024, hold_figure(d.sock, w.pid, "held_faults"),
                hold_figure(d.sock, w.pid, "timeouts"));
#if !ZSW_THREAD_SANITIZER
        /* Under TSan the writer (a fork of this program) also fills the
         * runtime's shadow of its buffer: memory of the group that no
         * fault shows, so no hold can bound it. */
        ASSERT_LE(peak, budget + budget / 20);
#endif
        /* It got there by being held, not by a slow writer. */
        ASSERT_GT(hold_figure(d.sock, w.pid, "held_faults"), 0);
        ASSERT_TRUE(hold_text_shown(d.sock, w.pid));
        ASSERT_TRUE(target_verify(&w));

        target_stop(&w);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

/* A writer held for good (its budget leaves 8 MiB of room and the policy
 * may not reclaim: MaxReclaimRate of a byte a second), with a fault
 * parked, is let go by detach, and by the daemon's stop: it then writes
 * the rest of its pages (at one page per 100 ms, the bound of a hold,
 * 56 MiB would take 20 minutes) and every byte checks. */
static void held_writer_released(bool by_stop) {
        const size_t size = 64u << 20;
        _cleanup_free_ char *out = NULL;
        char pid_s[16];
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target w;
        uint64_t budget;
        int i;

        g = test_cgroup_new(0);
        target_cgroup = g;
        writer_start(&w, size);
        target_cgroup = NULL;
        budget = group_memory(g, false) + (8u << 20);
        budget_daemon_start(&d, &c, g, budget, "1", w.pid);
        writer_go(&w);
        for (i = 0; i < 600 && hold_figure(d.sock, w.pid, "held_now") == 0; i++)
                usleep(50000);
        ASSERT_LT(i, 600);
        if (by_stop)
                ASSERT_EQ(daemon_stop(&d, SIGTERM), 0);
        else {
                snprintf(pid_s, sizeof(pid_s), "%d", w.pid);
                free(ctl_ok(d.sock, CTL_ARGS(d.sock, "detach", pid_s)));
                out = ctl_ok(d.sock, CTL_ARGS(d.sock, "targets", "--json"));
                ASSERT_FALSE(targets_entry(out, w.pid));
        }
        writer_wait_done(&w);
        ASSERT_TRUE(target_verify(&w));

        target_stop(&w);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

TEST(held_first_touches_go_on_detach) {
        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        held_writer_released(false);
}

TEST(held_first_touches_go_on_daemon_stop) {
        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        held_writer_released(true);
}

/* A real pressure source in the policy's group: a child re-reads a file
 * much larger than what the group's limit leaves beside the target. The
 * group stalls (its own memory.pressure says so), the group's PSI trigger
 * reaches the daemon, and it backs off for that reason at once, which its
 * log and `policies` show (a backoff from the averages, one period later,
 * is not enough: triggers once never reached the policies). */
TEST(pressure_makes_the_policy_back_off) {
        char path[256], psi[256];
        _cleanup_free_ char *out = NULL, *log = NULL;
        ssize_t n;
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target t;
        uint64_t backoffs_before, backoffs = 0, triggers = 0;
        int status, fd, file;
        pid_t thrash;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        file = test_thrash_file_create(128u << 20);
        ASSERT_OK(file);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\nMaxReclaimRate=64M/s\n"
                     "RefaultLimit=infinity\nPressureThreshold=some 2%%/2s\n",
                     g->name);
        target_cgroup = g;
        target_start(&t);
        target_cgroup = NULL;
        /* Room for 8 MiB of page cache beside the target: the file is 16
         * times that. (16 MiB of room can leave too little pressure: the
         * group's usage also shrinks as the policy takes the target's
         * pages, which widens the room.) */
        test_cgroup_limit_to_usage(g, 8u << 20);
        daemon_start_config(&d, c.dir);
        (void) wait_evicted(d.sock, t.pid, 1);
        out = ctl_ok(d.sock, CTL_ARGS(d.sock, "policies", "--json"));
        backoffs_before = json_u64(out, "backoffs");
        free(TAKE_PTR(out));

        thrash = fork();
        ASSERT_GE(thrash, 0);
        if (thrash == 0) {
                child_setup();
                if (test_cgroup_enter(g) < 0)
                        _exit(2);
                test_thrash_read(file, 0);
                _exit(0);
        }
        for (int i = 0; i < 600 && (backoffs <= backoffs_before || triggers == 0); i++) {
                usleep(100000);
                out = ctl_ok(d.sock, CTL_ARGS(d.sock, "policies", "--json"));
                backoffs = json_u64(out, "backoffs");
                triggers = json_u64(out, "trigger_events");
                if (backoffs > backoffs_before && triggers > 0)
                        fprintf(stderr, "policies: %s", out);
                free(TAKE_PTR(out));
        }
        log = read_log(&d);
        if (backoffs <= backoffs_before || triggers == 0) {
                snprintf(path, sizeof(path), "%s/memory.pressure", g->v2);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                n = fd >= 0 ? read(fd, psi, sizeof(psi) - 1) : -1;
                psi[MAX(n, (ssize_t) 0)] = 0;
                TEST_FAIL("%" PRIu64 " backoffs, %" PRIu64 " trigger events in 60 s; the group's "
                          "memory.pressure: %s; daemon log: %s",
                          backoffs - backoffs_before, triggers, psi, log);
        }
        if (!strstr(log, "backing off (PSI trigger)"))
                TEST_FAIL("no backoff for the group's PSI trigger in the log %s", d.log);

        /* What the kernel measured in the group meanwhile. */
        snprintf(path, sizeof(path), "%s/memory.pressure", g->v2);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        n = read(fd, psi, sizeof(psi) - 1); /* kernfs: one read, no seeking to the end */
        ASSERT_GT(n, 0);
        psi[n] = 0;
        close(fd);
        fprintf(stderr, "%s: %s", path, psi);
        ASSERT_TRUE(strncmp(psi, "some avg10=", 11) == 0 && !strstr(psi, "total=0\n"));

        kill(thrash, SIGKILL);
        ASSERT_EQ(waitpid(thrash, &status, 0), thrash);
        /* The pressure is measured. The target's pages coming back must
         * not depend on the kernel reclaiming the file's cache in time:
         * on a loaded machine the group's OOM killer took the target. */
        test_cgroup_unlimit(g);
        ASSERT_TRUE(target_verify(&t));
        target_stop(&t);
        daemon_cleanup(&d);
        confdir_remove(&c);
        close(file);
        test_cgroup_free(g);
}

/* ---- the service: per-policy settings, the reclaim worker, the journal ----------- */

/* Writes policy file NAME.conf of c with the given text. */
_printf_(3, 4) static void policy_write_named(struct confdir *c, const char *name, const char *fmt,
                                              ...) {
        char path[192], text[1024];
        va_list ap;
        int fd, n;

        va_start(ap, fmt);
        n = vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        snprintf(path, sizeof(path), "%s/policy.d/%s.conf", c->dir, name);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, text, n), n);
        close(fd);
}

/* `stats PID --json` of pid, or NULL while it is not attached. */
static char *target_stats(const char *sock, pid_t pid) {
        char pid_s[16], *out = NULL, *err = NULL;
        int r;

        snprintf(pid_s, sizeof(pid_s), "%d", pid);
        r = ctl(&out, &err, sock, "stats", pid_s, "--json");
        free(err);
        if (r != 0) {
                free(out);
                return NULL;
        }
        ASSERT_TRUE(stats_target(out, pid));
        return out;
}

/* Waits, boundedly, until the stats of pid satisfy done(); returns them. */
static char *wait_target(const char *sock, pid_t pid, bool (*done)(const char *stats),
                         const char *what) {
        for (int i = 0; i < 600; i++) {
                char *out = target_stats(sock, pid);

                if (out && done(stats_target(out, pid)))
                        return out;
                free(out);
                usleep(100000);
        }
        TEST_FAIL("target %d: %s never happened", pid, what);
}

static bool took_a_lot(const char *t) {
        return json_u64(t, "evicted_pages") >= 2048;
}

static bool refused_for_writeback_off(const char *t) {
        return json_u64(t, "refused_writeback_off") > 0 && json_u64(t, "evicted_pages") > 0;
}

static bool wrote_back(const char *t) {
        return json_u64(t, "written_back_pages") > 0;
}

static double payload_per_page(const char *t) {
        uint64_t pages = json_u64(t, "stored_pages") - json_u64(t, "same_filled_pages");

        ASSERT_GT(pages, 0);
        return (double) json_u64(t, "payload_bytes") / (double) pages;
}

/* Three policies in one daemon, three targets of the same content: each
 * gets its own policy's compressor, prefetch window, pool limit and
 * writeback, as the engine's per-target stats show and its behaviour
 * proves. */
TEST(policy_settings_apply_per_target) {
        _cleanup_free_ char *sa = NULL, *sb = NULL, *sc = NULL, *global = NULL;
        struct test_cgroup *ga, *gb, *gc;
        struct target ta, tb, tc;
        struct confdir c;
        struct daemon d;
        const char *a, *b, *cc;
        double ppa, ppb;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        ga = test_cgroup_new(0);
        gb = test_cgroup_new(0);
        gc = test_cgroup_new(0);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        ASSERT_GT(asprintf(&global,
                           "[Daemon]\nLogLevel=debug\n[Writeback]\nEnabled=yes\n"
                           "Swapfile=%s\nSwapfileSize=64M\n%s",
                           c.dir, QUIET_SYSTEM_PRESSURE),
                  0);
        {
                char path[128];
                int fd;

                snprintf(path, sizeof(path), "%s/zswapd.conf", c.dir);
                fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
                ASSERT_GE(fd, 0);
                ASSERT_EQ(write(fd, global, strlen(global)), (ssize_t) strlen(global));
                close(fd);
        }
#define COMMON "MinColdAge=0\nMaxReclaimRate=256M/s\nRefaultLimit=infinity\n"
        policy_write_named(&c, "10-a",
                           "[Match]\nCgroupPath=%s\n[Policy]\n" COMMON
                           "Compressor=lz4\nPrefetchWindow=0\n",
                           ga->name);
        policy_write_named(&c, "20-b",
                           "[Match]\nCgroupPath=%s\n[Policy]\n" COMMON
                           "Compressor=zstd\nCompressionLevel=9\nPrefetchWindow=8\n"
                           "PoolLimit=2M\nWriteback=no\n",
                           gb->name);
        policy_write_named(&c, "30-c",
                           "[Match]\nCgroupPath=%s\n[Policy]\n" COMMON
                           "PoolLimit=1M\nWriteback=yes\n",
                           gc->name);
#undef COMMON
        target_cgroup = ga;
        target_start(&ta);
        target_cgroup = gb;
        target_start(&tb);
        target_cgroup = gc;
        target_start(&tc);
        target_cgroup = NULL;
        daemon_start_config(&d, c.dir);

        sa = wait_target(d.sock, ta.pid, took_a_lot, "a large reclaim");
        sb = wait_target(d.sock, tb.pid, refused_for_writeback_off, "a refusal at its limit");
        sc = wait_target(d.sock, tc.pid, wrote_back, "writeback at its limit");
        a = stats_target(sa, ta.pid);
        b = stats_target(sb, tb.pid);
        cc = stats_target(sc, tc.pid);
        fprintf(stderr, "a: %s\nb: %s\nc: %s\n", a, b, cc);

        /* The settings as the engine applied them. */
        ASSERT_TRUE(strstr(a, "\"compressor\":\"lz4\"") && strstr(b, "\"compressor\":\"zstd\""));
        ASSERT_EQ(json_u64(b, "compression_level"), 9);
        ASSERT_EQ(json_u64(a, "prefetch_window"), 0);
        ASSERT_EQ(json_u64(b, "prefetch_window"), 8);
        ASSERT_EQ(json_u64(a, "max_pool_pages"), 0);
        ASSERT_EQ_U(json_u64(b, "max_pool_pages"), (2u << 20) / ZSW_PAGE_SIZE);
        ASSERT_TRUE(strstr(b, "\"writeback_allowed\":\"no\""));

        /* Compressor: the same content, zstd's payload clearly smaller. */
        ppa = payload_per_page(a);
        ppb = payload_per_page(b);
        fprintf(stderr, "payload per page: lz4 %.0f, zstd-9 %.0f bytes\n", ppa, ppb);
        ASSERT_TRUE(ppb < ppa * 0.9);

        /* Pool limit, for that target only: b is held at its 512 pages
         * and refused (no writeback), c writes back, a has neither. */
        ASSERT_GT(json_u64(a, "stored_pages") - json_u64(a, "same_filled_pages"), 512);
        ASSERT_EQ(json_u64(a, "refused_limit") + json_u64(a, "refused_writeback_off"), 0);
        ASSERT_EQ(json_u64(a, "written_back_pages"), 0);
        ASSERT_EQ(json_u64(b, "written_back_pages"), 0);
        ASSERT_GT(json_u64(cc, "written_back_pages"), 0);

        /* Prefetch: reading everything back in order brings neighbours
         * along for b, never for a. */
        ASSERT_TRUE(target_verify(&ta));
        ASSERT_TRUE(target_verify(&tb));
        ASSERT_TRUE(target_verify(&tc));
        free(TAKE_PTR(sa));
        free(TAKE_PTR(sb));
        sa = target_stats(d.sock, ta.pid);
        sb = target_stats(d.sock, tb.pid);
        ASSERT_TRUE(sa && sb);
        fprintf(stderr, "prefetched: a %" PRIu64 ", b %" PRIu64 "\n",
                json_u64(stats_target(sa, ta.pid), "prefetched_pages"),
                json_u64(stats_target(sb, tb.pid), "prefetched_pages"));
        ASSERT_EQ(json_u64(stats_target(sa, ta.pid), "prefetched_pages"), 0);
        ASSERT_GT(json_u64(stats_target(sb, tb.pid), "prefetched_pages"), 0);

        target_stop(&ta);
        target_stop(&tb);
        target_stop(&tc);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(ga);
        test_cgroup_free(gb);
        test_cgroup_free(gc);
}

/* MaxReclaimRate=256K/s: no reclaim takes more than the credit the rate
 * gave it, and the probing step itself never grows past the rate's share
 * of a period (the target's 1/64 would be more), so that a backoff's
 * halving takes effect at once. */
TEST(reclaim_rate_is_capped) {
        struct test_cgroup *g;
        struct confdir c;
        struct daemon d;
        struct target t;
        unsigned seen = 0;

        if (!test_cgroups_usable())
                TEST_SKIP("needs a writable cgroup tree");
        g = test_cgroup_new(0);
        confdir_new(&c, "[Daemon]\nLogLevel=debug\n");
        policy_write(&c,
                     "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\nMaxReclaimRate=256K/s\n"
                     "RefaultLimit=infinity\n",
                     g->name);
        target_cgroup = g;
        target_start(&t);
        target_cgroup = NULL;
        daemon_start_config(&d, c.dir);

        for (int i = 0; i < 600 && seen < 3; i++) {
                _cleanup_free_ char *out = ctl_ok(d.sock, CTL_ARGS(d.sock, "policies", "--json"));
                uint64_t last = json_u64(out, "reclaimed_last_bytes");
                uint64_t cap = json_u64(out, "rate_cap_last_bytes");

                ASSERT_LE(json_u64(out, "step_bytes"), 256 * 1024);
                if (json_u64(out, "periods") > 0 && cap > 0) {
                        ASSERT_LE(last, cap);
                        if (last > 0)
                                seen++;
                }
                usleep(200000);
        }
        if (seen < 3)
                TEST_FAIL("the capped policy reclaimed too seldom; see %s", d.log);
        ASSERT_TRUE(target_verify(&t));
        target_stop(&t);
        daemon_cleanup(&d);
        confdir_remove(&c);
        test_cgroup_free(g);
}

/* A numeric field ("TracerPid:", "PPid:") of /proc/PID/status. */
static pid_t status_field(pid_t pid, const char *field) {
        char path[64], line[256];
        pid_t v = -1;
        size_t len = strlen(field);
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, field, len) == 0 && sscanf(line + len, "%d", &v) == 1)
                        break;
        fclose(f);
        return v;
}

static pid_t tracer_of(pid_t pid) {
        return status_field(pid, "TracerPid:");
}

static bool readable(int fd, int timeout_ms) {
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return poll(&p, 1, timeout_ms) == 1;
}

/* A process of tests/vfork-target.c, talked to through its stdin/stdout. */
static pid_t vfork_target_start(int *ret_in, int *ret_out) {
        const char *path = getenv("ZSWAPD_TEST_VFORK_TARGET");
        int in[2], out[2];
        pid_t pid;
        char c;

        if (!path)
                TEST_SKIP("$ZSWAPD_TEST_VFORK_TARGET is not set");
        ASSERT_OK(pipe2(in, O_CLOEXEC));
        ASSERT_OK(pipe2(out, O_CLOEXEC));
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                child_setup();
                dup2(in[0], STDIN_FILENO);
                dup2(out[1], STDOUT_FILENO);
                execl(path, path, NULL);
                _exit(98);
        }
        close(in[0]);
        close(out[1]);
        ASSERT_EQ(read(out[0], &c, 1), 1);
        ASSERT_EQ(c, 'r');
        *ret_in = in[1];
        *ret_out = out[0];
        return pid;
}

static char proc_state(pid_t pid) {
        char path[64], stat[512], *p;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        n = read(fd, stat, sizeof(stat) - 1);
        close(fd);
        ASSERT_GT(n, 0);
        stat[n] = 0;
        p = strrchr(stat, ')');
        ASSERT_TRUE(p && p[1] == ' ');
        return p[2];
}

/* A reclaim that cannot finish (its target sits in vfork, so its ptrace
 * stop waits) does not hold up the control socket: stats are answered
 * while the reclaim is still running, and the reclaim's own reply comes
 * after, once the target is let go. Ordering, not time. */
TEST(control_socket_answers_during_a_reclaim) {
        char req[64], buf[4096], task[64], pid_s[16], c;
        _cleanup_free_ char *out = NULL;
        int fd, tin, tout, status;
        struct daemon d;
        pid_t t, tracer;
        ssize_t n;

        daemon_start(&d);
        t = vfork_target_start(&tin, &tout);
        snprintf(pid_s, sizeof(pid_s), "%d", t);
        free(ctl_ok(d.sock, CTL_ARGS(d.sock, "attach", pid_s)));

        ASSERT_EQ(write(tin, "f", 1), 1);
        for (int i = 0; proc_state(t) != 'D'; i++) {
                if (i == 6000)
                        TEST_FAIL("target %d never waited for its vfork child", t);
                usleep(10000);
        }

        fd = connect_seqpacket(d.sock);
        snprintf(req, sizeof(req), "reclaim %d all json", t);
        ASSERT_EQ(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t) strlen(req));
        /* The reclaim is under way once a tracer of the daemon's (a
         * task it started, or under ThreadSanitizer a thread; not its
         * main loop) is the target's. */
        for (int i = 0; i < 6000 && tracer_of(t) <= 0; i++)
                usleep(10000);
        tracer = tracer_of(t);
        snprintf(task, sizeof(task), "/proc/%d/task/%d", d.pid, tracer);
        ASSERT_GT(tracer, 0);
        ASSERT_NE(tracer, d.pid);
        ASSERT_TRUE(access(task, F_OK) == 0 || status_field(tracer, "PPid:") == d.pid);

        out = request(d.sock, "stats json");
        ASSERT_TRUE(strncmp(out, "ok\n", 3) == 0);
        ASSERT_TRUE(stats_target(out + 3, t));
        free(TAKE_PTR(out));
        out = request(d.sock, "status");
        ASSERT_TRUE(strncmp(out, "ok\n", 3) == 0);

        /* A thread that does not stop within the deadline (here, until
         * its vfork child exits) fails the reclaim, saying why; nothing
         * of the round was taken. */
        ASSERT_TRUE(readable(fd, 120000));
        n = recv(fd, buf, sizeof(buf) - 1, 0);
        ASSERT_GT(n, 0);
        buf[n] = 0;
        if (strncmp(buf, "error ETIMEDOUT\n", 16) != 0 || !strstr(buf, "uninterruptible sleep") ||
            !strstr(buf, "clone"))
                TEST_FAIL("reclaim of a target held in vfork: %s", buf);
        ASSERT_EQ(proc_state(t), 'D');
        ASSERT_EQ(tracer_of(t), 0);
        ASSERT_EQ(write(tin, "x", 1), 1); /* the vfork child exits */
        close(fd);

        /* Every byte, checked by the target itself. */
        ASSERT_EQ(read(tout, &c, 1), 1);
        ASSERT_EQ(c, '1');
        close(tin);
        close(tout);
        ASSERT_EQ(waitpid(t, &status, 0), t);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        daemon_cleanup(&d);
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: %s ZSWAPD ZSWAPCTL [TEST...]\n", argv[0]);
                return EXIT_FAILURE;
        }
        test_pid = getpid();
        zswapd_path = argv[1];
        zswapctl_path = argv[2];
        if (geteuid() != 0)
                TEST_SKIP("needs root: the daemon ptraces its targets");

        /* Test names follow the two paths. */
        return test_run_cases(argc - 2, argv + 2);
}
