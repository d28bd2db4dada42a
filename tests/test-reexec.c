/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * `zswapctl reexec` on the real zswapd (first argument) and zswapctl
 * (second), with real targets (zswapd-test-target): the process stays the
 * same, no page goes back to any target (a multi-threaded one that keeps
 * writing, a fork family made after attach, pages written back to the
 * swapfile), every byte reads back afterwards, a thread blocked in a fault
 * when the re-exec is asked for resumes with its data, and a re-exec that
 * cannot happen leaves zswapd serving as before.
 */
#define TEST_NO_MAIN
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/userfaultfd.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "test.h"
#include "test-disk.h"
#include "test-procs.h"
#include "target-client.h"

#define TARGET_MIB 24 /* as the fill commands say */
#define TARGET_PAGES (TARGET_MIB * 256ull)

static const char *zswapd_path, *zswapctl_path;

struct daemon {
        char dir[64], sock[96], log[96];
        pid_t pid;
};

/* Starts zswapd (the binary at exe) in d's directory; with state (len
 * bytes), as if a re-exec had handed that state over. */
static void daemon_exec(struct daemon *d, const char *exe, const void *state, size_t len) {
        int status;

        guard_log = d->log;
        d->pid = fork();
        ASSERT_GE(d->pid, 0);
        if (d->pid == 0) {
                int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(fd, STDERR_FILENO);
                /* Killed by SIGSEGV or SIGABRT on purpose: no core file,
                 * and the signal's own action, as in a build without
                 * AddressSanitizer (whose SIGSEGV handler can wait for
                 * good on a lock the interrupted thread holds). */
                setrlimit(RLIMIT_CORE, &(struct rlimit) { 0, 0 });
                if (getenv("ASAN_OPTIONS")) {
                        char opts[512];

                        snprintf(opts, sizeof(opts), "%s:handle_segv=0", getenv("ASAN_OPTIONS"));
                        setenv("ASAN_OPTIONS", opts, 1);
                }
                if (state) {
                        int sfd = memfd_create("state", 0);
                        char num[16];

                        if (sfd < 0 || write(sfd, state, len) != (ssize_t) len ||
                            lseek(sfd, 0, SEEK_SET) < 0)
                                _exit(97);
                        snprintf(num, sizeof(num), "%d", sfd);
                        setenv("ZSWAPD_REEXEC_STATE", num, 1);
                }
                execl(exe, exe, "--socket", d->sock, "--config", d->dir, NULL);
                _exit(98);
        }
        while (!can_connect(d->sock)) {
                if (waitpid(d->pid, &status, WNOHANG) == d->pid)
                        TEST_FAIL("zswapd exited with status %d at start-up; see %s", status,
                                  d->log);
                usleep(10000);
        }
        /* Bound before it takes a dead zswapd's state over: answered only
         * once it serves. */
        ASSERT_EQ(run_zswapctl(zswapctl_path, d->sock, NULL, NULL,
                               (const char *const[]) { "status", NULL }),
                  0);
}

/* Starts zswapd (the binary at exe) with conf as its zswapd.conf in a
 * new directory; with state (len bytes), as if a re-exec had handed that
 * state over. */
static void daemon_start_with(struct daemon *d, const char *exe, const char *conf,
                              const void *state, size_t len) {
        char path[128];
        FILE *f;

        snprintf(d->dir, sizeof(d->dir), "/var/tmp/zswapd-reexec.XXXXXX");
        ASSERT_TRUE(mkdtemp(d->dir));
        snprintf(d->sock, sizeof(d->sock), "%s/ctl.sock", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        snprintf(path, sizeof(path), "%s/zswapd.conf", d->dir);
        f = fopen(path, "we");
        ASSERT_TRUE(f);
        fputs(conf, f);
        ASSERT_OK(fclose(f));
        daemon_exec(d, exe, state, len);
}

static void daemon_start(struct daemon *d, const char *exe, const char *conf) {
        daemon_start_with(d, exe, conf, NULL, 0);
}

static char *daemon_log(const struct daemon *d) {
        int fd = open(d->log, O_RDONLY | O_CLOEXEC);
        char *s;

        ASSERT_GE(fd, 0);
        s = fd_slurp(fd);
        close(fd);
        return s;
}

/* SIGTERM: every page goes back, zswapd exits 0; its directory stays. */
static void daemon_stop_keep_dir(struct daemon *d) {
        int status;

        ASSERT_OK(kill(d->pid, SIGTERM));
        ASSERT_EQ(waitpid(d->pid, &status, 0), d->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void daemon_stop(struct daemon *d) {
        char cmdline[256];

        daemon_stop_keep_dir(d);
        snprintf(cmdline, sizeof(cmdline), "rm -rf '%s'", d->dir);
        ASSERT_EQ(system(cmdline), 0);
}

/* Runs zswapctl -s SOCK ARGS...; its exit status, its output (standard
 * output, then standard error) in *out. */
static int ctl(const struct daemon *d, char **out, const char *const args[]) {
        _cleanup_free_ char *o = NULL, *e = NULL;
        int r = run_zswapctl(zswapctl_path, d->sock, &o, &e, args);

        ASSERT_GE(asprintf(out, "%s%s", o, e), 0);
        return r;
}

/* Not inlined: gcc 12 at -O3 then takes the string it returns for a
 * pointer to its local out (-Wdangling-pointer, a false positive). */
static __attribute__((noinline)) char *ctl_ok(const struct daemon *d, const char *const args[]) {
        char *out;

        if (ctl(d, &out, args) != 0)
                TEST_FAIL("zswapctl %s failed: %s", args[0], out);
        return out;
}

/* key's value in s, after the object of pid (0: the first, the global one). */
static uint64_t json_u64(const char *s, pid_t pid, const char *key) {
        char pat[64];
        const char *p;

        if (pid) {
                snprintf(pat, sizeof(pat), "\"pid\":%d,", pid);
                s = strstr(s, pat);
                if (!s)
                        TEST_FAIL("no target %d in the stats", pid);
        }
        snprintf(pat, sizeof(pat), "\"%s\":", key);
        p = strstr(s, pat);
        if (!p)
                TEST_FAIL("no %s in %s", key, s);
        return strtoull(p + strlen(pat), NULL, 10);
}

/* A figure of one target, or of the store ("global") with pid 0. */
static uint64_t stat_of(const struct daemon *d, pid_t pid, const char *key) {
        char p[16];
        char *out;
        uint64_t v;

        snprintf(p, sizeof(p), "%d", pid);
        out = ctl_ok(d, pid ? (const char *const[]) { "stats", p, "--json", NULL }
                            : (const char *const[]) { "stats", "--json", NULL });
        v = json_u64(out, pid, key);
        free(out);
        return v;
}

static void attach(const struct daemon *d, pid_t pid) {
        char p[16];

        snprintf(p, sizeof(p), "%d", pid);
        free(ctl_ok(d, (const char *const[]) { "attach", p, NULL }));
}

static void reclaim_all(const struct daemon *d, pid_t pid) {
        char p[16];

        snprintf(p, sizeof(p), "%d", pid);
        free(ctl_ok(d, (const char *const[]) { "reclaim", p, "--all", NULL }));
}

/* Whether zswapd serves pid (a fork child is served once it is named). */
static bool served(const struct daemon *d, pid_t pid) {
        char p[16], *out;
        int r;

        snprintf(p, sizeof(p), "%d", pid);
        r = ctl(d, &out, (const char *const[]) { "stats", p, "--json", NULL });
        free(out);
        return r == 0;
}

static uint64_t rss_anon_kb(pid_t pid) {
        char path[64], line[256];
        uint64_t kb = UINT64_MAX;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "RssAnon: %" SCNu64, &kb) == 1)
                        break;
        fclose(f);
        ASSERT_NE(kb, UINT64_MAX);
        return kb;
}

static void reexec_ok(const struct daemon *d) {
        char *out = ctl_ok(d, (const char *const[]) { "reexec", NULL });
        char want[32];

        snprintf(want, sizeof(want), "(pid %d)", d->pid);
        if (!strstr(out, "re-executed") || !strstr(out, want))
                TEST_FAIL("unexpected reply to reexec: %s", out);
        free(out);
        /* Still our child, still running: the same process. */
        ASSERT_EQ(waitpid(d->pid, NULL, WNOHANG), 0);
}

/* Targets in every state that matters to a handover: pages in memory
 * and on disk (an 8 MiB pool limit with writeback), a fork family that
 * shares its pages and dictionary, one that keeps writing with 4 threads,
 * and (with a reader) one whose pages are all taken, to fault them back
 * at the handover. The quiet ones (parent, child, quiet) are the ones
 * whose stored pages, dictionary and resident memory must not change. */
struct fixture {
        struct daemon d;
        struct target *writer, *parent, *quiet, *reader;
        pid_t quiet_pids[3];
        uint64_t stored[3], rss[3], dict[3];
};

static void fixture_start(struct fixture *fx, bool with_reader) {
        pid_t child;

        daemon_start(&fx->d, zswapd_path,
                     "[Store]\nIncompressible=keep\n[Pool]\nLimit=8M\n"
                     "[Writeback]\nEnabled=yes\nSwapfile=/var/tmp\n"
                     "SwapfileSize=256M\n");
        fx->writer = target_start("--synthetic");
        fx->parent = target_start(NULL);
        fx->quiet = target_start(NULL);
        fx->reader = with_reader ? target_start(NULL) : NULL;
        cmd_ok(fx->writer, "fill 24");
        cmd_ok(fx->parent, "fill 24 10");
        cmd_ok(fx->quiet, "fill 24");
        if (fx->reader)
                cmd_ok(fx->reader, "fill 24");
        attach(&fx->d, fx->writer->pid);
        attach(&fx->d, fx->parent->pid);
        attach(&fx->d, fx->quiet->pid);
        if (fx->reader)
                attach(&fx->d, fx->reader->pid);
        reclaim_all(&fx->d, fx->parent->pid);
        /* Forked after its pages were taken: parent and child share them. */
        child = (pid_t) field(cmd_ok(fx->parent, "fork-hold"), "child");
        while (!served(&fx->d, child))
                usleep(10000);
        reclaim_all(&fx->d, fx->quiet->pid);
        if (fx->reader)
                reclaim_all(&fx->d, fx->reader->pid);
        reclaim_all(&fx->d, fx->writer->pid);
        cmd_ok(fx->writer, "threads 4");

        /* The pool limit sent the coldest pages to the swapfile. */
        ASSERT_GT(stat_of(&fx->d, 0, "disk_pages"), 0);
        fx->quiet_pids[0] = fx->parent->pid;
        fx->quiet_pids[1] = child;
        fx->quiet_pids[2] = fx->quiet->pid;
        for (int i = 0; i < 3; i++) {
                fx->stored[i] = stat_of(&fx->d, fx->quiet_pids[i], "stored_pages");
                fx->rss[i] = rss_anon_kb(fx->quiet_pids[i]);
                fx->dict[i] = stat_of(&fx->d, fx->quiet_pids[i], "dictionary_bytes");
                ASSERT_GT(fx->stored[i], 0);
        }
        /* The parent's family stored its 5,000 pages before the pool
         * filled: it has a dictionary (from 1,024 pages), which a handover
         * must carry; how many of its pages the last target stored before
         * the pool limit depends on writeback's pace. */
        ASSERT_GT(fx->dict[0], 0);
        ASSERT_EQ_U(fx->dict[1], fx->dict[0]);
}

/* After a handover: the quiet ones are served with every page they had,
 * their dictionary, and none came back; the writer is served. */
static void fixture_check_kept(struct fixture *fx) {
        for (int i = 0; i < 3; i++) {
                ASSERT_EQ_U(stat_of(&fx->d, fx->quiet_pids[i], "stored_pages"), fx->stored[i]);
                ASSERT_EQ_U(stat_of(&fx->d, fx->quiet_pids[i], "dictionary_bytes"), fx->dict[i]);
                ASSERT_LE(rss_anon_kb(fx->quiet_pids[i]), fx->rss[i] + 64);
        }
        ASSERT_TRUE(served(&fx->d, fx->writer->pid));
}

/* Every byte of every target, then stop gives everything back. */
static void fixture_finish(struct fixture *fx) {
        field(cmd_ok(fx->writer, "stop"), "writes");
        expect_verify(fx->writer, TARGET_PAGES, 0);
        expect_verify(fx->parent, TARGET_PAGES, 0);
        expect_verify(fx->quiet, TARGET_PAGES, 0);
        ASSERT_EQ_U(field(cmd_ok(fx->parent, "fork-release"), "good"), TARGET_PAGES);
        ASSERT_EQ_U(field(fx->parent->line, "bad"), 0);
        reclaim_all(&fx->d, fx->quiet->pid);
        daemon_stop(&fx->d);
        expect_verify(fx->quiet, TARGET_PAGES, 0);
        target_exit(fx->writer);
        target_exit(fx->parent);
        target_exit(fx->quiet);
        if (fx->reader)
                target_exit(fx->reader);
}

/* After the re-exec nothing came back, all is there; once more with the
 * new binary, while the writer writes. */
static void test_reexec_keeps_every_page(void) {
        struct fixture fx;

        fixture_start(&fx, false);
        reexec_ok(&fx.d);
        fixture_check_kept(&fx);
        reexec_ok(&fx.d);
        fixture_finish(&fx);
}

static bool in_userfault(pid_t pid) {
        char path[64], wchan[64] = "";
        int fd;
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        n = read(fd, wchan, sizeof(wchan) - 1);
        close(fd);
        return n > 0 && strncmp(wchan, "handle_userfault", 16) == 0;
}

/* A thread waiting in a fault when the re-exec is asked for (zswapd
 * stopped meanwhile, so nobody serves it) gets its page from the new
 * process. */
static void test_reexec_wakes_a_thread_blocked_in_a_fault(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct daemon d;
        struct target *t;
        char reply[512];
        ssize_t n;
        int fd;

        daemon_start(&d, zswapd_path, "");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        reclaim_all(&d, t->pid);

        ASSERT_OK(kill(d.pid, SIGSTOP));
        fprintf(t->in, "verify\n");
        fflush(t->in);
        while (!in_userfault(t->pid))
                usleep(1000);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", d.sock);
        ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_EQ(send(fd, "reexec", 6, 0), 6);
        ASSERT_OK(kill(d.pid, SIGCONT));
        n = recv(fd, reply, sizeof(reply) - 1, 0);
        ASSERT_GT(n, 0);
        reply[n] = 0;
        if (strncmp(reply, "ok\n", 3) != 0)
                TEST_FAIL("reexec answered: %s", reply);
        close(fd);

        ASSERT_TRUE(fgets(t->line, sizeof(t->line), t->out));
        ASSERT_EQ_U(field(t->line, "good"), TARGET_PAGES);
        ASSERT_EQ_U(field(t->line, "bad"), 0);
        daemon_stop(&d);
        target_exit(t);
}

/* A re-exec that cannot happen (the binary is not executable any more, a
 * configuration the new process would refuse) fails with a clear error,
 * and zswapd serves on as it was; once both are fixed, it goes through. */
static void test_failed_reexec_changes_nothing(void) {
        char exe[128], cmd[512], *out;
        struct daemon d;
        struct target *t;
        FILE *f;

        snprintf(exe, sizeof(exe), "/var/tmp/zswapd-reexec-bin.%d", getpid());
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", zswapd_path, exe);
        ASSERT_EQ(system(cmd), 0);
        daemon_start(&d, exe, "");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        reclaim_all(&d, t->pid);

        ASSERT_OK(chmod(exe, 0644));
        ASSERT_NE(ctl(&d, &out, (const char *const[]) { "reexec", NULL }), 0);
        if (!strstr(out, "runs on as it was"))
                TEST_FAIL("unexpected error: %s", out);
        free(out);
        ASSERT_EQ(waitpid(d.pid, NULL, WNOHANG), 0);
        expect_verify(t, TARGET_PAGES, 0);
        reclaim_all(&d, t->pid);

        /* A configuration the new process would refuse: not even tried. */
        snprintf(cmd, sizeof(cmd), "%s/zswapd.conf", d.dir);
        f = fopen(cmd, "we");
        ASSERT_TRUE(f);
        fputs("[Store]\nCompressor=none-such\n", f);
        ASSERT_OK(fclose(f));
        ASSERT_OK(chmod(exe, 0755));
        ASSERT_NE(ctl(&d, &out, (const char *const[]) { "reexec", NULL }), 0);
        if (!strstr(out, "fix the configuration first"))
                TEST_FAIL("unexpected error: %s", out);
        free(out);
        expect_verify(t, TARGET_PAGES, 0);
        reclaim_all(&d, t->pid);
        ASSERT_OK(truncate(cmd, 0));

        reexec_ok(&d);
        expect_verify(t, TARGET_PAGES, 0);
        daemon_stop(&d);
        unlink(exe);
        target_exit(t);
}

/* sig (SIGKILL, SIGSEGV, SIGABRT): zswapd dies at once; its rescue task
 * (which holds the control socket meanwhile) saves the state in
 * ctl.state and exits. */
static void daemon_wait_dead(struct daemon *d, int sig);

static void daemon_kill(struct daemon *d, int sig) {
        ASSERT_OK(kill(d->pid, sig));
        daemon_wait_dead(d, sig);
}

static void daemon_wait_dead(struct daemon *d, int sig) {
        char path[128];
        int status;

        if (!wait_guarded(d->pid, TEST_GUARD_MS, &status))
                TEST_FAIL("zswapd %d did not die of signal %d; see %s", d->pid, sig, d->log);
        /* A sanitizer's handler ends it with an exit status instead. */
        ASSERT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0));
        for (int i = 0; can_connect(d->sock); i++) {
                if (i == TEST_GUARD_MS / 10) {
                        dump_waits(test_pid, 0);
                        TEST_FAIL("the rescue task of zswapd %d did not end; see %s", d->pid,
                                  d->log);
                }
                usleep(10000);
        }
        snprintf(path, sizeof(path), "%s/ctl.state", d->dir);
        if (access(path, F_OK) < 0)
                TEST_FAIL("no state file %s after zswapd's death; see %s", path, d->log);
}

static int count_in_log(const struct daemon *d, const char *what) {
        char *log = daemon_log(d);
        int n = 0;

        for (const char *p = log; (p = strstr(p, what)); p++)
                n++;
        free(log);
        return n;
}

static void expect_in_log(const struct daemon *d, const char *what) {
        char *log = daemon_log(d);

        if (!strstr(log, what))
                TEST_FAIL("no \"%s\" in zswapd's log: %s", what, log);
        free(log);
}

/* The file name in d's directory holds exactly len bytes of content. */
static void expect_state_file(const struct daemon *d, const char *name, const void *content,
                              size_t len) {
        char path[160], *s;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", d->dir, name);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                TEST_FAIL("no %s; see %s", path, d->log);
        ASSERT_EQ(lseek(fd, 0, SEEK_END), (off_t) len);
        s = fd_slurp(fd);
        close(fd);
        ASSERT_EQ(memcmp(s, content, len), 0);
        free(s);
}

/* A state the new binary cannot read (here: not a state at all) is not
 * dropped: zswapd serves on, says so at error level, and a reexec hands
 * the same state over again (and fails the same way, with its reason).
 * Killed, its rescue keeps that state, as it is, for the next zswapd;
 * stopped, zswapd keeps it itself and exits with an error. */
static void test_unreadable_state_is_kept(void) {
        static const char garbage[64] = "ZSWSTATE but not one";
        char *log, *out, cmdline[128], pid[16];
        struct target *t;
        struct daemon d;
        int status;

        daemon_start_with(&d, zswapd_path, "", garbage, sizeof(garbage));
        log = daemon_log(&d);
        if (!strstr(log, "Cannot load the state the previous zswapd left"))
                TEST_FAIL("no error about the state in the log: %s", log);
        free(log);
        free(ctl_ok(&d, (const char *const[]) { "stats", NULL }));
        ASSERT_NE(ctl(&d, &out, (const char *const[]) { "reexec", NULL }), 0);
        if (!strstr(out, "cannot load the state") || !strstr(out, "every page stays held"))
                TEST_FAIL("unexpected reply to reexec: %s", out);
        free(out);
        ASSERT_EQ(waitpid(d.pid, NULL, WNOHANG), 0);
        free(ctl_ok(&d, (const char *const[]) { "stats", NULL }));
        /* Serving a process besides, it refuses: that process's pages
         * would not cross with the state not taken in. */
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        reclaim_all(&d, t->pid);
        snprintf(pid, sizeof(pid), "%d", t->pid);
        ASSERT_NE(ctl(&d, &out, (const char *const[]) { "reexec", NULL }), 0);
        if (!strstr(out, "serves 1 processes besides"))
                TEST_FAIL("unexpected reply to reexec: %s", out);
        free(out);
        expect_verify(t, TARGET_PAGES, 0);
        free(ctl_ok(&d, (const char *const[]) { "detach", pid, NULL }));
        target_exit(t);

        daemon_kill(&d, SIGKILL);
        expect_state_file(&d, "ctl.state", garbage, sizeof(garbage));
        expect_in_log(&d, "not taken in; it is kept in");

        daemon_exec(&d, zswapd_path, garbage, sizeof(garbage));
        ASSERT_OK(kill(d.pid, SIGTERM));
        if (!wait_guarded(d.pid, TEST_GUARD_MS, &status))
                TEST_FAIL("zswapd did not exit after SIGTERM; see %s", d.log);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
        expect_in_log(&d, "Exiting with the state the previous zswapd handed over");
        expect_state_file(&d, "ctl.state.1", garbage, sizeof(garbage));
        snprintf(cmdline, sizeof(cmdline), "rm -rf '%s'", d.dir);
        ASSERT_EQ(system(cmdline), 0);
}

/* kill -9 of zswapd serving several targets (pages in memory and on disk,
 * a fork family, one that keeps writing with 4 threads, one waiting in a
 * fault): a zswapd started again takes every one over, every byte reads
 * back, and the quiet ones keep their pages and dictionary. Then a SIGSEGV
 * and a SIGABRT, the same. */
static void test_killed_zswapd_loses_nothing(void) {
        struct fixture fx;
        struct target *reader;
        char path[128];

        fixture_start(&fx, true);
        reader = fx.reader;
        /* The reader faults its pages back as zswapd dies, and waits
         * (if it is still at it: the verdict does not depend on it). */
        fprintf(reader->in, "verify\n");
        fflush(reader->in);
        for (int i = 0; i < 2000 && !in_userfault(reader->pid); i++)
                usleep(1000);

        daemon_kill(&fx.d, SIGKILL);
        expect_in_log(&fx.d, "the pages it held for 5 processes");
        daemon_exec(&fx.d, zswapd_path, NULL, 0);
        expect_in_log(&fx.d, "Took over 5 processes");
        snprintf(path, sizeof(path), "%s/ctl.state", fx.d.dir);
        ASSERT_NE(access(path, F_OK), 0);
        fixture_check_kept(&fx);
        ASSERT_TRUE(fgets(reader->line, sizeof(reader->line), reader->out));
        ASSERT_EQ_U(field(reader->line, "good"), TARGET_PAGES);
        ASSERT_EQ_U(field(reader->line, "bad"), 0);

        /* A crash and an abort, while the writer writes and the reader
         * reads. */
        for (int i = 0; i < 2; i++) {
                reclaim_all(&fx.d, reader->pid);
                fprintf(reader->in, "verify\n");
                fflush(reader->in);
                daemon_kill(&fx.d, i == 0 ? SIGSEGV : SIGABRT);
                daemon_exec(&fx.d, zswapd_path, NULL, 0);
                ASSERT_EQ(count_in_log(&fx.d, "Took over 5 processes"), i + 2);
                ASSERT_TRUE(fgets(reader->line, sizeof(reader->line), reader->out));
                ASSERT_EQ_U(field(reader->line, "good"), TARGET_PAGES);
                ASSERT_EQ_U(field(reader->line, "bad"), 0);
        }
        fixture_finish(&fx);
}

/* A state no zswapd could read is kept (its processes wait), and a later
 * death does not write over it: the newer state goes beside it, and the
 * next zswapd takes that one over and keeps refusing the first. */
static void test_unread_state_is_never_overwritten(void) {
        static const char garbage[64] = "ZSWSTATE but not one";
        char path[128], path1[128];
        struct daemon d;
        struct target *t;
        FILE *f;

        daemon_start(&d, zswapd_path, "");
        daemon_stop_keep_dir(&d);
        snprintf(path, sizeof(path), "%s/ctl.state", d.dir);
        snprintf(path1, sizeof(path1), "%s/ctl.state.1", d.dir);
        f = fopen(path, "we");
        ASSERT_TRUE(f);
        ASSERT_EQ(fwrite(garbage, 1, sizeof(garbage), f), sizeof(garbage));
        ASSERT_OK(fclose(f));

        daemon_exec(&d, zswapd_path, NULL, 0);
        expect_in_log(&d, "Cannot take over the state a dead zswapd left");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        reclaim_all(&d, t->pid);
        daemon_kill(&d, SIGKILL);
        ASSERT_OK(access(path1, F_OK));

        daemon_exec(&d, zswapd_path, NULL, 0);
        ASSERT_EQ(count_in_log(&d, "Took over 1 processes"), 1);
        ASSERT_EQ(count_in_log(&d, "Cannot take over the state a dead zswapd left"), 2);
        ASSERT_NE(access(path1, F_OK), 0);
        ASSERT_OK(access(path, F_OK));
        expect_verify(t, TARGET_PAGES, 0);
        daemon_stop(&d);
        target_exit(t);
}

/* A target that exits while zswapd is dead: the next zswapd frees its
 * pages, takes the others over, and removes the state. */
static void test_target_gone_while_zswapd_dead(void) {
        struct target *gone, *kept;
        char path[128];
        struct daemon d;

        daemon_start(&d, zswapd_path, "");
        gone = target_start(NULL);
        kept = target_start(NULL);
        cmd_ok(gone, "fill 24");
        cmd_ok(kept, "fill 24");
        attach(&d, gone->pid);
        attach(&d, kept->pid);
        reclaim_all(&d, gone->pid);
        reclaim_all(&d, kept->pid);
        daemon_kill(&d, SIGKILL);
        ASSERT_OK(kill(gone->pid, SIGKILL));
        ASSERT_EQ(waitpid(gone->pid, NULL, 0), gone->pid);
        fclose(gone->in);
        fclose(gone->out);
        free(gone);

        daemon_exec(&d, zswapd_path, NULL, 0);
        expect_in_log(&d, "exited after the previous zswapd died; its pages are freed");
        expect_in_log(&d, "Took over 1 processes");
        snprintf(path, sizeof(path), "%s/ctl.state", d.dir);
        ASSERT_NE(access(path, F_OK), 0);
        ASSERT_EQ_U(stat_of(&d, 0, "stored_pages"), stat_of(&d, kept->pid, "stored_pages"));
        expect_verify(kept, TARGET_PAGES, 0);
        daemon_stop(&d);
        target_exit(kept);
}

/* Pages of the target's buffer at addr whose uffd-wp bit is set
 * (/proc/PID/pagemap bit 57). */
static uint64_t write_protected_pages(pid_t pid, uint64_t addr, uint64_t npages) {
        char path[64];
        uint64_t *pm = calloc(npages, sizeof(*pm)), n = 0;
        int fd;

        ASSERT_TRUE(pm);
        snprintf(path, sizeof(path), "/proc/%d/pagemap", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(pread(fd, pm, npages * sizeof(*pm), (off_t) (addr / PAGE * sizeof(*pm))),
                  (ssize_t) (npages * sizeof(*pm)));
        close(fd);
        for (uint64_t i = 0; i < npages; i++)
                n += (pm[i] >> 57) & 1;
        free(pm);
        return n;
}

/* Pages an age scan write-protected (no round of theirs in flight) when
 * zswapd died: the target waits on its first write to one, and the next
 * zswapd, once it has taken the target over, lets every such write
 * through. */
static void test_age_protected_pages_are_written_after_a_death(void) {
        struct target *t;
        struct daemon d;
        uint64_t addr;
        char p[16];

        daemon_start(&d, zswapd_path, "");
        t = target_start(NULL);
        addr = field(cmd_ok(t, "fill 24"), "addr");
        attach(&d, t->pid);
        snprintf(p, sizeof(p), "%d", t->pid);
        /* Nothing has been unused for an hour: the reclaim takes nothing,
         * but its age scan protects every page it finds. */
        free(ctl_ok(&d, (const char *const[]) { "reclaim", p, "--min-age", "1h", NULL }));
        ASSERT_GE(stat_of(&d, t->pid, "scans"), 1);
        ASSERT_EQ_U(write_protected_pages(t->pid, addr, TARGET_PAGES), TARGET_PAGES);
        ASSERT_EQ_U(stat_of(&d, t->pid, "stored_pages"), 0);

        daemon_kill(&d, SIGKILL);
        daemon_exec(&d, zswapd_path, NULL, 0);
        expect_in_log(&d, "Took over 1 processes");
        for (uint64_t i = 0; i < TARGET_PAGES; i++) {
                char w[48];

                snprintf(w, sizeof(w), "write %" PRIu64 " %" PRIu64, i, i + 7);
                cmd_ok(t, w);
        }
        /* Each page's first write was a write-protect fault the new
         * zswapd served (a scan of its own may protect some again since). */
        ASSERT_GE(stat_of(&d, t->pid, "wp_faults"), TARGET_PAGES);
        expect_verify(t, TARGET_PAGES, 0);
        daemon_stop(&d);
        target_exit(t);
}

/* A process still registered with a dead zswapd's uffd, whose state is
 * gone (here: removed), cannot be served there by a new zswapd: attach
 * says so (it serves what else the process maps). */
static void test_attach_warns_of_a_foreign_registration(void) {
        char path[128], p[16];
        struct target *t;
        struct daemon d;

        daemon_start(&d, zswapd_path, "");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        daemon_kill(&d, SIGKILL);
        snprintf(path, sizeof(path), "%s/ctl.state", d.dir);
        ASSERT_OK(unlink(path));

        daemon_exec(&d, zswapd_path, NULL, 0);
        snprintf(p, sizeof(p), "%d", t->pid);
        free(ctl_ok(&d, (const char *const[]) { "attach", p, NULL }));
        expect_in_log(&d, "mappings registered with another userfaultfd");
        expect_verify(t, TARGET_PAGES, 0);
        free(ctl_ok(&d, (const char *const[]) { "detach", p, NULL }));
        daemon_stop(&d);
        /* Its exit would free its buffer, and that munmap waits for good
         * on the dead zswapd's uffd to read its UFFD_EVENT_UNMAP. */
        ASSERT_OK(kill(t->pid, SIGKILL));
        ASSERT_EQ(waitpid(t->pid, NULL, 0), t->pid);
        fclose(t->in);
        fclose(t->out);
        free(t);
}

/* The swapfile's disk dies, then zswapd: the rescue saves the pages it
 * can read and marks the others lost instead of saving nothing; the next
 * zswapd takes the process over with every entry; a stop gives the others
 * back and exits 0; the process's walk of its pages ends in SIGBUS at the
 * first lost one (as after a kernel swap read error), never in other
 * bytes or a wait for good. */
static void test_dead_disk_then_dead_zswapd(void) {
        _cleanup_free_ char *dir = NULL, *log = NULL;
        uint64_t on_disk = 0, stored;
        struct target *t;
        const char *lost;
        struct daemon d;
        char conf[512];
        int fd;

        test_private_mounts();
        dir = test_make_dir("zswapd-reexec-disk");
        if (!test_ext4_on_loop(dir)) {
                rmdir(dir);
                TEST_SKIP("no loop device with ext4 here");
        }
        snprintf(conf, sizeof(conf),
                 "[Store]\nIncompressible=keep\n[Pool]\nLimit=2M\n"
                 "[Writeback]\nEnabled=yes\nSwapfile=%s\nSwapfileSize=32M\n",
                 dir);
        daemon_start(&d, zswapd_path, conf);
        sanitizers_leave_sigbus();
        t = target_start("--synthetic");
        cmd_ok(t, "fill 8 0");
        attach(&d, t->pid);
        for (int i = 0; i < 200 && on_disk < 8 * 256 / 2; i++) {
                reclaim_all(&d, t->pid);
                on_disk = stat_of(&d, 0, "disk_pages");
                usleep(10000);
        }
        ASSERT_GE(on_disk, 8 * 256 / 2);

        /* t takes its command while the disk still reads (its own buffers
         * may be on disk), so that only its walk of its pages meets the
         * lost ones. */
        ASSERT_TRUE(strncmp(cmd_ok(t, "verify-on-byte"), "ok waiting", 10) == 0);
        wait_reading_stdin(t->pid);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        test_ext4_shutdown(fd);
        close(fd);
        /* No write reaches the dead disk now: what is on it stays. */
        on_disk = stat_of(&d, 0, "disk_pages");
        stored = stat_of(&d, t->pid, "stored_pages");

        daemon_kill(&d, SIGKILL);
        expect_in_log(&d, "the pages it held for 1 processes");
        /* Exactly the pages on disk are lost. */
        log = daemon_log(&d);
        lost = strstr(log, " of those pages were in the swapfile, which could not be read");
        ASSERT_TRUE(lost);
        while (lost > log && lost[-1] >= '0' && lost[-1] <= '9')
                lost--;
        /* A write that finished as the disk died may be counted after
         * disk_pages was read: lost is at least what was on disk. */
        ASSERT_GE(strtoull(lost, NULL, 10), on_disk);
        ASSERT_LE(strtoull(lost, NULL, 10), stored);
        daemon_exec(&d, zswapd_path, NULL, 0);
        expect_in_log(&d, "Took over 1 processes");
        expect_in_log(&d, "of its pages were lost with the swapfile");
        ASSERT_EQ_U(stat_of(&d, t->pid, "stored_pages"), stored);
        ASSERT_EQ_U(stat_of(&d, t->pid, "lost_pages"), strtoull(lost, NULL, 10));

        /* A stop gives every other page back and poisons the lost ones
         * (it exits 0: nothing is held); the process meets them after. */
        daemon_stop(&d);
        expect_sigbus_death(t);
        ASSERT_OK(umount(dir));
        ASSERT_OK(rmdir(dir));
}

/* ---- an event read, not applied ------------------------------------------ */

/* zswapd's fault threads, seized by us and run from system call to
 * system call (PTRACE_SYSCALL). */
struct traced {
        pid_t tids[16];
        size_t n;
};

static void trace_fault_threads(pid_t pid, struct traced *tr) {
        char path[64], comm[32];
        struct dirent *de;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/task", pid);
        dir = opendir(path);
        ASSERT_TRUE(dir);
        tr->n = 0;
        while ((de = readdir(dir)) && tr->n < ARRAY_SIZE(tr->tids)) {
                pid_t tid = (pid_t) strtol(de->d_name, NULL, 10);
                int status;
                FILE *f;

                if (tid <= 0)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", pid, tid);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (!fgets(comm, sizeof(comm), f) || strncmp(comm, "zswapd-fault", 12) != 0) {
                        fclose(f);
                        continue;
                }
                fclose(f);
                ASSERT_OK(ptrace(PTRACE_SEIZE, tid, NULL, (void *) PTRACE_O_TRACESYSGOOD));
                ASSERT_OK(ptrace(PTRACE_INTERRUPT, tid, NULL, NULL));
                ASSERT_EQ(waitpid(tid, &status, __WALL), tid);
                ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, NULL, NULL));
                tr->tids[tr->n++] = tid;
        }
        closedir(dir);
        ASSERT_GT(tr->n, 0);
}

/* Runs the traced threads (tr) until one of them returns from a read(2)
 * of a userfaultfd with an event of kind event in hand, and leaves it
 * stopped there. */
static void run_to_uffd_read(pid_t pid, const struct traced *tr, uint8_t event) {
        struct uffd_msg msgs[64];

        for (size_t k = 0;; k = (k + 1) % tr->n) {
                struct user_regs_struct regs;
                char path[64], link[64] = "";
                pid_t tid = tr->tids[k];
                int status;

                /* Ours only: other children (zswapctl, a rescue task) are
                 * reaped where they are waited for. */
                if (waitpid(tid, &status, __WALL | WNOHANG) != tid) {
                        if (k + 1 == tr->n)
                                usleep(200);
                        continue;
                }
                ASSERT_TRUE(WIFSTOPPED(status));
                if (WSTOPSIG(status) != (SIGTRAP | 0x80)) {
                        /* A signal or a group stop: not ours to keep. */
                        int sig = (status >> 16) == 0 ? WSTOPSIG(status) : 0;

                        ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, NULL, (void *) (long) sig));
                        continue;
                }
                ASSERT_OK(ptrace(PTRACE_GETREGS, tid, NULL, &regs));
                /* At the entry rax is -ENOSYS; at the exit, the result. */
                if (regs.orig_rax == SYS_read && (long) regs.rax > 0 &&
                    regs.rax % sizeof(msgs[0]) == 0 && regs.rax <= sizeof(msgs)) {
                        struct iovec local = { msgs, regs.rax };
                        struct iovec remote = { (void *) regs.rsi, regs.rax };

                        snprintf(path, sizeof(path), "/proc/%d/fd/%llu", pid, regs.rdi);
                        if (readlink(path, link, sizeof(link) - 1) > 0 &&
                            strstr(link, "userfaultfd") &&
                            process_vm_readv(tid, &local, 1, &remote, 1, 0) == (ssize_t) regs.rax)
                                for (size_t i = 0; i < regs.rax / sizeof(msgs[0]); i++)
                                        if (msgs[i].event == event)
                                                return;
                }
                ASSERT_OK(ptrace(PTRACE_SYSCALL, tid, NULL, NULL));
        }
}

/* Kills zswapd with the traced threads as they are, and reaps them (a
 * traced thread that dies waits for its tracer, and the process with it). */
static void kill_traced(struct daemon *d, const struct traced *tr) {
        ASSERT_OK(kill(d->pid, SIGKILL));
        for (size_t i = 0; i < tr->n; i++) {
                int status;

                while (waitpid(tr->tids[i], &status, __WALL) == tr->tids[i] && !WIFEXITED(status) &&
                       !WIFSIGNALED(status))
                        ;
        }
        daemon_wait_dead(d, SIGKILL);
}

/* Has zswapd-test-hold hold zswapd's (pid's) thread named comm stopped
 * (where it holds no lock); returns the holder's pid once it does. The
 * holder exits once that thread is gone. */
static pid_t hold_thread(pid_t pid, const char *comm) {
        char arg[16], buf[64] = "";
        int out[2];
        ssize_t n;
        pid_t h;

        ASSERT_OK(pipe(out));
        h = fork();
        ASSERT_GE(h, 0);
        if (h == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(out[1], STDOUT_FILENO);
                close(out[0]);
                close(out[1]);
                snprintf(arg, sizeof(arg), "%d", pid);
                execl(getenv("ZSWAPD_TEST_HOLD"), "zswapd-test-hold", arg, comm, NULL);
                _exit(127);
        }
        close(out[1]);
        n = read(out[0], buf, sizeof(buf) - 1);
        close(out[0]);
        if (n <= 0 || strncmp(buf, "held ", 5) != 0)
                TEST_FAIL("zswapd-test-hold did not hold %s of %d", comm, pid);
        return h;
}

/* The task the dead zswapd's log says keeps the unnamed children's uffds. */
static pid_t keeper_pid(const struct daemon *d) {
        char *log = daemon_log(d), *p = strstr(log, "this task (");
        pid_t pid = p ? (pid_t) atoi(p + strlen("this task (")) : 0;

        free(log);
        ASSERT_GT(pid, 0);
        return pid;
}

/* Whether pid runs as `zswapd-rescue --keep-uffds FD...`. */
static bool is_keeper(pid_t pid) {
        static const char want[] = "zswapd-rescue\0--keep-uffds";
        char path[64], buf[64] = "";
        ssize_t n = 0;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
                n = read(fd, buf, sizeof(buf) - 1);
                close(fd);
        }
        return n >= (ssize_t) sizeof(want) && memcmp(buf, want, sizeof(want)) == 0;
}

/* zswapd dies while a fork child is not named yet (its reaper, which
 * names children, held with ptrace): the child's uffd is only in
 * zswapd's descriptor table. The rescue task keeps it open, the next
 * zswapd takes it from there and names the child, and the child's copy
 * of the pages taken before the fork verifies. Before, the uffd closed
 * with the rescue task, and those pages read as zeros. */
static void test_unnamed_fork_child_survives_a_death(void) {
        struct daemon d;
        struct target *t;
        pid_t child, holder, keeper;
        int status;

        daemon_start(&d, zswapd_path, "");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        reclaim_all(&d, t->pid);
        holder = hold_thread(d.pid, "zswapd-reaper");
        child = (pid_t) field(cmd_ok(t, "fork-hold"), "child");
        ASSERT_FALSE(served(&d, child));
        daemon_kill(&d, SIGKILL);
        ASSERT_EQ(waitpid(holder, &status, 0), holder);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        expect_in_log(&d, "keeps their userfaultfds");
        /* The keeper holds them and not the dead zswapd's memory: it is
         * the zswapd binary executed anew for that. */
        keeper = keeper_pid(&d);
        for (int i = 0; !is_keeper(keeper); i++) {
                if (i == TEST_GUARD_MS / 10)
                        TEST_FAIL("process %d did not become the keeper; see %s", keeper, d.log);
                usleep(10000);
        }
        daemon_exec(&d, zswapd_path, NULL, 0);
        expect_in_log(&d, "Took 1 fork children not named yet from the dead zswapd's rescue task");
        for (int i = 0; !served(&d, child); i++) {
                if (i == TEST_GUARD_MS / 10)
                        TEST_FAIL("fork child %d not named by the new zswapd; see %s", child,
                                  d.log);
                usleep(10000);
        }
        ASSERT_EQ_U(field(cmd_ok(t, "fork-release"), "good"), TARGET_PAGES);
        ASSERT_EQ_U(field(t->line, "bad"), 0);
        daemon_stop(&d);
        expect_verify(t, TARGET_PAGES, 0);
        target_exit(t);
}

/* zswapd dies right after a fault thread read the target's own
 * MADV_DONTNEED (then an mremap of all its memory) from the uffd: the
 * kernel has let the target go on, the event never comes again, and it
 * is only in the dead process's memory. The rescue saves it with the
 * state and the next zswapd applies it: the discarded pages read as
 * zeros (not the content taken before), the moved ones as they were.
 * Fails without the events in the state: 16 pages of old content, then
 * every page lost. */
static void test_event_read_by_a_dead_zswapd_is_applied(void) {
        static const struct {
                const char *command;
                uint8_t event;
        } steps[] = { { "dontneed 8 16", UFFD_EVENT_REMOVE }, { "mremap 0", UFFD_EVENT_REMAP } };
        struct daemon d;
        struct target *t;

        daemon_start(&d, zswapd_path, "");
        t = target_start(NULL);
        cmd_ok(t, "fill 24");
        attach(&d, t->pid);
        for (size_t i = 0; i < ARRAY_SIZE(steps); i++) {
                struct traced tr;

                reclaim_all(&d, t->pid);
                trace_fault_threads(d.pid, &tr);
                fprintf(t->in, "%s\n", steps[i].command);
                fflush(t->in);
                run_to_uffd_read(d.pid, &tr, steps[i].event);
                kill_traced(&d, &tr);
                daemon_exec(&d, zswapd_path, NULL, 0);
                ASSERT_EQ(count_in_log(&d, "Took over 1 process"), (int) i + 1);
                /* Its answer waits on pages the new zswapd serves. */
                ASSERT_TRUE(fgets(t->line, sizeof(t->line), t->out));
                ASSERT_TRUE(strncmp(t->line, "ok", 2) == 0);
                expect_verify(t, TARGET_PAGES, 0);
        }
        daemon_stop(&d);
        expect_verify(t, TARGET_PAGES, 0);
        target_exit(t);
}

int main(int argc, char **argv) {
        static const struct test_case cases[] = {
                { "unreadable_state_is_kept", test_unreadable_state_is_kept },
                { "reexec_keeps_every_page", test_reexec_keeps_every_page },
                { "reexec_wakes_a_thread_blocked_in_a_fault",
                  test_reexec_wakes_a_thread_blocked_in_a_fault },
                { "failed_reexec_changes_nothing", test_failed_reexec_changes_nothing },
                { "killed_zswapd_loses_nothing", test_killed_zswapd_loses_nothing },
                { "unread_state_is_never_overwritten", test_unread_state_is_never_overwritten },
                { "target_gone_while_zswapd_dead", test_target_gone_while_zswapd_dead },
                { "age_protected_pages_are_written_after_a_death",
                  test_age_protected_pages_are_written_after_a_death },
                { "event_read_by_a_dead_zswapd_is_applied",
                  test_event_read_by_a_dead_zswapd_is_applied },
                { "unnamed_fork_child_survives_a_death", test_unnamed_fork_child_survives_a_death },
                { "attach_warns_of_a_foreign_registration",
                  test_attach_warns_of_a_foreign_registration },
                /* Last: it skips where there is no loop device. */
                { "dead_disk_then_dead_zswapd", test_dead_disk_then_dead_zswapd },
        };

        if (argc < 3) {
                fprintf(stderr, "usage: %s ZSWAPD ZSWAPCTL [CASE...]\n", argv[0]);
                return 2;
        }
        if (geteuid() != 0) {
                fprintf(stderr,
                        "skipped: needs root (ptrace and userfaultfd of other processes)\n");
                return EXIT_TEST_SKIP;
        }
        test_pid = getpid();
        /* zswapd as started by hand: its rescue task can keep what a
         * service manager's restart could not wait for (rescue.c). */
        unsetenv("NOTIFY_SOCKET");
        /* A dead zswapd's rescue task becomes ours: dump_waits() shows it. */
        (void) prctl(PR_SET_CHILD_SUBREAPER, 1);
        zswapd_path = argv[1];
        zswapctl_path = argv[2];
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                bool run = argc == 3;

                for (int k = 3; k < argc; k++)
                        run = run || strcmp(argv[k], cases[i].name) == 0;
                if (!run)
                        continue;
                fprintf(stderr, "=== %s\n", cases[i].name);
                test_guard(240); /* meson's timeout: 300 s */
                cases[i].fn();
        }
        return 0;
}
