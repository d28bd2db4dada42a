/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Discovery by policy on real processes: children of this test put into
 * cgroups of its own (one named like a systemd scope) or running a binary
 * of a unique name are found by cgroup path, by unit and by executable and
 * attached by the policy manager; a process no enabled policy matches is
 * left alone; disabling a policy by reload detaches its processes.
 */
#define TEST_NO_MAIN
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "config.h"
#include "log.h"
#include "policy.h"
#include "test.h"
#include "test-cgroups.h"

static char sleeper[64];

/* How a child starts the sleeper: FILE (searched in PATH if set and FILE
 * has no '/') with ARGV0 from directory CWD; NULL means the sleeper's own
 * path, the test's directory and environment. */
struct start {
        const char *file, *argv0, *cwd, *path;
        bool no_env;
};

/* A child that enters G (if any; only its name=systemd group if SD_ONLY)
 * and runs the sleeper until killed, started as HOW says. */
static pid_t spawn_how(const struct test_cgroup *g, bool sd_only, const struct start *how) {
        const char *file = how->file ?: sleeper;
        int ready[2];
        pid_t pid;

        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                char *argv[] = { (char *) (how->argv0 ?: file), (char *) "1000", NULL };

                /* Dies with the test: a sleeper left behind by a failed
                 * check would hold the test's output open, and meson would
                 * wait for it until the timeout. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (g && (sd_only ? test_cgroup_enter_systemd(g) : test_cgroup_enter(g)) < 0)
                        _exit(2);
                if ((how->cwd && chdir(how->cwd) < 0) ||
                    (how->path && setenv("PATH", how->path, 1) < 0))
                        _exit(2);
                (void) !write(ready[1], "r", 1);
                if (how->no_env)
                        execve(file, argv, (char *[]) { NULL });
                else
                        execvp(file, argv);
                _exit(3);
        }
        close(ready[1]);
        ASSERT_EQ(read(ready[0], (char[1]) {}, 1), 1);
        close(ready[0]);
        /* Until exec has happened, /proc/PID/exe names this test; exec
         * sets the new exe before the new arguments, and until those are
         * in place /proc/PID/cmdline reads empty. */
        for (int i = 0; i < 10000; i++) {
                char path[64], target[128] = "", cmdline[8];
                int fd;
                ssize_t n = 0;

                snprintf(path, sizeof(path), "/proc/%d/exe", pid);
                if (readlink(path, target, sizeof(target) - 1) > 0 && strstr(target, "sleeper")) {
                        snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
                        fd = open(path, O_RDONLY | O_CLOEXEC);
                        if (fd >= 0) {
                                n = read(fd, cmdline, sizeof(cmdline));
                                close(fd);
                        }
                        if (n > 0)
                                return pid;
                }
                usleep(1000);
        }
        TEST_FAIL("child %d never ran %s", pid, sleeper);
}

static pid_t spawn_in(const struct test_cgroup *g, bool sd_only) {
        return spawn_how(g, sd_only, &(struct start) {});
}

static pid_t spawn(const struct test_cgroup *g) {
        return spawn_in(g, false);
}

static void reap(pid_t pid) {
        int status;

        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
}

static int proc_dir(pid_t pid) {
        char path[32];
        int fd;

        snprintf(path, sizeof(path), "/proc/%d", pid);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        return fd;
}

TEST(eligible_and_executable) {
        struct zsw_proc_exe exe = {};
        pid_t child, zombie;
        int fd;

        fd = proc_dir(getpid());
        ASSERT_EQ(policy_process_eligible(fd, getpid()), 0); /* the daemon itself */
        close(fd);
        fd = proc_dir(2);
        ASSERT_EQ(policy_process_eligible(fd, 2), 0); /* kthreadd */
        ASSERT_OK(proc_exe_read(fd, NULL, &exe));     /* no exe: comm */
        ASSERT_TRUE(!exe.path && !exe.argv0);
        ASSERT_STREQ(exe.comm, "kthreadd");
        proc_exe_done(&exe);
        close(fd);

        child = spawn(NULL);
        fd = proc_dir(child);
        ASSERT_EQ(policy_process_eligible(fd, child), 1);
        ASSERT_OK(proc_exe_read(fd, NULL, &exe));
        ASSERT_STREQ(exe.path, sleeper);
        ASSERT_STREQ(exe.argv0, sleeper);
        ASSERT_TRUE(strncmp(exe.comm, strrchr(sleeper, '/') + 1, 15) == 0);
        proc_exe_done(&exe);
        close(fd);
        reap(child);

        zombie = fork();
        ASSERT_GE(zombie, 0);
        if (zombie == 0)
                _exit(0);
        ASSERT_OK(waitid(P_PID, zombie, &(siginfo_t) {}, WEXITED | WNOWAIT));
        fd = proc_dir(zombie);
        ASSERT_EQ(policy_process_eligible(fd, zombie), 0);
        close(fd);
        ASSERT_EQ(waitpid(zombie, NULL, 0), zombie);
}

static struct zsw_config *config_of(const char *const *texts, const char *const *names, size_t n) {
        struct zsw_config_source src[8];
        struct zsw_config *c = NULL;

        for (size_t i = 0; i < n; i++)
                src[i] = (struct zsw_config_source) { names[i], texts[i], strlen(texts[i]) };
        ASSERT_OK(config_load_sources(NULL, src, n, log_get(), &c));
        return c;
}

static bool attached(struct zsw_engine *e, pid_t pid) {
        struct zsw_target_stats s;

        return zsw_engine_get_target_stats(e, pid, &s) == 0;
}

TEST(match_by_path_unit_and_executable) {
        struct test_cgroup *by_path, *by_unit, *off;
        char t_path[256], t_unit[256], t_exe[256], t_off[256];
        const char *names[] = { "/p/10-path.conf", "/p/20-unit.conf", "/p/30-exe.conf",
                                "/p/40-off.conf" };
        struct zsw_engine *e = NULL;
        struct policy_manager *m = NULL;
        pid_t a, b, c, d;

        if (!test_cgroups_usable())
                TEST_SKIP("needs root and a writable cgroup tree");
        by_path = test_cgroup_new(0);
        by_unit = test_cgroup_new_suffix(0, ".scope");
        off = test_cgroup_new(0);
        snprintf(t_path, sizeof(t_path), "[Match]\nCgroupPath=%s\n[Policy]\nMinColdAge=0\n",
                 by_path->name);
        snprintf(t_unit, sizeof(t_unit), "[Match]\nUnit=%s\n", by_unit->name + 1);
        snprintf(t_exe, sizeof(t_exe), "[Match]\nExecutable=%s\n", strrchr(sleeper, '/') + 1);
        /* Matches the sleeper too, but comes later and is off anyway. */
        snprintf(t_off, sizeof(t_off), "[Match]\nCgroupPath=%s\n[Policy]\nEnabled=no\n", off->name);

        a = spawn(by_path);
        b = spawn(by_unit);
        d = spawn(off);
        ASSERT_OK(zsw_engine_new(&(struct zsw_engine_config) { .log = log_get() }, &e));
        ASSERT_OK(policy_manager_new(
                e, config_of((const char *[]) { t_path, t_unit, t_exe, t_off }, names, 4), &m));
        /* b's and d's sleepers match 30-exe too, but the first policy in
         * file order wins: 20-unit for b; for d, 30-exe comes before the
         * disabled 40-off, so d is attached by executable. */
        ASSERT_EQ(policy_manager_scan(m), 3);
        ASSERT_STREQ(policy_manager_target_policy(m, a), "10-path");
        ASSERT_STREQ(policy_manager_target_policy(m, b), "20-unit");
        ASSERT_STREQ(policy_manager_target_policy(m, d), "30-exe");
        /* Started later, outside every group: found by executable alone. */
        c = spawn(NULL);
        ASSERT_EQ(policy_manager_scan(m), 1);
        ASSERT_STREQ(policy_manager_target_policy(m, c), "30-exe");
        ASSERT_EQ(policy_manager_scan(m), 0);
        ASSERT_TRUE(attached(e, a) && attached(e, b) && attached(e, c));

        /* Detached by hand (what the control socket does): not taken back. */
        ASSERT_OK(zsw_engine_detach(e, c, NULL));
        policy_manager_forget(m, c);
        ASSERT_EQ(policy_manager_scan(m), 0);
        ASSERT_FALSE(attached(e, c));
        ASSERT_TRUE(policy_manager_target_policy(m, c) == NULL);

        /* Reload: 10-path disabled, 30-exe gone; 40-off now the only match
         * of d, and off. Their processes are detached, b stays. */
        snprintf(t_path, sizeof(t_path), "[Match]\nCgroupPath=%s\n[Policy]\nEnabled=no\n",
                 by_path->name);
        policy_manager_set_config(m,
                                  config_of((const char *[]) { t_path, t_unit, t_off },
                                            (const char *[]) { names[0], names[1], names[3] }, 3));
        ASSERT_FALSE(attached(e, a));
        ASSERT_FALSE(attached(e, c));
        ASSERT_FALSE(attached(e, d));
        ASSERT_TRUE(attached(e, b));
        ASSERT_TRUE(policy_manager_target_policy(m, a) == NULL);
        ASSERT_EQ(policy_manager_scan(m), 0);

        policy_manager_free(m);
        zsw_engine_free(e);
        reap(a), reap(b), reap(c), reap(d);
        test_cgroup_free(by_path);
        test_cgroup_free(by_unit);
        test_cgroup_free(off);
}

static char *dump_targets(struct policy_manager *m, bool json) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        ASSERT_TRUE(f);
        ASSERT_OK(policy_manager_dump_targets(m, f, json));
        ASSERT_EQ(fclose(f), 0);
        return buf;
}

/* The listing's entry for PID: from its "pid" to the next one's. */
static char *json_entry(const char *json, pid_t pid) {
        char pat[32];
        const char *s, *e;

        snprintf(pat, sizeof(pat), "{\"pid\":%d,", pid);
        s = strstr(json, pat);
        ASSERT_TRUE(s);
        e = strstr(s + 1, "{\"pid\":");
        return strndup(s, e ? (size_t) (e - s) : strlen(s));
}

/* A program started through a symlink (as Debian's /usr/bin/redis-server,
 * a link to redis-check-rdb) runs the link's target, and /proc/PID/exe
 * names that; policies naming the link's path or its name match it all
 * the same, however it was started, and the listing says why. */
TEST(match_executable_started_through_a_symlink) {
        char dir[] = "/tmp/zswapd-test-link-XXXXXX", link[128], name[16], rel[32];
        char t_path[256], t_name[256], pat[512];
        _cleanup_free_ char *json = NULL, *text = NULL, *ea = NULL, *ed = NULL;
        struct zsw_engine *e = NULL;
        struct policy_manager *m = NULL;
        pid_t a, b, c, d, x;

        ASSERT_TRUE(mkdtemp(dir));
        /* Short enough for comm (15 bytes). */
        snprintf(name, sizeof(name), "zln-%d", getpid());
        snprintf(link, sizeof(link), "%s/%s", dir, name);
        snprintf(rel, sizeof(rel), "./%s", name);
        ASSERT_OK(symlink(sleeper, link));
        snprintf(t_path, sizeof(t_path), "[Match]\nExecutable=%s\n", link);
        snprintf(t_name, sizeof(t_name), "[Match]\nExecutable=%s\n", name);

        a = spawn_how(NULL, false, &(struct start) { .file = link });
        b = spawn_how(NULL, false, &(struct start) { .file = rel, .cwd = dir });
        c = spawn_how(NULL, false, &(struct start) { .file = name, .path = dir });
        /* argv[0] tells nothing; the kernel's comm still has the link's name. */
        d = spawn_how(NULL, false,
                      &(struct start) { .file = link, .argv0 = "renamed", .no_env = true });
        x = spawn(NULL); /* the same file, not started through the link */

        ASSERT_OK(zsw_engine_new(&(struct zsw_engine_config) { .log = log_get() }, &e));
        ASSERT_OK(policy_manager_new(
                e,
                config_of((const char *[]) { t_path, t_name },
                          (const char *[]) { "/p/10-path.conf", "/p/20-name.conf" }, 2),
                &m));
        ASSERT_EQ(policy_manager_scan(m), 4);
        ASSERT_STREQ(policy_manager_target_policy(m, a), "10-path");
        ASSERT_STREQ(policy_manager_target_policy(m, b), "10-path");
        ASSERT_STREQ(policy_manager_target_policy(m, c), "10-path");
        ASSERT_STREQ(policy_manager_target_policy(m, d), "20-name");
        ASSERT_TRUE(policy_manager_target_policy(m, x) == NULL);

        json = dump_targets(m, true);
        ea = json_entry(json, a);
        snprintf(pat, sizeof(pat), "\"exe\":\"%s\",\"argv0\":\"%s\"", sleeper, link);
        if (!strstr(ea, pat))
                TEST_FAIL("no %s in %s", pat, ea);
        snprintf(pat, sizeof(pat),
                 "\"match\":[{\"key\":\"Executable\",\"pattern\":\"%s\",\"form\":\"argv0\","
                 "\"value\":\"%s\"}]",
                 link, link);
        if (!strstr(ea, pat))
                TEST_FAIL("no %s in %s", pat, ea);
        ed = json_entry(json, d);
        snprintf(pat, sizeof(pat), "\"form\":\"comm\",\"value\":\"%s\"", name);
        if (!strstr(ed, pat) || !strstr(ed, "\"argv0\":\"\""))
                TEST_FAIL("no %s and no argv0 in %s", pat, ed);
        text = dump_targets(m, false);
        snprintf(pat, sizeof(pat), "Executable=%s (argv0)", link);
        ASSERT_TRUE(strstr(text, "MATCH") && strstr(text, pat));
        snprintf(pat, sizeof(pat), "Executable=%s (comm)", name);
        ASSERT_TRUE(strstr(text, pat));

        policy_manager_free(m);
        zsw_engine_free(e);
        reap(a), reap(b), reap(c), reap(d), reap(x);
        ASSERT_OK(unlink(link));
        ASSERT_OK(rmdir(dir));
}

/* Hybrid systems: systemd names units in its v1 name=systemd hierarchy,
 * and a unit's processes may sit in the v2 root. The unit is found there. */
TEST(match_unit_in_the_systemd_hierarchy) {
        char text[256];
        struct test_cgroup *g;
        struct zsw_engine *e = NULL;
        struct policy_manager *m = NULL;
        pid_t a;

        if (!test_cgroups_usable())
                TEST_SKIP("needs root and a writable cgroup tree");
        g = test_cgroup_new_systemd(".service");
        if (!g) {
                fprintf(stderr, "no name=systemd hierarchy here (pure cgroup v2), skipping\n");
                return;
        }
        snprintf(text, sizeof(text), "[Match]\nUnit=%s\n", g->name + 1);
        a = spawn_in(g, true);
        ASSERT_OK(zsw_engine_new(&(struct zsw_engine_config) { .log = log_get() }, &e));
        ASSERT_OK(policy_manager_new(
                e, config_of((const char *[]) { text }, (const char *[]) { "/p/unit.conf" }, 1),
                &m));
        ASSERT_EQ(policy_manager_scan(m), 1);
        ASSERT_STREQ(policy_manager_target_policy(m, a), "unit");
        policy_manager_free(m);
        zsw_engine_free(e);
        reap(a);
        test_cgroup_free(g);
}

int main(int argc, char **argv) {
        int r;
        char cmd[128];

        /* A binary of a name no other process on the machine has. */
        snprintf(sleeper, sizeof(sleeper), "/tmp/zswapd-test-sleeper-%d", getpid());
        snprintf(cmd, sizeof(cmd), "cp /bin/sleep %s", sleeper);
        if (geteuid() != 0)
                TEST_SKIP("needs root: the policy manager attaches with ptrace");
        log_setup(LOG_INFO);
        if (system(cmd) != 0)
                TEST_FAIL("%s failed", cmd);
        r = test_run_cases(argc, argv);
        unlink(sleeper);
        return r;
}
