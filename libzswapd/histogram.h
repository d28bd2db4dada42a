/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Latency histograms: log-linear buckets of nanoseconds (each power of two
 * split into 8 equal sub-buckets, so a bucket is at most 12.5% wide), with
 * relaxed atomic increments so that any thread records without a lock, a
 * merge to sum histograms, and percentile queries. Used for store, compress
 * and load latency, and by the daemon for fault latency.
 *
 * The struct is public so that it can be embedded; zero-initialized memory
 * is an empty histogram.
 */
#pragma once

#include <stdatomic.h>
#include <stdint.h>

#define ZSW_HIST_SUB_BITS 3u
#define ZSW_HIST_SUB (1u << ZSW_HIST_SUB_BITS)
/* Values below ZSW_HIST_SUB have one bucket each; every power of two from
 * 2^ZSW_HIST_SUB_BITS to 2^63 has ZSW_HIST_SUB buckets. */
#define ZSW_HIST_BUCKETS ((64u - ZSW_HIST_SUB_BITS + 1u) * ZSW_HIST_SUB)

struct zsw_histogram {
        _Atomic uint64_t buckets[ZSW_HIST_BUCKETS];
};

/* Records count samples of ns nanoseconds each. Thread-safe, lock-free. */
void zsw_histogram_record_n(struct zsw_histogram *h, uint64_t ns, uint64_t count);

static inline void zsw_histogram_record(struct zsw_histogram *h, uint64_t ns) {
        zsw_histogram_record_n(h, ns, 1);
}

/* Adds every sample of src to dst. */
void zsw_histogram_merge(struct zsw_histogram *dst, const struct zsw_histogram *src);

void zsw_histogram_reset(struct zsw_histogram *h);

uint64_t zsw_histogram_count(const struct zsw_histogram *h);

/* The value below which a fraction p (0 < p <= 1; 0.5, 0.95, 0.99) of the
 * samples lie, as the midpoint of its bucket; 0 for an empty histogram.
 * Read while others record, it describes some recent state. */
uint64_t zsw_histogram_percentile(const struct zsw_histogram *h, double p);

/* The bucket of a value, and the lowest value of a bucket (exposed for
 * tests and for exporters that print bucket bounds). */
unsigned zsw_histogram_bucket(uint64_t ns);
uint64_t zsw_histogram_bucket_low(unsigned bucket);
