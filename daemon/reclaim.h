/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reclaim worker: one thread that runs every reclaim the daemon asks
 * for (the policies' steps and `zswapctl reclaim`), so that the main loop
 * (the control socket, the watchdog, PSI triggers) never waits for an
 * eviction. Requests are queued and run in order; when one is done, the
 * worker posts it back and its callback runs on the main loop, from
 * reclaimer_process().
 *
 * Only the worker touches a request's results until it is posted back;
 * only the main loop touches its callback and userdata. A requester that
 * goes away first (a client disconnects, a group is removed) calls
 * reclaim_request_orphan(): the request still runs, its result is dropped.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine.h"
#include "util.h"

struct reclaimer;
struct reclaim_request;

/* Runs on the main loop when req is done (or cancelled at shutdown, with
 * r = -ECANCELED); req is freed afterwards. */
typedef void (*reclaim_done_fn)(void *userdata, const struct reclaim_request *req);

struct reclaim_request {
        /* Set by the requester. Targets are reclaimed in order until
         * max_bytes were taken in all (UINT64_MAX: everything), only pages
         * unused for min_cold_age_ms (0: any). */
        pid_t *pids;
        size_t n_pids;
        struct zsw_reclaim_request what;
        /* Registers the new mappings of every target first (but the first,
         * whose reclaim does; with max_bytes 0, all of them and nothing
         * else): first touches there reach the engine's hold even in the
         * targets this request never reaches. */
        bool register_all;
        reclaim_done_fn done;
        void *userdata;

        /* Set by the worker: 0 if any target could be reclaimed from, else
         * the first target's error (explained in err); the sums over the
         * targets in result. */
        int r;
        struct zsw_reclaim_result result;
        struct zsw_engine_error err;

        struct reclaim_request *next;
};

/* Starts the worker thread for ENGINE (not owned). Logs its failures. */
int reclaimer_new(struct zsw_engine *engine, struct reclaimer **ret);

/* Finishes the reclaim in progress, cancels the queued ones (their
 * callbacks run with -ECANCELED), runs the callbacks of every finished
 * one, stops the thread and frees everything. Accepts NULL. */
struct reclaimer *reclaimer_free(struct reclaimer *rc);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct reclaimer *, reclaimer_free);

/* Queues a reclaim of N_PIDS targets (copied) as WHAT says (with
 * REGISTER_ALL, see struct reclaim_request). Returns the
 * request (owned by the reclaimer; valid until its callback returned) or
 * NULL when out of memory. */
struct reclaim_request *reclaimer_submit(struct reclaimer *rc, const pid_t *pids, size_t n_pids,
                                         const struct zsw_reclaim_request *what, bool register_all,
                                         reclaim_done_fn done, void *userdata);

/* The requester is gone: the callback will not run. Main loop only. */
void reclaim_request_orphan(struct reclaim_request *req);

/* Polls readable when finished requests wait for reclaimer_process(). */
int reclaimer_get_fd(const struct reclaimer *rc);

/* Runs the callbacks of the finished requests. Main loop only. */
void reclaimer_process(struct reclaimer *rc);
