/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-shrinker: the writeback tier at the level of the shrinker.
 * Stores N MiB of corpus pages (lz4) in one owner, then writes every cold
 * entry back with shrink steps of 32 entries (isolate from the LRU, one
 * write batch, switch to disk), and faults pages back in random order with
 * exclusive loads after dropping the swapfile's cache: the path of a target
 * fault on a written-back page (read, decompress, free the sectors).
 *
 * Figures: writeback MB/s of page data, pages per write request, disk and
 * payload bytes per page, fault-in latency p50/p99 from disk. With
 * --no-merge, every entry is its own write request, for comparison.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus.h"
#include "store.h"
#include "writeback.h"

#define PAGE ZSW_PAGE_SIZE

static unsigned arg_mib = 128;
static unsigned arg_faults = 4000;
static const char *arg_dir = "/var/tmp";
static bool arg_json, arg_no_merge;

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static bool same_filled(const uint8_t *page) {
        const uint64_t *w = (const uint64_t *) page;

        for (size_t i = 1; i < PAGE / 8; i++)
                if (w[i] != w[0])
                        return false;
        return true;
}

static int store_all(struct zsw_worker *w, struct zsw_owner *o, const uint8_t *pages, size_t n) {
        for (size_t b = 0; b < n; b += ZSW_STORE_BATCH_MAX) {
                const void *p[ZSW_STORE_BATCH_MAX];
                uint64_t pgnos[ZSW_STORE_BATCH_MAX];
                size_t m = MIN(n - b, (size_t) ZSW_STORE_BATCH_MAX);
                int r;

                for (size_t i = 0; i < m; i++) {
                        pgnos[i] = b + i;
                        p[i] = pages + (b + i) * PAGE;
                }
                r = zsw_store_pages(w, o, pgnos, p, m, NULL);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Exclusive loads of disk pages in random order; latencies in ns. */
static int fault_in(struct zsw_worker *w, struct zsw_owner *o, const uint8_t *pages, size_t n,
                    uint64_t *ns, size_t *ret_count) {
        static uint8_t buf[PAGE];
        unsigned seed = 7;
        size_t k = 0;

        for (size_t tries = 0; k < arg_faults && tries < 4 * (size_t) arg_faults; tries++) {
                uint64_t pgno = (uint64_t) rand_r(&seed) % n, t0;
                int r;

                if (same_filled(pages + pgno * PAGE) || !zsw_store_contains(o, pgno))
                        continue;
                t0 = zsw_now_ns();
                r = zsw_store_load(w, o, pgno, buf, ZSW_LOAD_EXCLUSIVE);
                ns[k] = zsw_now_ns() - t0;
                if (r < 0)
                        return r;
                if (memcmp(buf, pages + pgno * PAGE, PAGE) != 0)
                        return -EBADMSG;
                k++;
        }
        *ret_count = k;
        return 0;
}

static int run(void) {
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        _cleanup_(zsw_store_freep) struct zsw_store *s = NULL;
        _cleanup_(zsw_worker_freep) struct zsw_worker *w = NULL;
        _cleanup_(zsw_writeback_freep) struct zsw_writeback *wb = NULL;
        _cleanup_free_ uint8_t *pages = NULL;
        _cleanup_free_ uint64_t *ns = NULL;
        struct zsw_store_config sc = {
                .read_disk = zsw_writeback_read_disk,
                .free_disk = zsw_writeback_free_disk,
        };
        struct zsw_writeback_stats ws;
        struct zsw_store_stats st;
        struct zsw_owner *o;
        size_t n = (size_t) arg_mib * 256, faults = 0;
        uint64_t t0, wb_ns;
        double mb_s;
        int r;

        pages = malloc(n * PAGE);
        ns = calloc(arg_faults, sizeof(*ns));
        if (!pages || !ns)
                return -ENOMEM;
        if (corpus_fill(pages, n, 10, 42) < 0)
                return -ENOENT;
        r = zsw_swapfile_open(arg_dir, (uint64_t) arg_mib << 21, NULL, &sf);
        if (r < 0)
                return r;
        zsw_swapfile_set_merge(sf, !arg_no_merge);
        sc.disk_userdata = sf;
        if ((r = zsw_store_new(&sc, &s)) < 0 || (r = zsw_worker_new(s, &w)) < 0 ||
            (r = zsw_writeback_new(s, sf, &(struct zsw_writeback_config) {}, &wb)) < 0 ||
            (r = zsw_store_owner_new(s, NULL, &o)) < 0)
                return r;
        r = store_all(w, o, pages, n);
        if (r < 0)
                return r;

        t0 = zsw_now_ns();
        while ((r = zsw_writeback_shrink_owner(wb, o, ZSW_WRITEBACK_STEP)) > 0)
                ;
        wb_ns = zsw_now_ns() - t0;
        if (r < 0)
                return r;
        zsw_writeback_get_stats(wb, &ws);
        zsw_store_get_stats(s, &st);
        mb_s = ws.written_back * (double) PAGE / (1 << 20) / (wb_ns / 1e9);

        r = zsw_swapfile_drop_cache(sf);
        if (r < 0)
                return r;
        r = fault_in(w, o, pages, n, ns, &faults);
        if (r < 0)
                return r;
        qsort(ns, faults, sizeof(*ns), cmp_u64);

#define PCT(p) (faults ? ns[(size_t) ((faults - 1) * (p))] / 1e3 : 0.0)
        if (arg_json)
                printf("{\"mode\":\"%s\",\"pages\":%zu,\"written_back\":%" PRIu64
                       ",\"steps\":%" PRIu64 ",\"write_requests\":%" PRIu64
                       ",\"pages_per_write\":%.2f,\"writeback_mb_s\":%.1f"
                       ",\"disk_bytes_per_page\":%.1f,\"payload_bytes_per_page\":%.1f"
                       ",\"faults\":%zu,\"fault_p50_us\":%.1f,\"fault_p99_us\":%.1f}\n",
                       arg_no_merge ? "unmerged" : "merged", n, ws.written_back, ws.steps,
                       ws.write_requests, ws.written_back / (double) MAX(ws.write_requests, 1u),
                       mb_s, ws.bytes_written / (double) MAX(ws.written_back, 1u),
                       ws.payload_bytes_written / (double) MAX(ws.written_back, 1u), faults,
                       PCT(0.50), PCT(0.99));
        else
                printf("%s: %zu pages, %" PRIu64 " written back in %" PRIu64 " steps, %" PRIu64
                       " write requests (%.2f pages per request), %.1f MB/s of pages\n"
                       "  disk %.1f bytes per page for %.1f payload bytes\n"
                       "  fault-in from disk (exclusive load, cache dropped): %zu, p50 %.1f us, "
                       "p99 %.1f us\n",
                       arg_no_merge ? "unmerged" : "merged", n, ws.written_back, ws.steps,
                       ws.write_requests, ws.written_back / (double) MAX(ws.write_requests, 1u),
                       mb_s, ws.bytes_written / (double) MAX(ws.written_back, 1u),
                       ws.payload_bytes_written / (double) MAX(ws.written_back, 1u), faults,
                       PCT(0.50), PCT(0.99));
        zsw_store_owner_free(o);
        return 0;
}

static int parse_argv(int argc, char **argv) {
        static const struct option options[] = { { "mib", required_argument, NULL, 'm' },
                                                 { "faults", required_argument, NULL, 'f' },
                                                 { "dir", required_argument, NULL, 'd' },
                                                 { "no-merge", no_argument, NULL, 'n' },
                                                 { "json", no_argument, NULL, 'j' },
                                                 { "help", no_argument, NULL, 'h' },
                                                 {} };
        int c;

        while ((c = getopt_long(argc, argv, "m:f:d:njh", options, NULL)) >= 0)
                switch (c) {
                case 'm':
                        arg_mib = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'f':
                        arg_faults = (unsigned) strtoul(optarg, NULL, 10);
                        break;
                case 'd':
                        arg_dir = optarg;
                        break;
                case 'n':
                        arg_no_merge = true;
                        break;
                case 'j':
                        arg_json = true;
                        break;
                case 'h':
                        printf("%s [--mib=N] [--faults=N] [--dir=DIR] [--no-merge] [--json]\n\n"
                               "Shrinker-level writeback of N MiB (default 128) of corpus pages "
                               "to\n"
                               "a swapfile in DIR (default /var/tmp), then random faults from "
                               "disk.\n",
                               program_invocation_short_name);
                        return 0;
                default:
                        return -EINVAL;
                }
        if (arg_mib == 0 || arg_faults == 0)
                return -EINVAL;
        return 1;
}

int main(int argc, char **argv) {
        int r = parse_argv(argc, argv);

        if (r > 0)
                r = run();
        if (r < 0)
                fprintf(stderr, "zswapd-bench-shrinker: %s\n", strerror(-r));
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
