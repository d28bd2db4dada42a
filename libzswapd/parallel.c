/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "lockdep.h"
#include "parallel.h"
#include "util.h"

struct zsw_parallel {
        pthread_mutex_t lock;
        pthread_cond_t start, done;
        unsigned n_threads, n_workers, started;
        pthread_t *threads;
        struct zsw_worker **workers;

        /* The job; changed only while no thread works on it. */
        uint64_t generation;
        zsw_parallel_fn fn;
        void *arg;
        size_t n_items;
        _Atomic size_t next;
        unsigned active; /* threads [0, active) take part */
        unsigned busy;
        bool stop;
};

/* Takes items until none is left. */
static void drain(struct zsw_parallel *p, struct zsw_worker *w) {
        size_t i;

        while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < p->n_items)
                p->fn(p->arg, w, i);
}

static void *thread_main(void *userdata) {
        struct zsw_parallel *p = userdata;
        struct zsw_worker *w;
        uint64_t seen = 0;
        unsigned me;

        zsw_mutex_lock(&p->lock, ZSW_LOCK_PARALLEL);
        me = p->started++;
        w = p->workers[me];
        for (;;) {
                while (!p->stop && p->generation == seen)
                        pthread_cond_wait(&p->start, &p->lock);
                if (p->stop)
                        break;
                seen = p->generation;
                if (me >= p->active)
                        continue;
                zsw_mutex_unlock(&p->lock);
                drain(p, w);
                zsw_mutex_lock(&p->lock, ZSW_LOCK_PARALLEL);
                if (--p->busy == 0)
                        pthread_cond_signal(&p->done);
        }
        zsw_mutex_unlock(&p->lock);
        return NULL;
}

int zsw_parallel_new(struct zsw_store *store, unsigned n_threads, struct zsw_parallel **ret) {
        struct zsw_parallel *p = calloc(1, sizeof(*p));
        int r = 0;

        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->start, NULL);
        pthread_cond_init(&p->done, NULL);
        p->threads = calloc(n_threads ?: 1, sizeof(pthread_t));
        p->workers = calloc(n_threads ?: 1, sizeof(struct zsw_worker *));
        if (!p->threads || !p->workers)
                r = -ENOMEM;
        for (unsigned i = 0; r >= 0 && i < n_threads; i++) {
                r = zsw_worker_new(store, &p->workers[i]);
                if (r >= 0)
                        p->n_workers++;
        }
        for (unsigned i = 0; r >= 0 && i < n_threads; i++) {
                r = -pthread_create(&p->threads[i], NULL, thread_main, p);
                if (r >= 0) {
                        pthread_setname_np(p->threads[i], "zswapd-evict");
                        p->n_threads++;
                }
        }
        if (r < 0) {
                zsw_parallel_free(p);
                return r;
        }
        *ret = p;
        return 0;
}

struct zsw_parallel *zsw_parallel_free(struct zsw_parallel *p) {
        if (!p)
                return NULL;
        zsw_mutex_lock(&p->lock, ZSW_LOCK_PARALLEL);
        p->stop = true;
        pthread_cond_broadcast(&p->start);
        zsw_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        for (unsigned i = 0; i < p->n_workers; i++)
                zsw_worker_free(p->workers[i]);
        free(p->threads);
        free(p->workers);
        pthread_cond_destroy(&p->start);
        pthread_cond_destroy(&p->done);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
}

/* The pool's threads that can work beside the caller: as many as the
 * CPUs it may run on, less its own. Confined to one CPU (CPUAffinity=,
 * taskset; the pool's threads with it, as they are made by the same
 * process), a helper would only take turns with the caller on that CPU,
 * and with whatever else runs there. */
static unsigned helpers_now(const struct zsw_parallel *p) {
        cpu_set_t cpus;
        unsigned n;

        if (p->n_threads == 0 || sched_getaffinity(0, sizeof(cpus), &cpus) < 0)
                return p->n_threads;
        n = (unsigned) CPU_COUNT(&cpus);
        return MIN(p->n_threads, n > 1 ? n - 1 : 0);
}

void zsw_parallel_start(struct zsw_parallel *p, zsw_parallel_fn fn, void *arg, size_t n_items) {
        unsigned helpers = helpers_now(p);

        zsw_mutex_lock(&p->lock, ZSW_LOCK_PARALLEL);
        p->fn = fn;
        p->arg = arg;
        p->n_items = n_items;
        atomic_store_explicit(&p->next, 0, memory_order_relaxed);
        /* Waking threads costs more than one batch: below two batches a
         * thread, the caller does it all. */
        if (n_items >= 2 && helpers > 0) {
                p->active = helpers;
                p->busy = helpers;
                p->generation++;
                pthread_cond_broadcast(&p->start);
        }
        zsw_mutex_unlock(&p->lock);
}

void zsw_parallel_join(struct zsw_parallel *p, struct zsw_worker *caller_worker) {
        drain(p, caller_worker);

        zsw_mutex_lock(&p->lock, ZSW_LOCK_PARALLEL);
        while (p->busy > 0)
                pthread_cond_wait(&p->done, &p->lock);
        zsw_mutex_unlock(&p->lock);
}

void zsw_parallel_run(struct zsw_parallel *p, struct zsw_worker *caller_worker, zsw_parallel_fn fn,
                      void *arg, size_t n_items) {
        zsw_parallel_start(p, fn, arg, n_items);
        zsw_parallel_join(p, caller_worker);
}
