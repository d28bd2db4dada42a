/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-writeback: the I/O level of the writeback tier. Writes N MiB
 * of corpus pages, lz4-compressed, to a swapfile in batches of 32 (one write
 * request per batch when the allocator finds a run), then reads random
 * entries back one at a time from the disk. For comparison the same data is
 * written with one request per page: 32 in flight at a time (kernel zswap's
 * writeback submits a bio per page and does not wait), and one at a time.
 *
 * Figures: writeback MB/s of uncompressed page data, pages per write
 * request, disk and payload bytes per page, single-entry read latency p50/p99
 * by pread and through the io_uring (read_batch of one).
 */
#include <getopt.h>
#include <lz4.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "corpus.h"
#include "swapfile.h"

#define PAGE ZSW_PAGE_SIZE

static unsigned arg_mib = 128;
static unsigned arg_reads = 2000;
static const char *arg_dir = "/var/tmp";
static bool arg_json;

struct corpus {
        size_t n;
        uint8_t *pages;
        uint8_t **data;
        uint32_t *lens;
        uint64_t *slots;
};

struct result {
        const char *mode;
        double writeback_mb_s;
        struct zsw_swapfile_stats st;
        double pread_p50_us, pread_p99_us;
        double uring_p50_us, uring_p99_us;
        double batch_p50_us, batch_p99_us; /* read_batch of a whole write batch */
};

static int corpus_make(struct corpus *c, size_t n) {
        *c = (struct corpus) { .n = n };
        c->pages = malloc(n * PAGE);
        c->data = calloc(n, sizeof(*c->data));
        c->lens = calloc(n, sizeof(*c->lens));
        c->slots = calloc(n, sizeof(*c->slots));
        if (!c->pages || !c->data || !c->lens || !c->slots)
                return -ENOMEM;
        if (corpus_fill(c->pages, n, 10, 42) < 0)
                return -ENOENT;
        for (size_t i = 0; i < n; i++) {
                char tmp[LZ4_COMPRESSBOUND(PAGE)];
                int len =
                        LZ4_compress_default((char *) c->pages + i * PAGE, tmp, PAGE, sizeof(tmp));

                if (len <= 0 || (unsigned) len >= PAGE) {
                        len = PAGE;
                        memcpy(tmp, c->pages + i * PAGE, PAGE);
                }
                c->lens[i] = (uint32_t) len;
                c->data[i] = malloc((size_t) len);
                if (!c->data[i])
                        return -ENOMEM;
                memcpy(c->data[i], tmp, (size_t) len);
        }
        return 0;
}

static void corpus_done(struct corpus *c) {
        for (size_t i = 0; i < c->n && c->data; i++)
                free(c->data[i]);
        free(c->data);
        free(c->lens);
        free(c->slots);
        free(c->pages);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

static double percentile_us(uint64_t *ns, size_t n, double pct) {
        qsort(ns, n, sizeof(*ns), cmp_u64);
        return (double) ns[(size_t) ((double) (n - 1) * pct / 100.0)] / 1000.0;
}

/* Random single-entry reads, each checked against the original payload. */
static int measure_reads(struct zsw_swapfile *sf, const struct corpus *c, bool uring,
                         double *ret_p50, double *ret_p99) {
        _cleanup_free_ uint64_t *ns = calloc(arg_reads, sizeof(uint64_t));
        uint64_t rng = uring ? 7 : 3;
        uint8_t buf[PAGE];
        int r;

        if (!ns)
                return -ENOMEM;
        r = zsw_swapfile_drop_cache(sf);
        if (r < 0)
                return r;
        for (unsigned k = 0; k < arg_reads; k++) {
                size_t i;
                uint64_t t0;
                void *bufs[1] = { buf };

                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                i = (rng >> 33) % c->n;
                t0 = zsw_now_ns();
                r = uring ? zsw_swapfile_read_batch(sf, &c->slots[i], &c->lens[i], 1, bufs)
                          : zsw_swapfile_read(sf, c->slots[i], c->lens[i], buf);
                ns[k] = zsw_now_ns() - t0;
                if (r < 0)
                        return r;
                if (memcmp(buf, c->data[i], c->lens[i]) != 0)
                        return -EBADMSG;
        }
        *ret_p50 = percentile_us(ns, arg_reads, 50);
        *ret_p99 = percentile_us(ns, arg_reads, 99);
        return 0;
}

/* Whole write batches read back at once (fault-time prefetch of the
 * neighbours): one request each when the batch was written as one run. */
static int measure_batch_reads(struct zsw_swapfile *sf, const struct corpus *c, double *ret_p50,
                               double *ret_p99) {
        unsigned count = MAX(arg_reads / 10, 10u);
        _cleanup_free_ uint64_t *ns = calloc(count, sizeof(uint64_t));
        _cleanup_free_ uint8_t *mem = malloc(ZSW_SWAPFILE_BATCH_MAX * PAGE);
        void *bufs[ZSW_SWAPFILE_BATCH_MAX];
        uint64_t rng = 11;
        int r;

        if (!ns || !mem)
                return -ENOMEM;
        for (size_t i = 0; i < ZSW_SWAPFILE_BATCH_MAX; i++)
                bufs[i] = mem + i * PAGE;
        r = zsw_swapfile_drop_cache(sf);
        if (r < 0)
                return r;
        for (unsigned k = 0; k < count; k++) {
                size_t first, n;
                uint64_t t0;

                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                first = (rng >> 33) % (c->n / ZSW_SWAPFILE_BATCH_MAX) * ZSW_SWAPFILE_BATCH_MAX;
                n = MIN((size_t) ZSW_SWAPFILE_BATCH_MAX, c->n - first);
                t0 = zsw_now_ns();
                r = zsw_swapfile_read_batch(sf, c->slots + first, c->lens + first, n, bufs);
                ns[k] = zsw_now_ns() - t0;
                if (r < 0)
                        return r;
                for (size_t i = 0; i < n; i++)
                        if (memcmp(bufs[i], c->data[first + i], c->lens[first + i]) != 0)
                                return -EBADMSG;
        }
        *ret_p50 = percentile_us(ns, count, 50);
        *ret_p99 = percentile_us(ns, count, 99);
        return 0;
}

static int run_mode(const struct corpus *c, size_t batch, bool merge, struct result *res) {
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        uint64_t t0, elapsed;
        int r;

        r = zsw_swapfile_open(arg_dir, (uint64_t) arg_mib << 21, NULL, &sf);
        if (r < 0)
                return r;
        zsw_swapfile_set_merge(sf, merge);
        t0 = zsw_now_ns();
        for (size_t b = 0; b < c->n; b += batch) {
                size_t n = MIN(batch, c->n - b);

                r = zsw_swapfile_write_batch(sf, (const void *const *) c->data + b, c->lens + b, n,
                                             c->slots + b, NULL);
                if (r < 0)
                        return r;
                if ((size_t) r != n)
                        return -EIO;
        }
        elapsed = zsw_now_ns() - t0;
        res->writeback_mb_s = (double) c->n * PAGE / 1e6 / ((double) elapsed / 1e9);
        zsw_swapfile_get_stats(sf, &res->st);
        r = measure_reads(sf, c, false, &res->pread_p50_us, &res->pread_p99_us);
        if (r < 0)
                return r;
        r = measure_reads(sf, c, true, &res->uring_p50_us, &res->uring_p99_us);
        if (r < 0)
                return r;
        return measure_batch_reads(sf, c, &res->batch_p50_us, &res->batch_p99_us);
}

static void print_result(const struct result *r) {
        const struct zsw_swapfile_stats *st = &r->st;
        double ppw = (double) st->pages_written / (double) st->write_requests;
        double disk = (double) st->bytes_written / (double) st->pages_written;
        double payload = (double) st->payload_bytes / (double) st->pages_written;

        if (arg_json) {
                printf("{\"bench\":\"writeback\",\"mode\":\"%s\",\"mib\":%u,"
                       "\"writeback_mb_s\":%.1f,\"pages_per_write\":%.2f,"
                       "\"disk_bytes_per_page\":%.1f,\"payload_bytes_per_page\":%.1f,"
                       "\"read_p50_us\":%.1f,\"read_p99_us\":%.1f,"
                       "\"read_uring_p50_us\":%.1f,\"read_uring_p99_us\":%.1f,"
                       "\"read_batch32_p50_us\":%.1f,\"read_batch32_p99_us\":%.1f}\n",
                       r->mode, arg_mib, r->writeback_mb_s, ppw, disk, payload, r->pread_p50_us,
                       r->pread_p99_us, r->uring_p50_us, r->uring_p99_us, r->batch_p50_us,
                       r->batch_p99_us);
                return;
        }
        printf("%-14s writeback %7.1f MB/s  %5.2f pages/write  disk %6.1f B/page (payload %6.1f)\n"
               "%-14s read one: pread p50 %6.1f p99 %7.1f us, io_uring p50 %6.1f p99 %7.1f us;"
               " 32 neighbours p50 %6.1f p99 %7.1f us\n",
               r->mode, r->writeback_mb_s, ppw, disk, payload, "", r->pread_p50_us, r->pread_p99_us,
               r->uring_p50_us, r->uring_p99_us, r->batch_p50_us, r->batch_p99_us);
}

static void help(void) {
        printf("%s [OPTIONS]\n\n"
               "Measures swapfile writeback: merged batches of 32 against one write per page.\n\n"
               "  -h --help        Show this help\n"
               "     --mib=N       MiB of page data to write (default %u)\n"
               "     --reads=N     Random single-entry reads to time (default %u)\n"
               "     --dir=PATH    Directory for the swapfile (default %s)\n"
               "     --json        One JSON object per line\n",
               program_invocation_short_name, arg_mib, arg_reads, arg_dir);
}

static int parse_argv(int argc, char **argv) {
        enum { ARG_MIB = 0x100, ARG_READS, ARG_DIR, ARG_JSON };
        static const struct option options[] = { { "help", no_argument, NULL, 'h' },
                                                 { "mib", required_argument, NULL, ARG_MIB },
                                                 { "reads", required_argument, NULL, ARG_READS },
                                                 { "dir", required_argument, NULL, ARG_DIR },
                                                 { "json", no_argument, NULL, ARG_JSON },
                                                 {} };
        int c;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_MIB:
                        arg_mib = (unsigned) strtoul(optarg, NULL, 10);
                        if (arg_mib == 0)
                                return fprintf(stderr, "Invalid --mib: %s\n", optarg), -EINVAL;
                        break;
                case ARG_READS:
                        arg_reads = (unsigned) strtoul(optarg, NULL, 10);
                        if (arg_reads == 0)
                                return fprintf(stderr, "Invalid --reads: %s\n", optarg), -EINVAL;
                        break;
                case ARG_DIR:
                        arg_dir = optarg;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                default:
                        return -EINVAL;
                }
        return 1;
}

static int run(int argc, char **argv) {
        _cleanup_(corpus_done) struct corpus c = {};
        struct result res[] = {
                { .mode = "merged-32" },    /* zswapd: a batch of 32, one request per run */
                { .mode = "unmerged-32" },  /* 32 requests in flight, one per page */
                { .mode = "one-per-page" }, /* one page, one request, wait, next */
        };
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        r = corpus_make(&c, (size_t) arg_mib * (1u << 20) / PAGE);
        if (r < 0)
                return fprintf(stderr, "Failed to build the page corpus: %s\n", strerror(-r)), r;
        for (size_t i = 0; i < ARRAY_SIZE(res); i++) {
                r = run_mode(&c, i < 2 ? ZSW_SWAPFILE_BATCH_MAX : 1, i == 0, &res[i]);
                if (r < 0)
                        return fprintf(stderr, "Run %s failed: %s\n", res[i].mode, strerror(-r)), r;
                print_result(&res[i]);
        }
        return 0;
}

int main(int argc, char **argv) {
        return run(argc, argv) < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
