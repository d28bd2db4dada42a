/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-test-target: a process with known memory for the integration
 * tests. It holds one anonymous buffer with a checksum per page and obeys
 * commands on stdin, one per line, answering each with one line on stdout
 * ("ok ..." or "error ..."), so a test can evict its pages, make it touch
 * them in every way that matters (threads, fork, mremap, its own
 * MADV_DONTNEED, kernel-mode access through a pipe, exec) and check that
 * no byte changed.
 *
 *   zswapd-test-target [--synthetic] [--seed N]
 *
 * Commands: fill MIB [ZERO_PERCENT] | verify | verify-on-byte (answers
 * "ok waiting", reads one raw byte from stdin, then verifies) |
 * write PAGE SEED | threads N |
 * stop | fork-verify | fork-hold | fork-release | mremap ADDR_HINT |
 * munmap-half | dontneed START COUNT | pipe-read PAGE | rss | exec | exit. On start, and after exec, it prints
 * "ok ready pid=PID".
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"

#define PAGE 4096ul
#define MAX_THREADS 64

static bool arg_synthetic;
static uint64_t arg_seed = 1;
static char **saved_argv;

/* The buffer and its expected sums; lock held by whoever writes a page
 * and updates its sum, so a verify never sees one without the other. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *buf;
static size_t npages;
static uint64_t *sums;
static uint64_t zero_sum;

static pthread_t threads[MAX_THREADS];
static unsigned nthreads;
static volatile int stop_flag;
static uint64_t writes_total;

static uint64_t splitmix(uint64_t *s) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

/* Deterministic, half compressible: random words interleaved with small
 * counters, the way pointer-heavy heaps look to a compressor. */
static void synth_page(void *page, uint64_t seed) {
        uint64_t *w = page, s = seed;

        for (size_t i = 0; i < PAGE / 8; i++)
                w[i] = i % 2 ? splitmix(&s) : i;
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
}

static void count_pages(size_t *good, size_t *bad, ssize_t *first_bad) {
        *good = *bad = 0;
        *first_bad = -1;
        for (size_t i = 0; i < npages; i++) {
                if (corpus_page_sum(buf + i * PAGE) == sums[i])
                        (*good)++;
                else if ((*bad)++ == 0)
                        *first_bad = (ssize_t) i;
        }
}

static int cmd_fill(size_t mib, unsigned zero_percent) {
        size_t n = mib * (1024 * 1024 / PAGE);
        char *p;
        uint64_t *s;

        if (nthreads > 0)
                return -EBUSY;
        if (n == 0 || zero_percent > 100)
                return -EINVAL;
        p = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return -errno;
        s = calloc(n, sizeof(*s));
        if (!s) {
                munmap(p, n * PAGE);
                return -ENOMEM;
        }
        if (arg_synthetic) {
                uint64_t seed = arg_seed;

                for (size_t i = 0; i < n; i++)
                        if (splitmix(&seed) % 100 >= zero_percent)
                                synth_page(p + i * PAGE, arg_seed * 1000003 + i);
        } else {
                int r = corpus_fill(p, n, zero_percent, arg_seed);

                if (r < 0) {
                        munmap(p, n * PAGE);
                        free(s);
                        return r;
                }
        }
        for (size_t i = 0; i < n; i++)
                s[i] = corpus_page_sum(p + i * PAGE);
        if (buf)
                munmap(buf, npages * PAGE);
        free(sums);
        buf = p;
        sums = s;
        npages = n;
        return 0;
}

static void *writer_main(void *arg) {
        uint64_t rng = (uintptr_t) arg, n = 0;
        char page[PAGE];

        while (!__atomic_load_n(&stop_flag, __ATOMIC_RELAXED)) {
                uint64_t seed = splitmix(&rng);
                size_t i;

                synth_page(page, seed);
                pthread_mutex_lock(&lock);
                i = seed % npages;
                memcpy(buf + i * PAGE, page, PAGE);
                sums[i] = corpus_page_sum(page);
                pthread_mutex_unlock(&lock);
                n++;
        }
        return (void *) (uintptr_t) n;
}

static int cmd_threads(unsigned n) {
        if (!buf || nthreads > 0)
                return -EBUSY;
        if (n == 0 || n > MAX_THREADS)
                return -EINVAL;
        stop_flag = 0;
        for (unsigned i = 0; i < n; i++) {
                int r = pthread_create(&threads[i], NULL, writer_main,
                                       (void *) (uintptr_t) (arg_seed * 7919 + i + 1));
                if (r != 0) {
                        __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
                        while (i-- > 0)
                                pthread_join(threads[i], NULL);
                        return -r;
                }
        }
        nthreads = n;
        return 0;
}

static uint64_t cmd_stop(void) {
        __atomic_store_n(&stop_flag, 1, __ATOMIC_RELAXED);
        for (unsigned i = 0; i < nthreads; i++) {
                void *n;

                pthread_join(threads[i], &n);
                writes_total += (uintptr_t) n;
        }
        nthreads = 0;
        return writes_total;
}

/* The child verifies its copy: whatever the parent had evicted must read
 * back in the child exactly as the parent would read it. */
static int cmd_fork_verify(size_t *ret_good, size_t *ret_bad) {
        size_t counts[2];
        int fds[2], status;
        pid_t pid;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        /* Fork with the lock held: no writer is halfway through a page. The
         * child never touches the (copied, locked) mutex. */
        pthread_mutex_lock(&lock);
        pid = fork();
        if (pid == 0) {
                ssize_t first_bad;

                count_pages(&counts[0], &counts[1], &first_bad);
                _exit(write(fds[1], counts, sizeof(counts)) == sizeof(counts) ? 0 : 1);
        }
        pthread_mutex_unlock(&lock);
        close(fds[1]);
        if (pid < 0) {
                close(fds[0]);
                return -errno;
        }
        if (read(fds[0], counts, sizeof(counts)) != sizeof(counts))
                counts[0] = 0, counts[1] = SIZE_MAX;
        close(fds[0]);
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return -ECHILD;
        *ret_good = counts[0];
        *ret_bad = counts[1];
        return 0;
}

/* fork-hold: a child that keeps its copy of the buffer, untouched, until
 * fork-release makes it verify that copy and exit. */
static pid_t held_child;
static int held_go = -1, held_counts = -1;

static int cmd_fork_hold(void) {
        int go[2], counts[2];
        pid_t pid;

        if (held_child > 0)
                return -EBUSY;
        if (pipe2(go, O_CLOEXEC) < 0)
                return -errno;
        if (pipe2(counts, O_CLOEXEC) < 0) {
                close(go[0]);
                close(go[1]);
                return -errno;
        }
        pthread_mutex_lock(&lock);
        pid = fork();
        if (pid == 0) {
                size_t c[2];
                ssize_t first_bad;
                char b;

                /* Never outlives the test, even one that failed. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (read(go[0], &b, 1) != 1)
                        _exit(1);
                count_pages(&c[0], &c[1], &first_bad);
                _exit(write(counts[1], c, sizeof(c)) == sizeof(c) ? 0 : 1);
        }
        pthread_mutex_unlock(&lock);
        close(go[0]);
        close(counts[1]);
        if (pid < 0) {
                close(go[1]);
                close(counts[0]);
                return -errno;
        }
        held_child = pid;
        held_go = go[1];
        held_counts = counts[0];
        return 0;
}

static int cmd_fork_release(size_t *ret_good, size_t *ret_bad) {
        size_t counts[2] = { 0, SIZE_MAX };
        int status, r = 0;

        if (held_child <= 0)
                return -ECHILD;
        if (write(held_go, "x", 1) != 1 ||
            read(held_counts, counts, sizeof(counts)) != sizeof(counts))
                r = -EIO;
        close(held_go);
        close(held_counts);
        if (waitpid(held_child, &status, 0) != held_child || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
                r = r ?: -ECHILD;
        held_child = 0;
        *ret_good = counts[0];
        *ret_bad = counts[1];
        return r;
}

/* Moves the buffer for sure: onto a fresh reservation (at the hint if
 * given) that mremap then replaces. */
static int cmd_mremap(uintptr_t hint) {
        void *dst, *p;

        dst = mmap((void *) hint, npages * PAGE, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED_NOREPLACE : 0), -1, 0);
        if (dst == MAP_FAILED)
                return -errno;
        p = mremap(buf, npages * PAGE, npages * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
        if (p == MAP_FAILED) {
                int r = -errno;

                munmap(dst, npages * PAGE);
                return r;
        }
        buf = p;
        return 0;
}

/* A kernel-mode read of the page (write(2) from it), then a kernel-mode
 * write into it (read(2) into it): both fault in kernel mode. */
static int cmd_pipe_read(size_t i) {
        char page[PAGE], fresh[PAGE];
        int fds[2], r = 0;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        if (write(fds[1], buf + i * PAGE, PAGE) != (ssize_t) PAGE ||
            read(fds[0], page, PAGE) != (ssize_t) PAGE)
                r = -EIO;
        else if (corpus_page_sum(page) != sums[i])
                r = -EBADMSG;
        else {
                synth_page(fresh, arg_seed ^ i ^ 0x5151);
                if (write(fds[1], fresh, PAGE) != (ssize_t) PAGE ||
                    read(fds[0], buf + i * PAGE, PAGE) != (ssize_t) PAGE)
                        r = -EIO;
                else if (memcmp(buf + i * PAGE, fresh, PAGE) != 0)
                        r = -EBADMSG;
                sums[i] = corpus_page_sum(fresh);
        }
        close(fds[0]);
        close(fds[1]);
        return r;
}

static long rss_kb(void) {
        char line[256];
        long kb = -1;
        FILE *f = fopen("/proc/self/status", "re");

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

static bool is_buffer_edit(const char *cmd) {
        static const char *const names[] = { "write", "mremap", "munmap-half", "dontneed",
                                             "pipe-read" };

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcmp(cmd, names[i]) == 0)
                        return true;
        return false;
}

/* Commands on the buffer: the caller checked that there is one. */
static void dispatch_buffer(const char *line) {
        char cmd[32];
        unsigned long long a = 0, b = 0;
        int nargs = sscanf(line, "%31s %lli %lli", cmd, &a, &b), r = -EINVAL;
        size_t good = 0, bad = 0;
        ssize_t first_bad;

        if (strcmp(cmd, "verify") == 0 || strcmp(cmd, "verify-on-byte") == 0) {
                if (strcmp(cmd, "verify-on-byte") == 0) {
                        /* After the byte only the buffer walk touches
                         * memory, never a syscall that would get EFAULT
                         * where a thread gets SIGBUS. c is written here, so
                         * the kernel's read(2) finds it present. */
                        char c = 0;

                        reply("ok waiting");
                        if (read(STDIN_FILENO, &c, 1) != 1)
                                exit(EXIT_FAILURE);
                }
                pthread_mutex_lock(&lock);
                count_pages(&good, &bad, &first_bad);
                pthread_mutex_unlock(&lock);
                reply("ok good=%zu bad=%zu first_bad=%zd", good, bad, first_bad);
                return;
        }
        if (strcmp(cmd, "fork-hold") == 0) {
                r = cmd_fork_hold();
                if (r < 0)
                        reply("error fork-hold: %s", strerror(-r));
                else
                        reply("ok child=%d", (int) held_child);
                return;
        }
        if (strcmp(cmd, "fork-release") == 0) {
                r = cmd_fork_release(&good, &bad);
                if (r < 0)
                        reply("error fork-release: %s", strerror(-r));
                else
                        reply("ok good=%zu bad=%zu", good, bad);
                return;
        }
        if (strcmp(cmd, "fork-verify") == 0) {
                r = cmd_fork_verify(&good, &bad);
                if (r < 0)
                        reply("error fork-verify: %s", strerror(-r));
                else
                        reply("ok good=%zu bad=%zu", good, bad);
                return;
        }
        if (!is_buffer_edit(cmd)) {
                reply("error unknown command: %s", cmd);
                return;
        }

        pthread_mutex_lock(&lock);
        if (strcmp(cmd, "write") == 0 && nargs == 3 && a < npages) {
                synth_page(buf + a * PAGE, b);
                sums[a] = corpus_page_sum(buf + a * PAGE);
                r = 0;
        } else if (strcmp(cmd, "mremap") == 0)
                r = cmd_mremap((uintptr_t) a);
        else if (strcmp(cmd, "munmap-half") == 0 && npages >= 2) {
                r = munmap(buf + (npages / 2) * PAGE, (npages - npages / 2) * PAGE) < 0 ? -errno
                                                                                        : 0;
                if (r >= 0)
                        npages /= 2;
        } else if (strcmp(cmd, "dontneed") == 0 && nargs == 3 && a + b <= npages) {
                r = madvise(buf + a * PAGE, b * PAGE, MADV_DONTNEED) < 0 ? -errno : 0;
                for (size_t i = a; r >= 0 && i < a + b; i++)
                        sums[i] = zero_sum;
        } else if (strcmp(cmd, "pipe-read") == 0 && nargs >= 2 && a < npages)
                r = cmd_pipe_read(a);
        pthread_mutex_unlock(&lock);

        if (r < 0)
                reply("error %s: %s", cmd, strerror(-r));
        else
                reply("ok addr=%p pages=%zu", (void *) buf, npages);
}

/* Runs one command line; returns 1 to exit. */
static int dispatch(char *line) {
        char cmd[32];
        unsigned long long a = 0, b = 0;
        int nargs = sscanf(line, "%31s %lli %lli", cmd, &a, &b), r = 0;

        if (nargs < 1)
                return reply("error empty command"), 0;
        if (strcmp(cmd, "exit") == 0) {
                reply("ok");
                return 1;
        }
        if (strcmp(cmd, "rss") == 0)
                return reply("ok rss_kb=%ld", rss_kb()), 0;
        if (strcmp(cmd, "exec") == 0) {
                if (nthreads > 0)
                        return reply("error stop threads first"), 0;
                fflush(stdout);
                execv("/proc/self/exe", saved_argv);
                return reply("error exec: %m"), 0;
        }
        if (strcmp(cmd, "fill") == 0) {
                if (nargs < 2)
                        return reply("error usage: fill MIB [ZERO_PERCENT]"), 0;
                r = cmd_fill(a, nargs > 2 ? (unsigned) b : 0);
                if (r < 0)
                        return reply("error fill: %s", strerror(-r)), 0;
                return reply("ok addr=%p pages=%zu", (void *) buf, npages), 0;
        }
        if (strcmp(cmd, "stop") == 0)
                return reply("ok writes=%" PRIu64, cmd_stop()), 0;
        if (strcmp(cmd, "threads") == 0) {
                r = cmd_threads((unsigned) a);
                if (r < 0)
                        return reply("error threads: %s", strerror(-r)), 0;
                return reply("ok threads=%u", nthreads), 0;
        }
        if (!buf)
                return reply("error no buffer: fill first"), 0;
        dispatch_buffer(line);
        return 0;
}

int main(int argc, char **argv) {
        static const char zero[PAGE];
        char *line = NULL;
        size_t cap = 0;

        saved_argv = argv;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--synthetic") == 0)
                        arg_synthetic = true;
                else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
                        arg_seed = strtoull(argv[++i], NULL, 0);
                else {
                        fprintf(stderr, "usage: %s [--synthetic] [--seed N]\n", argv[0]);
                        return 2;
                }
        }
        zero_sum = corpus_page_sum(zero);
        reply("ok ready pid=%d", (int) getpid());

        while (getline(&line, &cap, stdin) > 0) {
                if (dispatch(line) == 1)
                        break;
        }
        if (nthreads > 0)
                cmd_stop();
        free(line);
        free(sums);
        return 0;
}
