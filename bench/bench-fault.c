/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-fault: the engine's main job, measured from the target's side.
 *
 * A workload child (pinned to one CPU) fills N MiB with corpus pages (10%
 * zero pages) and keeps a checksum per page. The bench drives the engine
 * in-process: attach, reclaim everything (eviction MiB/s), then the child
 * touches every page once, in random order, timing each first touch with
 * clock_gettime(2) around the access and checking every byte of the page;
 * then a second full reclaim and the same again in address order. This is
 * done with prefetch off and with a window of W pages (one engine each,
 * one after the other on the same child), and the child verifies every page
 * again after each engine detached.
 *
 * The engine starts its fault threads (one per CPU, not pinned; the child,
 * one target, is served by one of them). Its checksums, latencies and access order live
 * in a shared mapping, which the engine never registers, so only the data
 * pages fault. The kernel figures printed beside ours were measured on one
 * machine with the same data (docs/performance.md says which and how); the
 * userfaultfd round trip alone (bench/uffd-floor.c), the floor under every
 * fault latency here, is timed at the start of each run.
 *
 *   zswapd-bench-fault [--json] [--mib N] [--prefetch W]
 *   zswapd-bench-fault --workload [--mib N]   (for tests/demo.sh)
 *
 * In --workload mode the process fills its memory, prints
 * "ready pid=PID pages=N", then obeys lines on stdin: "reread" touches every
 * page in random order, verifies it and prints one "reread ..." line;
 * "exit" (or EOF) ends it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <sched.h>
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

#include "corpus.h"
#include "engine.h"
#include "uffd-floor.h"
#include "util.h"

#define PAGE ZSW_PAGE_SIZE
#define ZERO_PERCENT 10u

/* Kernel zswap and zram on the machine of docs/performance.md ("Kernel
 * reference figures"). */
#define REF_ZSWAP_P50_NS 8400
#define REF_ZSWAP_P99_NS 23000
#define REF_ZRAM_P50_NS 6800
#define REF_ZRAM_P99_NS 22000
#define REF_RECLAIM_MIB_S 375.0

static unsigned arg_mib = 1024;
static unsigned arg_prefetch = 8;
static bool arg_json;
/* The userfaultfd round trip alone, from the workload's CPU, handler on
 * any CPU and on that one (measure_floor()). */
static struct uffd_floor floor_any, floor_same;
static bool arg_workload;
static bool arg_local_only;
static bool arg_fifo;
static unsigned arg_evict_only;

/* The workload's memory. buf is private anonymous (what the engine takes);
 * the rest is shared, so the engine leaves it alone. */
struct workload {
        uint8_t *buf;
        size_t npages;
        uint64_t *sums;
        uint32_t *lat_ns; /* per access, in access order */
        uint32_t *order;  /* page index of each access */
};

struct pass {
        uint64_t wall_ns;
        uint64_t bad_pages;
        uint64_t p50_ns, p99_ns; /* of the kernel's own faults, for 'c' */
};

#define CALIBRATE_PAGES 4096u

static uint64_t thread_cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static uint64_t process_cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static void *map_shared(size_t size) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        return p == MAP_FAILED ? NULL : p;
}

/* The shared part, mapped before the fork so that parent and child see it. */
static int workload_alloc(struct workload *w, size_t npages) {
        w->npages = npages;
        w->sums = map_shared(npages * sizeof(uint64_t));
        w->lat_ns = map_shared(npages * sizeof(uint32_t));
        w->order = map_shared(npages * sizeof(uint32_t));
        return w->sums && w->lat_ns && w->order ? 0 : -ENOMEM;
}

/* The private part, in the process whose memory is taken. */
static int workload_fill(struct workload *w) {
        int r;

        w->buf = mmap(NULL, w->npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
        if (w->buf == MAP_FAILED)
                return -ENOMEM;
        r = corpus_fill(w->buf, w->npages, ZERO_PERCENT, 42);
        if (r < 0)
                return r;
        for (size_t i = 0; i < w->npages; i++)
                w->sums[i] = corpus_page_sum(w->buf + i * PAGE);
        return 0;
}

static void order_set(struct workload *w, bool random, uint64_t seed) {
        if (random)
                corpus_shuffle(w->order, w->npages, seed);
        else
                for (size_t i = 0; i < w->npages; i++)
                        w->order[i] = (uint32_t) i;
}

/* Touches every page once in w->order, timing the first touch (the fault,
 * if the page is away), then checks the whole page. Runs in the workload. */
static struct pass workload_pass(struct workload *w) {
        struct pass p = {};
        uint64_t start = zsw_now_ns();

        for (size_t k = 0; k < w->npages; k++) {
                const uint8_t *page = w->buf + (size_t) w->order[k] * PAGE;
                uint64_t t0, t1;

                t0 = zsw_now_ns();
                (void) *(const volatile uint8_t *) page;
                t1 = zsw_now_ns();
                w->lat_ns[k] = (uint32_t) MIN(t1 - t0, (uint64_t) UINT32_MAX);
                if (corpus_page_sum(page) != w->sums[w->order[k]])
                        p.bad_pages++;
        }
        p.wall_ns = zsw_now_ns() - start;
        return p;
}

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;

        return (x > y) - (x < y);
}

/* The kernel's own anonymous fault on this machine right now: the first
 * write to fresh pages of a mapping the engine has not registered. On a
 * loaded machine this floor moves a lot, so it is measured next to every pass. */
static struct pass workload_calibrate(void) {
        uint32_t lat[CALIBRATE_PAGES];
        struct pass p = {};
        uint64_t seed = 99;
        size_t n = 0;
        uint8_t *m;

        m = mmap(NULL, CALIBRATE_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
        if (m == MAP_FAILED)
                return p;
        for (size_t k = 0; k < CALIBRATE_PAGES; k++) {
                volatile uint8_t *page = m + (corpus_random(&seed) % CALIBRATE_PAGES) * PAGE;
                uint64_t t0 = zsw_now_ns();

                if (*page)
                        continue; /* touched already: not a first touch */
                *page = 1;
                lat[n++] = (uint32_t) MIN(zsw_now_ns() - t0, (uint64_t) UINT32_MAX);
        }
        munmap(m, CALIBRATE_PAGES * PAGE);
        qsort(lat, n, sizeof(uint32_t), cmp_u32);
        p.p50_ns = lat[n / 2];
        p.p99_ns = lat[n * 99 / 100];
        return p;
}

struct lat_summary {
        uint64_t p50, p95, p99, p999, max;
};

static struct lat_summary lat_summarize(const uint32_t *lat, size_t n) {
        _cleanup_free_ uint32_t *s = malloc(n * sizeof(uint32_t));
        struct lat_summary ls = {};

        if (!s || n == 0)
                return ls;
        memcpy(s, lat, n * sizeof(uint32_t));
        qsort(s, n, sizeof(uint32_t), cmp_u32);
        ls.p50 = s[n / 2];
        ls.p95 = s[n * 95 / 100];
        ls.p99 = s[n * 99 / 100];
        ls.p999 = s[n * 999 / 1000];
        ls.max = s[n - 1];
        return ls;
}

/* The floor under every fault latency below (bench/uffd-floor.c), timed in
 * a child pinned to the workload's CPU before the workload starts. */
static int measure_floor(int cpu) {
        struct uffd_floor *res = map_shared(2 * sizeof(struct uffd_floor));
        pid_t pid;
        int status;

        if (!res)
                return -ENOMEM;
        pid = fork();
        if (pid < 0) {
                munmap(res, 2 * sizeof(struct uffd_floor));
                return -errno;
        }
        if (pid == 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                if (sched_setaffinity(0, sizeof(set), &set) < 0 ||
                    uffd_floor_measure(16384, -1, &res[0]) < 0 ||
                    uffd_floor_measure(16384, cpu, &res[1]) < 0)
                        _exit(1);
                _exit(0);
        }
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                floor_any = res[0];
                floor_same = res[1];
        } else
                pid = -1;
        munmap(res, 2 * sizeof(struct uffd_floor));
        return pid < 0 ? -EIO : 0;
}

/* ---- the workload child, driven over pipes -------------------------------- */

struct child {
        pid_t pid;
        int cmd, reply;
        int cpu;
};

/* Commands: 'r' random pass, 's' sequential pass, 'c' calibrate, 'q' quit. */
static _Noreturn void child_loop(struct workload *w, int cmd, int reply) {
        char c;

        while (read(cmd, &c, 1) == 1 && c != 'q') {
                struct pass p;

                if (c == 'c')
                        p = workload_calibrate();
                else {
                        order_set(w, c == 'r', 1234);
                        p = workload_pass(w);
                }
                if (write(reply, &p, sizeof(p)) != sizeof(p))
                        _exit(2);
        }
        _exit(0);
}

static int pin_to(pid_t pid, int cpu) {
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        return sched_setaffinity(pid, sizeof(set), &set) < 0 ? -errno : 0;
}

/* The last CPU we may run on: the workload's. */
static int workload_cpu(void) {
        cpu_set_t set;
        int last = -1;

        if (sched_getaffinity(0, sizeof(set), &set) == 0)
                for (int c = 0; c < CPU_SETSIZE; c++)
                        if (CPU_ISSET(c, &set))
                                last = c;
        return last;
}

static int child_start(struct workload *w, struct child *ret) {
        int to[2], from[2], ready[2];
        struct child ch = { .cpu = workload_cpu() };
        int r = 0;

        if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0 || pipe2(ready, O_CLOEXEC) < 0)
                return -errno;
        ch.pid = fork();
        if (ch.pid < 0)
                return -errno;
        if (ch.pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (ch.cpu >= 0)
                        (void) pin_to(0, ch.cpu);
                r = workload_fill(w);
                if (write(ready[1], &r, sizeof(r)) != sizeof(r) || r < 0)
                        _exit(3);
                child_loop(w, to[0], from[1]);
        }
        close(to[0]);
        close(from[1]);
        close(ready[1]);
        if (read(ready[0], &r, sizeof(r)) != sizeof(r))
                r = -EIO;
        close(ready[0]);
        ch.cmd = to[1];
        ch.reply = from[0];
        *ret = ch;
        return r;
}

static int child_pass(struct child *ch, char c, struct pass *ret) {
        if (write(ch->cmd, &c, 1) != 1)
                return -EIO;
        return read(ch->reply, ret, sizeof(*ret)) == sizeof(*ret) ? 0 : -EIO;
}

static void child_stop(struct child *ch) {
        if (write(ch->cmd, "q", 1) != 1)
                kill(ch->pid, SIGKILL);
        waitpid(ch->pid, NULL, 0);
        close(ch->cmd);
        close(ch->reply);
}

/* ---- one configuration: a reclaim, then one pass -------------------------- */

struct result {
        const char *pattern;
        unsigned prefetch;
        double evict_mib_s;
        double evict_cpu_mib_s; /* per second of the reclaiming thread's CPU */
        struct zsw_reclaim_result rec;
        struct pass calib;
        struct zsw_target_stats before, after; /* engine's view around the pass */
        struct pass pass;
        struct lat_summary lat;
        uint64_t bytes;
};

static double mib_s(uint64_t bytes, uint64_t ns) {
        return ns ? (double) bytes / (1 << 20) / ((double) ns / 1e9) : 0.0;
}

static void print_result(const struct result *r) {
        double payload = (double) r->before.payload_bytes;
        double stored = (double) r->before.stored_pages * PAGE;
        double ratio = payload > 0 ? stored / payload : 0.0;
        double overhead = payload > 0 ? (double) r->before.pool_bytes / payload - 1.0 : 0.0;
        uint64_t faults = r->after.faults - r->before.faults;
        uint64_t prefetched = r->after.prefetched_pages - r->before.prefetched_pages;
        uint64_t hits = r->after.prefetch_hits - r->before.prefetch_hits;

        if (arg_json) {
                printf("{\"pattern\":\"%s\",\"prefetch\":%u,\"mib\":%u,"
                       "\"evicted_pages\":%" PRIu64 ",\"evict_aborted\":%" PRIu64
                       ",\"evict_refused\":%" PRIu64 ",\"evict_mib_s\":%.1f,"
                       "\"evict_cpu_mib_s\":%.1f,\"anon_fault_ns_p50\":%" PRIu64
                       ",\"anon_fault_ns_p99\":%" PRIu64 ","
                       "\"fault_ns_p50\":%" PRIu64 ",\"fault_ns_p95\":%" PRIu64
                       ",\"fault_ns_p99\":%" PRIu64 ",\"fault_ns_p999\":%" PRIu64
                       ",\"fault_ns_max\":%" PRIu64 ",\"reread_mib_s\":%.1f,"
                       "\"verified_pages\":%zu,\"corrupted_pages\":%" PRIu64 ","
                       "\"stored_pages\":%" PRIu64 ",\"same_filled_pages\":%" PRIu64
                       ",\"payload_bytes\":%" PRIu64 ",\"pool_bytes\":%" PRIu64
                       ",\"compression_ratio\":%.3f,\"pool_overhead\":%.3f,"
                       "\"engine_faults\":%" PRIu64 ",\"engine_fault_ns_p50\":%" PRIu64
                       ",\"engine_fault_ns_p99\":%" PRIu64 ",\"prefetched_pages\":%" PRIu64
                       ",\"prefetch_hits\":%" PRIu64 ","
                       "\"ref_kernel_zswap_ns_p50\":%d,\"ref_kernel_zswap_ns_p99\":%d,"
                       "\"ref_zram_lz4_ns_p50\":%d,\"ref_zram_lz4_ns_p99\":%d,"
                       "\"ref_kernel_reclaim_mib_s\":%.0f,\"uffd_floor_ns_p50\":%" PRIu64
                       ",\"uffd_floor_ns_p99\":%" PRIu64 ",\"uffd_floor_same_cpu_ns_p50\":%" PRIu64
                       ",\"uffd_floor_same_cpu_ns_p99\":%" PRIu64 "}\n",
                       r->pattern, r->prefetch, arg_mib, r->rec.evicted_pages, r->rec.aborted_pages,
                       r->rec.refused_pages, r->evict_mib_s, r->evict_cpu_mib_s, r->calib.p50_ns,
                       r->calib.p99_ns, r->lat.p50, r->lat.p95, r->lat.p99, r->lat.p999, r->lat.max,
                       mib_s(r->bytes, r->pass.wall_ns), (size_t) (r->bytes / PAGE),
                       r->pass.bad_pages, r->before.stored_pages, r->before.same_filled_pages,
                       r->before.payload_bytes, r->before.pool_bytes, ratio, overhead, faults,
                       r->after.fault_ns_p50, r->after.fault_ns_p99, prefetched, hits,
                       REF_ZSWAP_P50_NS, REF_ZSWAP_P99_NS, REF_ZRAM_P50_NS, REF_ZRAM_P99_NS,
                       REF_RECLAIM_MIB_S, floor_any.p50_ns, floor_any.p99_ns, floor_same.p50_ns,
                       floor_same.p99_ns);
                fflush(stdout);
                return;
        }
        printf("%-10s %2u %6.0f %6.0f  %6.1f %6.1f %6.1f %7.1f %7.0f  %6.1f  %5.1f %5.1f  %5.0f "
               "%5.2f %4.1f%% %7" PRIu64 " %7" PRIu64 " %3" PRIu64 "\n",
               r->pattern, r->prefetch, r->evict_mib_s, r->evict_cpu_mib_s, r->lat.p50 / 1e3,
               r->lat.p95 / 1e3, r->lat.p99 / 1e3, r->lat.p999 / 1e3, r->lat.max / 1e3,
               r->after.fault_ns_p50 / 1e3, r->calib.p50_ns / 1e3, r->calib.p99_ns / 1e3,
               mib_s(r->bytes, r->pass.wall_ns), ratio, overhead * 100, faults, hits,
               r->pass.bad_pages);
        fflush(stdout);
}

static void print_header(const struct child *ch, unsigned n_cpus) {
        if (arg_json)
                return;
        printf("zswapd-bench-fault: %u MiB of corpus pages (%u%% zero), workload pinned to CPU %d, "
               "%u fault thread(s), not pinned, one of them serving the workload\n",
               arg_mib, ZERO_PERCENT, ch->cpu, n_cpus);
        printf("kernel on these machines: zswap swap-in p50 %.1f us p99 %.1f us, zram lz4 p50 "
               "%.1f us p99 %.1f us, reclaim ~%.0f MiB/s (target 1.5x: %.0f MiB/s)\n\n",
               REF_ZSWAP_P50_NS / 1e3, REF_ZSWAP_P99_NS / 1e3, REF_ZRAM_P50_NS / 1e3,
               REF_ZRAM_P99_NS / 1e3, REF_RECLAIM_MIB_S, REF_RECLAIM_MIB_S * 1.5);
        printf("userfaultfd round trip alone now (a handler process with a ready page): on any CPU "
               "p50 "
               "%.1f us p99 %.1f us, on the workload's CPU p50 %.1f us p99 %.1f us\n\n",
               floor_any.p50_ns / 1e3, floor_any.p99_ns / 1e3, floor_same.p50_ns / 1e3,
               floor_same.p99_ns / 1e3);
        printf("%-10s %2s %6s %6s  %6s %6s %6s %7s %7s  %6s  %5s %5s  %5s %5s %5s %7s %7s %3s\n",
               "", "", "evict", "MiB/s", "fault", "in", "(us)", "", "", "engine", "anon", "(us)",
               "reread", "", "pool", "engine", "pf", "");
        printf("%-10s %2s %6s %6s  %6s %6s %6s %7s %7s  %6s  %5s %5s  %5s %5s %5s %7s %7s %3s\n",
               "pattern", "pf", "wall", "cpu", "p50", "p95", "p99", "p99.9", "max", "p50", "p50",
               "p99", "MiB/s", "ratio", "ovhd", "faults", "hits", "bad");
}

static void log_stderr(void *userdata, int priority, const char *file, int line, const char *func,
                       const char *format, va_list ap) {
        fprintf(stderr, "<%d> ", priority);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
}

static struct zsw_log bench_log = { .fn = log_stderr, .max_priority = LOG_WARNING };

static int measure(struct zsw_engine *e, struct child *ch, struct workload *w, char pattern,
                   unsigned prefetch, struct result *ret) {
        struct result res = { .pattern = pattern == 'r' ? "random" : "sequential",
                              .prefetch = prefetch,
                              .bytes = (uint64_t) w->npages * PAGE };
        struct zsw_engine_error err = {};
        uint64_t cpu0;
        int r;

        cpu0 = thread_cpu_ns();
        r = zsw_engine_reclaim(e, ch->pid, UINT64_MAX, &res.rec, &err);
        if (r < 0) {
                fprintf(stderr, "reclaim failed: %s\n", err.message);
                return r;
        }
        res.evict_mib_s = mib_s(res.rec.evicted_pages * PAGE, res.rec.duration_ns);
        res.evict_cpu_mib_s = mib_s(res.rec.evicted_pages * PAGE, thread_cpu_ns() - cpu0);
        r = child_pass(ch, 'c', &res.calib);
        if (r < 0)
                return r;
        r = zsw_engine_get_target_stats(e, ch->pid, &res.before);
        if (r < 0)
                return r;
        r = child_pass(ch, pattern, &res.pass);
        if (r < 0)
                return r;
        r = zsw_engine_get_target_stats(e, ch->pid, &res.after);
        if (r < 0)
                return r;
        res.lat = lat_summarize(w->lat_ns, w->npages);
        *ret = res;
        return 0;
}

/* Puts the engine's fault threads (ours, found by name) in SCHED_FIFO: an
 * experiment on how much of the fault latency is waiting for a CPU that
 * other processes keep busy. */
static int fault_threads_fifo(void) {
        DIR *d = opendir("/proc/self/task");
        struct sched_param sp = { .sched_priority = 1 };
        struct dirent *de;
        int n = 0;

        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                char path[320], comm[32] = "";
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (!fgets(comm, sizeof(comm), f))
                        comm[0] = 0;
                fclose(f);
                if (strncmp(comm, "zswapd-fault", 12) != 0)
                        continue;
                if (sched_setscheduler((pid_t) atoi(de->d_name), SCHED_FIFO, &sp) < 0) {
                        n = -errno;
                        break;
                }
                n++;
        }
        closedir(d);
        return n;
}

/* One engine with the given prefetch window: random, then sequential, then
 * detach and check that every byte is back. Adds the corrupted pages to
 * *ret_bad. */
static int run_window(struct child *ch, struct workload *w, unsigned window,
                      const cpu_set_t *all_cpus, uint64_t *ret_bad) {
        struct zsw_engine_config cfg = { .prefetch_window = window, .log = &bench_log };
        struct zsw_engine *e = NULL;
        struct zsw_engine_error err = {};
        struct pass after_detach;
        uint64_t bad = 0;
        int r;

        /* The engine's threads may run on every CPU we may (or only on
         * the workload's, with --one-fault-thread); then our own thread,
         * which only reclaims, moves off the workload's CPU. */
        if (arg_local_only && ch->cpu >= 0)
                r = pin_to(0, ch->cpu);
        else
                r = sched_setaffinity(0, sizeof(*all_cpus), all_cpus) < 0 ? -errno : 0;
        if (r < 0)
                return r;
        r = zsw_engine_new(&cfg, &e);
        if (r < 0)
                return r;
        if (ch->cpu > 0)
                (void) pin_to(0, ch->cpu - 1);
        if (arg_fifo) {
                r = fault_threads_fifo();
                if (r < 0)
                        goto out;
        }
        r = zsw_engine_attach(e, ch->pid, &err);
        if (r < 0) {
                fprintf(stderr, "attach failed: %s\n", err.message);
                goto out;
        }
        for (const char *p = "rs"; *p; p++) {
                struct result res;

                r = measure(e, ch, w, *p, window, &res);
                if (r < 0)
                        goto out;
                print_result(&res);
                bad += res.pass.bad_pages;
        }
        r = zsw_engine_detach(e, ch->pid, &err);
        if (r < 0) {
                fprintf(stderr, "detach failed: %s\n", err.message);
                goto out;
        }
        r = child_pass(ch, 's', &after_detach);
        if (r < 0)
                goto out;
        bad += after_detach.bad_pages;
        *ret_bad += bad;
out:
        zsw_engine_free(e);
        return r;
}

/* --evict-only: N times attach, reclaim everything, detach (which puts every
 * page back) and verify; prints the eviction speed of each repetition, for
 * A/B comparisons of the eviction path without the fault passes between. */
static int run_evict_only(struct child *ch, const cpu_set_t *all_cpus, uint64_t *ret_bad) {
        struct zsw_engine_config cfg = { .log = &bench_log };
        struct zsw_engine *e = NULL;
        int r;

        r = sched_setaffinity(0, sizeof(*all_cpus), all_cpus) < 0 ? -errno : 0;
        if (r >= 0)
                r = zsw_engine_new(&cfg, &e);
        if (r < 0)
                return r;
        if (ch->cpu > 0)
                (void) pin_to(0, ch->cpu - 1);
        for (unsigned i = 0; i < arg_evict_only && r >= 0; i++) {
                struct zsw_engine_error err = {};
                struct zsw_reclaim_result rec = {};
                uint64_t cpu0 = thread_cpu_ns(), proc0 = process_cpu_ns();
                struct pass check;

                r = zsw_engine_attach(e, ch->pid, &err);
                if (r >= 0)
                        r = zsw_engine_reclaim(e, ch->pid, UINT64_MAX, &rec, &err);
                if (r >= 0) {
                        uint64_t bytes = rec.evicted_pages * PAGE;
                        double wall = mib_s(bytes, rec.duration_ns);
                        double cpu = mib_s(bytes, thread_cpu_ns() - cpu0);
                        double proc = mib_s(bytes, process_cpu_ns() - proc0);

                        if (arg_json)
                                printf("{\"evict_only\":%u,\"mib\":%u,\"evicted_pages\":%" PRIu64
                                       ",\"evict_aborted\":%" PRIu64 ",\"evict_mib_s\":%.1f,"
                                       "\"evict_cpu_mib_s\":%.1f,\"evict_process_cpu_mib_s\":%.1f}"
                                       "\n",
                                       i, arg_mib, rec.evicted_pages, rec.aborted_pages, wall, cpu,
                                       proc);
                        else
                                printf("evict %2u: %7" PRIu64
                                       " pages, MiB/s: %6.0f wall, %6.0f per "
                                       "CPU-second of the reclaiming thread, %6.0f of all "
                                       "threads\n",
                                       i, rec.evicted_pages, wall, cpu, proc);
                        fflush(stdout);
                        r = zsw_engine_detach(e, ch->pid, &err);
                }
                if (r < 0) {
                        fprintf(stderr, "evict-only failed: %s\n", err.message);
                        break;
                }
                r = child_pass(ch, 's', &check);
                if (r >= 0)
                        *ret_bad += check.bad_pages;
        }
        zsw_engine_free(e);
        return r;
}

/* ---- --workload: the demo's target, driven by lines on stdin -------------- */

static int workload_main(void) {
        struct workload w = {};
        char line[64];
        int r;

        r = workload_alloc(&w, (size_t) arg_mib * 256);
        if (r >= 0)
                r = workload_fill(&w);
        if (r < 0) {
                fprintf(stderr, "Cannot fill %u MiB: %s\n", arg_mib, strerror(-r));
                return r;
        }
        printf("ready pid=%d pages=%zu\n", getpid(), w.npages);
        fflush(stdout);
        while (fgets(line, sizeof(line), stdin)) {
                struct lat_summary ls;
                struct pass p;

                if (strncmp(line, "exit", 4) == 0)
                        break;
                if (strncmp(line, "reread", 6) != 0) {
                        printf("error unknown command\n");
                        fflush(stdout);
                        continue;
                }
                order_set(&w, true, 1234);
                p = workload_pass(&w);
                ls = lat_summarize(w.lat_ns, w.npages);
                printf("reread pages=%zu corrupted=%" PRIu64 " p50_ns=%" PRIu64 " p99_ns=%" PRIu64
                       " p999_ns=%" PRIu64 " mib_s=%.1f\n",
                       w.npages, p.bad_pages, ls.p50, ls.p99, ls.p999,
                       mib_s((uint64_t) w.npages * PAGE, p.wall_ns));
                fflush(stdout);
        }
        return 0;
}

/* ---- main ------------------------------------------------------------------ */

static void help(void) {
        printf("%s [--json] [--mib N] [--prefetch W]\n"
               "%s --workload [--mib N]\n\n"
               "Fault-in latency and eviction speed of the zswapd engine on N MiB of\n"
               "realistic pages, random and sequential re-reads, prefetch off and W.\n\n"
               "  --json         One JSON object per configuration per line\n"
               "  --mib N        Size of the workload (default 1024)\n"
               "  --prefetch W   Prefetch window compared with none (default 8)\n"
               "  --one-fault-thread\n"
               "                 Only one fault thread, on the workload's CPU\n"
               "  --fifo         Run the fault threads SCHED_FIFO (an experiment)\n"
               "  --debug        The engine's debug log on stderr (eviction phase times)\n"
               "  --evict-only N Only eviction, N times: attach, reclaim all, detach, verify\n"
               "  --workload     Be the demo's workload (see tests/demo.sh)\n",
               program_invocation_short_name, program_invocation_short_name);
}

static int parse_argv(int argc, char **argv) {
        enum {
                ARG_JSON = 0x100,
                ARG_MIB,
                ARG_PREFETCH,
                ARG_WORKLOAD,
                ARG_LOCAL,
                ARG_FIFO,
                ARG_DEBUG,
                ARG_EVICT_ONLY
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, ARG_JSON },
                { "mib", required_argument, NULL, ARG_MIB },
                { "prefetch", required_argument, NULL, ARG_PREFETCH },
                { "workload", no_argument, NULL, ARG_WORKLOAD },
                { "one-fault-thread", no_argument, NULL, ARG_LOCAL },
                { "fifo", no_argument, NULL, ARG_FIFO },
                { "debug", no_argument, NULL, ARG_DEBUG },
                { "evict-only", required_argument, NULL, ARG_EVICT_ONLY },
                {}
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_MIB:
                        arg_mib = (unsigned) strtoul(optarg, &end, 10);
                        if (*end || arg_mib == 0 || arg_mib > (1u << 20)) {
                                fprintf(stderr, "--mib wants a positive number of MiB\n");
                                return -EINVAL;
                        }
                        break;
                case ARG_PREFETCH:
                        arg_prefetch = (unsigned) strtoul(optarg, &end, 10);
                        if (*end || arg_prefetch == 0 || arg_prefetch > 64) {
                                fprintf(stderr, "--prefetch wants a window of 1..64 pages\n");
                                return -EINVAL;
                        }
                        break;
                case ARG_WORKLOAD:
                        arg_workload = true;
                        break;
                case ARG_LOCAL:
                        arg_local_only = true;
                        break;
                case ARG_FIFO:
                        arg_fifo = true;
                        break;
                case ARG_DEBUG:
                        bench_log.max_priority = LOG_DEBUG;
                        break;
                case ARG_EVICT_ONLY:
                        arg_evict_only = (unsigned) strtoul(optarg, &end, 10);
                        if (*end || arg_evict_only == 0 || arg_evict_only > 1000) {
                                fprintf(stderr, "--evict-only wants 1..1000 repetitions\n");
                                return -EINVAL;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                fprintf(stderr, "%s takes no arguments\n", program_invocation_short_name);
                return -EINVAL;
        }
        return 1;
}

static int run(int argc, char **argv) {
        struct workload w = {};
        struct child ch = {};
        cpu_set_t all_cpus;
        unsigned windows[2];
        uint64_t bad = 0;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        if (arg_workload)
                return workload_main();
        windows[0] = 0;
        windows[1] = arg_prefetch;
        if (geteuid() != 0) {
                fprintf(stderr, "Run as root: the engine needs ptrace and userfaultfd.\n");
                return -EPERM;
        }
        if (sched_getaffinity(0, sizeof(all_cpus), &all_cpus) < 0)
                return -errno;

        if (!arg_evict_only && workload_cpu() >= 0) {
                r = measure_floor(workload_cpu());
                if (r < 0) {
                        fprintf(stderr, "Cannot time the userfaultfd round trip: %s\n",
                                strerror(-r));
                        return r;
                }
        }
        r = workload_alloc(&w, (size_t) arg_mib * 256);
        if (r >= 0)
                r = child_start(&w, &ch);
        if (r < 0) {
                fprintf(stderr, "Cannot start the workload: %s\n", strerror(-r));
                return r;
        }
        if (arg_evict_only)
                r = run_evict_only(&ch, &all_cpus, &bad);
        else {
                print_header(&ch, arg_local_only ? 1 : (unsigned) CPU_COUNT(&all_cpus));
                for (size_t i = 0; i < ARRAY_SIZE(windows) && r >= 0; i++)
                        r = run_window(&ch, &w, windows[i], &all_cpus, &bad);
        }
        child_stop(&ch);
        if (r < 0) {
                fprintf(stderr, "Benchmark failed: %s\n", strerror(-r));
                return r;
        }
        if (!arg_json)
                printf("\nverified %zu pages %zu times: %" PRIu64 " corrupted\n", w.npages,
                       arg_evict_only ?: 3 * ARRAY_SIZE(windows), bad);
        return bad ? -EIO : 0;
}

int main(int argc, char **argv) {
        return run(argc, argv) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
