/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Log-linear latency histogram. A value v >= 8 with its top set bit at
 * position e falls into group e - 2 (group 0 holds the exact values 0..7),
 * and within the group into the sub-bucket given by the 3 bits below the
 * top bit; so buckets are exact below 8 and at most 12.5% wide above.
 * Counters are relaxed atomics: a sample is one fetch_add on one cache
 * line, and readers only need counts that were true at some point.
 */
#include <string.h>

#include "histogram.h"

unsigned zsw_histogram_bucket(uint64_t ns) {
        unsigned e;

        if (ns < ZSW_HIST_SUB)
                return (unsigned) ns;
        e = 63u - (unsigned) __builtin_clzll(ns);
        return (e - ZSW_HIST_SUB_BITS + 1u) * ZSW_HIST_SUB +
               (unsigned) ((ns >> (e - ZSW_HIST_SUB_BITS)) & (ZSW_HIST_SUB - 1u));
}

uint64_t zsw_histogram_bucket_low(unsigned bucket) {
        unsigned group = bucket / ZSW_HIST_SUB, sub = bucket % ZSW_HIST_SUB;
        unsigned e;

        if (group == 0)
                return sub;
        e = group + ZSW_HIST_SUB_BITS - 1u;
        return (UINT64_C(1) << e) | ((uint64_t) sub << (e - ZSW_HIST_SUB_BITS));
}

static uint64_t bucket_mid(unsigned bucket) {
        uint64_t lo = zsw_histogram_bucket_low(bucket);

        if (bucket + 1 >= ZSW_HIST_BUCKETS)
                return lo;
        /* Half the width, computed without overflowing at the top. */
        return lo + (zsw_histogram_bucket_low(bucket + 1) - 1 - lo) / 2;
}

void zsw_histogram_record_n(struct zsw_histogram *h, uint64_t ns, uint64_t count) {
        atomic_fetch_add_explicit(&h->buckets[zsw_histogram_bucket(ns)], count,
                                  memory_order_relaxed);
}

void zsw_histogram_merge(struct zsw_histogram *dst, const struct zsw_histogram *src) {
        for (unsigned i = 0; i < ZSW_HIST_BUCKETS; i++) {
                uint64_t v = atomic_load_explicit(&src->buckets[i], memory_order_relaxed);

                if (v)
                        atomic_fetch_add_explicit(&dst->buckets[i], v, memory_order_relaxed);
        }
}

void zsw_histogram_reset(struct zsw_histogram *h) {
        for (unsigned i = 0; i < ZSW_HIST_BUCKETS; i++)
                atomic_store_explicit(&h->buckets[i], 0, memory_order_relaxed);
}

uint64_t zsw_histogram_count(const struct zsw_histogram *h) {
        uint64_t n = 0;

        for (unsigned i = 0; i < ZSW_HIST_BUCKETS; i++)
                n += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        return n;
}

uint64_t zsw_histogram_percentile(const struct zsw_histogram *h, double p) {
        uint64_t counts[ZSW_HIST_BUCKETS], total = 0, rank, seen = 0;

        /* One snapshot, so that the rank and the walk agree. */
        for (unsigned i = 0; i < ZSW_HIST_BUCKETS; i++) {
                counts[i] = atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
                total += counts[i];
        }
        if (total == 0)
                return 0;
        if (p <= 0)
                p = 0;
        if (p > 1)
                p = 1;
        /* The smallest sample with at least p * total samples at or below it. */
        rank = (uint64_t) (p * (double) total + 0.5);
        if (rank < 1)
                rank = 1;
        if (rank > total)
                rank = total;
        for (unsigned i = 0; i < ZSW_HIST_BUCKETS; i++) {
                seen += counts[i];
                if (seen >= rank)
                        return bucket_mid(i);
        }
        return bucket_mid(ZSW_HIST_BUCKETS - 1);
}
