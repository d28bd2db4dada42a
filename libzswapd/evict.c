/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Eviction: taking a target's present pages into the store without losing
 * a write.
 *
 * A round takes up to ZSW_EVICT_MAX_PAGES present pages:
 *   1. publish the round (COLLECTING) so that fault threads can see it;
 *   2. write-protect its runs: from now on a write by the target raises a
 *      WP fault instead of changing the page behind our back;
 *   3. read the pages (process_vm_readv; they are present, so the read
 *      cannot fault on a missing page of the target, which would block us
 *      on our own fault service);
 *   4. store them through the store's batch pipeline;
 *   5. commit (DROPPING): pages that were written, removed, unmapped or
 *      moved meanwhile are cancelled and their entries dropped; the rest
 *      are dropped from the target by one injected process_madvise.
 *
 * Fault threads, holding the target's serve_lock, apply the rules:
 *   - a WP fault on a page of a COLLECTING round cancels that page and
 *     un-protects it: the target's write goes through, the page stays;
 *   - a WP fault during DROPPING waits: the page is being dropped, and the
 *     thread is woken afterwards to fault it back in from the store;
 *   - the target's own MADV_DONTNEED, munmap or mremap of pages of the
 *     round cancels them;
 *   - UFFD_EVENT_REMOVE for exactly the ranges being dropped is our own
 *     drop, not the target's, and changes nothing in the store.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "engine-internal.h"
#include "remote.h"
#include "uffd.h"
#include "vma.h"

static ssize_t batch_find(const struct evict_batch *b, uint64_t addr) {
        size_t lo = 0, hi = b->n;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (b->addrs[mid] < addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < b->n && b->addrs[lo] == addr ? (ssize_t) lo : -1;
}

static void batch_cancel(struct evict_batch *b, size_t i) {
        if (!b->cancelled[i]) {
                b->cancelled[i] = true;
                b->n_cancelled++;
        }
}

bool evict_on_wp_fault(struct zsw_target *t, uint64_t addr) {
        struct evict_batch *b = &t->batch;
        bool handled = false;
        ssize_t i;

        addr &= ~(uint64_t) (ZSW_PAGE_SIZE - 1);
        pthread_mutex_lock(&t->batch_lock);
        i = b->state == EVICT_IDLE ? -1 : batch_find(b, addr);
        if (i >= 0 && b->state == EVICT_DROPPING && !b->cancelled[i]) {
                /* Being dropped: let the writer wait for the drop, then
                 * fault the page back in from the store. */
                b->wake_pending = true;
                handled = true;
        } else if (i >= 0 && b->state == EVICT_COLLECTING) {
                batch_cancel(b, (size_t) i);
                atomic_fetch_add_explicit(&t->evict_aborted, 1, memory_order_relaxed);
        }
        pthread_mutex_unlock(&t->batch_lock);
        /* Not handled: the caller un-protects the page, which lets the
         * write through. */
        return handled;
}

bool evict_on_remove(struct zsw_target *t, uint64_t start, uint64_t end, bool unmap) {
        struct evict_batch *b = &t->batch;
        bool ours = false;

        pthread_mutex_lock(&t->batch_lock);
        if (b->state == EVICT_DROPPING && !unmap)
                for (size_t d = 0; d < b->n_drops && !ours; d++) {
                        uint64_t ds = (uint64_t) b->drops[d].iov_base;

                        ours = start >= ds && end <= ds + b->drops[d].iov_len;
                }
        if (!ours && b->state != EVICT_IDLE)
                for (size_t i = 0; i < b->n; i++)
                        if (b->addrs[i] >= start && b->addrs[i] < end)
                                batch_cancel(b, i);
        pthread_mutex_unlock(&t->batch_lock);
        return ours;
}

/* Registers every eligible mapping (new ones appear as the target maps
 * memory; registering a registered range again is harmless). */
int evict_register_ranges(struct zsw_engine *e, struct zsw_target *t) {
        _cleanup_free_ struct zsw_vma *vmas = NULL;
        size_t n = 0;
        int r;

        r = zsw_vma_list_pid(t->pid, &vmas, &n);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                if (!zsw_vma_eligible(&vmas[i]))
                        continue;
                if (t->scratch && vmas[i].start <= t->scratch && t->scratch < vmas[i].end)
                        continue;
                r = zsw_uffd_register(t->uffd, vmas[i].start, vmas[i].end - vmas[i].start,
                                      UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, NULL);
                if (r < 0)
                        zsw_log(e->log, LOG_DEBUG,
                                "Cannot register 0x%" PRIx64 "-0x%" PRIx64 " of %d (%s), skipping",
                                vmas[i].start, vmas[i].end, t->pid, strerror(-r));
        }
        return 0;
}

/* Merges the round's pages that are still to go into ranges. */
static size_t collect_runs(const struct evict_batch *b, struct iovec *runs) {
        size_t n = 0;

        for (size_t i = 0; i < b->n; i++) {
                if (b->cancelled[i])
                        continue;
                if (n > 0 && (uint64_t) runs[n - 1].iov_base + runs[n - 1].iov_len == b->addrs[i])
                        runs[n - 1].iov_len += ZSW_PAGE_SIZE;
                else
                        runs[n++] = (struct iovec) { (void *) b->addrs[i], ZSW_PAGE_SIZE };
        }
        return n;
}

struct round {
        uint8_t *buf;                           /* ZSW_EVICT_MAX_PAGES pages */
        struct iovec runs[ZSW_EVICT_MAX_PAGES];
        size_t n_runs;
        bool stored[ZSW_EVICT_MAX_PAGES];
};

/* Steps 2-4: protect, read, store. Pages that cannot go are cancelled. */
static int round_collect(struct zsw_engine *e, struct zsw_target *t, struct round *rd,
                         struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        size_t read_pages;
        int r;

        for (size_t i = 0; i < rd->n_runs; i++) {
                r = zsw_uffd_writeprotect(t->uffd, (uint64_t) rd->runs[i].iov_base,
                                          rd->runs[i].iov_len, true, true);
                if (r < 0)
                        return r;
        }

        r = zsw_vma_read_pages(t->pid, b->addrs, b->n, rd->buf, &read_pages);
        if (r < 0)
                return r;

        memset(rd->stored, 0, sizeof(rd->stored));
        for (size_t off = 0; off < read_pages; off += ZSW_STORE_BATCH_MAX) {
                size_t n = MIN(ZSW_STORE_BATCH_MAX, read_pages - off);
                const void *pages[ZSW_STORE_BATCH_MAX];
                uint64_t pgnos[ZSW_STORE_BATCH_MAX];
                uint32_t mask = 0;

                for (size_t i = 0; i < n; i++) {
                        pages[i] = rd->buf + (off + i) * ZSW_PAGE_SIZE;
                        pgnos[i] = b->addrs[off + i] / ZSW_PAGE_SIZE;
                }
                r = zsw_store_pages(e->worker, t->owner, pgnos, pages, n, &mask);
                for (size_t i = 0; i < n; i++) {
                        rd->stored[off + i] = r >= 0 && (mask & (1u << i));
                        if (!rd->stored[off + i])
                                res->refused_pages++;
                }
        }

        pthread_mutex_lock(&t->batch_lock);
        for (size_t i = 0; i < b->n; i++)
                if (!rd->stored[i])
                        batch_cancel(b, i);
        pthread_mutex_unlock(&t->batch_lock);
        return 0;
}

/* Un-protects pages that stay: refused by the store, or left after a
 * failure. Pages cancelled by a write were un-protected by the fault
 * thread already; doing it again is harmless. */
static void round_unprotect_kept(struct zsw_target *t) {
        struct evict_batch *b = &t->batch;

        for (size_t i = 0; i < b->n; i++)
                if (b->cancelled[i])
                        zsw_uffd_writeprotect(t->uffd, b->addrs[i], ZSW_PAGE_SIZE, false, false);
}

/* Step 5: commit and drop. */
static int round_drop(struct zsw_engine *e, struct zsw_target *t, struct round *rd,
                      struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        _cleanup_remote_ struct zsw_remote *remote = NULL;
        size_t dropped = 0;
        int r;

        pthread_mutex_lock(&t->batch_lock);
        for (size_t i = 0; i < b->n; i++)
                if (b->cancelled[i])
                        zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
        rd->n_runs = collect_runs(b, rd->runs);
        b->drops = rd->runs;
        b->n_drops = rd->n_runs;
        b->state = EVICT_DROPPING;
        pthread_mutex_unlock(&t->batch_lock);

        if (rd->n_runs == 0)
                return 0;
        r = zsw_remote_seize(t->pid, e->log, &remote);
        if (r >= 0)
                r = zsw_remote_madvise_ranges(remote, t->scratch, t->scratch_size, rd->runs,
                                              rd->n_runs, MADV_DONTNEED);
        remote = zsw_remote_release(remote);

        pthread_mutex_lock(&t->batch_lock);
        for (size_t i = 0; i < b->n; i++) {
                if (b->cancelled[i])
                        continue;
                if (r < 0) {
                        /* Nothing is known to be dropped: keep the pages,
                         * forget the copies. */
                        zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
                        batch_cancel(b, i);
                } else
                        dropped++;
        }
        pthread_mutex_unlock(&t->batch_lock);

        res->evicted_pages += dropped;
        atomic_fetch_add_explicit(&t->evicted, dropped, memory_order_relaxed);
        return r;
}

static int evict_round(struct zsw_engine *e, struct zsw_target *t, struct round *rd,
                       const struct page_region *regions, size_t n_regions,
                       struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        bool wake;
        int r;

        pthread_mutex_lock(&t->batch_lock);
        b->n = 0;
        b->n_cancelled = 0;
        b->wake_pending = false;
        b->n_drops = 0;
        rd->n_runs = 0;
        for (size_t i = 0; i < n_regions; i++) {
                rd->runs[rd->n_runs++] = (struct iovec) {
                        (void *) regions[i].start, regions[i].end - regions[i].start };
                for (uint64_t a = regions[i].start; a < regions[i].end; a += ZSW_PAGE_SIZE) {
                        b->cancelled[b->n] = false;
                        b->addrs[b->n++] = a;
                }
        }
        b->state = EVICT_COLLECTING;
        pthread_mutex_unlock(&t->batch_lock);
        res->scanned_pages += b->n;

        r = round_collect(e, t, rd, res);
        if (r < 0) {
                pthread_mutex_lock(&t->batch_lock);
                for (size_t i = 0; i < b->n; i++) {
                        batch_cancel(b, i);
                        zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
                }
                pthread_mutex_unlock(&t->batch_lock);
        } else
                r = round_drop(e, t, rd, res);

        round_unprotect_kept(t);
        pthread_mutex_lock(&t->batch_lock);
        res->aborted_pages += b->n_cancelled;
        wake = b->wake_pending;
        b->state = EVICT_IDLE;
        b->n_drops = 0;
        pthread_mutex_unlock(&t->batch_lock);
        if (wake)
                /* Writers that hit the drop wait on WP faults: the pages are
                 * gone now, so they fault them back in from the store. */
                for (size_t i = 0; i < n_regions; i++)
                        zsw_uffd_wake(t->uffd, regions[i].start, regions[i].end - regions[i].start);
        return r;
}

int evict_target(struct zsw_engine *e, struct zsw_target *t, uint64_t max_bytes,
                 struct zsw_reclaim_result *res, struct zsw_engine_error *err) {
        _cleanup_free_ struct zsw_vma *vmas = NULL;
        _cleanup_close_ int pagemap = -EBADF;
        struct round *rd = NULL;
        uint64_t budget = max_bytes / ZSW_PAGE_SIZE;
        char path[64];
        size_t n_vmas = 0;
        int r;

        r = evict_register_ranges(e, t);
        if (r < 0)
                return r;
        r = zsw_vma_list_pid(t->pid, &vmas, &n_vmas);
        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/proc/%d/pagemap", t->pid);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                return -errno;
        rd = malloc(sizeof(*rd));
        if (rd)
                rd->buf = aligned_alloc(ZSW_PAGE_SIZE, (size_t) ZSW_EVICT_MAX_PAGES * ZSW_PAGE_SIZE);
        if (!rd || !rd->buf) {
                free(rd);
                return -ENOMEM;
        }

        for (size_t v = 0; v < n_vmas && r >= 0 && res->evicted_pages < budget; v++) {
                uint64_t cursor = vmas[v].start;

                if (!zsw_vma_eligible(&vmas[v]) || !vmas[v].uffd_registered)
                        continue;
                while (cursor < vmas[v].end && res->evicted_pages < budget) {
                        struct page_region regions[64];
                        uint64_t want = MIN(budget - res->evicted_pages, ZSW_EVICT_MAX_PAGES);
                        uint64_t walk_end;
                        ssize_t n;

                        n = zsw_pagemap_scan_present(pagemap, cursor, vmas[v].end, want, regions,
                                                     ARRAY_SIZE(regions), &walk_end);
                        if (n < 0) {
                                r = (int) n;
                                break;
                        }
                        if (n > 0) {
                                r = evict_round(e, t, rd, regions, (size_t) n, res);
                                if (r < 0)
                                        break;
                        }
                        if (walk_end <= cursor)
                                break;
                        cursor = walk_end;
                }
        }
        free(rd->buf);
        free(rd);
        if (r < 0 && err)
                snprintf(err->message, sizeof(err->message),
                         "eviction of process %d stopped after %" PRIu64 " pages: %s", t->pid,
                         res->evicted_pages, strerror(-r));
        return r;
}
