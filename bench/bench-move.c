/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-move: what taking pages out of a process that keeps running
 * costs it, by mechanism; the reason eviction stops its target instead
 * (docs/design.md, "Which pages, and how many per stop").
 *
 * A child process has an application thread that reads random bytes of its
 * own 128 MiB as fast as it can (or sleeps: "idle"), on one CPU, and a
 * second thread, on another CPU, that takes scattered pages (one in
 * --stride) of a 128 MiB range from it in rounds of 1024, --rate pages a
 * second:
 *
 *   move  UFFDIO_MOVE of each page to a staging range and back the next
 *         round. The kernel accepts it only from a task of the process
 *         itself (its mm), never from another process, and it flushes the
 *         TLB of the page on every CPU that runs the process, page by page.
 *   zap   MADV_DONTNEED of each page (refilled with UFFDIO_COPY outside the
 *         time measured).
 *   none  nothing: the application's own rate.
 *
 * Printed per mechanism (medians over --reps, runs interleaved, each in a
 * fresh child): the taking thread's time per page, and the application's
 * reads a second as a multiple of "none".
 *
 *   zswapd-bench-move [--rate N] [--stride N] [--seconds S] [--reps R]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
struct uffdio_move {
        __u64 dst;
        __u64 src;
        __u64 len;
        __u64 mode;
        __s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif

#define PAGE 4096u
#define ROUND 1024u
#define APP_PAGES 32768u  /* 128 MiB the application reads */
#define TAKE_PAGES 32768u /* 128 MiB pages are taken from */
#define MAX_REPS 15

enum mech { NONE, MOVE, ZAP };
static const char *const mech_name[] = { "none", "move", "zap" };

struct run {
        uint64_t ns, reads, pages, take_ns;
};

static unsigned arg_rate = 40000, arg_stride = 16, arg_seconds = 3, arg_reps = 3;

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static int pin(int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(0, sizeof(set), &set);
}

struct app {
        uint8_t *mem;
        bool idle;
        _Atomic bool stop;
        _Atomic uint64_t reads;
};

static void *app_main(void *p) {
        struct app *a = p;
        uint64_t x = 88172645463325252u, sum = 0;

        (void) pin(1);
        while (!atomic_load(&a->stop)) {
                if (a->idle) {
                        usleep(1000);
                        continue;
                }
                for (int i = 0; i < 1000; i++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        sum += a->mem[(x % APP_PAGES) * PAGE + (x >> 40) % PAGE];
                }
                atomic_fetch_add(&a->reads, 1000);
        }
        return (void *) (uintptr_t) sum;
}

static uint64_t page_of(unsigned round, unsigned i) {
        return ((uint64_t) round + (uint64_t) i * arg_stride) % TAKE_PAGES;
}

/* One round of the taking thread; returns the pages taken, or -errno. */
static int take_round(enum mech m, int uffd, uint8_t *from, uint8_t *staging, unsigned round,
                      uint64_t *ns) {
        static uint8_t fill[PAGE];
        bool back = m == MOVE && round % 2 == 1;
        uint64_t t0 = now_ns();

        for (unsigned i = 0; i < ROUND; i++) {
                uint8_t *p = from + page_of(m == MOVE ? round / 2 : round, i) * PAGE;

                if (m == MOVE) {
                        struct uffdio_move mv = { .len = PAGE };

                        mv.src = (uintptr_t) (back ? staging + (size_t) i * PAGE : p);
                        mv.dst = (uintptr_t) (back ? p : staging + (size_t) i * PAGE);
                        if (ioctl(uffd, UFFDIO_MOVE, &mv) < 0)
                                return -errno;
                } else if (madvise(p, PAGE, MADV_DONTNEED) < 0)
                        return -errno;
        }
        *ns += now_ns() - t0;
        if (m == ZAP)
                for (unsigned i = 0; i < ROUND; i++) {
                        struct uffdio_copy cp = { .len = PAGE, .src = (uintptr_t) fill };

                        cp.dst = (uintptr_t) (from + page_of(round, i) * PAGE);
                        if (ioctl(uffd, UFFDIO_COPY, &cp) < 0)
                                return -errno;
                }
        return (int) ROUND;
}

static int child_run(enum mech m, bool idle, struct run *out) {
        size_t take_len = (size_t) TAKE_PAGES * PAGE;
        uint64_t period = (uint64_t) ROUND * 1000000000u / arg_rate, t0, reads0;
        struct app a = { .idle = idle };
        uint8_t *from, *staging;
        pthread_t th;
        int uffd, r = 0;

        a.mem = mmap(NULL, (size_t) APP_PAGES * PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        from = mmap(NULL, take_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        staging = mmap(NULL, (size_t) ROUND * PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a.mem == MAP_FAILED || from == MAP_FAILED || staging == MAP_FAILED)
                return -ENOMEM;
        /* Base pages only: a huge page would be split on the first take. */
        (void) madvise(from, take_len, MADV_NOHUGEPAGE);
        (void) madvise(staging, (size_t) ROUND * PAGE, MADV_NOHUGEPAGE);
        memset(a.mem, 1, (size_t) APP_PAGES * PAGE);
        memset(from, 2, take_len);

        uffd = (int) syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
        if (uffd < 0)
                return -errno;
        struct uffdio_api api = { .api = UFFD_API, .features = m == MOVE ? UFFD_FEATURE_MOVE : 0 };
        struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
        if (ioctl(uffd, UFFDIO_API, &api) < 0)
                return -errno;
        reg.range = (struct uffdio_range) { (uintptr_t) from, take_len };
        if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
                return -errno;
        reg.range = (struct uffdio_range) { (uintptr_t) staging, (uint64_t) ROUND * PAGE };
        if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
                return -errno;

        if (pin(0) < 0 || pthread_create(&th, NULL, app_main, &a) != 0)
                return -errno;
        usleep(200000);
        *out = (struct run) {};
        t0 = now_ns();
        reads0 = atomic_load(&a.reads);
        for (unsigned round = 0; r >= 0 && now_ns() - t0 < arg_seconds * 1000000000ull; round++) {
                uint64_t r0 = now_ns(), el;

                if (m != NONE) {
                        r = take_round(m, uffd, from, staging, round, &out->take_ns);
                        out->pages += r > 0 ? (uint64_t) r : 0;
                }
                el = now_ns() - r0;
                if (el < period)
                        (void) nanosleep(&(struct timespec) { 0, (long) (period - el) }, NULL);
        }
        out->ns = now_ns() - t0;
        out->reads = atomic_load(&a.reads) - reads0;
        atomic_store(&a.stop, true);
        pthread_join(th, NULL);
        return r < 0 ? r : 0;
}

/* Each run in a fresh process: no page table or TLB state carried over. */
static int one_run(enum mech m, bool idle, struct run *ret) {
        int p[2], status, r;
        pid_t pid;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                struct run out;
                int err;

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                err = child_run(m, idle, &out);
                if (err < 0) {
                        fprintf(stderr, "%s: %s\n", mech_name[m], strerror(-err));
                        _exit(1);
                }
                _exit(write(p[1], &out, sizeof(out)) == sizeof(out) ? 0 : 1);
        }
        close(p[1]);
        r = read(p[0], ret, sizeof(*ret)) == sizeof(*ret) ? 0 : -EIO;
        close(p[0]);
        waitpid(pid, &status, 0);
        return r;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n) {
        qsort(v, n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_argv(int argc, char **argv) {
        static const struct option options[] = { { "help", no_argument, NULL, 'h' },
                                                 { "rate", required_argument, NULL, 'r' },
                                                 { "stride", required_argument, NULL, 's' },
                                                 { "seconds", required_argument, NULL, 't' },
                                                 { "reps", required_argument, NULL, 'n' },
                                                 {} };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
                unsigned long v = optarg ? strtoul(optarg, NULL, 10) : 0;

                switch (c) {
                case 'h':
                        printf("%s [--rate N] [--stride N] [--seconds S] [--reps R]\n\n"
                               "What taking pages from a running process costs it, by "
                               "mechanism.\n\n"
                               "  --rate N     Pages taken a second (default 40000)\n"
                               "  --stride N   One page taken in N (default 16: scattered)\n"
                               "  --seconds S  Length of each run (default 3)\n"
                               "  --reps R     Repetitions, interleaved (default 3)\n",
                               program_invocation_short_name);
                        return 0;
                case 'r':
                        if (v < ROUND || v > 1000000)
                                goto bad;
                        arg_rate = (unsigned) v;
                        break;
                case 's':
                        if (v < 1 || v > TAKE_PAGES / ROUND)
                                goto bad;
                        arg_stride = (unsigned) v;
                        break;
                case 't':
                        if (v < 1 || v > 600)
                                goto bad;
                        arg_seconds = (unsigned) v;
                        break;
                case 'n':
                        if (v < 1 || v > MAX_REPS)
                                goto bad;
                        arg_reps = (unsigned) v;
                        break;
                default:
                        return -EINVAL;
                }
                continue;
        bad:
                fprintf(stderr,
                        "Bad value '%s' for --%s: --rate wants %u..1000000, --stride 1..%u, "
                        "--seconds 1..600, --reps 1..%u\n",
                        optarg,
                        c == 'r'   ? "rate"
                        : c == 's' ? "stride"
                        : c == 't' ? "seconds"
                                   : "reps",
                        ROUND, TAKE_PAGES / ROUND, MAX_REPS);
                return -EINVAL;
        }
        if (optind < argc) {
                fprintf(stderr, "%s takes no arguments; see --help\n",
                        program_invocation_short_name);
                return -EINVAL;
        }
        return 1;
}

int main(int argc, char **argv) {
        static const struct {
                enum mech m;
                bool idle;
        } kinds[] = {
                { NONE, false }, { MOVE, false }, { ZAP, false }, { MOVE, true }, { ZAP, true }
        };
        enum { N_KINDS = sizeof(kinds) / sizeof(kinds[0]) };
        double per_page[N_KINDS][MAX_REPS], rate[N_KINDS][MAX_REPS];
        int r = parse_argv(argc, argv);

        if (r <= 0)
                return r < 0 ? 2 : 0;
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
                fprintf(stderr, "Needs two CPUs (the application's and the taking thread's)\n");
                return 77;
        }
        for (unsigned rep = 0; rep < arg_reps; rep++)
                for (unsigned k = 0; k < N_KINDS; k++) {
                        struct run run = {};

                        r = one_run(kinds[k].m, kinds[k].idle, &run);
                        if (r < 0) {
                                fprintf(stderr, "Run failed: %s\n", strerror(-r));
                                return 1;
                        }
                        per_page[k][rep] =
                                run.pages ? (double) run.take_ns / 1e3 / (double) run.pages : 0;
                        rate[k][rep] = (double) run.reads * 1e3 / (double) run.ns;
                }
        printf("%u pages/s taken, one in %u, rounds of %u, %u s x %u runs each (medians)\n",
               arg_rate, arg_stride, ROUND, arg_seconds, arg_reps);
        printf("%-6s %-12s %14s %16s %10s\n", "take", "application", "us per page", "app Mreads/s",
               "x none");
        double base = median(rate[0], arg_reps);
        for (unsigned k = 0; k < N_KINDS; k++) {
                double reads = median(rate[k], arg_reps);

                printf("%-6s %-12s %14.2f", mech_name[kinds[k].m],
                       kinds[k].idle ? "asleep" : "reading", median(per_page[k], arg_reps));
                if (kinds[k].idle || base <= 0)
                        printf(" %16s %10s\n", "-", "-");
                else
                        printf(" %16.2f %10.2f\n", reads, reads / base);
        }
        return 0;
}
