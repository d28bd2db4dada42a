/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Latency histogram: bucket geometry, percentiles against exact answers,
 * merge, and lock-free recording from several threads. */
#include <pthread.h>

#include "histogram.h"
#include "test.h"
#include "util.h"

TEST(buckets_cover_values_in_order) {
        uint64_t samples[] = { 0,         1,   7,    8,    9,    15,        16,
                               17,        100, 1000, 4095, 4096, 123456789, UINT64_C(1) << 40,
                               UINT64_MAX };

        for (size_t i = 0; i < ARRAY_SIZE(samples); i++) {
                uint64_t v = samples[i];
                unsigned b = zsw_histogram_bucket(v);

                ASSERT_LT(b, ZSW_HIST_BUCKETS);
                ASSERT_TRUE(zsw_histogram_bucket_low(b) <= v);
                if (b + 1 < ZSW_HIST_BUCKETS)
                        ASSERT_TRUE(v < zsw_histogram_bucket_low(b + 1));
        }
        ASSERT_EQ(zsw_histogram_bucket(UINT64_MAX), ZSW_HIST_BUCKETS - 1);
        for (unsigned b = 1; b < ZSW_HIST_BUCKETS; b++) {
                uint64_t lo = zsw_histogram_bucket_low(b), prev = zsw_histogram_bucket_low(b - 1);

                ASSERT_TRUE(lo > prev);
                ASSERT_EQ(zsw_histogram_bucket(lo), b);
                ASSERT_EQ(zsw_histogram_bucket(lo - 1), b - 1);
                /* Log-linear: no bucket wider than 1/8 of its low bound (beyond the exact ones). */
                if (prev >= 8)
                        ASSERT_TRUE(lo - prev <= prev / 8);
        }
}

static void assert_near(uint64_t got, uint64_t want) {
        /* Within one bucket: 12.5%. */
        if (got * 8 < want * 7 || got * 8 > want * 9)
                TEST_FAIL("percentile %" PRIu64 " not near %" PRIu64, got, want);
}

TEST(percentiles_of_known_distribution) {
        static struct zsw_histogram h;

        ASSERT_EQ_U(zsw_histogram_percentile(&h, 0.5), 0);
        for (uint64_t v = 1; v <= 10000; v++)
                zsw_histogram_record(&h, v * 100);
        ASSERT_EQ_U(zsw_histogram_count(&h), 10000);
        assert_near(zsw_histogram_percentile(&h, 0.50), 500000);
        assert_near(zsw_histogram_percentile(&h, 0.95), 950000);
        assert_near(zsw_histogram_percentile(&h, 0.99), 990000);
        assert_near(zsw_histogram_percentile(&h, 1.0), 1000000);

        /* A tail: 1% of slow samples moves p99 but not p50. */
        zsw_histogram_reset(&h);
        zsw_histogram_record_n(&h, 1000, 990);
        zsw_histogram_record_n(&h, 1000000, 10);
        assert_near(zsw_histogram_percentile(&h, 0.50), 1000);
        assert_near(zsw_histogram_percentile(&h, 0.99), 1000);
        assert_near(zsw_histogram_percentile(&h, 0.995), 1000000);
        ASSERT_EQ_U(zsw_histogram_percentile(&h, 0.0), zsw_histogram_percentile(&h, 0.001));
}

TEST(merge_adds) {
        static struct zsw_histogram a, b;

        zsw_histogram_record_n(&a, 50, 3);
        zsw_histogram_record_n(&b, 5000, 1);
        zsw_histogram_merge(&a, &b);
        ASSERT_EQ_U(zsw_histogram_count(&a), 4);
        ASSERT_EQ_U(zsw_histogram_count(&b), 1);
        assert_near(zsw_histogram_percentile(&a, 0.5), 50);
        assert_near(zsw_histogram_percentile(&a, 1.0), 5000);
}

#define THREADS 4
#define PER_THREAD 200000

static struct zsw_histogram shared;

static void *recorder(void *arg) {
        uint64_t base = (uintptr_t) arg;

        for (uint64_t i = 0; i < PER_THREAD; i++)
                zsw_histogram_record(&shared, base + (i % 64));
        return NULL;
}

TEST(threads_record_without_loss) {
        pthread_t t[THREADS];

        for (uintptr_t i = 0; i < THREADS; i++)
                ASSERT_EQ(pthread_create(&t[i], NULL, recorder, (void *) (1000 * (i + 1))), 0);
        for (int i = 0; i < THREADS; i++)
                ASSERT_EQ(pthread_join(t[i], NULL), 0);
        ASSERT_EQ_U(zsw_histogram_count(&shared), (uint64_t) THREADS * PER_THREAD);
}
