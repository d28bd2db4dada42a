/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The eviction path's fork-join pool: every item runs once, and only
 * threads that can run beside the caller take part.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "parallel.h"
#include "test.h"

#define ITEMS 256u

struct job {
        struct zsw_worker *caller;
        _Atomic unsigned runs[ITEMS];
        _Atomic unsigned by_helpers;
        /* The caller's first item waits until a helper has run one. */
        bool wait_for_helper;
        _Atomic bool waited;
};

/* Long enough for any runnable thread to get a CPU, loaded machine or not. */
#define HELPER_WAIT_NS (20ull * 1000 * 1000 * 1000)

/* An item lasts ~20 us, a batch's compression: long enough for a woken
 * helper to take some of them. */
static void count(void *arg, struct zsw_worker *w, size_t item) {
        struct job *j = arg;
        uint64_t until = zsw_now_ns() + 20000;

        while (zsw_now_ns() < until)
                ;
        if (j->wait_for_helper && w == j->caller && !atomic_exchange(&j->waited, true)) {
                until = zsw_now_ns() + HELPER_WAIT_NS;
                while (atomic_load(&j->by_helpers) == 0 && zsw_now_ns() < until)
                        ;
        }
        atomic_fetch_add(&j->runs[item], 1);
        if (w != j->caller)
                atomic_fetch_add(&j->by_helpers, 1);
}

static void run_job(struct zsw_parallel *p, struct zsw_worker *caller, struct job *j,
                    bool wait_for_helper) {
        *j = (struct job) { .caller = caller, .wait_for_helper = wait_for_helper };
        zsw_parallel_start(p, count, j, ITEMS);
        zsw_parallel_join(p, caller);
        for (unsigned i = 0; i < ITEMS; i++)
                ASSERT_EQ(atomic_load(&j->runs[i]), 1);
}

/* Confined to one CPU, the caller does every item itself: a helper could
 * only take turns with it. Let go again on a machine of several CPUs, the
 * helpers take part. */
TEST(helpers_take_part_only_beside_the_caller) {
        struct zsw_store *store = NULL;
        struct zsw_worker *caller = NULL;
        struct zsw_parallel *p = NULL;
        cpu_set_t all, one;
        struct job j;

        ASSERT_OK(sched_getaffinity(0, sizeof(all), &all));
        ASSERT_OK(zsw_store_new(NULL, &store));
        ASSERT_OK(zsw_worker_new(store, &caller));
        ASSERT_OK(zsw_parallel_new(store, 3, &p));

        CPU_ZERO(&one);
        for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &all)) {
                        CPU_SET(c, &one);
                        break;
                }
        ASSERT_OK(sched_setaffinity(0, sizeof(one), &one));
        for (int k = 0; k < 20; k++) {
                run_job(p, caller, &j, false);
                ASSERT_EQ(atomic_load(&j.by_helpers), 0);
        }
        ASSERT_OK(sched_setaffinity(0, sizeof(all), &all));
        for (int k = 0; k < 20; k++) {
                run_job(p, caller, &j, CPU_COUNT(&all) > 1);
                if (CPU_COUNT(&all) > 1)
                        ASSERT_GT(atomic_load(&j.by_helpers), 0);
        }

        zsw_parallel_free(p);
        zsw_worker_free(caller);
        zsw_store_free(store);
}

/* A pool without threads runs everything on the caller. */
TEST(a_pool_without_threads_runs_on_the_caller) {
        struct zsw_store *store = NULL;
        struct zsw_worker *caller = NULL;
        struct zsw_parallel *p = NULL;
        struct job j;

        ASSERT_OK(zsw_store_new(NULL, &store));
        ASSERT_OK(zsw_worker_new(store, &caller));
        ASSERT_OK(zsw_parallel_new(store, 0, &p));
        run_job(p, caller, &j, false);
        ASSERT_EQ(atomic_load(&j.by_helpers), 0);
        zsw_parallel_free(p);
        zsw_worker_free(caller);
        zsw_store_free(store);
}
