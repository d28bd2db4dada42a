/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-store: store and load throughput and latency of the
 * compressed store on realistic pages (bench/corpus.h), for lz4 and zstd at
 * batch sizes 1, 8 and 32, beside the compressor library alone on the same
 * pages (the physical limit of one thread).
 *
 * Each configuration runs --reps times on a fresh store; the best run (the
 * least store time) is reported. Throughputs are computed from the thread's
 * CPU time (user + system, so page faults and syscalls count), which keeps
 * the figures meaningful on a machine shared with other work; the latency
 * percentiles come from the store's own histograms and are wall time.
 * Figures, not a test: nothing here asserts on time.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <lz4.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zstd.h>

#include "corpus.h"
#include "store.h"
#include "util.h"

static bool arg_json;
static size_t arg_pages = 65536;
static unsigned arg_zero = 10;
static unsigned arg_reps = 3;
static int arg_level = 1;
static int arg_compressor = -1; /* all */
static unsigned arg_batch;      /* 0: 1, 8 and 32 */

struct result {
        const char *compressor;
        int level;
        unsigned batch;
        double store_s, cold_s, load_s, raw_s;
        struct zsw_store_latency store_lat, load_lat, compress_lat;
        struct zsw_store_stats st;
};

static uint64_t cpu_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

static uint8_t *pages;
static uint8_t *scratch;
static uint64_t *order;

/* The compressor library alone, with the calls and the output limit the
 * store uses. */
struct raw {
        enum zsw_compressor c;
        LZ4_stream_t lz4;
        ZSTD_CCtx *zstd;
};

static uint64_t raw_compress(struct raw *raw, size_t first, size_t n) {
        uint64_t t0 = cpu_ns(), sink = 0;

        for (size_t i = first; i < first + n; i++) {
                const char *src = (const char *) pages + i * ZSW_PAGE_SIZE;

                if (raw->c == ZSW_COMPRESSOR_LZ4) {
                        LZ4_resetStream_fast(&raw->lz4);
                        sink += (uint64_t) LZ4_compress_fast_continue(
                                &raw->lz4, src, (char *) scratch, ZSW_PAGE_SIZE,
                                ZSW_PAGE_SIZE * 7 / 8, 1);
                } else
                        sink += ZSTD_compressCCtx(raw->zstd, scratch, ZSW_PAGE_SIZE * 7 / 8, src,
                                                  ZSW_PAGE_SIZE, arg_level);
        }
        /* Keep the calls from being optimized away. */
        __asm__ volatile("" : : "r"(sink));
        return cpu_ns() - t0;
}

static int store_range(struct zsw_worker *w, struct zsw_owner *o, unsigned batch, size_t first,
                       size_t count, uint64_t *ret_ns) {
        uint64_t t0 = cpu_ns();

        for (size_t i = first; i < first + count; i += batch) {
                uint64_t pgnos[ZSW_STORE_BATCH_MAX];
                const void *src[ZSW_STORE_BATCH_MAX];
                size_t n = MIN((size_t) batch, first + count - i);
                int r;

                for (size_t k = 0; k < n; k++) {
                        pgnos[k] = i + k;
                        src[k] = pages + (i + k) * ZSW_PAGE_SIZE;
                }
                r = zsw_store_pages(w, o, pgnos, src, n, NULL);
                if (r < 0)
                        return r;
        }
        *ret_ns = cpu_ns() - t0;
        return 0;
}

/* The steady-state pass: chunk by chunk, the raw compressor and the store
 * on the same pages, alternating which goes first (the second finds the
 * pages in cache), so that both see the same machine and the same caches. */
#define CHUNK 256u

static int store_paired(struct zsw_worker *w, struct zsw_owner *o, unsigned batch, struct raw *raw,
                        struct result *ret) {
        uint64_t store_ns = 0, raw_ns = 0;

        for (size_t i = 0, k = 0; i < arg_pages; i += CHUNK, k++) {
                size_t n = MIN((size_t) CHUNK, arg_pages - i);
                uint64_t t;
                int r;

                if (k % 2 == 0)
                        raw_ns += raw_compress(raw, i, n);
                r = store_range(w, o, batch, i, n, &t);
                if (r < 0)
                        return r;
                store_ns += t;
                if (k % 2 == 1)
                        raw_ns += raw_compress(raw, i, n);
        }
        ret->store_s = (double) store_ns / 1e9;
        ret->raw_s = (double) raw_ns / 1e9;
        return 0;
}

static int load_all(struct zsw_worker *w, struct zsw_owner *o, struct result *ret) {
        uint8_t buf[ZSW_PAGE_SIZE];
        uint64_t t0 = cpu_ns();
        int r;

        /* Faults arrive in no particular order. */
        for (size_t i = 0; i < arg_pages; i++) {
                r = zsw_store_load(w, o, order[i], buf, 0);
                if (r < 0)
                        return r;
        }
        ret->load_s = (double) (cpu_ns() - t0) / 1e9;

        /* Untimed: every byte came back. */
        for (size_t i = 0; i < arg_pages; i++) {
                r = zsw_store_load(w, o, i, buf, ZSW_LOAD_EXCLUSIVE);
                if (r < 0)
                        return r;
                if (memcmp(buf, pages + i * ZSW_PAGE_SIZE, ZSW_PAGE_SIZE) != 0) {
                        fprintf(stderr, "page %zu differs after a round trip\n", i);
                        return -EBADMSG;
                }
        }
        return 0;
}

static int run_once(enum zsw_compressor c, unsigned batch, struct raw *raw, struct result *ret) {
        /* --level is zstd's: lz4 runs its fast mode, as the raw baseline does. */
        struct zsw_store_config cfg = { .compressor = c,
                                        .level = c == ZSW_COMPRESSOR_ZSTD ? arg_level : 0 };
        _cleanup_(zsw_store_freep) struct zsw_store *s = NULL;
        _cleanup_(zsw_worker_freep) struct zsw_worker *w = NULL;
        _cleanup_(zsw_store_owner_freep) struct zsw_owner *o = NULL;
        uint64_t t;
        int r;

        r = zsw_store_new(&cfg, &s);
        if (r >= 0)
                r = zsw_worker_new(s, &w);
        if (r >= 0)
                r = zsw_store_owner_new(s, NULL, &o);
        if (r < 0)
                return r;

        /* Cold: every pool page is touched for the first time, which
         * under a hypervisor can cost more than compressing the page. */
        r = store_range(w, o, batch, 0, arg_pages, &t);
        if (r < 0)
                return r;
        ret->cold_s = (double) t / 1e9;
        /* Steady state: the same pages stored again over themselves, so the
         * pool reuses memory it has touched (each batch also frees the
         * entries it replaces: more work than a plain store). */
        for (unsigned k = 0; k < _ZSW_LATENCY_MAX; k++)
                zsw_histogram_reset(zsw_store_histogram(s, k));
        r = store_paired(w, o, batch, raw, ret);
        if (r < 0)
                return r;
        zsw_store_get_stats(s, &ret->st);

        r = load_all(w, o, ret);
        if (r < 0)
                return r;
        zsw_store_get_latency(s, ZSW_LATENCY_STORE, &ret->store_lat);
        zsw_store_get_latency(s, ZSW_LATENCY_LOAD, &ret->load_lat);
        zsw_store_get_latency(s, ZSW_LATENCY_COMPRESS, &ret->compress_lat);
        return 0;
}

static int run_config(enum zsw_compressor c, unsigned batch, struct result *ret) {
        struct result best = { .store_s = 1e30 };
        double load_best = 1e30, cold_best = 1e30;
        struct raw *raw = calloc(1, sizeof(*raw));
        int r = 0;

        if (!raw)
                return -ENOMEM;
        raw->c = c;
        LZ4_initStream(&raw->lz4, sizeof(raw->lz4));
        raw->zstd = ZSTD_createCCtx();
        for (unsigned rep = 0; rep < arg_reps && r >= 0; rep++) {
                struct result cur = {};

                r = run_once(c, batch, raw, &cur);
                /* The best run, with the raw figure measured beside it. */
                if (r >= 0 && cur.store_s < best.store_s)
                        best = cur;
                load_best = MIN(load_best, cur.load_s);
                cold_best = MIN(cold_best, cur.cold_s);
        }
        ZSTD_freeCCtx(raw->zstd);
        free(raw);
        if (r < 0)
                return r;
        best.load_s = load_best;
        best.cold_s = cold_best;
        best.compressor = zsw_compressor_to_string(c);
        best.level = c == ZSW_COMPRESSOR_ZSTD ? arg_level : 0;
        best.batch = batch;
        *ret = best;
        return 0;
}

static double mb_s(double seconds) {
        return (double) arg_pages * ZSW_PAGE_SIZE / 1e6 / seconds;
}

/* Per page cost of the store beyond the compressor itself. */
static double extra_ns(const struct result *r) {
        return (r->store_s - r->raw_s) * 1e9 / (double) arg_pages;
}

/* a / b, or 0 when there is nothing to divide by (all pages same-filled):
 * JSON has no infinity. */
static double ratio(double a, double b) {
        return b > 0 ? a / b : 0;
}

static void print_json(const struct result *r) {
        const struct zsw_store_stats *st = &r->st;

        printf("{\"compressor\":\"%s\",\"level\":%d,\"batch\":%u,\"pages\":%zu,"
               "\"store_mb_s\":%.1f,\"store_ns_p50\":%" PRIu64 ",\"store_ns_p95\":%" PRIu64
               ",\"store_ns_p99\":%" PRIu64 ",\"load_mb_s\":%.1f,\"load_ns_p50\":%" PRIu64
               ",\"load_ns_p99\":%" PRIu64 ",\"ratio\":%.3f,\"pool_overhead\":%.4f,"
               "\"meta_bytes_per_page\":%.1f,\"raw_compress_mb_s\":%.1f,"
               "\"store_vs_raw\":%.3f,\"extra_ns_per_page\":%.1f,\"compress_ns_p50\":%" PRIu64
               ",\"store_cold_mb_s\":%.1f,\"same_filled_pages\":%" PRIu64
               ",\"incompressible_pages\":%" PRIu64 "}\n",
               r->compressor, r->level, r->batch, arg_pages, mb_s(r->store_s), r->store_lat.p50,
               r->store_lat.p95, r->store_lat.p99, mb_s(r->load_s), r->load_lat.p50,
               r->load_lat.p99,
               ratio((double) arg_pages * ZSW_PAGE_SIZE, (double) st->payload_bytes),
               ratio((double) st->pool_bytes, (double) st->payload_bytes),
               ratio((double) st->meta_bytes, (double) st->stored_pages), mb_s(r->raw_s),
               r->raw_s / r->store_s, extra_ns(r), r->compress_lat.p50, mb_s(r->cold_s),
               st->same_filled_pages, st->incompressible_pages);
}

static void print_table(const struct result *res, size_t n) {
        printf("%zu pages (%u%% zero), best of %u runs\n\n", arg_pages, arg_zero, arg_reps);
        printf("%-7s %5s %9s %9s %8s %8s %8s %9s %8s %8s %6s %8s %6s %9s\n", "comp", "batch",
               "store", "raw", "st/raw", "extra", "st p50", "st p99", "load", "ld p50", "ld p99",
               "ratio", "pool", "meta/pg");
        printf("%-7s %5s %9s %9s %8s %8s %8s %9s %8s %8s %6s %8s %6s %9s\n", "", "", "MB/s", "MB/s",
               "", "ns/pg", "ns", "ns", "MB/s", "ns", "ns", "", "ovh", "bytes");
        for (size_t i = 0; i < n; i++) {
                const struct result *r = &res[i];
                char name[16];

                snprintf(name, sizeof(name), r->level ? "%s-%d" : "%s", r->compressor, r->level);
                printf("%-7s %5u %9.1f %9.1f %8.3f %8.1f %8" PRIu64 " %9" PRIu64 " %8.1f %8" PRIu64
                       " %6" PRIu64 " %8.3f %6.4f %9.1f\n",
                       name, r->batch, mb_s(r->store_s), mb_s(r->raw_s), r->raw_s / r->store_s,
                       extra_ns(r), r->store_lat.p50, r->store_lat.p99, mb_s(r->load_s),
                       r->load_lat.p50, r->load_lat.p99,
                       ratio((double) arg_pages * ZSW_PAGE_SIZE, (double) r->st.payload_bytes),
                       ratio((double) r->st.pool_bytes, (double) r->st.payload_bytes),
                       ratio((double) r->st.meta_bytes, (double) r->st.stored_pages));
        }
}

static void help(void) {
        printf("zswapd-bench-store [OPTIONS]\n\n"
               "Store/load throughput and latency of the compressed store on real pages.\n\n"
               "  -h --help        Show this help\n"
               "     --json        One JSON object per line per configuration\n"
               "     --pages N     Pages to store (default 65536)\n"
               "     --zero PCT    Share of zero pages (default 10)\n"
               "     --reps N      Runs per configuration, best reported (default 3)\n"
               "     --level N     zstd level (default 1)\n"
               "     --compressor C  Only lz4 or zstd (default both)\n"
               "     --batch N     Only this batch size (default 1, 8 and 32)\n");
}

static int parse_argv(int argc, char **argv) {
        enum {
                ARG_JSON = 0x100,
                ARG_PAGES,
                ARG_ZERO,
                ARG_REPS,
                ARG_LEVEL,
                ARG_COMPRESSOR,
                ARG_BATCH
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, ARG_JSON },
                { "pages", required_argument, NULL, ARG_PAGES },
                { "zero", required_argument, NULL, ARG_ZERO },
                { "reps", required_argument, NULL, ARG_REPS },
                { "level", required_argument, NULL, ARG_LEVEL },
                { "compressor", required_argument, NULL, ARG_COMPRESSOR },
                { "batch", required_argument, NULL, ARG_BATCH },
                {},
        };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_PAGES:
                        arg_pages = strtoull(optarg, NULL, 0);
                        if (arg_pages < ZSW_STORE_BATCH_MAX) {
                                fprintf(stderr, "--pages must be at least %u\n",
                                        ZSW_STORE_BATCH_MAX);
                                return -EINVAL;
                        }
                        break;
                case ARG_ZERO:
                        arg_zero = (unsigned) atoi(optarg);
                        if (arg_zero > 100) {
                                fprintf(stderr, "--zero must be 0..100\n");
                                return -EINVAL;
                        }
                        break;
                case ARG_REPS:
                        arg_reps = (unsigned) MAX(atoi(optarg), 1);
                        break;
                case ARG_LEVEL:
                        arg_level = atoi(optarg);
                        break;
                case ARG_COMPRESSOR:
                        arg_compressor = zsw_compressor_from_string(optarg);
                        if (arg_compressor < 0) {
                                fprintf(stderr, "Unknown compressor: %s\n", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_BATCH:
                        arg_batch = (unsigned) atoi(optarg);
                        if (arg_batch < 1 || arg_batch > ZSW_STORE_BATCH_MAX) {
                                fprintf(stderr, "--batch must be 1..%u\n", ZSW_STORE_BATCH_MAX);
                                return -EINVAL;
                        }
                        break;
                default:
                        return -EINVAL;
                }
        return 1;
}

static int run(int argc, char **argv) {
        static const unsigned batches[] = { 1, 8, 32 };
        static const enum zsw_compressor comps[] = { ZSW_COMPRESSOR_LZ4, ZSW_COMPRESSOR_ZSTD };
        struct result res[ARRAY_SIZE(comps) * ARRAY_SIZE(batches)];
        uint64_t seed = 12345;
        size_t n = 0;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;

        pages = aligned_alloc(4096, arg_pages * ZSW_PAGE_SIZE);
        scratch = malloc(2 * ZSW_PAGE_SIZE);
        order = malloc(arg_pages * sizeof(*order));
        if (!pages || !scratch || !order)
                return -ENOMEM;
        r = corpus_fill(pages, arg_pages, arg_zero, 1);
        if (r < 0) {
                fprintf(stderr, "Failed to assemble the page corpus: %s\n", strerror(-r));
                return r;
        }
        for (size_t i = 0; i < arg_pages; i++)
                order[i] = i;
        for (size_t i = arg_pages - 1; i > 0; i--) {
                size_t j;
                uint64_t t;

                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                j = (size_t) ((seed >> 33) % (i + 1));
                t = order[i];
                order[i] = order[j];
                order[j] = t;
        }

        for (size_t c = 0; c < ARRAY_SIZE(comps); c++)
                for (size_t b = 0; b < ARRAY_SIZE(batches); b++) {
                        if ((arg_compressor >= 0 && (int) comps[c] != arg_compressor) ||
                            (arg_batch > 0 && b > 0))
                                continue;
                        r = run_config(comps[c], arg_batch ?: batches[b], &res[n]);
                        if (r < 0) {
                                fprintf(stderr, "Benchmark of %s batch %u failed: %s\n",
                                        zsw_compressor_to_string(comps[c]), arg_batch ?: batches[b],
                                        strerror(-r));
                                return r;
                        }
                        if (arg_json) {
                                print_json(&res[n]);
                                fflush(stdout);
                        }
                        n++;
                }
        if (!arg_json)
                print_table(res, n);
        free(pages);
        free(scratch);
        free(order);
        return 0;
}

int main(int argc, char **argv) {
        return run(argc, argv) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
