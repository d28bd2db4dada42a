/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-first-touch: what an attached process pays to use fresh
 * memory, by zero-fill window.
 *
 * A child maps N MiB it has never touched; the engine attaches to it with
 * a given zero_window (the kernel alone: not attached), and the child
 * writes one word of every page, in address order ("seq", a growing heap,
 * malloc + memset) or in random order ("rand"), timing the whole pass.
 * Then it reads every page back and checks it. Every (pattern, window)
 * runs once per repetition, interleaved, each on a fresh child, so that a
 * noisy machine's load falls on all of them alike. Printed: first-touch
 * MiB/s (median over repetitions), the engine's faults and pages filled
 * ahead, and the ratios to window 0 (one fault of ours per page) and to
 * the kernel.
 *
 *   zswapd-bench-first-touch [--json] [--mib N] [--reps R] [--windows LIST]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define PAGE ZSW_PAGE_SIZE
#define MAX_WINDOWS 8
#define MAX_REPS 15
#define KERNEL (-1) /* "window" of the run without the engine */

static unsigned arg_mib = 256;
static unsigned arg_reps = 3;
static bool arg_json;
static int arg_windows[MAX_WINDOWS] = { KERNEL, 0, 16, 64, 511 };
static unsigned arg_n_windows = 5;

struct run {
        uint64_t ns;
        uint64_t faults, zero_ahead;
        uint64_t bad;
};

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* The child: only system calls after the fork (the parent runs the
 * engine's threads). The access order was made before the fork. */
static _Noreturn void child_main(const uint32_t *order, size_t npages, int cmd, int reply) {
        uint8_t *m = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
        uint64_t out[2] = { 0, 0 };
        char c;

        if (m == MAP_FAILED)
                _exit(3);
        if (write(reply, out, sizeof(out)) != sizeof(out) || read(cmd, &c, 1) != 1)
                _exit(2);
        out[0] = now_ns();
        for (size_t k = 0; k < npages; k++) {
                size_t i = order ? order[k] : k;

                *(uint64_t *) (m + i * PAGE) = i + 1;
        }
        out[0] = now_ns() - out[0];
        for (size_t i = 0; i < npages; i++)
                for (size_t o = 0; o < PAGE; o += 8)
                        if (*(uint64_t *) (m + i * PAGE + o) != (o == 0 ? i + 1 : 0)) {
                                out[1]++;
                                break;
                        }
        if (write(reply, out, sizeof(out)) != sizeof(out))
                _exit(2);
        _exit(0);
}

static int one_run(struct zsw_engine *e, int window, const uint32_t *order, size_t npages,
                   struct run *ret) {
        struct zsw_target_config tc = { .prefetch_window = 8,
                                        .zero_window = (unsigned) MAX(window, 0) };
        struct zsw_engine_error err = {};
        struct zsw_target_stats s = {};
        int to[2], from[2], status, r = 0;
        uint64_t out[2];
        pid_t pid;

        if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                child_main(order, npages, to[0], from[1]);
        }
        close(to[0]);
        close(from[1]);
        if (read(from[0], out, sizeof(out)) != sizeof(out))
                r = -EIO;
        if (r == 0 && window != KERNEL) {
                r = zsw_engine_attach_with(e, pid, &tc, &err);
                if (r < 0)
                        fprintf(stderr, "Cannot attach to %d: %s\n", pid, err.message);
        }
        if (r == 0 && (write(to[1], "g", 1) != 1 || read(from[0], out, sizeof(out)) != sizeof(out)))
                r = -EIO;
        if (r == 0 && window != KERNEL) {
                (void) zsw_engine_get_target_stats(e, pid, &s);
                (void) zsw_engine_detach(e, pid, &err);
        }
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(to[1]);
        close(from[0]);
        if (r < 0)
                return r;
        *ret = (struct run) { out[0], s.faults, s.zero_ahead_pages, out[1] };
        return 0;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static double mib_s(uint64_t ns) {
        return ns ? (double) arg_mib * 1e9 / (double) ns : 0;
}

static int parse_windows(const char *s) {
        char *end;

        arg_n_windows = 0;
        arg_windows[arg_n_windows++] = KERNEL;
        for (;;) {
                unsigned long w = strtoul(s, &end, 10);

                if (end == s || w > ZSW_ZERO_WINDOW_MAX || arg_n_windows == MAX_WINDOWS)
                        return -EINVAL;
                arg_windows[arg_n_windows++] = (int) w;
                if (*end == '\0')
                        return 0;
                if (*end != ',')
                        return -EINVAL;
                s = end + 1;
        }
}

static int parse_argv(int argc, char **argv) {
        static const struct option options[] = { { "help", no_argument, NULL, 'h' },
                                                 { "json", no_argument, NULL, 'j' },
                                                 { "mib", required_argument, NULL, 'm' },
                                                 { "reps", required_argument, NULL, 'r' },
                                                 { "windows", required_argument, NULL, 'w' },
                                                 {} };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        printf("%s [--json] [--mib N] [--reps R] [--windows LIST]\n\n"
                               "First-touch MiB/s of an attached process, by zero-fill window.\n\n"
                               "  --json          One JSON object per pattern and window per line\n"
                               "  --mib N         Fresh memory the child writes (default 256)\n"
                               "  --reps R        Repetitions, interleaved (default 3)\n"
                               "  --windows LIST  Comma-separated windows, 0..%u (default "
                               "0,16,64,511);\n"
                               "                  the kernel alone is always measured too\n",
                               program_invocation_short_name, ZSW_ZERO_WINDOW_MAX);
                        return 0;
                case 'j':
                        arg_json = true;
                        break;
                case 'm':
                        arg_mib = (unsigned) strtoul(optarg, NULL, 10);
                        if (arg_mib == 0 || arg_mib > 65536) {
                                fprintf(stderr, "--mib wants 1..65536\n");
                                return -EINVAL;
                        }
                        break;
                case 'r':
                        arg_reps = (unsigned) strtoul(optarg, NULL, 10);
                        if (arg_reps == 0 || arg_reps > MAX_REPS) {
                                fprintf(stderr, "--reps wants 1..%u\n", MAX_REPS);
                                return -EINVAL;
                        }
                        break;
                case 'w':
                        if (parse_windows(optarg) < 0) {
                                fprintf(stderr, "--windows wants up to %u windows of 0..%u pages\n",
                                        MAX_WINDOWS - 1, ZSW_ZERO_WINDOW_MAX);
                                return -EINVAL;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        return 1;
}

static int run(int argc, char **argv) {
        static const char *const patterns[] = { "seq", "rand" };
        struct zsw_log log = { .fn = NULL, .max_priority = LOG_ERR };
        struct zsw_engine_config cfg = { .prefetch_window = 8, .log = &log };
        struct run runs[2][MAX_WINDOWS][MAX_REPS] = {};
        uint64_t median[2][MAX_WINDOWS];
        struct zsw_engine *e = NULL;
        uint32_t *order;
        size_t npages;
        uint64_t seed = 42;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        if (geteuid() != 0) {
                fprintf(stderr, "Needs root (ptrace, userfaultfd)\n");
                return -EPERM;
        }
        npages = (size_t) arg_mib * 256;
        order = malloc(npages * sizeof(uint32_t));
        if (!order)
                return -ENOMEM;
        for (size_t i = 0; i < npages; i++)
                order[i] = (uint32_t) i;
        for (size_t i = npages - 1; i > 0; i--) {
                size_t j;
                uint32_t x;

                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                j = (size_t) ((seed >> 33) % (i + 1));
                x = order[i];
                order[i] = order[j];
                order[j] = x;
        }
        r = zsw_engine_new(&cfg, &e);
        if (r < 0) {
                free(order);
                return r;
        }
        for (unsigned rep = 0; rep < arg_reps && r >= 0; rep++)
                for (unsigned p = 0; p < 2 && r >= 0; p++)
                        for (unsigned w = 0; w < arg_n_windows && r >= 0; w++)
                                r = one_run(e, arg_windows[w], p ? order : NULL, npages,
                                            &runs[p][w][rep]);
        zsw_engine_free(e);
        free(order);
        if (r < 0) {
                fprintf(stderr, "A run failed: %s\n", strerror(-r));
                return r;
        }

        for (unsigned p = 0; p < 2; p++)
                for (unsigned w = 0; w < arg_n_windows; w++) {
                        uint64_t ns[MAX_REPS];

                        for (unsigned rep = 0; rep < arg_reps; rep++)
                                ns[rep] = runs[p][w][rep].ns;
                        qsort(ns, arg_reps, sizeof(ns[0]), cmp_u64);
                        median[p][w] = ns[arg_reps / 2];
                }
        if (!arg_json)
                printf("%u MiB, %u repetitions (median)\n%-5s %-7s %10s %10s %12s %8s %8s %6s\n",
                       arg_mib, arg_reps, "order", "window", "MiB/s", "faults", "filled ahead",
                       "vs w=0", "vs kern", "bad");
        for (unsigned p = 0; p < 2; p++)
                for (unsigned w = 0; w < arg_n_windows; w++) {
                        const struct run *x = &runs[p][w][arg_reps / 2];
                        double v = mib_s(median[p][w]), w0 = 0, kern = mib_s(median[p][0]);
                        uint64_t bad = 0;
                        char name[16];

                        for (unsigned k = 0; k < arg_n_windows; k++)
                                if (arg_windows[k] == 0)
                                        w0 = mib_s(median[p][k]);
                        for (unsigned rep = 0; rep < arg_reps; rep++)
                                bad += runs[p][w][rep].bad;
                        if (arg_windows[w] == KERNEL)
                                snprintf(name, sizeof(name), "kernel");
                        else
                                snprintf(name, sizeof(name), "%d", arg_windows[w]);
                        if (arg_json)
                                printf("{\"order\":\"%s\",\"window\":\"%s\",\"mib\":%u,\"reps\":%u,"
                                       "\"mib_s\":%.1f,\"faults\":%" PRIu64
                                       ",\"zero_ahead_pages\":%" PRIu64
                                       ",\"ratio_to_window_0\":%.3f,\"ratio_to_kernel\":%.3f,\"bad_"
                                       "pages\":%" PRIu64 "}\n",
                                       patterns[p], name, arg_mib, arg_reps, v, x->faults,
                                       x->zero_ahead, w0 ? v / w0 : 0, kern ? v / kern : 0, bad);
                        else
                                printf("%-5s %-7s %10.1f %10" PRIu64 " %12" PRIu64
                                       " %8.2f %8.2f %6" PRIu64 "\n",
                                       patterns[p], name, v, x->faults, x->zero_ahead,
                                       w0 ? v / w0 : 0, kern ? v / kern : 0, bad);
                }
        for (unsigned p = 0; p < 2; p++)
                for (unsigned w = 0; w < arg_n_windows; w++)
                        for (unsigned rep = 0; rep < arg_reps; rep++)
                                if (runs[p][w][rep].bad)
                                        return -EIO;
        return 0;
}

int main(int argc, char **argv) {
        int r = run(argc, argv);

        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
