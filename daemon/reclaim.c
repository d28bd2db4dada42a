/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The reclaim worker (see reclaim.h). A mutex guards the two lists: the
 * queue the worker takes from and the finished list the main loop drains;
 * an eventfd tells the main loop that the finished list is not empty.
 * The engine lets a reclaim run without its control lock, so the main
 * loop's stats and attach calls go on while the worker evicts.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>

#include "lockdep.h"
#include "log.h"
#include "reclaim.h"

struct reclaimer {
        struct zsw_engine *engine;
        pthread_t thread;
        bool started;
        int event_fd;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct reclaim_request *queue, **queue_tail;
        struct reclaim_request *finished, **finished_tail;
        bool stop;
};

static struct reclaim_request *request_free(struct reclaim_request *req) {
        if (req) {
                free(req->pids);
                free(req);
        }
        return NULL;
}

/* Runs one request on the worker. A target that went away meanwhile is
 * skipped; the request fails only if no target could be reclaimed from. */
static void request_run(struct zsw_engine *engine, struct reclaim_request *req) {
        uint64_t start = zsw_now_ns(), got = 0, page = (uint64_t) ZSW_PAGE_SIZE;
        bool any = false, failed = false;

        req->r = -ENOENT;
        /* Without bytes to take, no reclaim registers the first one. */
        for (size_t i = req->what.max_bytes ? 1 : 0; req->register_all && i < req->n_pids; i++)
                (void) zsw_engine_register(engine, req->pids[i]);
        for (size_t i = 0; i < req->n_pids && got + page <= req->what.max_bytes; i++) {
                struct zsw_reclaim_request what = req->what;
                struct zsw_engine_error err = {};
                struct zsw_reclaim_result res = {};
                int r;
                LOG_FIELDS(.target_pid = req->pids[i]);

                what.max_bytes -= got;
                r = zsw_engine_reclaim_cold(engine, req->pids[i], &what, &res, &err);
                if (r < 0) {
                        log_debug_errno(r, "Cannot reclaim from %d: %s", req->pids[i],
                                        err.message[0] ? err.message : "%m");
                        if (!any && !failed) {
                                req->r = r;
                                req->err = err;
                                failed = true;
                        }
                        continue;
                }
                any = true;
                req->r = 0;
                req->result.scanned_pages += res.scanned_pages;
                req->result.evicted_pages += res.evicted_pages;
                req->result.aborted_pages += res.aborted_pages;
                req->result.refused_pages += res.refused_pages;
                req->result.cold_pages += res.cold_pages;
                got += res.evicted_pages * page;
        }
        req->result.duration_ns = zsw_now_ns() - start;
}

static void post_finished(struct reclaimer *rc, struct reclaim_request *req) {
        uint64_t one = 1;

        req->next = NULL;
        *rc->finished_tail = req;
        rc->finished_tail = &req->next;
        if (write(rc->event_fd, &one, sizeof(one)) < 0)
                log_warning_errno(errno, "Cannot wake the main loop, ignoring: %m");
}

static void *worker_main(void *userdata) {
        struct reclaimer *rc = userdata;

        zsw_mutex_lock(&rc->lock, ZSW_LOCK_DAEMON_RECLAIM);
        for (;;) {
                struct reclaim_request *req;

                while (!rc->stop && !rc->queue)
                        pthread_cond_wait(&rc->cond, &rc->lock);
                if (rc->stop)
                        break;
                req = rc->queue;
                rc->queue = req->next;
                if (!rc->queue)
                        rc->queue_tail = &rc->queue;
                zsw_mutex_unlock(&rc->lock);

                request_run(rc->engine, req);

                zsw_mutex_lock(&rc->lock, ZSW_LOCK_DAEMON_RECLAIM);
                post_finished(rc, req);
        }
        zsw_mutex_unlock(&rc->lock);
        return NULL;
}

int reclaimer_new(struct zsw_engine *engine, struct reclaimer **ret) {
        struct reclaimer *rc;
        sigset_t all, old;
        int r;

        rc = calloc(1, sizeof(*rc));
        if (!rc)
                return log_oom();
        rc->engine = engine;
        rc->queue_tail = &rc->queue;
        rc->finished_tail = &rc->finished;
        pthread_mutex_init(&rc->lock, NULL);
        pthread_cond_init(&rc->cond, NULL);
        rc->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (rc->event_fd < 0) {
                r = log_error_errno(errno, "Failed to create an eventfd: %m");
                reclaimer_free(rc);
                return r;
        }
        /* Signals belong to the main loop's signalfd. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = -pthread_create(&rc->thread, NULL, worker_main, rc);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                log_error_errno(r, "Failed to start the reclaim worker: %m");
                reclaimer_free(rc);
                return r;
        }
        rc->started = true;
        *ret = rc;
        return 0;
}

struct reclaimer *reclaimer_free(struct reclaimer *rc) {
        if (!rc)
                return NULL;
        if (rc->started) {
                zsw_mutex_lock(&rc->lock, ZSW_LOCK_DAEMON_RECLAIM);
                rc->stop = true;
                pthread_cond_signal(&rc->cond);
                zsw_mutex_unlock(&rc->lock);
                pthread_join(rc->thread, NULL);
        }
        /* The thread is gone: no lock needed any more. */
        while (rc->queue) {
                struct reclaim_request *req = rc->queue;

                rc->queue = req->next;
                req->r = -ECANCELED;
                snprintf(req->err.message, sizeof(req->err.message), "zswapd is stopping");
                *rc->finished_tail = req;
                rc->finished_tail = &req->next;
                req->next = NULL;
        }
        reclaimer_process(rc);
        safe_close(rc->event_fd);
        pthread_cond_destroy(&rc->cond);
        pthread_mutex_destroy(&rc->lock);
        free(rc);
        return NULL;
}

struct reclaim_request *reclaimer_submit(struct reclaimer *rc, const pid_t *pids, size_t n_pids,
                                         const struct zsw_reclaim_request *what, bool register_all,
                                         reclaim_done_fn done, void *userdata) {
        struct reclaim_request *req = calloc(1, sizeof(*req));

        if (!req)
                return NULL;
        req->pids = malloc(MAX(n_pids, 1u) * sizeof(pid_t));
        if (!req->pids)
                return request_free(req);
        memcpy(req->pids, pids, n_pids * sizeof(pid_t));
        req->n_pids = n_pids;
        req->what = *what;
        req->register_all = register_all;
        req->done = done;
        req->userdata = userdata;

        zsw_mutex_lock(&rc->lock, ZSW_LOCK_DAEMON_RECLAIM);
        *rc->queue_tail = req;
        rc->queue_tail = &req->next;
        pthread_cond_signal(&rc->cond);
        zsw_mutex_unlock(&rc->lock);
        return req;
}

void reclaim_request_orphan(struct reclaim_request *req) {
        req->done = NULL;
        req->userdata = NULL;
}

int reclaimer_get_fd(const struct reclaimer *rc) {
        return rc->event_fd;
}

void reclaimer_process(struct reclaimer *rc) {
        struct reclaim_request *list;
        uint64_t v;

        (void) !read(rc->event_fd, &v, sizeof(v));
        zsw_mutex_lock(&rc->lock, ZSW_LOCK_DAEMON_RECLAIM);
        list = rc->finished;
        rc->finished = NULL;
        rc->finished_tail = &rc->finished;
        zsw_mutex_unlock(&rc->lock);

        while (list) {
                struct reclaim_request *req = list;

                list = req->next;
                if (req->done)
                        req->done(req->userdata, req);
                request_free(req);
        }
}
