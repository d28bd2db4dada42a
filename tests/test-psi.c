/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * PSI: the parser on fixtures (the kernel's format, and malformed ones),
 * triggers on /proc/pressure/memory and on a v2 group of the test's own,
 * and a real pressure source (page cache thrash in a memory-limited group)
 * that the group's memory.pressure and its trigger both show.
 */
#include <poll.h>
#include <sys/wait.h>

#include "psi.h"
#include "test.h"
#include "test-cgroups.h"

static const char kernel_text[] = "some avg10=1.25 avg60=0.50 avg300=0.07 total=123456\n"
                                  "full avg10=0.00 avg60=0.10 avg300=0.00 total=789\n";

TEST(parse_kernel_format) {
        struct zsw_psi psi;

        ASSERT_OK(zsw_psi_parse(kernel_text, strlen(kernel_text), &psi));
        ASSERT_EQ(psi.some.avg10, 125);
        ASSERT_EQ(psi.some.avg60, 50);
        ASSERT_EQ(psi.some.avg300, 7);
        ASSERT_EQ_U(psi.some.total_usec, 123456);
        ASSERT_TRUE(psi.has_full);
        ASSERT_EQ(psi.full.avg60, 10);
        ASSERT_EQ_U(psi.full.total_usec, 789);

        /* cpu.pressure of older kernels: no full line. Keys in another
         * order, and one the parser does not know, are fine. */
        ASSERT_OK(zsw_psi_parse("some total=5 avg300=1.00 avg60=2 avg10=100.00 new=7\n", 52, &psi));
        ASSERT_FALSE(psi.has_full);
        ASSERT_EQ(psi.some.avg10, 10000);
        ASSERT_EQ(psi.some.avg60, 200);
        ASSERT_EQ_U(psi.some.total_usec, 5);
}

TEST(parse_malformed) {
        static const char *const bad[] = {
                "",
                "\n",
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", /* no some */
                "some avg10=0.00 avg60=0.00 total=0\n",             /* avg300 missing */
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=\n",
                "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
                "some avg10=1.234 avg60=0.00 avg300=0.00 total=0\n", /* three decimals */
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
                "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n", /* over 100% */
                "some avg10=0.00 avg60=123456 avg300=0.00 total=0\n",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=99999999999999999999\n",
                "some avg10 avg60=0.00 avg300=0.00 total=0\n",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nbogus\n",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00\n",
        };
        struct zsw_psi psi = { .some.total_usec = 42 };

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                if (zsw_psi_parse(bad[i], strlen(bad[i]), &psi) != -EBADMSG)
                        TEST_FAIL("accepted: \"%s\"", bad[i]);
                ASSERT_EQ_U(psi.some.total_usec, 42); /* untouched */
        }
}

TEST(stall_permyriad) {
        ASSERT_EQ(zsw_psi_stall_permyriad(100, 100, 1000000), 0);
        ASSERT_EQ(zsw_psi_stall_permyriad(0, 100000, 1000000), 1000);
        ASSERT_EQ(zsw_psi_stall_permyriad(0, 5000000, 1000000), 10000);
        ASSERT_EQ(zsw_psi_stall_permyriad(500, 100, 1000000), 0);
        ASSERT_EQ(zsw_psi_stall_permyriad(0, 100, 0), 0);
}

TEST(read_fixture_and_proc) {
        char dir[] = "/tmp/zswapd-psi.XXXXXX", path[64];
        struct zsw_psi psi, again;
        int dfd, fd;

        ASSERT_TRUE(mkdtemp(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        fd = openat(dfd, "memory.pressure", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, kernel_text, strlen(kernel_text)), (ssize_t) strlen(kernel_text));
        close(fd);
        ASSERT_OK(zsw_psi_read_at(dfd, "memory.pressure", &psi));
        ASSERT_EQ_U(psi.some.total_usec, 123456);
        ASSERT_ERRNO(zsw_psi_read_at(dfd, "missing", &psi), ENOENT);
        /* Windows and stalls out of the kernel's bounds are refused before
         * the file is even opened. */
        ASSERT_ERRNO(zsw_psi_trigger_open_at(dfd, "memory.pressure", false, 10, 100, &fd), EINVAL);
        ASSERT_ERRNO(zsw_psi_trigger_open_at(dfd, "memory.pressure", false, 0, 1000000, &fd),
                     EINVAL);
        ASSERT_ERRNO(zsw_psi_trigger_open_at(dfd, "memory.pressure", false, 3000000, 2000000, &fd),
                     EINVAL);
        unlinkat(dfd, "memory.pressure", 0);
        close(dfd);
        snprintf(path, sizeof(path), "rm -rf %s", dir);
        ASSERT_EQ(system(path), 0);

        if (access("/proc/pressure/memory", R_OK) < 0)
                TEST_SKIP("no /proc/pressure/memory (PSI disabled)");
        ASSERT_OK(zsw_psi_read_at(AT_FDCWD, "/proc/pressure/memory", &psi));
        ASSERT_TRUE(psi.has_full);
        /* A quiet machine may never have stalled (totals of 0), so only
         * what the kernel guarantees: every CPU counts a "full" stall as a
         * "some" stall too, and totals never go back. */
        ASSERT_LE(psi.full.total_usec, psi.some.total_usec);
        ASSERT_OK(zsw_psi_read_at(AT_FDCWD, "/proc/pressure/memory", &again));
        ASSERT_GE(again.some.total_usec, psi.some.total_usec);
        ASSERT_GE(again.full.total_usec, psi.full.total_usec);
}

TEST(triggers_on_proc_and_group) {
        struct test_cgroup *g;
        uint64_t stall, window;
        int fd, dfd, r;

        if (!test_cgroups_usable() || access("/proc/pressure/memory", W_OK) < 0)
                TEST_SKIP("needs root and PSI");

        /* A 2 s window is allowed with or without CAP_SYS_RESOURCE. */
        ASSERT_OK(zsw_psi_trigger_open_at(AT_FDCWD, "/proc/pressure/memory", false, 150000, 2000000,
                                          &fd));
        ASSERT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        /* One trigger per open file. */
        ASSERT_ERRNO(write(fd, "some 150000 2000000", 20) < 0 ? -errno : 0, EBUSY);
        close(fd);
        ASSERT_OK(zsw_psi_trigger_open_at(AT_FDCWD, "/proc/pressure/memory", true, 100000, 4000000,
                                          &fd));
        close(fd);

        /* A 1 s window needs CAP_SYS_RESOURCE; the widening variant gets a
         * trigger either way, of the same fraction. */
        r = zsw_psi_trigger_open_widen_at(AT_FDCWD, "/proc/pressure/memory", false, 100000, 1000000,
                                          &fd, &stall, &window);
        ASSERT_OK(r);
        close(fd);
        if (r == 1) {
                ASSERT_EQ_U(window, 2000000);
                ASSERT_EQ_U(stall, 200000);
        } else
                ASSERT_EQ_U(window, 1000000);

        g = test_cgroup_new(0);
        dfd = open(g->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        ASSERT_OK(zsw_psi_trigger_open_at(dfd, "memory.pressure", false, 50000, 2000000, &fd));
        /* No stall in an empty group: nothing to poll. */
        ASSERT_EQ(poll(&(struct pollfd) { .fd = fd, .events = POLLPRI }, 1, 0), 0);
        close(fd);
        close(dfd);
        test_cgroup_free(g);
}

/* Pressure for real: a child re-reads a file four times the size of its
 * group's memory limit. The group's stall time grows, its avg10 rises
 * above zero and its trigger fires; the poll is bounded so that a machine
 * where nothing stalls fails instead of hanging. */
TEST(real_pressure_in_a_group) {
        struct test_cgroup *g;
        struct zsw_psi before, after;
        struct pollfd p;
        int dfd, fd, status, file;
        pid_t pid;

        if (!test_cgroups_usable())
                TEST_SKIP("needs root and a writable cgroup tree");
        g = test_cgroup_new(16u << 20);
        file = test_thrash_file_create(64u << 20);
        ASSERT_OK(file);
        dfd = open(g->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        ASSERT_OK(zsw_psi_read_at(dfd, "memory.pressure", &before));
        ASSERT_OK(zsw_psi_trigger_open_at(dfd, "memory.pressure", false, 20000, 2000000, &fd));

        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                if (test_cgroup_enter(g) < 0)
                        _exit(2);
                test_thrash_read(file, 0);
                _exit(0);
        }
        p = (struct pollfd) { .fd = fd, .events = POLLPRI };
        ASSERT_EQ(poll(&p, 1, 60000), 1);
        ASSERT_TRUE(p.revents & POLLPRI);
        /* avg10 is updated every 2 s: wait for a non-zero one, bounded. */
        for (int i = 0; i < 100; i++) {
                ASSERT_OK(zsw_psi_read_at(dfd, "memory.pressure", &after));
                if (after.some.avg10 > 0)
                        break;
                usleep(100000);
        }
        fprintf(stderr, "group stall: %" PRIu64 " us, some avg10 %u.%02u%%\n",
                after.some.total_usec - before.some.total_usec, after.some.avg10 / 100,
                after.some.avg10 % 100);
        ASSERT_GT(after.some.total_usec, before.some.total_usec);
        ASSERT_GT(after.some.avg10, 0);

        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        close(fd);
        close(dfd);
        close(file);
        test_cgroup_free(g);
}
