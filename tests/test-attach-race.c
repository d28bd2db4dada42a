/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Attach, reclaim and detach, over and over, while the target's threads
 * are busy with everything that raises userfaultfd traffic: first touches
 * of fresh anonymous memory (by write and by read), read(2) from a pipe
 * into fresh pages (faults taken in kernel mode), mmap/munmap, its own
 * MADV_DONTNEED, malloc/free (brk up and down), fork, and writes to a
 * buffer that reclaim takes away. Every thread checks what it reads.
 *
 * The failure this hunts is a fault that nobody serves: the target's
 * thread sleeps forever in the kernel. A watchdog thread watches every
 * worker's progress counter; when one stands still for WATCHDOG_S it
 * prints where each thread of the target and of this process sleeps
 * (/proc/.../stack, wchan) and what the userfaultfds hold (fdinfo:
 * faults read but unanswered, faults not read), then fails the test
 * instead of letting it hang until meson's timeout.
 *
 * ZSWAPD_TEST_RACE_CYCLES sets the number of attach/detach cycles
 * (default 40) for longer hunts; ZSWAPD_TEST_RACE_NO_RECLAIM=1 makes every
 * cycle attach and detach only.
 *
 * Two data races of the eviction protocol gave wrong reads in fresh
 * memory (the workers that map, unmap and DONTNEED it) in about one run
 * in six before every thread of the target was stopped for a round's
 * commit and drop (evict.c, round_drop()): the target's DONTNEED whose
 * zap came after a round read the page, and a range the target unmapped
 * and mapped again while our drop's madvise was on its way through it.
 * Every wrong read fails the test, and every hang.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "test.h"

#define PAGE 4096ul
#define KEEP_PAGES 512u /* the buffer reclaim takes away: 2 MiB */
#define WATCHDOG_S 30

enum {
        W_TOUCH_WRITE,
        W_TOUCH_READ,
        W_PIPE,
        W_KEEP,
        W_FORK,
        W_DONTNEED,
        W_MALLOC,
        N_WORKERS,
};

static const char *const worker_names[N_WORKERS] = {
        "touch-write", "touch-read", "pipe", "keep", "fork", "dontneed", "malloc",
};

/* Shared with the target (MAP_SHARED: never registered, never evicted). */
struct shared {
        _Atomic uint64_t progress[N_WORKERS];
        _Atomic uint64_t errors;
        _Atomic bool stop;
        _Atomic unsigned ready;
        char first_error[256];
};

static struct shared *sh;

/* ---- The target ------------------------------------------------------ */

static uint64_t mix(uint64_t x) {
        x ^= x >> 31;
        x *= 0x9e3779b97f4a7c15ull;
        return x ^ (x >> 29);
}

static void fill_page(void *p, uint64_t seed) {
        uint64_t *w = p;

        for (size_t i = 0; i < PAGE / 8; i += 8)
                w[i] = mix(seed + i);
}

static bool page_ok(const void *p, uint64_t seed) {
        const uint64_t *w = p;

        for (size_t i = 0; i < PAGE / 8; i++)
                if (w[i] != (i % 8 == 0 ? mix(seed + i) : 0))
                        return false;
        return true;
}

static void bad(const char *what, uint64_t n) {
        if (atomic_fetch_add(&sh->errors, 1) == 0)
                snprintf(sh->first_error, sizeof(sh->first_error), "%s (iteration %" PRIu64 ")",
                         what, n);
}

static void *fresh(size_t pages) {
        void *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);

        if (p == MAP_FAILED)
                _exit(3);
        return p;
}

static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *keep;
static uint64_t keep_seed[KEEP_PAGES];

static bool keep_verify(const char *who) {
        for (size_t i = 0; i < KEEP_PAGES; i++)
                if (!page_ok(keep + i * PAGE, keep_seed[i])) {
                        char what[128];

                        snprintf(what, sizeof(what), "%s: keep page %zu at %p reads %s", who, i,
                                 (void *) (keep + i * PAGE),
                                 *(uint64_t *) (keep + i * PAGE) == 0 ? "zeros" : "wrong data");
                        bad(what, 0);
                        return false;
                }
        return true;
}

static void work_once(unsigned w, uint64_t n) {
        switch (w) {
        case W_TOUCH_WRITE: {
                uint8_t *p = fresh(64);

                for (size_t i = 0; i < 64; i++)
                        fill_page(p + i * PAGE, n * 64 + i);
                for (size_t i = 0; i < 64; i++)
                        if (!page_ok(p + i * PAGE, n * 64 + i))
                                bad("touch-write: page changed", n);
                munmap(p, 64 * PAGE);
                break;
        }
        case W_TOUCH_READ: {
                volatile uint8_t *p = fresh(64);

                for (size_t i = 0; i < 64; i++)
                        if (p[i * PAGE + (n % PAGE)] != 0)
                                bad("touch-read: fresh page not zero", n);
                for (size_t i = 0; i < 64; i++)
                        p[i * PAGE] = 1;
                munmap((void *) p, 64 * PAGE);
                break;
        }
        case W_PIPE: {
                _Alignas(4096) static uint8_t src[PAGE];
                uint8_t *p = fresh(16);
                int fds[2];

                if (pipe2(fds, O_CLOEXEC) < 0)
                        _exit(4);
                for (size_t i = 0; i < 16; i++) {
                        fill_page(src, n * 16 + i);
                        /* read(2) into a page never touched: the kernel
                         * takes the fault while copying. */
                        if (write(fds[1], src, PAGE) != (ssize_t) PAGE ||
                            read(fds[0], p + i * PAGE, PAGE) != (ssize_t) PAGE)
                                bad("pipe: short transfer", n);
                        else if (!page_ok(p + i * PAGE, n * 16 + i))
                                bad("pipe: page read wrong", n);
                }
                close(fds[0]);
                close(fds[1]);
                munmap(p, 16 * PAGE);
                break;
        }
        case W_KEEP: {
                size_t i = mix(n) % KEEP_PAGES;

                pthread_mutex_lock(&keep_lock);
                keep_seed[i] = mix(n + 77);
                fill_page(keep + i * PAGE, keep_seed[i]);
                if (n % 64 == 0)
                        keep_verify("keep");
                pthread_mutex_unlock(&keep_lock);
                break;
        }
        case W_FORK: {
                pid_t p;
                int status;

                /* With the lock held no page of keep is half written; the
                 * child never touches the lock again. */
                pthread_mutex_lock(&keep_lock);
                p = fork();
                if (p == 0) {
                        uint8_t *f = fresh(8);

                        for (size_t i = 0; i < 8; i++)
                                fill_page(f + i * PAGE, i);
                        _exit(keep_verify("fork child") ? 0 : 1);
                }
                pthread_mutex_unlock(&keep_lock);
                if (p < 0 || waitpid(p, &status, 0) != p || !WIFEXITED(status) ||
                    WEXITSTATUS(status) != 0)
                        bad("fork: the child failed", n);
                break;
        }
        case W_DONTNEED: {
                static uint8_t *d;

                if (!d)
                        d = fresh(32);
                for (size_t i = 0; i < 32; i++)
                        fill_page(d + i * PAGE, n + i);
                for (size_t i = 0; i < 32; i++)
                        if (!page_ok(d + i * PAGE, n + i))
                                bad("dontneed: page changed", n);
                if (madvise(d, 32 * PAGE, MADV_DONTNEED) < 0)
                        bad("dontneed: madvise failed", n);
                for (size_t i = 0; i < 32; i++)
                        if (*(uint64_t *) (d + i * PAGE) != 0)
                                bad("dontneed: page not zero after MADV_DONTNEED", n);
                break;
        }
        case W_MALLOC: {
                /* Sizes on both sides of glibc's mmap threshold: the heap
                 * grows and shrinks (brk), big blocks come and go. */
                size_t sz = (mix(n) % 64 + 1) * 8 * PAGE;
                uint8_t *m = malloc(sz);

                if (!m)
                        _exit(5);
                for (size_t off = 0; off < sz; off += PAGE)
                        m[off] = (uint8_t) (off / PAGE + n);
                for (size_t off = 0; off < sz; off += PAGE)
                        if (m[off] != (uint8_t) (off / PAGE + n))
                                bad("malloc: block changed", n);
                free(m);
                break;
        }
        }
}

static void *worker_main(void *arg) {
        unsigned w = (unsigned) (uintptr_t) arg;

        atomic_fetch_add(&sh->ready, 1);
        for (uint64_t n = 1; !atomic_load(&sh->stop); n++) {
                work_once(w, n);
                atomic_store(&sh->progress[w], n);
        }
        return NULL;
}

static _Noreturn void target_main(void) {
        pthread_t th[N_WORKERS];

        keep = fresh(KEEP_PAGES);
        for (size_t i = 0; i < KEEP_PAGES; i++) {
                keep_seed[i] = i;
                fill_page(keep + i * PAGE, i);
        }
        for (unsigned w = 0; w < N_WORKERS; w++)
                if (pthread_create(&th[w], NULL, worker_main, (void *) (uintptr_t) w) != 0)
                        _exit(6);
        for (unsigned w = 0; w < N_WORKERS; w++)
                pthread_join(th[w], NULL);
        keep_verify("keep at the end");
        _exit(atomic_load(&sh->errors) ? 1 : 0);
}

/* ---- The watchdog ---------------------------------------------------- */

static pid_t target_pid;

static void dump_file(const char *path, const char *label) {
        char buf[4096];
        ssize_t l;
        int fd = open(path, O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return;
        l = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (l <= 0)
                return;
        buf[l] = 0;
        fprintf(stderr, "  %s:%s%s", label, strchr(buf, '\n') ? "\n" : " ", buf);
        if (buf[l - 1] != '\n')
                fputc('\n', stderr);
}

/* Where each thread of pid sleeps; then its children, recursively. */
static void dump_process(pid_t pid, unsigned depth) {
        char path[384];
        struct dirent *de;
        DIR *d;

        snprintf(path, sizeof(path), "/proc/%d/task", pid);
        d = opendir(path);
        if (!d || depth > 3)
                goto out;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                fprintf(stderr, "process %d thread %s\n", pid, de->d_name);
                snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", pid, de->d_name);
                dump_file(path, "comm");
                snprintf(path, sizeof(path), "/proc/%d/task/%s/wchan", pid, de->d_name);
                dump_file(path, "wchan");
                snprintf(path, sizeof(path), "/proc/%d/task/%s/stack", pid, de->d_name);
                dump_file(path, "stack");
        }
        rewinddir(d);
        while ((de = readdir(d))) {
                char buf[512], *tok, *save = NULL;
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/task/%s/children", pid, de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(buf, sizeof(buf), f))
                        for (tok = strtok_r(buf, " \n", &save); tok;
                             tok = strtok_r(NULL, " \n", &save))
                                dump_process(atoi(tok), depth + 1);
                fclose(f);
        }
out:
        if (d)
                closedir(d);
}

/* The userfaultfds pid holds: "pending" counts faults not read yet,
 * "total" those plus the faults read and not answered yet. */
static void dump_uffds(pid_t pid) {
        char dir[64];
        struct dirent *de;
        DIR *d;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
        d = opendir(dir);
        if (!d)
                return;
        while ((de = readdir(d))) {
                char path[384], link[128];
                ssize_t l;

                snprintf(path, sizeof(path), "/proc/%d/fd/%s", pid, de->d_name);
                l = readlink(path, link, sizeof(link) - 1);
                if (l <= 0)
                        continue;
                link[l] = 0;
                if (!strstr(link, "userfaultfd"))
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", pid, de->d_name);
                fprintf(stderr, "process %d fd %s (%s)\n", pid, de->d_name, link);
                dump_file(path, "fdinfo");
        }
        closedir(d);
}

/* A mapping's first line in smaps ("start-end perms offset dev inode
 * [path]"); its field lines ("Rss:   4 kB", "VmFlags: ...") never start
 * with two hex numbers joined by '-'. */
static bool smaps_is_mapping(const char *line) {
        unsigned long start, end;
        char perms[5];

        return sscanf(line, "%lx-%lx %4s", &start, &end, perms) == 3;
}

/* The mappings of pid still registered with a userfaultfd. */
static void dump_registered(pid_t pid) {
        char path[64], line[512], range[512] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/smaps", pid);
        f = fopen(path, "re");
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                if (smaps_is_mapping(line))
                        snprintf(range, sizeof(range), "%s", line);
                if (strncmp(line, "VmFlags:", 8) == 0 &&
                    (strstr(line, " um") || strstr(line, " uw")))
                        fprintf(stderr, "registered: %s  %s", range, line);
        }
        fclose(f);
}

static struct zsw_engine *engine;

static void dump_targets(void) {
        pid_t pids[256];
        size_t n = zsw_engine_list_targets(engine, pids, 256);

        fprintf(stderr, "engine targets (%zu):", n);
        for (size_t i = 0; i < n && i < 256; i++)
                fprintf(stderr, " %d", pids[i]);
        fputc('\n', stderr);
}

static void *watchdog_main(void *arg) {
        uint64_t last[N_WORKERS] = {};
        time_t since[N_WORKERS];
        (void) arg;

        for (unsigned w = 0; w < N_WORKERS; w++)
                since[w] = time(NULL);
        while (!atomic_load(&sh->stop)) {
                time_t now = time(NULL);

                for (unsigned w = 0; w < N_WORKERS; w++) {
                        uint64_t p = atomic_load(&sh->progress[w]);

                        if (p != last[w]) {
                                last[w] = p;
                                since[w] = now;
                        } else if (now - since[w] >= WATCHDOG_S) {
                                fprintf(stderr,
                                        "\nWATCHDOG: worker %s of target %d made no progress "
                                        "for %d s; where everybody sleeps:\n",
                                        worker_names[w], target_pid, WATCHDOG_S);
                                dump_process(target_pid, 0);
                                fprintf(stderr, "\nthis process (the engine's threads):\n");
                                dump_process(getpid(), 3);
                                dump_uffds(target_pid);
                                dump_uffds(getpid());
                                dump_registered(target_pid);
                                dump_targets();
                                kill(target_pid, SIGKILL);
                                TEST_FAIL("target %d stuck (worker %s)", target_pid,
                                          worker_names[w]);
                        }
                }
                usleep(100 * 1000);
        }
        return NULL;
}

/* ---- The test -------------------------------------------------------- */

static const struct zsw_log test_log = { .fn = test_log_stderr, .max_priority = LOG_INFO };

/* Waits until every worker got through at least one more iteration:
 * while attached, that means each one's faults were served. */
static void wait_all_progress(void) {
        uint64_t start[N_WORKERS];

        for (unsigned w = 0; w < N_WORKERS; w++)
                start[w] = atomic_load(&sh->progress[w]);
        for (unsigned w = 0; w < N_WORKERS; w++)
                while (atomic_load(&sh->progress[w]) == start[w] && !atomic_load(&sh->errors))
                        usleep(200);
}

TEST(attach_reclaim_detach_while_busy) {
        struct zsw_engine_config cfg = { .prefetch_window = 8, .log = &test_log };
        const char *env = getenv("ZSWAPD_TEST_RACE_CYCLES");
        unsigned cycles = env ? (unsigned) atoi(env) : 40;
        struct zsw_engine_error err = {};
        struct zsw_engine *e;
        pthread_t watchdog;
        uint64_t evicted = 0, faults = 0;
        int status;

        if (geteuid() != 0)
                TEST_SKIP("needs root for ptrace and userfaultfd");
        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(sh != MAP_FAILED);

        /* The target first: a process that runs the engine's threads may
         * fork only to exec. */
        target_pid = fork();
        ASSERT_GE(target_pid, 0);
        if (target_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                target_main();
        }
        ASSERT_OK(zsw_engine_new(&cfg, &e));
        engine = e;
        ASSERT_EQ(pthread_create(&watchdog, NULL, watchdog_main, NULL), 0);
        while (atomic_load(&sh->ready) < N_WORKERS)
                usleep(1000);

        for (unsigned c = 0; c < cycles && !atomic_load(&sh->errors); c++) {
                struct zsw_reclaim_result res = {};
                struct zsw_target_stats ts = {};

                /* Attach in the middle of the workers' traffic, at a
                 * different moment of their loops each time. */
                usleep((useconds_t) (mix(c) % 3000));
                if (zsw_engine_attach(e, target_pid, &err) < 0)
                        TEST_FAIL("attach (cycle %u): %s", c, err.message);
                if (getenv("ZSWAPD_TEST_RACE_NO_RECLAIM") == NULL && c % 4 != 3) {
                        /* Odd cycles reclaim everything at once, the
                         * others in small steps that race the workers. */
                        for (unsigned k = 0; k < (c % 2 ? 1u : 3u); k++) {
                                if (zsw_engine_reclaim(e, target_pid,
                                                       c % 2 ? UINT64_MAX : 256 * 1024, &res,
                                                       &err) < 0)
                                        TEST_FAIL("reclaim (cycle %u): %s", c, err.message);
                                evicted += res.evicted_pages;
                        }
                }
                wait_all_progress();
                ASSERT_OK(zsw_engine_get_target_stats(e, target_pid, &ts));
                faults += ts.faults;
                if (zsw_engine_detach(e, target_pid, &err) < 0)
                        TEST_FAIL("detach (cycle %u): %s", c, err.message);
                /* Detached, the workers run on: nothing of ours is left. */
                wait_all_progress();
        }

        atomic_store(&sh->stop, true);
        ASSERT_EQ(waitpid(target_pid, &status, 0), target_pid);
        pthread_join(watchdog, NULL);
        zsw_engine_free(e);
        fprintf(stderr, "%u cycles, %" PRIu64 " pages evicted, %" PRIu64 " faults served\n", cycles,
                evicted, faults);
        if (atomic_load(&sh->errors))
                TEST_FAIL("the target saw %" PRIu64 " wrong reads, first: %s",
                          (uint64_t) atomic_load(&sh->errors), sh->first_error);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!getenv("ZSWAPD_TEST_RACE_NO_RECLAIM"))
                ASSERT_GT(evicted, 0);
        ASSERT_GT(faults, 0);
        munmap(sh, sizeof(*sh));
}
