/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A fork-join pool for the eviction path: the batches of a round are
 * compressed by the evicting thread and by the pool's threads together.
 * Compression is what eviction spends its time on (well over 80% of a
 * round), and the store is built for concurrent batches (per-thread
 * workers, no lock held while compressing), so on two CPUs a round
 * finishes in a little over half the time.
 *
 * Each pool thread owns a store worker; the caller brings its own.
 */
#pragma once

#include <stddef.h>

#include "store.h"

struct zsw_parallel;

typedef void (*zsw_parallel_fn)(void *arg, struct zsw_worker *w, size_t item);

/* n_threads may be 0: then zsw_parallel_run() runs everything itself. */
int zsw_parallel_new(struct zsw_store *store, unsigned n_threads, struct zsw_parallel **ret);
struct zsw_parallel *zsw_parallel_free(struct zsw_parallel *p);

/* Calls fn(arg, worker, i) for every i < n_items, spread over the pool's
 * threads and the caller (with caller_worker); returns when all are done.
 * Only as many of the pool's threads take part as the caller has other
 * CPUs to run on (none when it is confined to one). Only one run at a
 * time per pool. */
void zsw_parallel_run(struct zsw_parallel *p, struct zsw_worker *caller_worker, zsw_parallel_fn fn,
                      void *arg, size_t n_items);

/* The same in two steps, so that the caller can do other work while the
 * pool's threads start on the items: zsw_parallel_start() hands the job to
 * the threads and returns; zsw_parallel_join() then takes the items left
 * on the caller's thread and returns when all are done. Every start must
 * be followed by its join before the next start. */
void zsw_parallel_start(struct zsw_parallel *p, zsw_parallel_fn fn, void *arg, size_t n_items);
void zsw_parallel_join(struct zsw_parallel *p, struct zsw_worker *caller_worker);
