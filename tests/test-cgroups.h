/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Cgroups of a test's own: a v1 memory group (with a limit, where the
 * machine has the v1 controller) and the v2 group of the same name (for
 * PSI, and for memory on pure v2), created under the real hierarchies and
 * removed at exit, after a failed assertion too (the abort handler kills
 * what is left inside and removes them). Header-only: each test binary
 * that includes it gets its own registry.
 */
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEST_CGROUP_V1_MEMORY "/sys/fs/cgroup/memory"
#define TEST_CGROUP_V1_SYSTEMD "/sys/fs/cgroup/systemd"
#define TEST_CGROUP_MAX 8

struct test_cgroup {
        char name[64]; /* "/zswapd-test-PID-N", as policies match it */
        char v2[160];  /* its v2 directory */
        char v1[160];  /* its v1 memory directory, "" without v1 */
        char sd[160];  /* its name=systemd directory, only if asked for */
};

static struct test_cgroup *test_cgroups[TEST_CGROUP_MAX];
/* Only the process that made them removes them: children that exit or
 * abort must leave the groups of their parent alone. */
static pid_t test_cgroups_owner;

/* The v2 root: /sys/fs/cgroup/unified on hybrid machines. */
static inline const char *test_cgroup_v2_root(void) {
        return access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0 ? "/sys/fs/cgroup/unified"
                                                                        : "/sys/fs/cgroup";
}

static inline void test_cgroup_write(const char *dir, const char *file, const char *value) {
        char path[256];
        int fd;

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void) !write(fd, value, strlen(value));
                close(fd);
        }
}

/* Kills every process in dir's cgroup.procs; async-signal-safe enough for
 * the abort handler (no stdio, no allocation). */
static inline void test_cgroup_kill_procs(const char *dir) {
        char path[256], buf[4096];
        ssize_t n;
        int fd;

        if (!dir[0])
                return;
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return;
        buf[n] = 0;
        for (char *p = buf; *p;) {
                long pid = strtol(p, &p, 10);

                if (pid > 0)
                        kill((pid_t) pid, SIGKILL);
                while (*p == '\n')
                        p++;
        }
}

static inline void test_cgroup_remove(struct test_cgroup *g) {
        for (int i = 0; i < 200; i++) {
                test_cgroup_write(g->v2, "cgroup.kill", "1");
                test_cgroup_kill_procs(g->v2);
                test_cgroup_kill_procs(g->v1);
                test_cgroup_kill_procs(g->sd);
                if ((rmdir(g->v2) == 0 || errno == ENOENT) &&
                    (!g->v1[0] || rmdir(g->v1) == 0 || errno == ENOENT) &&
                    (!g->sd[0] || rmdir(g->sd) == 0 || errno == ENOENT))
                        return;
                nanosleep(&(struct timespec) { 0, 10 * 1000 * 1000 }, NULL);
        }
}

static inline void test_cgroups_remove_all(void) {
        if (getpid() != test_cgroups_owner)
                return;
        for (unsigned i = 0; i < TEST_CGROUP_MAX; i++)
                if (test_cgroups[i]) {
                        test_cgroup_remove(test_cgroups[i]);
                        test_cgroups[i] = NULL;
                }
}

static inline void test_cgroups_on_abort(int sig) {
        test_cgroups_remove_all();
        signal(sig, SIG_DFL);
        raise(sig);
}

/* Creates /zswapd-test-PID-N (with SUFFIX, e.g. ".scope") in both hierarchies; limit_bytes > 0 sets the
 * v1 memory limit (or v2 memory.max where v2 has the controller). */
static inline struct test_cgroup *test_cgroup_new_suffix(uint64_t limit_bytes, const char *suffix) {
        static unsigned counter;
        struct test_cgroup *g = calloc(1, sizeof(*g));
        char limit[32];
        unsigned slot;

        if (!g)
                abort();
        for (slot = 0; slot < TEST_CGROUP_MAX && test_cgroups[slot]; slot++)
                ;
        if (slot == TEST_CGROUP_MAX)
                abort();
        if (counter++ == 0) {
                test_cgroups_owner = getpid();
                atexit(test_cgroups_remove_all);
                /* A failed assertion, and meson's timeout (SIGTERM), or ^C. */
                signal(SIGABRT, test_cgroups_on_abort);
                signal(SIGTERM, test_cgroups_on_abort);
                signal(SIGINT, test_cgroups_on_abort);
        }
        snprintf(g->name, sizeof(g->name), "/zswapd-test-%d-%u%s", getpid(), counter, suffix);
        snprintf(g->v2, sizeof(g->v2), "%s%s", test_cgroup_v2_root(), g->name);
        if (access(TEST_CGROUP_V1_MEMORY "/cgroup.procs", F_OK) == 0)
                snprintf(g->v1, sizeof(g->v1), "%s%s", TEST_CGROUP_V1_MEMORY, g->name);
        test_cgroups[slot] = g;
        if (mkdir(g->v2, 0755) < 0 || (g->v1[0] && mkdir(g->v1, 0755) < 0)) {
                fprintf(stderr, "cannot create cgroup %s: %m\n", g->name);
                abort();
        }
        if (limit_bytes > 0) {
                snprintf(limit, sizeof(limit), "%llu", (unsigned long long) limit_bytes);
                if (g->v1[0])
                        test_cgroup_write(g->v1, "memory.limit_in_bytes", limit);
                else
                        test_cgroup_write(g->v2, "memory.max", limit);
        }
        return g;
}

static inline struct test_cgroup *test_cgroup_new(uint64_t limit_bytes) {
        return test_cgroup_new_suffix(limit_bytes, "");
}

/* The same, and in the v1 name=systemd hierarchy of hybrid systems (where
 * systemd names units); NULL where there is no such hierarchy. */
static inline struct test_cgroup *test_cgroup_new_systemd(const char *suffix) {
        struct test_cgroup *g;

        if (access(TEST_CGROUP_V1_SYSTEMD "/cgroup.procs", F_OK) < 0)
                return NULL;
        g = test_cgroup_new_suffix(0, suffix);
        snprintf(g->sd, sizeof(g->sd), "%s%s", TEST_CGROUP_V1_SYSTEMD, g->name);
        if (mkdir(g->sd, 0755) < 0)
                abort();
        return g;
}

/* Sets the group's memory limit to what it uses now plus headroom, so that
 * a test works alike whatever its processes cost (a ThreadSanitizer build
 * adds shadow memory to every page a target touches). */
static inline void test_cgroup_limit_to_usage(const struct test_cgroup *g, uint64_t headroom) {
        char path[256], buf[64] = "";
        unsigned long long usage = 0;
        int fd;

        snprintf(path, sizeof(path), "%s/%s", g->v1[0] ? g->v1 : g->v2,
                 g->v1[0] ? "memory.usage_in_bytes" : "memory.current");
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, buf, sizeof(buf) - 1) <= 0 || sscanf(buf, "%llu", &usage) != 1)
                abort();
        close(fd);
        snprintf(buf, sizeof(buf), "%llu", usage + (unsigned long long) headroom);
        if (g->v1[0])
                test_cgroup_write(g->v1, "memory.limit_in_bytes", buf);
        else
                test_cgroup_write(g->v2, "memory.max", buf);
}

/* Lifts the group's memory limit. */
static inline void test_cgroup_unlimit(const struct test_cgroup *g) {
        if (g->v1[0])
                test_cgroup_write(g->v1, "memory.limit_in_bytes", "-1");
        else
                test_cgroup_write(g->v2, "memory.max", "max");
}

/* Moves the calling process into the group's name=systemd directory only,
 * as a process of a unit on a hybrid system whose v2 group is the root. */
static inline int test_cgroup_enter_systemd(const struct test_cgroup *g) {
        char path[256], pid[16];
        int fd, r = 0;

        snprintf(pid, sizeof(pid), "%d", getpid());
        snprintf(path, sizeof(path), "%s/cgroup.procs", g->sd);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, pid, strlen(pid)) < 0)
                r = -errno;
        close(fd);
        return r;
}

/* Moves the calling process into the group (every hierarchy it has).
 * Returns 0 or -errno. */
static inline int test_cgroup_enter(const struct test_cgroup *g) {
        char path[256], pid[16];
        const char *dirs[3] = { g->v1, g->v2, g->sd };

        snprintf(pid, sizeof(pid), "%d", getpid());
        for (unsigned i = 0; i < 3; i++) {
                int fd;

                if (!dirs[i][0])
                        continue;
                snprintf(path, sizeof(path), "%s/cgroup.procs", dirs[i]);
                fd = open(path, O_WRONLY | O_CLOEXEC);
                if (fd < 0)
                        return -errno;
                if (write(fd, pid, strlen(pid)) < 0) {
                        close(fd);
                        return -errno;
                }
                close(fd);
        }
        return 0;
}

static inline void test_cgroup_free(struct test_cgroup *g) {
        for (unsigned i = 0; i < TEST_CGROUP_MAX; i++)
                if (test_cgroups[i] == g)
                        test_cgroups[i] = NULL;
        test_cgroup_remove(g);
        free(g);
}

/*
 * A real pressure source: page cache thrash. A file several times larger
 * than the group's limit, read again and again from inside the group,
 * makes every read reclaim the group's own cache (direct reclaim and
 * refaults of its working set, both counted as memory stalls by PSI). With
 * no swap the kernel cannot take anonymous memory, so this is what stalls
 * a group here. The file lives on a disk file system (not tmpfs, whose
 * pages would be unreclaimable shmem) and is dropped from the cache after
 * writing, so that the group's reads are charged to the group.
 */
static inline int test_thrash_file_create(size_t size) {
        static char block[1 << 16];
        char path[] = "/var/tmp/zswapd-thrash.XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC), rfd;

        if (fd < 0)
                return -errno;
        /* Nothing left behind, whatever happens to the test. */
        rfd = open(path, O_RDONLY | O_CLOEXEC);
        unlink(path);
        for (size_t i = 0; i < sizeof(block); i++)
                block[i] = (char) (i * 7 + 3);
        for (size_t done = 0; rfd >= 0 && done < size; done += sizeof(block))
                if (write(fd, block, sizeof(block)) != (ssize_t) sizeof(block)) {
                        close(rfd);
                        rfd = -EIO;
                }
        if (rfd >= 0) {
                (void) fsync(fd);
                (void) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        close(fd);
        return rfd < 0 ? -EIO : rfd;
}

/* Reads the file from start to end, PASSES times (0: forever). */
static inline void test_thrash_read(int fd, unsigned passes) {
        static char buf[1 << 16];

        for (unsigned i = 0; passes == 0 || i < passes; i++) {
                off_t off = 0;
                ssize_t n;

                while ((n = pread(fd, buf, sizeof(buf), off)) > 0)
                        off += n;
                if (n < 0)
                        _exit(3);
        }
}

/* Whether this machine lets the test make cgroups at all. */
static inline bool test_cgroups_usable(void) {
        return geteuid() == 0 && access(test_cgroup_v2_root(), W_OK) == 0;
}
