/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The shrinker (see writeback.h). Its thread sleeps on a condition
 * variable until the store reports a limit; a pass then takes steps, one
 * owner at a time in creation order starting after the last one served,
 * until nothing is above a threshold or a full circle of owners yields
 * nothing to write.
 *
 * A step runs with the store's owners pinned (no owner can be freed while
 * its entries are isolated or in flight, and steps are serialised by that
 * pin, which also guards the failure bookkeeping here). Payloads are read
 * straight from pool memory: an isolated entry keeps its payload until its
 * writeback ends, which is ours to decide. The write is synchronous; the
 * swapfile copies the payloads into its aligned staging buffer first, so
 * the switch to disk may free pool memory as soon as it returns.
 *
 * Backoff: a pass that ends in failure (every page of a step refused: disk
 * full, I/O errors) makes the thread sleep, from BACKOFF_MIN doubling to
 * BACKOFF_MAX, ignoring wake-ups meanwhile: a full pool refuses stores and
 * wakes us on every batch, and retrying a full disk at that rate would only
 * burn CPU. Meanwhile the store counts its refusals as reclaim failures.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "lockdep.h"
#include "writeback.h"

#define BACKOFF_MIN_NS (10ull * 1000 * 1000)
#define BACKOFF_MAX_NS (1000ull * 1000 * 1000)

struct zsw_writeback {
        struct zsw_store *store;
        struct zsw_swapfile *sf;
        struct zsw_writeback_config cfg;

        pthread_t thread;
        bool started;
        pthread_mutex_t lock; /* pending, stop, passes */
        pthread_cond_t cond;  /* wakes the thread */
        pthread_cond_t idle;  /* a pass ended (zsw_writeback_settle) */
        bool pending, stop;
        uint64_t passes;

        /* Under the store's owners pin (see above). */
        uint64_t cursor; /* the owner served last */
        bool failing;    /* failed since the last success: logged */

        _Atomic uint64_t wakeups, steps, written_back, write_requests, bytes_written,
                payload_bytes_written, write_failures, invalidated, backoffs;
};

static void add(_Atomic uint64_t *c, uint64_t v) {
        atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

int zsw_writeback_read_disk(void *userdata, uint64_t sector, uint32_t len, void *dst) {
        int r = zsw_swapfile_read(userdata, sector, len, dst);

        /* Whatever went wrong, the page cannot be handed out: a read error
         * is what the fault path must see. */
        return r < 0 && r != -EINVAL ? -EIO : r;
}

int zsw_writeback_read_disk_batch(void *userdata, const uint64_t *sectors, const uint32_t *lens,
                                  size_t n, void *const *dsts) {
        int r = zsw_swapfile_read_batch(userdata, sectors, lens, n, dsts);

        return r < 0 && r != -EINVAL ? -EIO : r;
}

void zsw_writeback_free_disk(void *userdata, uint64_t sector, uint32_t len) {
        (void) zsw_swapfile_free(userdata, sector, len);
}

/* Failures of one step: the entries stay in memory. */
static void step_failed(struct zsw_writeback *wb, size_t nfailed, size_t nwritten, int error) {
        add(&wb->write_failures, nfailed);
        if (!wb->failing)
                zsw_log_errno(wb->cfg.log, LOG_WARNING, error,
                              "Writeback of %zu pages failed: %m; they stay in memory, "
                              "backing off",
                              nfailed);
        wb->failing = true;
        if (nwritten == 0)
                zsw_store_set_reclaim_failing(wb->store, true);
}

/* With the owners pinned. Returns pages written, 0 for none to write, or
 * a negative errno when every page failed. */
static int shrink_step(struct zsw_writeback *wb, struct zsw_owner *o, size_t n) {
        struct zsw_entry *v[ZSW_WRITEBACK_STEP], *ok[ZSW_WRITEBACK_STEP], *bad[ZSW_WRITEBACK_STEP];
        const void *payloads[ZSW_WRITEBACK_STEP];
        uint32_t lens[ZSW_WRITEBACK_STEP];
        uint64_t slots[ZSW_WRITEBACK_STEP], sectors[ZSW_WRITEBACK_STEP];
        int errors[ZSW_WRITEBACK_STEP], error = 0;
        struct zsw_swapfile_stats before, after;
        size_t nok = 0, nbad = 0;
        uint64_t payload = 0;
        int r;

        n = zsw_store_isolate(o, v, MIN(n, (size_t) ZSW_WRITEBACK_STEP));
        if (n == 0)
                return 0;
        add(&wb->steps, 1);
        for (size_t i = 0; i < n; i++) {
                unsigned c;

                /* LRU entries are in the pool by construction. */
                r = zsw_store_entry_payload(wb->store, v[i], &payloads[i], &lens[i], &c);
                if (r < 0) {
                        zsw_store_putback(o, v, n);
                        return zsw_log_errno(wb->cfg.log, LOG_ERR, r,
                                             "Isolated entry not in the pool: %m");
                }
        }

        zsw_swapfile_get_stats(wb->sf, &before);
        r = zsw_swapfile_write_batch(wb->sf, payloads, lens, n, slots, errors);
        zsw_swapfile_get_stats(wb->sf, &after);
        if (r < 0) {
                zsw_store_putback(o, v, n);
                step_failed(wb, n, 0, r);
                return r;
        }
        for (size_t i = 0; i < n; i++)
                if (slots[i] != ZSW_SWAPFILE_NO_SLOT) {
                        payload += lens[i];
                        sectors[nok] = slots[i];
                        ok[nok++] = v[i];
                } else {
                        error = error ?: errors[i];
                        bad[nbad++] = v[i];
                }
        add(&wb->write_requests, after.write_requests - before.write_requests);
        add(&wb->bytes_written, after.bytes_written - before.bytes_written);
        add(&wb->payload_bytes_written, payload);

        if (nok > 0) {
                size_t moved = zsw_store_writeback_done(o, ok, sectors, nok);

                add(&wb->written_back, moved);
                add(&wb->invalidated, nok - moved);
        }
        if (nbad > 0) {
                zsw_store_putback(o, bad, nbad);
                step_failed(wb, nbad, nok, error ?: -EIO);
        }
        if (nok == 0)
                return error ?: -EIO;
        if (wb->failing && nbad == 0) {
                zsw_log(wb->cfg.log, LOG_INFO, "Writeback works again");
                wb->failing = false;
                zsw_store_set_reclaim_failing(wb->store, false);
        }
        return (int) nok;
}

int zsw_writeback_shrink_owner(struct zsw_writeback *wb, struct zsw_owner *o, size_t n) {
        int r;

        zsw_store_owners_lock(wb->store);
        r = shrink_step(wb, o, n);
        zsw_store_owners_unlock(wb->store);
        return r;
}

static bool owner_wants_shrink(struct zsw_owner *o, bool global) {
        return zsw_store_owner_may_writeback(o) && (global || zsw_store_owner_over_threshold(o));
}

/* With the owners pinned: the next owner after the cursor that needs
 * writeback, or NULL. */
static struct zsw_owner *pick_owner(struct zsw_writeback *wb, bool global) {
        struct zsw_owner *first = zsw_store_owner_next(wb->store, &wb->cursor), *o = first;

        while (o && !owner_wants_shrink(o, global)) {
                o = zsw_store_owner_next(wb->store, &wb->cursor);
                if (o == first)
                        return NULL;
        }
        return o;
}

static bool stopping(struct zsw_writeback *wb) {
        bool stop;

        zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
        stop = wb->stop;
        zsw_mutex_unlock(&wb->lock);
        return stop;
}

/* Steps until there is nothing to do (0) or a step failed (< 0). */
static int shrink_pass(struct zsw_writeback *wb) {
        uint64_t idle_since = 0;

        while (!stopping(wb)) {
                bool global = zsw_store_over_threshold(wb->store);
                struct zsw_owner *o;
                int r;

                zsw_store_owners_lock(wb->store);
                o = pick_owner(wb, global);
                r = o ? shrink_step(wb, o, ZSW_WRITEBACK_STEP) : 0;
                zsw_store_owners_unlock(wb->store);
                if (!o || r < 0)
                        return r;
                /* A full circle of owners with nothing to write: done. */
                if (r > 0)
                        idle_since = 0;
                else if (idle_since == 0)
                        idle_since = wb->cursor;
                else if (idle_since == wb->cursor)
                        return 0;
        }
        return 0;
}

static struct timespec deadline_after(uint64_t ns) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        ns += (uint64_t) ts.tv_nsec;
        ts.tv_sec += (time_t) (ns / 1000000000ull);
        ts.tv_nsec = (long) (ns % 1000000000ull);
        return ts;
}

static void *shrink_thread(void *userdata) {
        struct zsw_writeback *wb = userdata;
        uint64_t backoff = 0;

        zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
        for (;;) {
                if (backoff > 0) {
                        struct timespec until = deadline_after(backoff);

                        add(&wb->backoffs, 1);
                        while (!wb->stop &&
                               pthread_cond_timedwait(&wb->cond, &wb->lock, &until) != ETIMEDOUT)
                                ;
                } else
                        while (!wb->stop && !wb->pending)
                                pthread_cond_wait(&wb->cond, &wb->lock);
                if (wb->stop)
                        break;
                wb->pending = false;
                zsw_mutex_unlock(&wb->lock);

                add(&wb->wakeups, 1);
                backoff = shrink_pass(wb) < 0
                                  ? MIN(MAX(backoff * 2, BACKOFF_MIN_NS), BACKOFF_MAX_NS)
                                  : 0;

                zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
                wb->passes++;
                pthread_cond_broadcast(&wb->idle);
        }
        zsw_mutex_unlock(&wb->lock);
        return NULL;
}

void zsw_writeback_wake(struct zsw_writeback *wb) {
        zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
        wb->pending = true;
        pthread_cond_signal(&wb->cond);
        zsw_mutex_unlock(&wb->lock);
}

static void store_wake(void *userdata) {
        zsw_writeback_wake(userdata);
}

void zsw_writeback_settle(struct zsw_writeback *wb) {
        uint64_t pass;

        zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
        wb->pending = true;
        pthread_cond_signal(&wb->cond);
        pass = wb->passes;
        while (wb->passes == pass && !wb->stop)
                pthread_cond_wait(&wb->idle, &wb->lock);
        zsw_mutex_unlock(&wb->lock);
}

int zsw_writeback_new(struct zsw_store *s, struct zsw_swapfile *sf,
                      const struct zsw_writeback_config *config, struct zsw_writeback **ret) {
        struct zsw_writeback *wb;
        pthread_condattr_t ca;
        int r;

        if (!s || !sf || config->accept_threshold_percent > 100)
                return -EINVAL;
        wb = calloc(1, sizeof(*wb));
        if (!wb)
                return -ENOMEM;
        wb->store = s;
        wb->sf = sf;
        wb->cfg = *config;
        pthread_mutex_init(&wb->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&wb->cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&wb->idle, NULL);

        /* Limits first: the thread reads them. A store may wake us before
         * the thread runs; the wake-up waits in pending. */
        r = zsw_store_set_limits(s, &(struct zsw_store_limits) {
                                            .pool_bytes = config->pool_limit_bytes,
                                            .accept_percent = config->accept_threshold_percent,
                                            .wake = store_wake,
                                            .userdata = wb,
                                    });
        if (r >= 0)
                r = -pthread_create(&wb->thread, NULL, shrink_thread, wb);
        if (r < 0) {
                zsw_writeback_free(wb);
                return r;
        }
        wb->started = true;
        *ret = wb;
        return 0;
}

struct zsw_writeback *zsw_writeback_free(struct zsw_writeback *wb) {
        if (!wb)
                return NULL;
        if (wb->started) {
                zsw_mutex_lock(&wb->lock, ZSW_LOCK_WRITEBACK);
                wb->stop = true;
                pthread_cond_broadcast(&wb->cond);
                pthread_cond_broadcast(&wb->idle);
                zsw_mutex_unlock(&wb->lock);
                pthread_join(wb->thread, NULL);
        }
        /* Stores must not wake a freed object (none runs now). */
        zsw_store_set_limits(wb->store, &(struct zsw_store_limits) {});
        pthread_cond_destroy(&wb->cond);
        pthread_cond_destroy(&wb->idle);
        pthread_mutex_destroy(&wb->lock);
        free(wb);
        return NULL;
}

void zsw_writeback_get_stats(struct zsw_writeback *wb, struct zsw_writeback_stats *ret) {
        struct zsw_swapfile_stats ss;

        zsw_swapfile_get_stats(wb->sf, &ss);
        *ret = (struct zsw_writeback_stats) {
                .wakeups = atomic_load(&wb->wakeups),
                .steps = atomic_load(&wb->steps),
                .written_back = atomic_load(&wb->written_back),
                .write_requests = atomic_load(&wb->write_requests),
                .bytes_written = atomic_load(&wb->bytes_written),
                .payload_bytes_written = atomic_load(&wb->payload_bytes_written),
                .write_failures = atomic_load(&wb->write_failures),
                .invalidated = atomic_load(&wb->invalidated),
                .backoffs = atomic_load(&wb->backoffs),
                .disk_bytes_in_use = ss.disk_bytes_in_use,
        };
}
