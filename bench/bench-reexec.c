/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-reexec: how long `zswapctl reexec` holds the faults of a
 * target. It starts the given zswapd on a socket of its own, a target
 * process holding MIB MiB of corpus pages, attaches it and takes every
 * page, then lets THREADS threads of the target touch evicted pages (one
 * every PAUSE_US each, so that most of the store stays stored) while it
 * asks for ROUNDS re-execs. A touch that started before a re-exec's reply
 * and ended after its request is a fault the handover stalled; their times
 * are reported (p50, p99, max), next to the touches outside the
 * handovers and the time of each re-exec request. At the end the target
 * checks every byte of its memory.
 *
 *   zswapd-bench-reexec ZSWAPD ZSWAPCTL [MIB [THREADS [ROUNDS [PAUSE_US]]]]
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"

#define PAGE 4096ul
#define MAX_TOUCHES (1u << 22)
#define MAX_ROUNDS 1000u
#define HELD_NS (50 * 1000000ull)

/* Shared between the bench and its target (MAP_SHARED, made before fork). */
struct shared {
        _Atomic int phase; /* 0 fill, 1 filled, 2 touch, 3 stop, 4 verified */
        _Atomic uint64_t n_touches;
        uint64_t bad_pages;
        struct touch {
                uint64_t start_ns, ns;
        } touches[MAX_TOUCHES];
};

static struct shared *sh;
static uint8_t *buf;
static uint64_t *sums;
static size_t npages;
static unsigned pause_us;

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void *toucher(void *arg) {
        uint64_t state = (uintptr_t) arg;

        while (atomic_load(&sh->phase) == 2) {
                size_t i = corpus_random(&state) % npages;
                uint64_t t0 = now_ns(), k;

                (void) *(volatile uint8_t *) (buf + i * PAGE + 8);
                k = atomic_fetch_add(&sh->n_touches, 1);
                if (k < MAX_TOUCHES)
                        sh->touches[k] = (struct touch) { t0, now_ns() - t0 };
                usleep(pause_us);
        }
        return NULL;
}

static _Noreturn void target_main(unsigned threads) {
        pthread_t th[64];

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        buf = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        sums = calloc(npages, sizeof(*sums));
        if (buf == MAP_FAILED || !sums || corpus_fill(buf, npages, 10, 7) < 0)
                _exit(2);
        for (size_t i = 0; i < npages; i++)
                sums[i] = corpus_page_sum(buf + i * PAGE);
        atomic_store(&sh->phase, 1);
        while (atomic_load(&sh->phase) < 2)
                usleep(1000);
        for (unsigned i = 0; i < threads; i++)
                pthread_create(&th[i], NULL, toucher, (void *) (uintptr_t) (i + 1));
        while (atomic_load(&sh->phase) == 2)
                usleep(1000);
        for (unsigned i = 0; i < threads; i++)
                pthread_join(th[i], NULL);
        for (size_t i = 0; i < npages; i++)
                sh->bad_pages += corpus_page_sum(buf + i * PAGE) != sums[i];
        atomic_store(&sh->phase, 4);
        for (;;)
                pause();
}

static int run(const char *const argv[]) {
        pid_t pid = fork();
        int status;

        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

                dup2(fd, STDOUT_FILENO);
                execv(argv[0], (char **) argv);
                _exit(127);
        }
        if (waitpid(pid, &status, 0) != pid)
                return -errno;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static void report(const char *what, uint64_t *v, size_t n) {
        if (n == 0) {
                printf("%-34s none\n", what);
                return;
        }
        qsort(v, n, sizeof(*v), cmp_u64);
        printf("%-34s n=%-7zu p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms\n", what, n, v[n / 2] / 1e6,
               v[(n * 99) / 100] / 1e6, v[n - 1] / 1e6);
}

int main(int argc, char **argv) {
        unsigned mib = argc > 3 ? (unsigned) atoi(argv[3]) : 1024;
        unsigned threads = argc > 4 ? (unsigned) atoi(argv[4]) : 4;
        unsigned rounds = argc > 5 ? (unsigned) atoi(argv[5]) : 10;
        static uint64_t req_start[MAX_ROUNDS], req_end[MAX_ROUNDS];
        char dir[] = "/var/tmp/zswapd-bench-reexec.XXXXXX", sock[96], conf[96], log[96], p[16];
        uint64_t *stalled, *other, *reqs, *longest;
        size_t ns = 0, no = 0, n;
        pid_t daemon, target;
        FILE *f;

        if (argc < 3 || threads == 0 || threads > 64 || rounds == 0 || rounds > MAX_ROUNDS) {
                fprintf(stderr,
                        "usage: %s ZSWAPD ZSWAPCTL [MIB [THREADS(1-64) [ROUNDS [PAUSE_US]]]]\n",
                        argv[0]);
                return 2;
        }
        pause_us = argc > 6 ? (unsigned) atoi(argv[6]) : 2000;
        npages = (size_t) mib * 256;
        if (!mkdtemp(dir))
                return perror("mkdtemp"), 1;
        snprintf(sock, sizeof(sock), "%s/ctl.sock", dir);
        snprintf(conf, sizeof(conf), "%s/zswapd.conf", dir);
        snprintf(log, sizeof(log), "%s/log", dir);
        f = fopen(conf, "we");
        if (!f)
                return perror(conf), 1;
        fputs("[Pool]\nLimit=80%\n", f);
        fclose(f);

        sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
                return perror("mmap"), 1;
        daemon = fork();
        if (daemon == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(fd, STDERR_FILENO);
                execl(argv[1], argv[1], "--socket", sock, "--config", dir, (char *) NULL);
                _exit(127);
        }
        target = fork();
        if (target == 0)
                target_main(threads);
        while (atomic_load(&sh->phase) < 1 || access(sock, F_OK) < 0)
                usleep(10000);
        usleep(200000);
        snprintf(p, sizeof(p), "%d", target);
        if (run((const char *const[]) { argv[2], "-s", sock, "attach", p, NULL }) != 0 ||
            run((const char *const[]) { argv[2], "-s", sock, "reclaim", p, "--all", NULL }) != 0) {
                fprintf(stderr, "attach or reclaim failed; see %s\n", log);
                return 1;
        }
        atomic_store(&sh->phase, 2);
        usleep(500000);
        for (unsigned r = 0; r < rounds; r++) {
                req_start[r] = now_ns();
                if (run((const char *const[]) { argv[2], "-s", sock, "reexec", NULL }) != 0) {
                        fprintf(stderr, "reexec %u failed; see %s\n", r, log);
                        return 1;
                }
                req_end[r] = now_ns();
                usleep(500000);
        }
        atomic_store(&sh->phase, 3);
        while (atomic_load(&sh->phase) != 4)
                usleep(10000);

        n = atomic_load(&sh->n_touches);
        n = n < MAX_TOUCHES ? n : MAX_TOUCHES;
        stalled = calloc(n + 1, sizeof(*stalled));
        other = calloc(n + 1, sizeof(*other));
        reqs = calloc(rounds, sizeof(*reqs));
        longest = calloc(rounds, sizeof(*longest));
        if (!stalled || !other || !reqs || !longest)
                return 1;
        for (size_t i = 0; i < n; i++) {
                const struct touch *t = &sh->touches[i];
                bool in = false;

                for (unsigned r = 0; r < rounds && !in; r++) {
                        in = t->start_ns < req_end[r] && t->start_ns + t->ns > req_start[r];
                        if (in && t->ns > longest[r])
                                longest[r] = t->ns;
                }
                if (!in)
                        other[no++] = t->ns;
                else if (t->ns > HELD_NS)
                        stalled[ns++] = t->ns;
        }
        for (unsigned r = 0; r < rounds; r++)
                reqs[r] = req_end[r] - req_start[r];
        printf("target: %u MiB, %u touching threads (one touch every %u us each), %u re-execs\n",
               mib, threads, pause_us, rounds);
        report("re-exec request to reply", reqs, rounds);
        report("longest touch of each re-exec", longest, rounds);
        report("touches held by a re-exec (>50 ms)", stalled, ns);
        report("touches outside the re-execs", other, no);
        printf("pages verified: %zu, wrong: %" PRIu64 "\n", npages, sh->bad_pages);
        printf("zswapd log: %s\n", log);
        kill(target, SIGKILL);
        waitpid(target, NULL, 0);
        kill(daemon, SIGTERM);
        waitpid(daemon, NULL, 0);
        return sh->bad_pages ? 1 : 0;
}
