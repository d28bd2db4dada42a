/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The workload every contender of bench/compare runs, so that the kernel's
 * zswap, zram, a plain swapfile and zswapd are measured on the same pages.
 *
 *   reread  fills --size MiB with corpus pages (a share of them zero pages),
 *           checksums each page, prints "ready" and waits for SIGUSR1 while
 *           the driver reclaims. Then it notes which pages are no longer
 *           present (/proc/self/pagemap), reads every page once in random
 *           order, timing the first touch of each evicted page, and once
 *           sequentially, checking every byte both times.
 *   usemem  the zswap authors' over-commit method: after "ready" and
 *           SIGUSR1, writes --size MiB of corpus pages, notes how many
 *           of them were reclaimed meanwhile (absent from pagemap), verifies
 *           them and frees them. The driver runs two of these under one
 *           memory budget smaller than their total.
 *   fill    fills --size MiB and exits: reads the corpus files into the page
 *           cache outside the measured cgroup, so that the cgroup's charge
 *           is the workload's anonymous memory only.
 *   uffd-floor  times FLOOR_PAGES faults answered by a bare userfaultfd
 *           handler process (bench/uffd-floor.c) on any CPU, then on ours: the
 *           floor under any userfaultfd service's fault latency.
 *   threads fills --size MiB with corpus pages, then --threads threads use
 *           them until SIGUSR1: each checks a page's checksum (all but
 *           --cold-permille of them in the first fifth, the hot set),
 *           rewrites a byte of one in eight with its own value, and sleeps
 *           1 ms every 64 pages, as a server's workers that wait for
 *           requests. bench/stops holds it at a budget to measure the
 *           stops of a many-threaded process.
 *
 * Results are printed as key=value lines on stdout for the driver to parse.
 * Bookkeeping memory is mlock()ed (when allowed) so that only the measured
 * pages are candidates for reclaim.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "uffd-floor.h"
#include "util.h"

#define PAGE 4096u
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
/* The usemem template: enough distinct pages that the compressor sees the
 * corpus' variety, small enough to stay out of the budget's way (1/32 of
 * the memory written, locked, outside reclaim). */
#define TEMPLATE_PAGES_MAX 4096u
#define FLOOR_PAGES 16384u
#define TEMPLATE_SHARE 32u

/* threads: the hot set is the first HOT_SHARE-th of the pages; a worker
 * sleeps 1 ms every BURST pages. */
#define HOT_SHARE 5u
#define BURST 64u
#define THREADS_MAX 1024ul

enum mode { MODE_REREAD, MODE_USEMEM, MODE_FILL, MODE_UFFD_FLOOR, MODE_THREADS };

static enum mode arg_mode;
static size_t arg_size_mib = 256;
static unsigned arg_zero_percent = 10;
static uint64_t arg_seed = 1;
static size_t arg_inject_corruption;
static unsigned arg_threads = 16;
static unsigned arg_cold_permille = 10;

struct region {
        void *mem;
        size_t len;
};

static void region_unmap(struct region *r) {
        if (r->mem && r->mem != MAP_FAILED)
                munmap(r->mem, r->len);
        r->mem = NULL;
}

/* Anonymous private memory without THP, so that reclaim and fault-in work
 * on 4 KiB pages for every contender. */
static int region_map(size_t len, bool lock, struct region *ret) {
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (m == MAP_FAILED)
                return -errno;
        (void) madvise(m, len, MADV_NOHUGEPAGE);
        if (lock)
                (void) mlock(m, len); /* Best effort: only keeps it out of reclaim. */
        *ret = (struct region) { m, len };
        return 0;
}

static size_t count_diff(const uint8_t *a, const uint8_t *b) {
        size_t n = 0;

        for (size_t i = 0; i < PAGE; i++)
                n += a[i] != b[i];
        return n;
}

/* Blocks SIGUSR1 (so it cannot be lost before we wait), prints the ready
 * line and waits for the driver's go. */
static int announce_and_wait(const char *extra) {
        sigset_t ss;
        int sig;

        sigemptyset(&ss);
        sigaddset(&ss, SIGUSR1);
        printf("ready pid=%d%s\n", (int) getpid(), extra);
        fflush(stdout);
        do
                sig = sigwaitinfo(&ss, NULL);
        while (sig < 0 && errno == EINTR);
        return sig < 0 ? -errno : 0;
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;

        return (x > y) - (x < y);
}

static double pct_us(const uint32_t *sorted, size_t n, double p) {
        size_t i;

        if (n == 0)
                return 0;
        i = (size_t) (p * (double) n);
        return sorted[MIN(i, n - 1)] / 1000.0;
}

/* Reads pagemap entries of the region: which pages are no longer present. */
static int scan_evicted(const struct region *r, uint8_t *evicted, size_t *ret_evicted,
                        size_t *ret_swapped) {
        _cleanup_close_ int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        size_t npages = r->len / PAGE, n_evicted = 0, n_swapped = 0;
        uint64_t buf[512];

        if (fd < 0)
                return -errno;
        for (size_t p = 0; p < npages; p += ARRAY_SIZE(buf)) {
                size_t chunk = MIN(ARRAY_SIZE(buf), npages - p);
                off_t off = (off_t) (((uintptr_t) r->mem / PAGE + p) * sizeof(uint64_t));
                ssize_t k = pread(fd, buf, chunk * sizeof(uint64_t), off);

                if (k != (ssize_t) (chunk * sizeof(uint64_t)))
                        return k < 0 ? -errno : -EIO;
                for (size_t i = 0; i < chunk; i++) {
                        evicted[p + i] = !(buf[i] & PM_PRESENT);
                        n_evicted += evicted[p + i];
                        n_swapped += !!(buf[i] & PM_SWAPPED);
                }
        }
        *ret_evicted = n_evicted;
        *ret_swapped = n_swapped;
        return 0;
}

/* Counts the bytes of the pages whose checksum failed, against the same
 * corpus generated again (same seed, same machine, same content). Only
 * runs when something is already wrong, so its memory does not matter. */
static int count_corrupted_bytes(const struct region *r, const uint8_t *bad, size_t *ret) {
        _cleanup_(region_unmap) struct region ref = {};
        size_t npages = r->len / PAGE, n = 0;
        int k;

        k = region_map(r->len, false, &ref);
        if (k < 0)
                return k;
        k = corpus_fill(ref.mem, npages, arg_zero_percent, arg_seed);
        if (k < 0)
                return k;
        for (size_t p = 0; p < npages; p++)
                if (bad[p])
                        n += count_diff((uint8_t *) r->mem + p * PAGE,
                                        (uint8_t *) ref.mem + p * PAGE);
        *ret = n;
        return 0;
}

/* Maps npages of corpus pages in data and their checksums, locked, in
 * sums: what the reread and threads modes check every page against. */
static int map_corpus(size_t npages, struct region *data, struct region *sums) {
        int r;

        r = region_map(npages * PAGE, false, data);
        if (r < 0)
                return r;
        r = region_map(npages * sizeof(uint64_t), true, sums);
        if (r < 0)
                return r;
        r = corpus_fill(data->mem, npages, arg_zero_percent, arg_seed);
        if (r < 0)
                return r;
        for (size_t p = 0; p < npages; p++)
                ((uint64_t *) sums->mem)[p] = corpus_page_sum((uint8_t *) data->mem + p * PAGE);
        return 0;
}

static int run_reread(void) {
        _cleanup_(region_unmap) struct region data = {}, sums = {}, book = {};
        size_t npages = arg_size_mib * 1024 * 1024 / PAGE, n_evicted, n_swapped, nlat = 0;
        size_t bad_pages = 0, corrupted = 0;
        uint64_t *sum, t0, t_random, t_seq, lat_ns = 0;
        uint32_t *perm, *lat;
        uint8_t *evicted, *bad;
        int r;

        r = map_corpus(npages, &data, &sums);
        if (r < 0)
                return r;
        sum = sums.mem;

        r = announce_and_wait("");
        if (r < 0)
                return r;

        /* Allocated after the reclaim, so that it never competes with it. */
        r = region_map(npages * (2 * sizeof(uint32_t) + 2), true, &book);
        if (r < 0)
                return r;
        perm = book.mem;
        lat = perm + npages;
        evicted = (uint8_t *) (lat + npages);
        bad = evicted + npages;

        r = scan_evicted(&data, evicted, &n_evicted, &n_swapped);
        if (r < 0)
                return r;
        /* For the tests: proves that a changed byte is found and counted. */
        for (size_t i = 0; i < MIN(arg_inject_corruption, npages); i++)
                ((uint8_t *) data.mem)[i * PAGE + i % PAGE] ^= 0x5a;
        corpus_shuffle(perm, npages, arg_seed ^ 0x5eed);

        t0 = zsw_now_ns();
        for (size_t i = 0; i < npages; i++) {
                size_t p = perm[i];
                const volatile uint8_t *page = (const volatile uint8_t *) data.mem + p * PAGE;

                if (evicted[p]) {
                        uint64_t a = zsw_now_ns(), b;

                        (void) page[0];
                        b = zsw_now_ns();
                        lat[nlat++] = (uint32_t) MIN(b - a, UINT32_MAX);
                        lat_ns += b - a;
                }
                if (corpus_page_sum((const void *) page) != sum[p] && !bad[p]) {
                        bad[p] = 1;
                        bad_pages++;
                }
        }
        t_random = zsw_now_ns() - t0;

        t0 = zsw_now_ns();
        for (size_t p = 0; p < npages; p++)
                if (corpus_page_sum((uint8_t *) data.mem + p * PAGE) != sum[p] && !bad[p]) {
                        bad[p] = 1;
                        bad_pages++;
                }
        t_seq = zsw_now_ns() - t0;

        if (bad_pages > 0) {
                r = count_corrupted_bytes(&data, bad, &corrupted);
                if (r < 0)
                        return r;
        }
        qsort(lat, nlat, sizeof(uint32_t), cmp_u32);

        printf("pages=%zu\nevicted_pages=%zu\nswapped_pages=%zu\n", npages, n_evicted, n_swapped);
        if (nlat > 0)
                printf("lat_p50_us=%.2f\nlat_p99_us=%.2f\nlat_p999_us=%.2f\nlat_mean_us=%.2f\n",
                       pct_us(lat, nlat, 0.50), pct_us(lat, nlat, 0.99), pct_us(lat, nlat, 0.999),
                       lat_ns / 1000.0 / (double) nlat);
        printf("reread_random_mibs=%.1f\nreread_seq_mibs=%.1f\n",
               (double) arg_size_mib / ((double) t_random / 1e9),
               (double) arg_size_mib / ((double) t_seq / 1e9));
        printf("corrupted_pages=%zu\ncorrupted_bytes=%zu\n", bad_pages, corrupted);
        return 0;
}

static int run_usemem(void) {
        _cleanup_(region_unmap) struct region tmpl = {}, tsums = {}, data = {}, absent = {};
        size_t npages = arg_size_mib * 1024 * 1024 / PAGE, n_absent, n_swapped;
        size_t ntmpl = MIN(TEMPLATE_PAGES_MAX, MAX(npages / TEMPLATE_SHARE, (size_t) 1)),
               corrupted = 0, bad_pages = 0;
        uint64_t *tsum, t0, t_write, t_verify, t_free;
        struct rusage ru;
        int r;

        /* The template is the reference the written pages are checked
         * against: locked, so that it cannot itself go through reclaim. */
        r = region_map(ntmpl * PAGE, true, &tmpl);
        if (r < 0)
                return r;
        r = region_map(ntmpl * sizeof(uint64_t), true, &tsums);
        if (r < 0)
                return r;
        tsum = tsums.mem;
        r = corpus_fill(tmpl.mem, ntmpl, arg_zero_percent, arg_seed);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ntmpl; i++)
                tsum[i] = corpus_page_sum((uint8_t *) tmpl.mem + i * PAGE);
        /* One byte a page, for the pagemap scan before the verification. */
        r = region_map(npages, true, &absent);
        if (r < 0)
                return r;

        r = announce_and_wait("");
        if (r < 0)
                return r;

        /* Page p holds template page (p * stride) % ntmpl: a stride prime to
         * ntmpl spreads repeats far apart, as in real heaps. */
        t0 = zsw_now_ns();
        r = region_map(npages * PAGE, false, &data);
        if (r < 0)
                return r;
        for (size_t p = 0; p < npages; p++)
                memcpy((uint8_t *) data.mem + p * PAGE,
                       (uint8_t *) tmpl.mem + ((p * 7919) % ntmpl) * PAGE, PAGE);
        for (size_t i = 0; i < MIN(arg_inject_corruption, npages); i++)
                ((uint8_t *) data.mem)[i * PAGE + i % PAGE] ^= 0x5a;
        t_write = zsw_now_ns() - t0;

        /* Every page is written once: whatever is absent now was reclaimed
         * after its write and is brought back by the verification, in the
         * kernel's swap-in or zswapd's fault service alike (the kernel's
         * readahead makes its major faults fewer than these pages). */
        r = scan_evicted(&data, absent.mem, &n_absent, &n_swapped);
        if (r < 0)
                return r;
        t0 = zsw_now_ns();
        for (size_t p = 0; p < npages; p++) {
                const uint8_t *page = (const uint8_t *) data.mem + p * PAGE;
                size_t t = (p * 7919) % ntmpl;

                if (corpus_page_sum(page) != tsum[t]) {
                        bad_pages++;
                        corrupted += count_diff(page, (uint8_t *) tmpl.mem + t * PAGE);
                }
        }
        t_verify = zsw_now_ns() - t0;

        t0 = zsw_now_ns();
        region_unmap(&data);
        t_free = zsw_now_ns() - t0;

        if (getrusage(RUSAGE_SELF, &ru) < 0)
                return -errno;
        printf("pages=%zu\nwrite_s=%.3f\nwrite_mibs=%.1f\nverify_s=%.3f\nfree_s=%.4f\n", npages,
               t_write / 1e9, (double) arg_size_mib / ((double) t_write / 1e9), t_verify / 1e9,
               t_free / 1e9);
        printf("major_faults=%ld\nminor_faults=%ld\n", ru.ru_majflt, ru.ru_minflt);
        printf("absent_pages=%zu\nswapped_pages=%zu\n", n_absent, n_swapped);
        printf("corrupted_pages=%zu\ncorrupted_bytes=%zu\n", bad_pages, corrupted);
        return 0;
}

/* The userfaultfd round trip alone (bench/uffd-floor.c), from the CPU we
 * are pinned to: handler on any CPU (as zswapd's fault threads), then on
 * our own. */
static int run_uffd_floor(void) {
        struct uffd_floor any, same;
        int r, cpu = sched_getcpu();

        r = uffd_floor_measure(FLOOR_PAGES, -1, &any);
        if (r >= 0)
                r = uffd_floor_measure(FLOOR_PAGES, cpu, &same);
        if (r < 0)
                return r;
        printf("floor_p50_us=%.1f\nfloor_p99_us=%.1f\nfloor_same_cpu_p50_us=%.1f\n"
               "floor_same_cpu_p99_us=%.1f\nfloor_faults=%zu\n",
               any.p50_ns / 1e3, any.p99_ns / 1e3, same.p50_ns / 1e3, same.p99_ns / 1e3,
               any.faults);
        return 0;
}

struct workers {
        uint8_t *mem;
        const uint64_t *sum;
        uint8_t *bad; /* per page, set once its checksum failed */
        size_t npages;
        atomic_bool stop;
        _Atomic uint64_t ops, bad_pages;
};

struct worker {
        struct workers *w;
        uint64_t seed;
        pthread_t thread;
};

static uint64_t next_random(uint64_t *s) {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        return *s;
}

static void *worker_main(void *userdata) {
        struct worker *me = userdata;
        struct workers *w = me->w;
        size_t hot = MAX(w->npages / HOT_SHARE, (size_t) 1);
        uint64_t s = me->seed, ops = 0;

        while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
                for (unsigned i = 0; i < BURST; i++) {
                        uint64_t x = next_random(&s);
                        size_t p = x % 1000 >= arg_cold_permille ? (x >> 10) % hot
                                                                 : (x >> 10) % w->npages;
                        volatile uint8_t *page = w->mem + p * PAGE;

                        if (corpus_page_sum((const void *) page) != w->sum[p] && !w->bad[p]) {
                                w->bad[p] = 1;
                                atomic_fetch_add(&w->bad_pages, 1);
                        }
                        if ((x >> 40) % 8 == 0)
                                page[(x >> 20) % PAGE] = page[(x >> 20) % PAGE];
                }
                ops += BURST;
                (void) nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
        }
        atomic_fetch_add(&w->ops, ops);
        return NULL;
}

static int run_threads(void) {
        _cleanup_(region_unmap) struct region data = {}, sums = {}, bad = {};
        size_t npages = arg_size_mib * 1024 * 1024 / PAGE;
        struct workers w = { .npages = npages };
        _cleanup_free_ struct worker *workers = calloc(arg_threads, sizeof(*workers));
        unsigned started = 0;
        uint64_t t0, t;
        int r;

        if (!workers)
                return -ENOMEM;
        r = map_corpus(npages, &data, &sums);
        if (r < 0)
                return r;
        r = region_map(npages, true, &bad);
        if (r < 0)
                return r;
        w.mem = data.mem;
        w.sum = sums.mem;
        w.bad = bad.mem;

        for (; started < arg_threads; started++) {
                workers[started] =
                        (struct worker) { .w = &w, .seed = arg_seed * 7919 + started + 1 };
                r = -pthread_create(&workers[started].thread, NULL, worker_main, &workers[started]);
                if (r < 0)
                        break;
        }
        t0 = zsw_now_ns();
        if (r >= 0)
                r = announce_and_wait("");
        atomic_store(&w.stop, true);
        for (unsigned i = 0; i < started; i++)
                pthread_join(workers[i].thread, NULL);
        t = zsw_now_ns() - t0;
        if (r < 0)
                return r;
        printf("pages=%zu\nthreads=%u\nops=%" PRIu64 "\nops_per_s=%.0f\nbad_pages=%" PRIu64 "\n",
               npages, arg_threads, atomic_load(&w.ops), (double) atomic_load(&w.ops) / (t / 1e9),
               atomic_load(&w.bad_pages));
        return 0;
}

static int run_fill(void) {
        _cleanup_(region_unmap) struct region data = {};
        size_t npages = arg_size_mib * 1024 * 1024 / PAGE;
        int r;

        r = region_map(npages * PAGE, false, &data);
        if (r < 0)
                return r;
        return corpus_fill(data.mem, npages, arg_zero_percent, arg_seed);
}

static void help(void) {
        printf("zswapd-bench-workload MODE [OPTIONS]\n\n"
               "Modes: reread, usemem, fill, uffd-floor (see bench/workload.c; run by\n"
               "bench/compare), threads (run by bench/stops)\n\n"
               "  --size MIB          memory to fill (default 256)\n"
               "  --zero-percent P    share of zero pages (default 10)\n"
               "  --seed N            corpus seed (default 1)\n"
               "  --inject-corruption N  change one byte in each of the first N pages\n"
               "                      after filling (tests the verification)\n"
               "  --threads N         threads of the threads mode (default 16)\n"
               "  --cold-permille N   its accesses outside the hot fifth, per mille (default "
               "10)\n");
}

static int parse_ulong(const char *s, unsigned long max, unsigned long *ret) {
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(s, &end, 0);
        if (errno || end == s || *end || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Returns <0 on error, 0 to exit successfully, >0 to run. */
static int parse_argv(int argc, char *argv[]) {
        static const struct option options[] = { { "help", no_argument, NULL, 'h' },
                                                 { "size", required_argument, NULL, 's' },
                                                 { "zero-percent", required_argument, NULL, 'z' },
                                                 { "seed", required_argument, NULL, 'S' },
                                                 { "inject-corruption", required_argument, NULL,
                                                   'C' },
                                                 { "threads", required_argument, NULL, 'T' },
                                                 { "cold-permille", required_argument, NULL, 'P' },
                                                 {} };
        unsigned long v;
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case 's':
                        if (parse_ulong(optarg, 1ul << 20, &v) < 0 || v == 0)
                                return fprintf(stderr, "Invalid --size: %s\n", optarg), -EINVAL;
                        arg_size_mib = v;
                        break;
                case 'z':
                        if (parse_ulong(optarg, 100, &v) < 0)
                                return fprintf(stderr, "Invalid --zero-percent: %s\n", optarg),
                                       -EINVAL;
                        arg_zero_percent = (unsigned) v;
                        break;
                case 'S':
                        if (parse_ulong(optarg, ULONG_MAX, &v) < 0)
                                return fprintf(stderr, "Invalid --seed: %s\n", optarg), -EINVAL;
                        arg_seed = v;
                        break;
                case 'C':
                        if (parse_ulong(optarg, ULONG_MAX, &v) < 0)
                                return fprintf(stderr, "Invalid --inject-corruption: %s\n", optarg),
                                       -EINVAL;
                        arg_inject_corruption = v;
                        break;
                case 'T':
                        if (parse_ulong(optarg, THREADS_MAX, &v) < 0 || v == 0)
                                return fprintf(stderr, "Invalid --threads (1-%lu): %s\n",
                                               THREADS_MAX, optarg),
                                       -EINVAL;
                        arg_threads = (unsigned) v;
                        break;
                case 'P':
                        if (parse_ulong(optarg, 1000, &v) < 0)
                                return fprintf(stderr, "Invalid --cold-permille (0-1000): %s\n",
                                               optarg),
                                       -EINVAL;
                        arg_cold_permille = (unsigned) v;
                        break;
                default:
                        return -EINVAL;
                }
        if (optind != argc - 1)
                return fprintf(stderr,
                               "Expected one mode: reread, usemem, fill, uffd-floor or threads\n"),
                       -EINVAL;
        if (strcmp(argv[optind], "reread") == 0)
                arg_mode = MODE_REREAD;
        else if (strcmp(argv[optind], "usemem") == 0)
                arg_mode = MODE_USEMEM;
        else if (strcmp(argv[optind], "fill") == 0)
                arg_mode = MODE_FILL;
        else if (strcmp(argv[optind], "uffd-floor") == 0)
                arg_mode = MODE_UFFD_FLOOR;
        else if (strcmp(argv[optind], "threads") == 0)
                arg_mode = MODE_THREADS;
        else
                return fprintf(stderr, "Unknown mode: %s\n", argv[optind]), -EINVAL;
        return 1;
}

static int run(int argc, char *argv[]) {
        sigset_t ss;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        /* Blocked from the start, so that a go sent right after "ready"
         * stays pending until sigwaitinfo() picks it up. */
        sigemptyset(&ss);
        sigaddset(&ss, SIGUSR1);
        if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
                return -errno;

        switch (arg_mode) {
        case MODE_REREAD:
                r = run_reread();
                break;
        case MODE_USEMEM:
                r = run_usemem();
                break;
        case MODE_FILL:
                r = run_fill();
                break;
        case MODE_UFFD_FLOOR:
                r = run_uffd_floor();
                break;
        case MODE_THREADS:
                r = run_threads();
                break;
        }
        if (r < 0)
                fprintf(stderr, "workload failed: %s\n", strerror(-r));
        return r;
}

int main(int argc, char *argv[]) {
        return run(argc, argv) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
