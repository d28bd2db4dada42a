/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The daemon's logging (daemon/log.c) on real descriptors: journal
 * detection by $JOURNAL_STREAM against real sockets, pipes and files, and
 * the structured entries themselves, received by a datagram socket of the
 * test's own at /run/systemd/journal/socket inside a private mount
 * namespace (so the machine's journal, if any, is left alone), parsed as
 * journald parses the native protocol.
 */
#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "log.h"
#include "test.h"

#define JOURNAL_DIR "/run/systemd/journal"
#define JOURNAL_SOCKET JOURNAL_DIR "/socket"

static void stream_of(int fd, char *buf, size_t size) {
        struct stat st;

        ASSERT_OK(fstat(fd, &st));
        snprintf(buf, size, "%llu:%llu", (unsigned long long) st.st_dev,
                 (unsigned long long) st.st_ino);
}

TEST(journal_stream_detection) {
        char s[64], bad[80];
        int sv[2], p[2], f;

        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        f = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        ASSERT_GE(f, 0);

        stream_of(sv[0], s, sizeof(s));
        ASSERT_TRUE(log_fd_is_journal_stream(s, sv[0]));
        /* The other end of the same connection is another inode. */
        ASSERT_FALSE(log_fd_is_journal_stream(s, sv[1]));
        ASSERT_FALSE(log_fd_is_journal_stream(s, p[1]));
        ASSERT_FALSE(log_fd_is_journal_stream(s, f));
        stream_of(f, s, sizeof(s));
        ASSERT_TRUE(log_fd_is_journal_stream(s, f));
        /* A descriptor that is closed matches nothing. */
        ASSERT_FALSE(log_fd_is_journal_stream(s, 1000));

        ASSERT_FALSE(log_fd_is_journal_stream(NULL, f));
        ASSERT_FALSE(log_fd_is_journal_stream("", f));
        ASSERT_FALSE(log_fd_is_journal_stream("12", f));
        snprintf(bad, sizeof(bad), "%s:", s);
        ASSERT_FALSE(log_fd_is_journal_stream(bad, f));
        snprintf(bad, sizeof(bad), "%sx", s);
        ASSERT_FALSE(log_fd_is_journal_stream(bad, f));
        close(sv[0]), close(sv[1]), close(p[0]), close(p[1]), close(f);
}

/* ---- the native protocol, as journald reads it ---------------------------------- */

struct entry {
        size_t n;
        char *names[32];
        char *values[32];
};

static void entry_parse(const char *buf, size_t len, struct entry *e) {
        const char *p = buf, *end = buf + len;

        e->n = 0;
        while (p < end) {
                const char *nl = memchr(p, '\n', end - p), *eq;
                uint64_t le, vlen;

                ASSERT_TRUE(nl);
                ASSERT_LT(e->n, ARRAY_SIZE(e->names));
                eq = memchr(p, '=', nl - p);
                if (eq) {
                        e->names[e->n] = strndup(p, eq - p);
                        e->values[e->n] = strndup(eq + 1, nl - eq - 1);
                        p = nl + 1;
                } else {
                        /* NAME\n, a little-endian 64-bit length, the value, \n */
                        e->names[e->n] = strndup(p, nl - p);
                        ASSERT_LE(nl + 1 + 8, end);
                        memcpy(&le, nl + 1, 8);
                        vlen = le64toh(le);
                        ASSERT_LE(nl + 9 + vlen + 1, end);
                        e->values[e->n] = strndup(nl + 9, vlen);
                        ASSERT_EQ(nl[9 + vlen], '\n');
                        p = nl + 9 + vlen + 1;
                }
                e->n++;
        }
}

static const char *entry_get(const struct entry *e, const char *name) {
        for (size_t i = 0; i < e->n; i++)
                if (strcmp(e->names[i], name) == 0)
                        return e->values[i];
        return NULL;
}

static void entry_free(struct entry *e) {
        for (size_t i = 0; i < e->n; i++) {
                free(e->names[i]);
                free(e->values[i]);
        }
        e->n = 0;
}

static bool entry_recv(int fd, struct entry *e, int timeout_ms) {
        char buf[8192];
        struct pollfd p = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&p, 1, timeout_ms) != 1)
                return false;
        n = recv(fd, buf, sizeof(buf), 0);
        ASSERT_GT(n, 0);
        entry_parse(buf, n, e);
        return true;
}

/* A journald of the test's own: a datagram socket at the real path, in a
 * mount namespace of this process. Returns its fd, or -1 to skip. */
static int private_journal(void) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET };
        int fd;

        if (unshare(CLONE_NEWNS) < 0)
                return -1;
        ASSERT_OK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL));
        (void) mkdir("/run/systemd", 0755);
        ASSERT_OK(mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755"));
        ASSERT_OK(mkdir(JOURNAL_DIR, 0755));
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        ASSERT_OK(bind(fd, (struct sockaddr *) &sa, sizeof(sa)));
        return fd;
}

/* The journal's entries, their fields, and what happens when journald is
 * slow or gone. */
TEST(journal_entries) {
        char stream[64], buf[4096], line[16];
        struct entry e = {};
        int jfd, sv[2], saved_stderr, expected_line;
        unsigned lost_seen = 0, sent = 0;
        ssize_t n;

        jfd = private_journal();
        if (jfd < 0)
                TEST_SKIP("cannot make a mount namespace");
        /* stderr becomes the stream systemd would have connected. */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        saved_stderr = dup(STDERR_FILENO);
        ASSERT_GE(saved_stderr, 0);
        ASSERT_EQ(dup2(sv[0], STDERR_FILENO), STDERR_FILENO);
        stream_of(STDERR_FILENO, stream, sizeof(stream));
        ASSERT_OK(setenv("JOURNAL_STREAM", stream, 1));
        log_setup(LOG_DEBUG);
        ASSERT_TRUE(log_to_journal());

        {
                LOG_FIELDS(.target_pid = 1234, .policy = "browser",
                           .cgroup = "/user.slice/user-1000.slice/app-firefox.scope");
                expected_line = __LINE__ + 1;
                log_notice("Attached to %d.", 1234);
        }
        ASSERT_TRUE(entry_recv(jfd, &e, 10000));
        ASSERT_STREQ(entry_get(&e, "MESSAGE"), "Attached to 1234.");
        ASSERT_STREQ(entry_get(&e, "PRIORITY"), "5");
        ASSERT_STREQ(entry_get(&e, "SYSLOG_IDENTIFIER"), program_invocation_short_name);
        ASSERT_TRUE(strstr(entry_get(&e, "CODE_FILE"), "test-log.c"));
        snprintf(line, sizeof(line), "%d", expected_line);
        ASSERT_STREQ(entry_get(&e, "CODE_LINE"), line);
        ASSERT_STREQ(entry_get(&e, "CODE_FUNC"), "test_journal_entries");
        ASSERT_STREQ(entry_get(&e, "ZSWAPD_TARGET_PID"), "1234");
        ASSERT_STREQ(entry_get(&e, "ZSWAPD_POLICY"), "browser");
        ASSERT_STREQ(entry_get(&e, "ZSWAPD_CGROUP"),
                     "/user.slice/user-1000.slice/app-firefox.scope");
        ASSERT_STREQ(entry_get(&e, "ZSWAPD_UNIT"), "app-firefox.scope");
        entry_free(&e);

        /* Out of the scope the fields are gone; a cgroup that is no unit
         * gives no ZSWAPD_UNIT; a message with a newline travels whole. */
        {
                LOG_FIELDS(.cgroup = "/zswapd-test-1");
                errno = ENOSPC;
                log_warning_errno(ENOSPC, "two\nlines: %m");
        }
        ASSERT_TRUE(entry_recv(jfd, &e, 10000));
        ASSERT_STREQ(entry_get(&e, "MESSAGE"), "two\nlines: No space left on device");
        ASSERT_STREQ(entry_get(&e, "PRIORITY"), "4");
        ASSERT_FALSE(entry_get(&e, "ZSWAPD_UNIT"));
        ASSERT_FALSE(entry_get(&e, "ZSWAPD_TARGET_PID"));
        ASSERT_STREQ(entry_get(&e, "ZSWAPD_CGROUP"), "/zswapd-test-1");
        entry_free(&e);

        /* A journal that does not read: logging never waits, entries are
         * lost and counted, and the count is reported once it reads. */
        for (sent = 0; sent < 20000; sent++)
                log_debug("filler %u", sent); /* far more than net.unix.max_dgram_qlen */
        while (entry_recv(jfd, &e, 0))
                entry_free(&e);
        log_info("after the flood");
        while (entry_recv(jfd, &e, 1000)) {
                const char *m = entry_get(&e, "MESSAGE");

                if (m && strstr(m, "log messages were lost"))
                        lost_seen++;
                entry_free(&e);
        }
        fprintf(stdout, "flood of %u entries: lost count reported %u times\n", sent, lost_seen);
        ASSERT_EQ(lost_seen, 1);

        /* journald gone: the message goes to the stream with its priority. */
        ASSERT_OK(unlink(JOURNAL_SOCKET));
        log_error("journal gone");
        n = recv(sv[1], buf, sizeof(buf) - 1, MSG_DONTWAIT);
        ASSERT_GT(n, 0);
        buf[n] = 0;
        ASSERT_STREQ(buf, "<3>journal gone\n");

        ASSERT_EQ(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
        close(saved_stderr);
        close(sv[0]), close(sv[1]), close(jfd);
        unsetenv("JOURNAL_STREAM");
        log_setup(LOG_INFO);
        ASSERT_FALSE(log_to_journal());
}

/* The same entries through the real systemd-journald, read back with
 * journalctl -o json: the daemon's fields as a user queries them. The
 * journald runs in this test's mount namespace with volatile storage on a
 * tmpfs, so the machine's journal (if any) never sees it. */
TEST(real_journald_and_journalctl) {
        char stream[64], cmd[256], out[8192], marker[64];
        int sv[2], saved_stderr, status, fd;
        pid_t jd;
        size_t n;
        FILE *f;

        if (access("/lib/systemd/systemd-journald", X_OK) < 0 ||
            access("/usr/bin/journalctl", X_OK) < 0)
                TEST_SKIP("no systemd-journald or journalctl");
        fd = private_journal();
        if (fd < 0)
                TEST_SKIP("cannot make a mount namespace");
        /* Not our socket this time: journald makes its own, on a fresh
         * tmpfs over that one. */
        close(fd);
        ASSERT_OK(mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755"));
        (void) mkdir("/run/log", 0755);
        ASSERT_OK(mount("tmpfs", "/run/log", "tmpfs", 0, "mode=0755"));
        f = fopen("/run/systemd/journald.conf", "we");
        ASSERT_TRUE(f);
        fputs("[Journal]\nStorage=volatile\nRateLimitBurst=0\n", f);
        fclose(f);
        ASSERT_OK(mount("/run/systemd/journald.conf", "/etc/systemd/journald.conf", NULL, MS_BIND,
                        NULL));

        jd = fork();
        ASSERT_GE(jd, 0);
        if (jd == 0) {
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);

                dup2(null, STDOUT_FILENO);
                dup2(null, STDERR_FILENO);
                execl("/lib/systemd/systemd-journald", "systemd-journald", NULL);
                _exit(127);
        }
        for (int i = 0; i < 3000 && access(JOURNAL_SOCKET, F_OK) < 0; i++)
                usleep(10000);
        ASSERT_OK(access(JOURNAL_SOCKET, F_OK));

        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        saved_stderr = dup(STDERR_FILENO);
        ASSERT_EQ(dup2(sv[0], STDERR_FILENO), STDERR_FILENO);
        stream_of(STDERR_FILENO, stream, sizeof(stream));
        ASSERT_OK(setenv("JOURNAL_STREAM", stream, 1));
        log_setup(LOG_INFO);
        snprintf(marker, sizeof(marker), "through journald %d", getpid());
        {
                LOG_FIELDS(.target_pid = 4242, .policy = "build",
                           .cgroup = "/system.slice/build-agent.service");
                log_info("%s", marker);
        }
        ASSERT_EQ(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
        close(saved_stderr);
        unsetenv("JOURNAL_STREAM");
        log_setup(LOG_INFO);

        /* journald writes what it received before it answers a sync. */
        snprintf(cmd, sizeof(cmd),
                 "journalctl --directory=/run/log/journal -o json --no-pager "
                 "ZSWAPD_UNIT=build-agent.service 2>&1");
        out[0] = 0;
        for (int i = 0; i < 100 && !strstr(out, marker); i++) {
                f = popen(cmd, "re");
                ASSERT_TRUE(f);
                n = fread(out, 1, sizeof(out) - 1, f);
                out[n] = 0;
                pclose(f);
                if (!strstr(out, marker))
                        usleep(100000);
        }
        fprintf(stdout, "journalctl: %s", out);
        if (!strstr(out, marker))
                TEST_FAIL("journalctl did not show the entry: %s", out);
        ASSERT_TRUE(strstr(out, "\"ZSWAPD_TARGET_PID\":\"4242\""));
        ASSERT_TRUE(strstr(out, "\"ZSWAPD_POLICY\":\"build\""));
        ASSERT_TRUE(strstr(out, "\"PRIORITY\":\"6\""));
        ASSERT_TRUE(strstr(out, "\"CODE_FUNC\":\"test_real_journald_and_journalctl\""));

        ASSERT_OK(kill(jd, SIGTERM));
        ASSERT_EQ(waitpid(jd, &status, 0), jd);
        close(sv[0]), close(sv[1]);
}
