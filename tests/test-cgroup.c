/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Cgroup discovery: mountinfo and /proc/PID/cgroup fixtures of the hybrid
 * and pure v2 layouts (and malformed ones), then the real machine: the
 * layout detected, a child put into groups of the test's own found in
 * them, and the group's memory use read.
 */
#include <sys/mman.h>
#include <sys/wait.h>

#include "cgroup.h"
#include "test.h"
#include "test-cgroups.h"

static const char hybrid_mountinfo[] =
        "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
        "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
        "32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup "
        "rw,xattr,name=systemd\n"
        "36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory\n"
        "37 30 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:16 - cgroup cgroup "
        "rw,cpu,cpuacct\n";

static const char v2_mountinfo[] =
        "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
        "99 25 0:26 / /container/sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";

TEST(layout_fixtures) {
        struct zsw_cgroup_layout l;

        ASSERT_OK(zsw_cgroup_layout_parse(hybrid_mountinfo, strlen(hybrid_mountinfo), &l));
        ASSERT_STREQ(l.v2_root, "/sys/fs/cgroup/unified");
        ASSERT_STREQ(l.memory_root, "/sys/fs/cgroup/memory");
        ASSERT_STREQ(l.systemd_root, "/sys/fs/cgroup/systemd");
        zsw_cgroup_layout_done(&l);
        ASSERT_TRUE(!l.v2_root && !l.memory_root);

        /* The first cgroup2 mount wins over a later bind mount. */
        ASSERT_OK(zsw_cgroup_layout_parse(v2_mountinfo, strlen(v2_mountinfo), &l));
        ASSERT_STREQ(l.v2_root, "/sys/fs/cgroup");
        ASSERT_TRUE(!l.memory_root && !l.systemd_root);
        zsw_cgroup_layout_done(&l);

        ASSERT_ERRNO(zsw_cgroup_layout_parse("garbage\n\n 1 2 3\n", 17, &l), ENOMEDIUM);
        ASSERT_ERRNO(zsw_cgroup_layout_parse("", 0, &l), ENOMEDIUM);
}

TEST(proc_cgroup_fixtures) {
        static const char hybrid[] = "12:memory:/process_api/abc\n"
                                     "4:cpu,cpuacct:/\n"
                                     "1:name=systemd:/system.slice/nginx.service\n"
                                     "0::/system.slice/nginx.service\n";
        static const char v2[] = "0::/user.slice/user-1000.slice/app.slice/app-firefox-1.scope\n";
        struct zsw_proc_cgroups c = {};

        ASSERT_OK(zsw_proc_cgroups_parse(hybrid, strlen(hybrid), &c));
        ASSERT_STREQ(c.memory, "/process_api/abc");
        ASSERT_STREQ(c.systemd, "/system.slice/nginx.service");
        ASSERT_STREQ(c.v2, "/system.slice/nginx.service");
        zsw_proc_cgroups_done(&c);

        ASSERT_OK(zsw_proc_cgroups_parse(v2, strlen(v2), &c));
        ASSERT_STREQ(c.v2, "/user.slice/user-1000.slice/app.slice/app-firefox-1.scope");
        ASSERT_TRUE(!c.memory && !c.systemd);
        zsw_proc_cgroups_done(&c);

        c.v2 = (char *) "untouched";
        ASSERT_ERRNO(zsw_proc_cgroups_parse("0::relative\n", 12, &c), EBADMSG);
        ASSERT_ERRNO(zsw_proc_cgroups_parse("no colons\n", 10, &c), EBADMSG);
        ASSERT_ERRNO(zsw_proc_cgroups_parse("4:memory:\n", 10, &c), EBADMSG);
        ASSERT_STREQ(c.v2, "untouched");
}

/* memory.current wins over memory.usage_in_bytes; malformed values are
 * refused; a group with neither says ENOENT. */
TEST(memory_and_procs_fixtures) {
        char dir[] = "/tmp/zswapd-cg.XXXXXX", cmd[64];
        _cleanup_free_ pid_t *pids = NULL;
        uint64_t v = 7;
        int dfd, fd;

        ASSERT_TRUE(mkdtemp(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        ASSERT_ERRNO(zsw_cgroup_read_memory_at(dfd, &v), ENOENT);
        fd = openat(dfd, "memory.usage_in_bytes", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_EQ(write(fd, "4096\n", 5), 5);
        close(fd);
        ASSERT_OK(zsw_cgroup_read_memory_at(dfd, &v));
        ASSERT_EQ_U(v, 4096);
        fd = openat(dfd, "memory.current", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_EQ(write(fd, "12x\n", 4), 4);
        close(fd);
        ASSERT_ERRNO(zsw_cgroup_read_memory_at(dfd, &v), EBADMSG);
        ASSERT_EQ_U(v, 4096);
        fd = openat(dfd, "memory.current", O_WRONLY | O_TRUNC | O_CLOEXEC);
        ASSERT_EQ(write(fd, "8192\n", 5), 5);
        close(fd);
        ASSERT_OK(zsw_cgroup_read_memory_at(dfd, &v));
        ASSERT_EQ_U(v, 8192);

        fd = openat(dfd, "cgroup.procs", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        ASSERT_EQ(write(fd, "1\n23\n456\n", 9), 9);
        close(fd);
        ASSERT_EQ(zsw_cgroup_read_procs_at(dfd, &pids), 3);
        ASSERT_EQ(pids[0], 1);
        ASSERT_EQ(pids[2], 456);
        fd = openat(dfd, "cgroup.procs", O_WRONLY | O_TRUNC | O_CLOEXEC);
        ASSERT_EQ(write(fd, "1\nx\n", 4), 4);
        close(fd);
        ASSERT_ERRNO(zsw_cgroup_read_procs_at(dfd, &pids), EBADMSG);
        close(dfd);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        ASSERT_EQ(system(cmd), 0);
}

TEST(real_layout_and_groups) {
        struct zsw_cgroup_layout l;
        struct zsw_proc_cgroups c;
        struct test_cgroup *g;
        _cleanup_free_ pid_t *pids = NULL;
        int ready[2], go[2], pfd, gfd, n, status;
        uint64_t usage;
        char path[64];
        pid_t pid;

        if (!test_cgroups_usable())
                TEST_SKIP("needs root and a writable cgroup tree");
        ASSERT_OK(zsw_cgroup_layout_detect(&l));
        ASSERT_STREQ(l.v2_root, test_cgroup_v2_root());
        if (access(TEST_CGROUP_V1_MEMORY "/cgroup.procs", F_OK) == 0)
                ASSERT_STREQ(l.memory_root, TEST_CGROUP_V1_MEMORY);
        else
                ASSERT_TRUE(!l.memory_root);

        g = test_cgroup_new(64u << 20);
        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        ASSERT_OK(pipe2(go, O_CLOEXEC));
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                char *buf;

                if (test_cgroup_enter(g) < 0)
                        _exit(2);
                /* Charged to the group: 8 MiB touched. */
                buf = mmap(NULL, 8u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                           0);
                if (buf == MAP_FAILED)
                        _exit(3);
                memset(buf, 1, 8u << 20);
                (void) !write(ready[1], "r", 1);
                (void) !read(go[0], buf, 1);
                _exit(0);
        }
        ASSERT_EQ(read(ready[0], (char[1]) {}, 1), 1);

        snprintf(path, sizeof(path), "/proc/%d", pid);
        pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(pfd, 0);
        ASSERT_OK(zsw_proc_cgroups_read(pfd, &c));
        ASSERT_STREQ(c.v2, g->name);
        if (g->v1[0])
                ASSERT_STREQ(c.memory, g->name);
        zsw_proc_cgroups_done(&c);
        close(pfd);

        /* The group holds the child, and it is charged for its memory. */
        gfd = open(g->v1[0] ? g->v1 : g->v2, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(gfd, 0);
        n = zsw_cgroup_read_procs_at(gfd, &pids);
        ASSERT_EQ(n, 1);
        ASSERT_EQ(pids[0], pid);
        ASSERT_OK(zsw_cgroup_read_memory_at(gfd, &usage));
        ASSERT_GE(usage, 8u << 20);
        close(gfd);

        ASSERT_EQ(write(go[1], "g", 1), 1);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        test_cgroup_free(g);
        zsw_cgroup_layout_done(&l);
}
