/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Eviction: taking a target's present pages into the store without losing
 * a write.
 *
 * A round takes up to ZSW_EVICT_MAX_PAGES present pages (ZSW_EVICT_HELD_PAGES
 * of a target held at a budget, see round_size()):
 *   1. publish the round (COLLECTING) so that fault threads can see it;
 *   2. write-protect its runs: from now on a write by the target raises a
 *      WP fault instead of changing the page behind our back; pages not
 *      present and protected right after are cancelled (the target
 *      removed them before the round was published; see
 *      round_keep_protected());
 *   3. read the pages (process_vm_readv; they are present, so the read
 *      cannot fault on a missing page of the target, which would block us
 *      on our own fault service);
 *   4. store them through the store's batch pipeline;
 *   5. stop every thread of the target (round_drop() says why), cancel
 *      pages it removed meanwhile (missing or unprotected now), commit
 *      (DROPPING): pages that were written, removed, unmapped or moved
 *      are cancelled and their entries dropped; the rest are zapped from
 *      the target by two injected process_madvise calls, guard markers
 *      installed and removed again (round_zap()), which leave their PTEs
 *      empty without raising a UFFD_EVENT_REMOVE, and the threads let go.
 *
 * Fault threads, holding the target's serve_lock, apply the rules:
 *   - a WP fault on a page of a COLLECTING round cancels that page and
 *     un-protects it: the target's write goes through, the page stays;
 *   - a WP fault during DROPPING waits: the page is being dropped, and the
 *     thread is woken afterwards to fault it back in from the store;
 *   - the target's own MADV_DONTNEED, munmap or mremap of pages of the
 *     round cancels them; pages it moves over pages of the round leave
 *     the round, entries and all (evict_on_move_in());
 *   - our drop raises no UFFD_EVENT_REMOVE, so every REMOVE is the
 *     target's; only where the kernel lacks guard regions is the drop a
 *     MADV_DONTNEED, which raises one per dropped page: then the first
 *     REMOVE of a committed page is taken for ours and changes nothing in
 *     the store, a second one is the target's (see evict_on_remove());
 *   - a missing fault on a cancelled page is never served from the store:
 *     its entry may hold what the target discarded; nor one on a page of
 *     a COLLECTING round, which the target must have discarded (it was
 *     present when the round took it): that page is cancelled and
 *     zero-filled; one on a page being dropped waits for the drop, like a
 *     write (evict_may_restore());
 *   - a page brought back during a round keeps its entry, which the round
 *     settles (evict_forget_restored()).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "evict.h"
#include "hold.h"
#include "parallel.h"
#include "remote.h"
#include "uffd.h"
#include "vma.h"

/* The first batch index whose address is >= addr. */
static size_t batch_lower_bound(const struct evict_batch *b, uint64_t addr) {
        size_t lo = 0, hi = b->n;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (b->addrs[mid] < addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* A page of the round; pages moved in over it are not (evict_on_move_in()). */
static ssize_t batch_find(const struct evict_batch *b, uint64_t addr) {
        size_t i = batch_lower_bound(b, addr);

        return i < b->n && b->addrs[i] == addr && !b->moved_in[i] ? (ssize_t) i : -1;
}

static void batch_cancel(struct evict_batch *b, size_t i) {
        if (!b->cancelled[i]) {
                b->cancelled[i] = true;
                b->n_cancelled++;
        }
}

/* The range of the drop (b->drop, while bridging) holding addr, or -1. */
static ssize_t drop_find(const struct evict_batch *b, uint64_t addr) {
        size_t lo = 0, hi = b->n_drop;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                uint64_t start = (uint64_t) b->drop[mid].iov_base;

                if (addr < start)
                        hi = mid;
                else if (addr >= start + b->drop[mid].iov_len)
                        lo = mid + 1;
                else
                        return (ssize_t) mid;
        }
        return -1;
}

static bool in_drop(const struct evict_batch *b, uint64_t addr) {
        return drop_find(b, addr) >= 0;
}

/* Whether one range of the drop holds all of [start, end). */
static bool drop_covers(const struct evict_batch *b, uint64_t start, uint64_t end) {
        ssize_t d = drop_find(b, start);

        return d >= 0 && end <= (uint64_t) b->drop[d].iov_base + b->drop[d].iov_len;
}

/* A WP fault may be read long after it was raised: the thread that raised
 * it may have been interrupted meanwhile (our seize does that) and the
 * message stays queued. So the rules never depend on who raised it: in a
 * committed round the page is being dropped whoever wrote it, and the
 * writer is woken to fault it back in once the drop is done. */
bool evict_on_wp_fault(struct zsw_target *t, uint64_t addr, bool *ret_round) {
        struct evict_batch *b = &t->batch;
        bool handled = false;
        ssize_t i;

        addr &= ~(uint64_t) (ZSW_PAGE_SIZE - 1);
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
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
        zsw_mutex_unlock(&t->batch_lock);
        /* Else an age scan protected it. */
        *ret_round = i >= 0;
        /* Written while a round was taking it: in use. */
        if (i >= 0 && !handled)
                zsw_heat_touch(t->heat, addr / ZSW_PAGE_SIZE, 1, zsw_now_ns());
        /* Not handled: the caller un-protects the page, which lets the
         * write through. */
        return handled;
}


/* Our drop by guard markers raises no REMOVE: every one is the
 * target's. One by DONTNEED (round_zap()'s fallback) raises one REMOVE
 * per page it drops; the target's DONTNEED of the same pages, before or
 * after ours, raises another. Whichever comes first is taken for ours,
 * the second for the target's, and the page reads zeros either way, as
 * it must. Outside a committed round every removal is the target's. */
void evict_on_remove(struct zsw_target *t, uint64_t start, uint64_t end, enum evict_removal kind) {
        struct evict_batch *b = &t->batch;
        uint64_t from = start; /* start of the target's part not yet dropped */

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (b->n_drop > 0 && kind == REMOVAL_REMOVE && !b->drop_silent) {
                /* The target is stopped: a REMOVE is our drop's, over its
                 * own pages and its bridges alike. */
                for (size_t i = batch_lower_bound(b, start); i < b->n && b->addrs[i] < end; i++)
                        if (!b->cancelled[i])
                                b->drop_seen[i] = true;
                if (!drop_covers(b, start, end))
                        for (uint64_t a = start; a < end; a += ZSW_PAGE_SIZE)
                                if (!in_drop(b, a))
                                        zsw_store_invalidate(t->owner, a / ZSW_PAGE_SIZE, 1);
                zsw_mutex_unlock(&t->batch_lock);
                return;
        }
        if (b->state != EVICT_IDLE)
                for (size_t i = batch_lower_bound(b, start); i < b->n && b->addrs[i] < end; i++) {
                        if (kind == REMOVAL_REMOVE && b->state == EVICT_DROPPING &&
                            !b->drop_silent && !b->cancelled[i] && !b->drop_seen[i]) {
                                b->drop_seen[i] = true;
                                if (b->addrs[i] > from)
                                        zsw_store_invalidate(t->owner, from / ZSW_PAGE_SIZE,
                                                             (b->addrs[i] - from) / ZSW_PAGE_SIZE);
                                from = b->addrs[i] + ZSW_PAGE_SIZE;
                        } else
                                batch_cancel(b, i);
                }
        if (kind != REMOVAL_MOVE && end > from)
                zsw_store_invalidate(t->owner, from / ZSW_PAGE_SIZE, (end - from) / ZSW_PAGE_SIZE);
        zsw_mutex_unlock(&t->batch_lock);
}

/* The target moved pages over [start, end). The round's pages there were
 * unmapped first (the UNMAP cancelled them and dropped their entries);
 * what is there now are the moved pages, whose entries the caller moves
 * in next: they are served from the store like any page outside the
 * round, and the commit must not drop their entries as it drops those of
 * cancelled pages. tests/test-engine.c mremap_over_a_round_keeps_the_moved_pages
 * lost them before. */
bool evict_on_move_in(struct zsw_target *t, uint64_t start, uint64_t end) {
        struct evict_batch *b = &t->batch;
        bool any = false;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (b->state != EVICT_IDLE)
                for (size_t i = batch_lower_bound(b, start); i < b->n && b->addrs[i] < end; i++) {
                        batch_cancel(b, i);
                        b->moved_in[i] = true;
                        any = true;
                }
        zsw_mutex_unlock(&t->batch_lock);
        return any;
}

enum evict_restore evict_may_restore(struct zsw_target *t, uint64_t pgno, bool defer) {
        struct evict_batch *b = &t->batch;
        enum evict_restore v = RESTORE_STORE;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (b->n_drop > 0 && in_drop(b, pgno * ZSW_PAGE_SIZE)) {
                /* Being dropped, or bridged by the drop: whatever the
                 * page is, the drop decides it first. */
                v = RESTORE_WAIT;
                if (defer)
                        b->wake_pending = true;
        } else if (b->state != EVICT_IDLE) {
                ssize_t i = batch_find(b, pgno * ZSW_PAGE_SIZE);

                if (i >= 0 && b->cancelled[i])
                        v = RESTORE_ZERO;
                else if (i >= 0 && b->state == EVICT_COLLECTING) {
                        /* Present when the round took it, and not dropped
                         * by us: the target discarded it (a MADV_DONTNEED
                         * whose REMOVE came before the round, see
                         * round_drop()). Its entry may hold what it
                         * discarded. */
                        batch_cancel(b, (size_t) i);
                        v = RESTORE_ZERO;
                } else if (i >= 0 && b->state == EVICT_DROPPING) {
                        v = RESTORE_WAIT;
                        if (defer)
                                b->wake_pending = true;
                }
        }
        zsw_mutex_unlock(&t->batch_lock);
        return v;
}

uint64_t evict_first_in_round(struct zsw_target *t, uint64_t from, uint64_t end) {
        struct evict_batch *b = &t->batch;
        uint64_t first = end;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (b->state != EVICT_IDLE) {
                size_t i = batch_lower_bound(b, from * ZSW_PAGE_SIZE);

                if (i < b->n && b->addrs[i] / ZSW_PAGE_SIZE < end)
                        first = b->addrs[i] / ZSW_PAGE_SIZE;
                if (b->n_drop > 0) {
                        /* The first range of the drop that ends after from. */
                        size_t lo = 0, hi = b->n_drop;

                        while (lo < hi) {
                                size_t mid = (lo + hi) / 2;

                                if (((uint64_t) b->drop[mid].iov_base + b->drop[mid].iov_len) /
                                            ZSW_PAGE_SIZE <=
                                    from)
                                        lo = mid + 1;
                                else
                                        hi = mid;
                        }
                        if (lo < b->n_drop)
                                first = MIN(
                                        first,
                                        MAX((uint64_t) b->drop[lo].iov_base / ZSW_PAGE_SIZE, from));
                }
        }
        zsw_mutex_unlock(&t->batch_lock);
        return first;
}

void evict_forget_restored(struct zsw_target *t, uint64_t pgno, uint64_t n) {
        struct evict_batch *b = &t->batch;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (b->state == EVICT_IDLE)
                zsw_store_invalidate(t->owner, pgno, n);
        else
                for (uint64_t p = pgno; p < pgno + n; p++)
                        if (batch_find(b, p * ZSW_PAGE_SIZE) < 0 && !in_drop(b, p * ZSW_PAGE_SIZE))
                                zsw_store_invalidate(t->owner, p, 1);
        zsw_mutex_unlock(&t->batch_lock);
}

/* The registered ranges are read whole (smaps, a walk of the target's
 * page tables, and UFFDIO_REGISTER, its mmap lock taken for writing: 3-5
 * ms a reclaim for bench/apps' redis, up to 49 ms) only when the target's
 * maps changed, or at least this often: smaps alone tells the flags that
 * make a mapping ineligible (mlock, MADV_DONTDUMP, another uffd), which
 * maps does not show. */
#define REGISTER_FULL_NS (1000ull * 1000 * 1000)

static struct zsw_range *ranges_dup(const struct zsw_range *v, size_t n) {
        struct zsw_range *c = malloc(MAX(n, (size_t) 1) * sizeof(*c));

        if (c)
                memcpy(c, v, n * sizeof(*c));
        return c;
}

/* Registers every eligible mapping (new ones appear as the target maps
 * memory; registering a registered range again is harmless) and returns
 * the ranges now registered, if ret is not NULL. */
int evict_register_ranges(struct evictor *e, struct zsw_target *t, struct zsw_range **ret,
                          size_t *ret_n, size_t *ret_foreign) {
        struct zsw_vma_list l = {};
        _cleanup_free_ struct zsw_range *ranges = NULL;
        struct zsw_range scratch = { t->scratch, t->scratch + t->scratch_size };
        size_t n = 0, kept = 0, foreign = 0;
        uint64_t now = zsw_now_ns(), hash;
        bool stale, hashed;
        int r;

        /* Hashed before the read: maps that change in between differ
         * from this hash at the next call. */
        stale = atomic_exchange_explicit(&t->reg_stale, false, memory_order_relaxed);
        hashed = target_maps_hash(t, &hash) >= 0;
        if (!stale && hashed && t->reg_ranges && hash == t->reg_maps_hash &&
            now - t->reg_full_ns < REGISTER_FULL_NS) {
                if (ret_foreign)
                        *ret_foreign = t->reg_foreign;
                if (!ret)
                        return 0;
                *ret = ranges_dup(t->reg_ranges, t->n_reg_ranges);
                *ret_n = t->n_reg_ranges;
                return *ret ? 0 : -ENOMEM;
        }
        /* A read that fails leaves none: the next one is whole. */
        free(t->reg_ranges);
        t->reg_ranges = NULL;
        r = target_read_vmas(t, &l);
        if (r < 0)
                return r;
        r = zsw_vma_eligible_ranges(&l, scratch, &ranges, &n);
        zsw_vma_list_free(&l);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                r = zsw_uffd_register(t->uffd, ranges[i].start, ranges[i].end - ranges[i].start,
                                      UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, NULL);
                if (r < 0)
                        zsw_log(e->log, LOG_DEBUG,
                                "Cannot register 0x%" PRIx64 "-0x%" PRIx64 " of %d (%s), skipping",
                                ranges[i].start, ranges[i].end, t->pid, strerror(-r));
                else
                        ranges[kept++] = ranges[i];
                foreign += r == -EBUSY;
        }
        if (hashed) {
                t->reg_ranges = ranges_dup(ranges, kept);
                if (t->reg_ranges) {
                        t->n_reg_ranges = kept;
                        t->reg_foreign = foreign;
                        t->reg_maps_hash = hash;
                        t->reg_full_ns = now;
                }
        }
        if (ret_foreign)
                *ret_foreign = foreign;
        if (ret) {
                *ret = TAKE_PTR(ranges);
                *ret_n = kept;
        }
        return 0;
}

/* The target's /proc/PID/pagemap, for PAGEMAP_SCAN; -errno if gone. */
static int target_open_pagemap(const struct zsw_target *t) {
        char path[64];
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/pagemap", t->pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
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

struct evict_round {
        struct zsw_target *target;
        uint8_t *buf;                         /* 2 chunks of pages */
        void *bufs[2][ZSW_EVICT_CHUNK_PAGES]; /* its pages, by half */
        size_t chunk;                         /* first page of the chunk being stored */
        size_t n_kept;           /* cancelled for the store or a vanished page, not a write */
        void *const *chunk_bufs; /* and where its pages are */
        struct iovec runs[ZSW_EVICT_MAX_PAGES];
        size_t n_runs;
        struct zsw_page_run regions[ZSW_EVICT_MAX_PAGES]; /* the round's pages, as chosen */
        struct zsw_page_run empties[ZSW_EVICT_MAX_PAGES]; /* round_bridge()'s scan, and
                                                                * drop_hot()'s room */
        struct iovec span;                                /* first to last page of the drop */
        uint64_t taken[ZSW_EVICT_MAX_PAGES];              /* page numbers the drop took */
        const struct zsw_range *ranges;                   /* registered, sorted: a bridge */
        size_t n_ranges;                                  /* stays inside one of them */
        bool read_ok[ZSW_EVICT_MAX_PAGES];
        bool stored[ZSW_EVICT_MAX_PAGES];
        bool protected_[ZSW_EVICT_MAX_PAGES];
        int pagemap; /* the target's, for the round's scans */
        /* Where the time goes, for the debug log. */
        uint64_t ns_scan, ns_protect, ns_read, ns_store, ns_drop, ns_seize, ns_inject, ns_sync;
        uint64_t runs_chosen, runs_dropped; /* before and after round_bridge() */
        uint64_t rounds;
};

#define ROUND_BUF_SIZE ((size_t) 2 * ZSW_EVICT_CHUNK_PAGES * ZSW_PAGE_SIZE)

struct evict_round *evict_round_free(struct evict_round *rd) {
        if (rd) {
                munmap(rd->buf, ROUND_BUF_SIZE);
                free(rd);
        }
        return NULL;
}

/* The engine's round buffers, made on its first reclaim and kept: a fresh
 * page's first touch is dear under a hypervisor (it fills its shadow page
 * table; docs/performance.md), 512 of them a reclaim call's worth. The
 * buffer is one aligned huge page where the kernel has one: one fault per
 * reclaim call, as its memory goes back after each (evict_target()). */
static int evict_round_get(struct evictor *e, struct evict_round **ret) {
        struct evict_round *rd;
        uint8_t *m;

        if (!e->evict_round) {
                rd = calloc(1, sizeof(*rd));
                if (!rd)
                        return -ENOMEM;
                /* Map twice the length to cut an aligned run out of it. */
                m = mmap(NULL, 2 * ROUND_BUF_SIZE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (m == MAP_FAILED) {
                        free(rd);
                        return -ENOMEM;
                }
                rd->buf = (uint8_t *) (((uintptr_t) m + ROUND_BUF_SIZE - 1) &
                                       ~(uintptr_t) (ROUND_BUF_SIZE - 1));
                if (rd->buf > m)
                        munmap(m, (size_t) (rd->buf - m));
                munmap(rd->buf + ROUND_BUF_SIZE, (size_t) (m + ROUND_BUF_SIZE - rd->buf));
                (void) madvise(rd->buf, ROUND_BUF_SIZE, MADV_HUGEPAGE);
                for (size_t h = 0; h < 2; h++)
                        for (size_t i = 0; i < ZSW_EVICT_CHUNK_PAGES; i++)
                                rd->bufs[h][i] =
                                        rd->buf + (h * ZSW_EVICT_CHUNK_PAGES + i) * ZSW_PAGE_SIZE;
                e->evict_round = rd;
        }
        rd = e->evict_round;
        rd->ns_scan = rd->ns_protect = rd->ns_read = rd->ns_store = rd->ns_drop = 0;
        rd->ns_seize = rd->ns_inject = rd->ns_sync = 0;
        rd->runs_chosen = rd->runs_dropped = rd->rounds = 0;
        *ret = rd;
        return 0;
}

/* Stores batch number `item` of the chunk being stored (its pages
 * rd->chunk + item * 32 ...). Runs on the evicting thread and the evict
 * pool's threads at once. */
static void store_batch(void *arg, struct zsw_worker *w, size_t item) {
        struct evict_round *rd = arg;
        struct evict_batch *b = &rd->target->batch;
        size_t off = rd->chunk + item * ZSW_STORE_BATCH_MAX, k = 0;
        size_t n = MIN(ZSW_STORE_BATCH_MAX, b->n - off);
        const void *pages[ZSW_STORE_BATCH_MAX];
        uint64_t pgnos[ZSW_STORE_BATCH_MAX];
        size_t idx[ZSW_STORE_BATCH_MAX];
        uint32_t mask = 0;
        int r = 0;

        /* Pages that vanished before the read are not stored, nor pages
         * others were moved over (their entries must stay). */
        zsw_rwlock_rdlock(&rd->target->round_store_lock, ZSW_LOCK_ROUND_STORE);
        zsw_mutex_lock(&rd->target->batch_lock, ZSW_LOCK_BATCH);
        for (size_t i = off; i < off + n; i++)
                if (rd->read_ok[i] && !b->moved_in[i]) {
                        idx[k] = i;
                        pages[k] = rd->chunk_bufs[i - rd->chunk];
                        pgnos[k++] = b->addrs[i] / ZSW_PAGE_SIZE;
                }
        zsw_mutex_unlock(&rd->target->batch_lock);
        if (k > 0)
                r = zsw_store_pages(w, rd->target->owner, pgnos, pages, k, &mask);
        zsw_rwlock_unlock(&rd->target->round_store_lock);
        for (size_t i = 0; i < k; i++)
                rd->stored[idx[i]] = r >= 0 && (mask & (1u << i));
}

/* Step 3 for the chunk of pages from first: reads them into half h. */
static int chunk_read(struct evictor *e, struct zsw_target *t, struct evict_round *rd, size_t first,
                      size_t h) {
        struct evict_batch *b = &t->batch;
        size_t n = MIN((size_t) ZSW_EVICT_CHUNK_PAGES, b->n - first);
        uint64_t t0 = zsw_now_ns();
        int r;

        r = zsw_vma_read_pages(t->pid, b->addrs + first, n, rd->bufs[h], rd->read_ok + first);
        rd->ns_read += zsw_now_ns() - t0;
        if (r < 0)
                return zsw_log_errno(e->log, LOG_DEBUG, r, "Cannot read pages of %d: %m", t->pid);
        return 0;
}

/* Steps 3-4, a chunk at a time: while the evict pool's threads compress a
 * chunk, this thread reads the next one into the other half of the buffer,
 * then joins in the compression. */
static int round_read_store(struct evictor *e, struct zsw_target *t, struct evict_round *rd) {
        struct evict_batch *b = &t->batch;
        size_t h = 0;
        int r;

        rd->target = t;
        r = chunk_read(e, t, rd, 0, h);
        for (size_t first = 0; r >= 0 && first < b->n; first += ZSW_EVICT_CHUNK_PAGES) {
                size_t next = first + ZSW_EVICT_CHUNK_PAGES;
                uint64_t t0 = zsw_now_ns();

                rd->chunk = first;
                rd->chunk_bufs = rd->bufs[h];
                zsw_parallel_start(e->evict_pool, store_batch, rd,
                                   DIV_ROUND_UP(MIN((size_t) ZSW_EVICT_CHUNK_PAGES, b->n - first),
                                                ZSW_STORE_BATCH_MAX));
                h ^= 1;
                if (next < b->n)
                        r = chunk_read(e, t, rd, next, h);
                /* Joined even after a failed read: the chunk's batches may
                 * still be running. */
                zsw_parallel_join(e->evict_pool, e->worker);
                rd->ns_store += zsw_now_ns() - t0;
        }
        return r;
}

/* Runs of a round at most this far apart are scanned by one PAGEMAP_SCAN
 * walk: a call costs a few microseconds, walking the entries of a short
 * gap far less, and a round of scattered pages has a thousand runs, which
 * the commit scans with every thread of the target stopped. */
#define SCAN_JOIN_GAP (512 * ZSW_PAGE_SIZE)

/* After step 2, and again at the commit with the target stopped: only
 * pages present and write-protected now stay in the round. The scan that
 * chose them ran before the round was published, so a page the target
 * removed in between was not cancelled (its REMOVE found no round), and
 * once filled again (a zero fill of ours, a copy) it carries no uffd-wp
 * bit: the target's writes to it would go unseen and the drop would lose
 * them. From the protection on, a page that stays protected cannot change
 * unseen: a write raises a WP fault and a removal an event, and both
 * cancel it. tests/test-zero-window.c's race lost pages this way before
 * this check. The first check also keeps pages already gone out of the
 * read (a missing page would fault on our own service); the one at the
 * commit catches the target's DONTNEEDs whose zap came after the first
 * (round_drop()). */
static int round_keep_protected(struct zsw_target *t, struct evict_round *rd) {
        struct evict_batch *b = &t->batch;
        size_t j = 0;

        memset(rd->protected_, 0, b->n * sizeof(bool));
        for (size_t i = 0, next; i < rd->n_runs; i = next) {
                uint64_t pos = (uint64_t) rd->runs[i].iov_base;
                uint64_t end = pos + rd->runs[i].iov_len;

                /* Runs close together are one walk (see SCAN_JOIN_GAP):
                 * what it finds between them is no page of the round. */
                for (next = i + 1;
                     next < rd->n_runs && (uint64_t) rd->runs[next].iov_base - end <= SCAN_JOIN_GAP;
                     next++)
                        end = (uint64_t) rd->runs[next].iov_base + rd->runs[next].iov_len;

                while (pos < end) {
                        struct zsw_page_run found[64];
                        int k = zsw_vma_scan(rd->pagemap, pos, end, PAGE_IS_PRESENT,
                                             PAGE_IS_WRITTEN, found, ARRAY_SIZE(found), &pos);

                        if (k < 0)
                                return k;
                        for (int f = 0; f < k; f++) {
                                while (j < b->n && b->addrs[j] < found[f].start)
                                        j++;
                                for (; j < b->n && b->addrs[j] < found[f].end; j++)
                                        rd->protected_[j] = true;
                        }
                }
        }
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        for (size_t i = 0; i < b->n; i++)
                if (!rd->protected_[i])
                        batch_cancel(b, i);
        zsw_mutex_unlock(&t->batch_lock);
        return 0;
}

/* Steps 2-4: protect, read, store. Pages that cannot go are cancelled. */
static int round_collect(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                         struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        uint64_t t0 = zsw_now_ns();
        int r;

        for (size_t i = 0; i < rd->n_runs; i++) {
                r = zsw_uffd_writeprotect(t->uffd, (uint64_t) rd->runs[i].iov_base,
                                          rd->runs[i].iov_len, true, false);
                if (r < 0)
                        return zsw_log_errno(e->log, LOG_DEBUG, r,
                                             "Cannot write-protect 0x%" PRIx64 "+%zu of %d: %m",
                                             (uint64_t) rd->runs[i].iov_base, rd->runs[i].iov_len,
                                             t->pid);
        }
        r = round_keep_protected(t, rd);
        if (r < 0)
                return zsw_log_errno(e->log, LOG_DEBUG, r,
                                     "Cannot scan the round's pages of %d: %m", t->pid);
        rd->ns_protect += zsw_now_ns() - t0;

        memset(rd->stored, 0, b->n * sizeof(bool));
        r = round_read_store(e, t, rd);
        if (r < 0)
                return r;
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        for (size_t i = 0; i < b->n; i++)
                if (rd->read_ok[i] && !rd->stored[i] && !b->moved_in[i])
                        res->refused_pages++;
        for (size_t i = 0; i < b->n; i++)
                if (!rd->stored[i] && !b->cancelled[i]) {
                        batch_cancel(b, i);
                        rd->n_kept++;
                }
        zsw_mutex_unlock(&t->batch_lock);
        return 0;
}

/* Un-protects pages that stay: refused by the store, or left after a
 * failure. Pages cancelled by a write were un-protected by the fault
 * thread already; doing it again is harmless. */
static void round_unprotect_kept(struct zsw_target *t) {
        struct evict_batch *b = &t->batch;

        for (size_t i = 0; i < b->n; i++) {
                bool cancelled;

                /* A fault thread may cancel a page meanwhile (a REMOVE). */
                zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
                cancelled = b->cancelled[i];
                zsw_mutex_unlock(&t->batch_lock);
                if (cancelled)
                        zsw_uffd_writeprotect(t->uffd, b->addrs[i], ZSW_PAGE_SIZE, false, false);
        }
}

/* After a failed drop: it may still have dropped some ranges, or parts of
 * one (madvise advises what is mapped and then fails with ENOMEM for a
 * hole the target made; process_madvise stops at the first failing range).
 * Forgetting the entry of a dropped page would lose it, so ask the page
 * tables: pages still present were not dropped and are cancelled (their
 * entries go at once, before a REMOVE of the target's could be taken for
 * ours); missing ones keep their entries. Unreadable page tables mean
 * the target is gone. */
static void round_keep_undropped(struct zsw_target *t) {
        struct evict_batch *b = &t->batch;
        _cleanup_close_ int pagemap = target_open_pagemap(t);

        if (pagemap < 0)
                return;
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        for (size_t i = 0; i < b->n; i++) {
                struct zsw_page_run run;
                uint64_t next;

                if (b->cancelled[i])
                        continue;
                if (zsw_vma_scan(pagemap, b->addrs[i], b->addrs[i] + ZSW_PAGE_SIZE, PAGE_IS_PRESENT,
                                 0, &run, 1, &next) > 0) {
                        zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
                        batch_cancel(b, i);
                }
        }
        zsw_mutex_unlock(&t->batch_lock);
}

/* Whether [start, end) lies inside one registered range. */
static bool in_one_range(const struct evict_round *rd, uint64_t start, uint64_t end) {
        size_t lo = 0, hi = rd->n_ranges;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (rd->ranges[mid].end <= start)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < rd->n_ranges && rd->ranges[lo].start <= start && end <= rd->ranges[lo].end;
}

/* Joins the drop's runs across gaps that hold no page: nothing present
 * (the zero page neither) and nothing swapped, only evicted pages and
 * pages never filled, all inside mappings (PAGEMAP_SCAN reports no run
 * over a hole) and inside one registered range (no mlocked or hugetlb
 * mapping, which madvise would refuse). Dropping such a gap changes
 * nothing in it, and the drop then costs the target, stopped, one
 * range's walk (round_zap()) per joined range instead of per run.
 *
 * The whole span is the round's (b->drop) before the scan: a fault thread
 * that read a fault of a gap page after the stop (one raised before it)
 * either placed the page before that, and the scan sees it present, or
 * waits for the drop; serve_lock is taken once in between so that none
 * is half way. The target is stopped: nothing else changes a gap. No gap
 * holds [rseq, rseq_end), the injected thread's rseq area (see
 * round_commit_drop()): the kernel may write it on the way back from the
 * first call of the drop, and a guard marker there would kill the thread
 * (a missing page there would wait for the drop). */
static void round_bridge(struct zsw_target *t, struct evict_round *rd, uint64_t rseq,
                         uint64_t rseq_end) {
        struct evict_batch *b = &t->batch;
        uint64_t start = (uint64_t) rd->span.iov_base, next;
        size_t n = 0, e = 0;
        int k;

        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        zsw_mutex_unlock(&t->serve_lock);
        k = zsw_vma_scan(rd->pagemap, start, start + rd->span.iov_len, 0,
                         PAGE_IS_PRESENT | PAGE_IS_SWAPPED, rd->empties, ARRAY_SIZE(rd->empties),
                         &next);
        for (size_t i = 1; i < rd->n_runs && k > 0; i++) {
                uint64_t gap = (uint64_t) rd->runs[n].iov_base + rd->runs[n].iov_len;
                uint64_t gap_end = (uint64_t) rd->runs[i].iov_base;

                while (e < (size_t) k && rd->empties[e].end < gap_end)
                        e++;
                if (e < (size_t) k && rd->empties[e].start <= gap &&
                    rd->empties[e].end >= gap_end && in_one_range(rd, gap, gap_end) &&
                    (rseq_end <= gap || gap_end <= rseq))
                        rd->runs[n].iov_len =
                                gap_end + rd->runs[i].iov_len - (uint64_t) rd->runs[n].iov_base;
                else
                        rd->runs[++n] = rd->runs[i];
        }
        if (k > 0)
                rd->n_runs = n + 1;
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        b->drop = rd->runs;
        b->n_drop = rd->n_runs;
        zsw_mutex_unlock(&t->batch_lock);
}

/* Zaps the drop's ranges with every thread stopped: guard markers
 * installed over them (which zaps what is there) and removed again, two
 * injected calls that leave the PTEs empty, as MADV_DONTNEED does, but
 * raise no UFFD_EVENT_REMOVE: no round trip to a fault thread per range
 * (10-20 us each here; both calls together cost 3-4 us on a one-page
 * range, docs/performance.md).
 * Every range is given its remove whatever became of its install: a
 * marker left behind is a SIGSEGV at the target's next touch of the
 * page. Where the kernel lacks guard regions or the target's
 * process_madvise on itself, it is MADV_DONTNEED, and the REMOVEs it
 * raises are told from the target's by drop_seen (evict_on_remove()).
 * Returns what the install (or the DONTNEED) returned. */
static int round_zap(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                     struct zsw_remote *remote) {
        struct evict_batch *b = &t->batch;
        int r, k;

        r = zsw_remote_madvise_ranges_batched(remote, t->scratch, t->scratch_size, rd->runs,
                                              rd->n_runs, MADV_GUARD_INSTALL);
        if (r == -EOPNOTSUPP) {
                zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
                b->drop_silent = false;
                zsw_mutex_unlock(&t->batch_lock);
                return zsw_remote_madvise_ranges(remote, t->scratch, t->scratch_size, rd->runs,
                                                 rd->n_runs, MADV_DONTNEED);
        }
        k = zsw_remote_madvise_ranges(remote, t->scratch, t->scratch_size, rd->runs, rd->n_runs,
                                      MADV_GUARD_REMOVE);
        /* ENOMEM: a range over a hole the target made, whose mapped part
         * was done. */
        if (k < 0 && k != -ENOMEM && k != -ESRCH)
                zsw_log_errno(e->log, LOG_ERR, k,
                              "Cannot remove the guard markers of a drop from process %d: %m; "
                              "its next touch of those pages will kill it",
                              t->pid);
        return r;
}

/* Step 5: commit and drop.
 *
 * Every thread of the target is stopped first, and held until the drop
 * is done: the thread we inject into and all the others. The runs are
 * fixed at the commit and dropped by one injected call; while it runs no
 * thread may unmap a run and map something new in its place (the drop
 * would zap the new mapping's data), and a MADV_DONTNEED of the target's
 * must not be half done: madvise raises UFFD_EVENT_REMOVE, waits only
 * until we read it, and zaps afterwards, so a round that started in
 * between would read the doomed content and, with the zap after our
 * check, leave it stored for a page that reads zeros. A thread stops only
 * on its way back to user space, after its madvise or munmap returned;
 * once the fault threads have handled what the stopped threads raised,
 * a page of the round that is missing now or no longer protected was
 * removed by the target, and is cancelled.
 *
 * Threads are stopped before the commit: a thread blocked on a WP fault
 * of a committed round waits for the drop, and if it were one we need
 * to stop, it would wait for us while we wait for it (a fault taken in
 * kernel mode, e.g. rseq's store to a thread's TLS on its way back to
 * user space, sleeps killably, so PTRACE_INTERRUPT cannot break it).
 * While COLLECTING, every fault is answered at once, so the stops come.
 *
 * round_commit_drop() runs with every thread stopped; round_drop() stops
 * them, lets them go and accounts the stop. */
static int round_commit_drop(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                             struct zsw_remote *remote) {
        struct evict_batch *b = &t->batch;
        uint64_t rseq = 0, t0;
        uint32_t rseq_len = 0;
        int r = 0;

        if (zsw_remote_rseq_area(remote, &rseq, &rseq_len) < 0)
                rseq = 0;
        /* The stopped threads' last events were read (each waited for
         * that); handled too once no fault thread holds serve_lock. */
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        zsw_mutex_unlock(&t->serve_lock);
        if (zsw_uffd_mm_alive(t->uffd) == -ESRCH)
                return -ESRCH; /* exec'd or exited: nothing to drop */
        r = round_keep_protected(t, rd);
        if (r < 0)
                return zsw_log_errno(e->log, LOG_DEBUG, r,
                                     "Cannot scan the round's pages of %d: %m", t->pid);

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        /* The injected call's return writes the thread's rseq area: keep
         * its page, or the thread would wait on our drop while we wait on
         * it (see zsw_remote_rseq_area()). */
        for (size_t i = 0; rseq && i < b->n; i++)
                if (b->addrs[i] < rseq + MAX(rseq_len, 1u) && rseq < b->addrs[i] + ZSW_PAGE_SIZE &&
                    !b->cancelled[i]) {
                        batch_cancel(b, i);
                        rd->n_kept++; /* kept by us, not cancelled by a write */
                }
        for (size_t i = 0; i < b->n; i++)
                if (b->cancelled[i] && !b->moved_in[i])
                        zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
        rd->n_runs = collect_runs(b, rd->runs);
        memset(b->drop_seen, 0, b->n * sizeof(b->drop_seen[0]));
        b->drop_silent = true; /* unless round_zap() falls back to DONTNEED */
        b->state = EVICT_DROPPING;
        if (rd->n_runs > 1) {
                /* Bridges may go anywhere between the first page of the
                 * drop and its last: those pages are the round's from now. */
                rd->span = (struct iovec) { rd->runs[0].iov_base,
                                            (uint64_t) rd->runs[rd->n_runs - 1].iov_base +
                                                    rd->runs[rd->n_runs - 1].iov_len -
                                                    (uint64_t) rd->runs[0].iov_base };
                b->drop = &rd->span;
                b->n_drop = 1;
        }
        zsw_mutex_unlock(&t->batch_lock);
        rd->runs_chosen += rd->n_runs;
        if (rd->n_runs > 1)
                round_bridge(t, rd, rseq, rseq + MAX(rseq_len, 1u));
        rd->runs_dropped += rd->n_runs;

        t0 = zsw_now_ns();
        if (rd->n_runs > 0)
                r = round_zap(e, t, rd, remote);
        rd->ns_inject += zsw_now_ns() - t0;
        /* A drop by DONTNEED returned once its REMOVEs were read; once
         * they are handled, every REMOVE to come is the target's again. */
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        zsw_mutex_unlock(&t->serve_lock);
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        b->drop = NULL;
        b->n_drop = 0;
        zsw_mutex_unlock(&t->batch_lock);
        return r;
}

/* The pages the round took (not cancelled), in rd->taken, stamped taken
 * for the refault distance of each (heat.h). Returns how many. */
static size_t round_taken(struct zsw_target *t, struct evict_round *rd) {
        struct evict_batch *b = &t->batch;
        size_t dropped = 0;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        for (size_t i = 0; i < b->n; i++)
                if (!b->cancelled[i])
                        rd->taken[dropped++] = b->addrs[i] / ZSW_PAGE_SIZE;
        zsw_mutex_unlock(&t->batch_lock);
        for (size_t i = 0, j; i < dropped; i = j) {
                for (j = i + 1; j < dropped && rd->taken[j] == rd->taken[j - 1] + 1; j++)
                        ;
                zsw_heat_taken(t->heat, rd->taken[i], j - i);
        }
        return dropped;
}

static int round_drop(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                      struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        struct zsw_remote *remote = NULL;
        uint64_t start = zsw_now_ns();
        size_t dropped = 0;
        int r;

        r = zsw_remote_seize(t->pid, e->log, &remote);
        if (r >= 0)
                r = zsw_remote_stop_others(remote);
        rd->ns_seize += zsw_now_ns() - start;
        if (r >= 0)
                r = round_commit_drop(e, t, rd, remote);
        /* Stamped before the threads go: a fault on a page right after
         * must find its taken stamp, not have its use overwritten by it. */
        if (r >= 0)
                dropped = round_taken(t, rd);
        /* The round lends no room any more, before its threads go: their
         * faults would count the dropped pages twice. And none while
         * drops fail (a target that cannot be stopped): the group would
         * stay over its limit by the credit for as long. */
        hold_set_credit(t, 0);
        t->credit_off = r < 0;
        if (remote) {
                uint64_t held = zsw_remote_release_held_ns(TAKE_PTR(remote));

                if (held > 0)
                        target_count_stop_ns(t, held);
        }
        /* Dropped: the group has room for the first touches held. */
        if (r >= 0)
                hold_kick(t);
        if (r < 0 && b->state != EVICT_DROPPING)
                return r;
        if (r < 0) {
                round_keep_undropped(t);
                dropped = round_taken(t, rd);
        }
        res->evicted_pages += dropped;
        atomic_fetch_add_explicit(&t->evicted, dropped, memory_order_relaxed);
        return r;
}

static int evict_round(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                       const struct zsw_page_run *regions, size_t n_regions,
                       struct zsw_reclaim_result *res) {
        struct evict_batch *b = &t->batch;
        bool wake;
        int r;

        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        b->n = 0;
        b->n_cancelled = 0;
        b->wake_pending = false;
        rd->n_runs = 0;
        rd->n_kept = 0;
        for (size_t i = 0; i < n_regions; i++) {
                rd->runs[rd->n_runs++] = (struct iovec) { (void *) regions[i].start,
                                                          regions[i].end - regions[i].start };
                for (uint64_t a = regions[i].start; a < regions[i].end; a += ZSW_PAGE_SIZE) {
                        b->cancelled[b->n] = false;
                        b->moved_in[b->n] = false;
                        b->addrs[b->n++] = a;
                }
        }
        b->state = EVICT_COLLECTING;
        zsw_mutex_unlock(&t->batch_lock);
        res->scanned_pages += b->n;
        /* The drop will take these off the group (hold.c's credit). */
        hold_set_credit(t, t->credit_off ? 0 : b->n);

        r = round_collect(e, t, rd, res);
        if (r >= 0) {
                uint64_t t0 = zsw_now_ns();

                r = round_drop(e, t, rd, res);
                rd->ns_drop += zsw_now_ns() - t0;
        }
        /* Failed before the commit (a drop that could not seize the
         * target fails there too): nothing was dropped, and every entry
         * goes, cancelled pages' first: one may hold what the target
         * discarded during the round, and once the round is over no
         * RESTORE_ZERO would keep a fault from reading it back. */
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        if (r < 0 && b->state == EVICT_COLLECTING)
                for (size_t i = 0; i < b->n; i++) {
                        batch_cancel(b, i);
                        if (!b->moved_in[i])
                                zsw_store_invalidate(t->owner, b->addrs[i] / ZSW_PAGE_SIZE, 1);
                }
        zsw_mutex_unlock(&t->batch_lock);
        hold_set_credit(t, 0); /* a round that failed before its drop */

        uint64_t t1 = zsw_now_ns();
        round_unprotect_kept(t);
        /* A drop by DONTNEED returned once its UFFD_EVENT_REMOVEs were
         * read, not once they were handled: a fault thread may still hold
         * them, and must see the round DROPPING when it does, or it would
         * take our own drop for the target's and forget the pages. Threads
         * hold serve_lock from reading a message until it is handled. */
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        zsw_mutex_unlock(&t->serve_lock);
        rd->ns_sync += zsw_now_ns() - t1;
        zsw_mutex_lock(&t->batch_lock, ZSW_LOCK_BATCH);
        /* Only what writes cancelled: refused and vanished pages are not. */
        res->aborted_pages += b->n_cancelled - rd->n_kept;
        wake = b->wake_pending;
        b->state = EVICT_IDLE;
        zsw_mutex_unlock(&t->batch_lock);
        if (wake)
                /* Threads that hit the drop wait: writers on WP faults,
                 * readers of pages already dropped on missing faults. Now
                 * they fault the pages back in from the store. */
                zsw_uffd_wake(t->uffd, regions[0].start,
                              regions[n_regions - 1].end - regions[0].start);
        return r;
}

/* Present pages a round takes besides the cold ones to join two of its
 * runs (evict_next_round()): the drop costs per range (round_zap()) with
 * every thread of the target stopped, and cold pages lie scattered among
 * warmer ones. A page taken this way has gone unused for at least
 * 1/GAP_IDLE_SHARE of the round's idle time (heat.h): under uniform use
 * any page is as likely to come back as another; under skewed use the
 * hot pages stay. */
#define GAP_MAX_PAGES 16u
#define GAP_IDLE_SHARE 8u

/* The pages of a gap between the round's last run and its next cold
 * page, if it can still be joined. */
struct gap {
        struct zsw_page_run pages[GAP_MAX_PAGES];
        size_t n;
        bool broken; /* a hot page, or too many: the next run starts anew */
};

/* Adds page p (kind categories) to the round's regions; extends the last
 * region where p follows it. */
static void round_add(struct zsw_page_run *regions, size_t *n, uint64_t p, uint64_t categories) {
        if (*n > 0 && regions[*n - 1].end == p)
                regions[*n - 1].end += ZSW_PAGE_SIZE;
        else
                regions[(*n)++] = (struct zsw_page_run) { p, p + ZSW_PAGE_SIZE, categories };
}

int evict_next_round(int pagemap, struct zsw_heat *heat, uint64_t cold_ns, uint64_t now,
                     uint64_t *cursor, uint64_t end, uint64_t max, struct zsw_page_run *regions,
                     size_t n_max) {
        uint64_t pages = 0;
        struct gap gap = { .broken = true };
        size_t n = 0;

        while (*cursor < end && pages < max && n < n_max) {
                struct zsw_page_run runs[64];
                uint64_t next;
                int k = zsw_vma_scan(pagemap, *cursor, end, PAGE_IS_PRESENT, 0, runs,
                                     ARRAY_SIZE(runs), &next);

                if (k < 0)
                        return n > 0 ? (int) n : k;
                for (int i = 0; i < k; i++) {
                        if (runs[i].categories & PAGE_IS_PFNZERO) {
                                gap.broken = true;
                                continue;
                        }
                        for (uint64_t p = runs[i].start; p < runs[i].end; p += ZSW_PAGE_SIZE) {
                                bool extends = n > 0 && regions[n - 1].end == p;

                                if (cold_ns &&
                                    zsw_heat_is_hot(heat, p / ZSW_PAGE_SIZE, cold_ns, now)) {
                                        if (gap.n == GAP_MAX_PAGES ||
                                            zsw_heat_is_hot(heat, p / ZSW_PAGE_SIZE,
                                                            cold_ns / GAP_IDLE_SHARE, now))
                                                gap.broken = true;
                                        else
                                                gap.pages[gap.n++] = (struct zsw_page_run) {
                                                        p, p + ZSW_PAGE_SIZE, runs[i].categories
                                                };
                                        continue;
                                }
                                if (!gap.broken && gap.n > 0 && pages + gap.n < max &&
                                    n + gap.n < n_max) {
                                        for (size_t g = 0; g < gap.n; g++)
                                                round_add(regions, &n, gap.pages[g].start,
                                                          gap.pages[g].categories);
                                        pages += gap.n;
                                        extends = regions[n - 1].end == p;
                                }
                                gap.n = 0;
                                gap.broken = false;
                                if (pages == max || (!extends && n == n_max)) {
                                        /* Full: resume at this page next time. */
                                        *cursor = p;
                                        return (int) n;
                                }
                                round_add(regions, &n, p, runs[i].categories);
                                pages++;
                        }
                }
                *cursor = k == 0 || next <= *cursor ? end : next;
        }
        return (int) n;
}

/* With a minimum age, the pages old enough (age.c) are taken in two
 * passes: from the age that gives the budget on its own (coldest first),
 * then down to the minimum. Returns the ages of the passes, 0 for none. */
static unsigned cold_passes(struct zsw_target *t, uint64_t min_age_ms, uint64_t budget,
                            uint32_t passes[2], struct zsw_reclaim_result *res) {
        uint32_t min_age = t->age ? zsw_age_threshold(t->age, min_age_ms * 1000000, zsw_now_ns())
                                  : ZSW_AGE_NEVER;

        if (min_age == ZSW_AGE_NEVER)
                return 0;
        res->cold_pages = zsw_age_count(t->age, min_age);
        if (res->cold_pages == 0)
                return 0;
        passes[0] = zsw_age_coldest(t->age, min_age, budget);
        passes[1] = min_age;
        return passes[0] > min_age ? 2 : 1;
}

/* Without a minimum age, eviction goes round the address space from the
 * target's hand and takes the pages that have gone unused (as seen, see
 * heat.h) at least as long as the first of these that gives the budget:
 * pages never seen in use or not for 64 s first, at last any page.
 * Each class is 1/sqrt(2) of the one before: the closer the classes, the
 * closer the pages taken are to the coldest the budget needs
 * (docs/performance.md, "Heat of the page alone"). */
static const uint64_t heat_classes_ns[] = {
        64000000000, 45254833996, 32000000000, 22627416998, 16000000000, 11313708499,
        8000000000,  5656854249,  4000000000,  2828427124,  2000000000,  1414213562,
        1000000000,  707106781,   500000000,   353553390,   250000000,   176776695,
        125000000,   88388347,    62500000,    44194173,    31250000,    0,
};

/* Segments of the ranges in clock order: from the hand to the end of its
 * range, the ranges after it, those before it, and the hand's range up
 * to the hand. */
static size_t clock_segments(const struct zsw_range *ranges, size_t n, uint64_t hand,
                             struct zsw_range *seg) {
        size_t h = 0, m = 0;

        while (h < n && ranges[h].end <= hand)
                h++;
        if (h == n)
                h = 0, hand = 0;
        hand = MAX(hand, ranges[h].start);
        seg[m++] = (struct zsw_range) { hand, ranges[h].end };
        for (size_t i = 1; i < n; i++)
                seg[m++] = ranges[(h + i) % n];
        if (hand > ranges[h].start)
                seg[m++] = (struct zsw_range) { ranges[h].start, hand };
        return m;
}

/* The first class (the longest idle time) a page idle for idle_ns is
 * in; the last one takes every page. */
static size_t heat_class_of(uint64_t idle_ns) {
        size_t lo = 0, hi = ARRAY_SIZE(heat_classes_ns) - 1;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (zsw_heat_idle_for(idle_ns, heat_classes_ns[mid]))
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return lo;
}

/* The shortest idle time of heat_classes_ns whose pages in seg cover
 * the budget: one walk of the present pages, which also tells heat how
 * many the target keeps. */
static int heat_cold_ns(struct zsw_target *t, struct evict_round *rd, const struct zsw_range *seg,
                        size_t n_seg, uint64_t budget, uint64_t *ret) {
        uint64_t count[ARRAY_SIZE(heat_classes_ns)] = {}, now = zsw_now_ns(), sum = 0;

        for (size_t v = 0; v < n_seg; v++)
                for (uint64_t pos = seg[v].start; pos < seg[v].end;) {
                        struct zsw_page_run runs[64];
                        int k = zsw_vma_scan(rd->pagemap, pos, seg[v].end, PAGE_IS_PRESENT, 0, runs,
                                             ARRAY_SIZE(runs), &pos);

                        if (k < 0)
                                return k;
                        for (int i = 0; i < k; i++) {
                                if (runs[i].categories & PAGE_IS_PFNZERO)
                                        continue;
                                for (uint64_t p = runs[i].start; p < runs[i].end;
                                     p += ZSW_PAGE_SIZE) {
                                        uint64_t idle =
                                                zsw_heat_idle_ns(t->heat, p / ZSW_PAGE_SIZE, now);
                                        count[heat_class_of(idle)]++;
                                }
                        }
                }
        for (size_t c = 0; c < ARRAY_SIZE(heat_classes_ns); c++)
                sum += count[c];
        zsw_heat_set_resident(t->heat, sum);
        sum = 0;
        for (size_t c = 0; c < ARRAY_SIZE(heat_classes_ns); c++) {
                sum += count[c];
                if (sum >= budget || c + 1 == ARRAY_SIZE(heat_classes_ns)) {
                        *ret = heat_classes_ns[c];
                        return 0;
                }
        }
        return 0;
}

static int cmp_run(const void *a, const void *b) {
        const struct zsw_page_run *x = a, *y = b;

        return x->start < y->start ? -1 : x->start > y->start;
}

/* Evicts the n regions gathered in rd->regions as one round: sorted
 * first, as they may come from both sides of the hand. */
static int flush_round(struct evictor *e, struct zsw_target *t, struct evict_round *rd, size_t n,
                       struct zsw_reclaim_result *res) {
        int r;

        if (n == 0)
                return 0;
        qsort(rd->regions, n, sizeof(rd->regions[0]), cmp_run);
        rd->rounds++;
        r = evict_round(e, t, rd, rd->regions, n, res);
        /* The target's mappings were changing (an event not read yet) or
         * are gone in part: that round kept what it could not take; the
         * next ones go on. */
        return r == -EAGAIN || r == -ENOENT || r == -ENOMEM ? 0 : r;
}

/* Leaves out of runs[0..k) the pages heat says were in use less than
 * cold_ns ago (a refault, counted at the page's level), through tmp (room
 * for as many runs as pages). Returns the runs left. */
static int drop_hot(struct zsw_heat *heat, uint64_t cold_ns, struct zsw_page_run *runs, int k,
                    struct zsw_page_run *tmp) {
        uint64_t now = zsw_now_ns();
        int n = 0;

        for (int i = 0; i < k; i++)
                for (uint64_t p = runs[i].start; p < runs[i].end; p += ZSW_PAGE_SIZE) {
                        if (zsw_heat_is_hot(heat, p / ZSW_PAGE_SIZE, cold_ns, now))
                                continue;
                        if (n > 0 && tmp[n - 1].end == p)
                                tmp[n - 1].end += ZSW_PAGE_SIZE;
                        else
                                tmp[n++] = (struct zsw_page_run) { p, p + ZSW_PAGE_SIZE,
                                                                   runs[i].categories };
                }
        memcpy(runs, tmp, (size_t) n * sizeof(*runs));
        return n;
}

/* Pages a round of t takes. Each round costs a stop of every thread of
 * t, so rounds are as long as they can be; but the faults of a target
 * held at a budget (hold.c: a policy holds its first touches at its
 * group's MemoryBudget=) may wait for room, and room comes only with a
 * round's drop, after all its pages are read and compressed: tens of
 * milliseconds for a full round. Shorter rounds there make room sooner
 * and stops shorter, for more stops (docs/performance.md, "Rounds of a
 * held target"). */
static uint64_t round_size(struct zsw_target *t) {
        return hold_on(t) ? ZSW_EVICT_HELD_PAGES : ZSW_EVICT_MAX_PAGES;
}

/* One walk over seg, gathering pages into rounds of up to round_size(t)
 * pages, across segments, until the budget is met: with age, pages at
 * least that many age scans old that heat does not show in use for
 * cold_ns (the minimum age: a page that came back by a fault waits that
 * long, more for a hot one, before it goes again); else pages cold for
 * cold_ns by heat alone. */
static int evict_pass(struct evictor *e, struct zsw_target *t, struct evict_round *rd,
                      const struct zsw_range *seg, size_t n_seg, uint64_t cold_ns, uint32_t age,
                      uint64_t budget, struct zsw_reclaim_result *res) {
        uint64_t pages = 0, size = round_size(t);
        size_t n = 0;
        int r = 0;

        for (size_t v = 0; v < n_seg && res->evicted_pages + pages < budget; v++) {
                uint64_t cursor = seg[v].start;

                while (cursor < seg[v].end && res->evicted_pages + pages < budget) {
                        uint64_t want = MIN(budget - res->evicted_pages - pages, size - pages);
                        struct zsw_page_run *regions = rd->regions + n;
                        uint64_t t0 = zsw_now_ns();
                        int k;

                        k = age == 0 ? evict_next_round(rd->pagemap, t->heat, cold_ns, t0, &cursor,
                                                        seg[v].end, want, regions,
                                                        ZSW_EVICT_MAX_PAGES - n)
                                     : zsw_age_next_round(t->age, rd->pagemap, age, &cursor,
                                                          seg[v].end, want, regions,
                                                          ZSW_EVICT_MAX_PAGES - n);
                        if (k > 0 && age > 0 && cold_ns > 0)
                                k = drop_hot(t->heat, cold_ns, regions, k, rd->empties);
                        rd->ns_scan += zsw_now_ns() - t0;
                        if (k < 0)
                                return k == -ENOENT || k == -ENOMEM ? flush_round(e, t, rd, n, res)
                                                                    : k;
                        for (int i = 0; i < k; i++)
                                pages += (regions[i].end - regions[i].start) / ZSW_PAGE_SIZE;
                        n += (size_t) k;
                        if (k > 0)
                                t->hand = regions[k - 1].end;
                        if (pages == size || n == ZSW_EVICT_MAX_PAGES) {
                                r = flush_round(e, t, rd, n, res);
                                if (r < 0)
                                        return r;
                                n = 0;
                                pages = 0;
                        }
                }
        }
        return flush_round(e, t, rd, n, res);
}

int evict_target(struct evictor *e, struct zsw_target *t, uint64_t max_bytes, uint64_t min_age_ms,
                 struct zsw_reclaim_result *res, char *why, size_t why_size) {
        _cleanup_free_ struct zsw_range *ranges = NULL, *seg = NULL;
        _cleanup_close_ int pagemap = -EBADF;
        struct evict_round *rd = NULL;
        uint64_t budget = max_bytes / ZSW_PAGE_SIZE;
        uint32_t passes[2];
        size_t n_ranges = 0, n_seg;
        uint64_t t0, ns_register;
        int r;

        /* With a minimum age and no page old enough at the last age scan,
         * nothing can be taken: spare the target the walk of its mappings
         * (smaps reads its page tables, registering takes its mmap lock
         * for writing) that a policy would otherwise make it pay at each
         * period until pages turn cold. */
        if (min_age_ms > 0 && cold_passes(t, min_age_ms, budget, passes, res) == 0)
                return 0;
        t0 = zsw_now_ns();
        r = evict_register_ranges(e, t, &ranges, &n_ranges, NULL);
        ns_register = zsw_now_ns() - t0;
        if (r < 0)
                return r;
        if (n_ranges == 0)
                return 0;
        seg = calloc(n_ranges + 1, sizeof(*seg));
        if (!seg)
                return -ENOMEM;
        pagemap = target_open_pagemap(t);
        if (pagemap < 0)
                return pagemap;
        r = evict_round_get(e, &rd);
        if (r < 0)
                return r;
        rd->pagemap = pagemap;
        rd->ranges = ranges;
        rd->n_ranges = n_ranges;

        if (min_age_ms == 0 && max_bytes == UINT64_MAX) {
                /* Everything: one walk in address order. */
                r = evict_pass(e, t, rd, ranges, n_ranges, 0, 0, budget, res);
        } else if (min_age_ms == 0) {
                uint64_t cold_ns = 0;

                n_seg = clock_segments(ranges, n_ranges, t->hand, seg);
                r = heat_cold_ns(t, rd, seg, n_seg, budget, &cold_ns);
                if (r >= 0)
                        r = evict_pass(e, t, rd, seg, n_seg, cold_ns, 0, budget, res);
        } else {
                unsigned n_passes = cold_passes(t, min_age_ms, budget, passes, res);

                for (unsigned p = 0; p < n_passes && r >= 0 && res->evicted_pages < budget; p++)
                        r = evict_pass(e, t, rd, ranges, n_ranges, min_age_ms * 1000000, passes[p],
                                       budget, res);
        }
        /* A daemon that saves memory does not sit on 2 MiB between reclaims. */
        (void) madvise(rd->buf, ROUND_BUF_SIZE, MADV_DONTNEED);
        zsw_log(e->log, LOG_DEBUG,
                "Evicted %" PRIu64 " pages of %d; us spent: register %" PRIu64 ", scan %" PRIu64
                ", protect %" PRIu64 ", read %" PRIu64 ", store %" PRIu64 ", drop %" PRIu64
                " (seize %" PRIu64 ", inject %" PRIu64 "), sync %" PRIu64 "; %" PRIu64
                " rounds, %" PRIu64 " runs dropped as %" PRIu64,
                res->evicted_pages, t->pid, ns_register / 1000, rd->ns_scan / 1000,
                rd->ns_protect / 1000, rd->ns_read / 1000, rd->ns_store / 1000, rd->ns_drop / 1000,
                rd->ns_seize / 1000, rd->ns_inject / 1000, rd->ns_sync / 1000, rd->rounds,
                rd->runs_chosen, rd->runs_dropped);
        if (r < 0 && why)
                snprintf(why, why_size,
                         "eviction of process %d stopped after %" PRIu64 " pages: %s", t->pid,
                         res->evicted_pages, strerror(-r));
        return r < 0 ? r : 0;
}

/* Hands the refaults noted since the last scan to the age table. */
static void age_note_refaults(struct zsw_target *t) {
        uint64_t head = atomic_load_explicit(&t->refault_head, memory_order_acquire);
        uint64_t from = MAX(t->refault_tail, head > REFAULT_RING ? head - REFAULT_RING : 0);
        uint64_t pgnos[64];
        size_t n = 0;

        for (uint64_t i = from; i < head; i++) {
                pgnos[n++] = atomic_load_explicit(&t->refault_ring[i % REFAULT_RING],
                                                  memory_order_relaxed);
                if (n == ARRAY_SIZE(pgnos) || i + 1 == head) {
                        zsw_age_note_refaults(t->age, pgnos, n);
                        n = 0;
                }
        }
        t->refault_tail = head;
}

int evict_age_scan(struct evictor *e, struct zsw_target *t) {
        _cleanup_free_ struct zsw_range *ranges = NULL;
        _cleanup_close_ int pagemap = -EBADF;
        struct zsw_age_scan_stats st;
        struct zsw_age_cost cost = {
                atomic_load_explicit(&t->age_wp_faults, memory_order_relaxed),
                atomic_load_explicit(&t->age_wp_fault_ns, memory_order_relaxed),
                e->age_cost_percent,
        };
        uint64_t start = zsw_now_ns();
        size_t n_ranges = 0;
        int r;

        /* New mappings are registered first, so that their pages age too. */
        r = evict_register_ranges(e, t, &ranges, &n_ranges, NULL);
        if (r < 0)
                return r;
        pagemap = target_open_pagemap(t);
        if (pagemap < 0)
                return pagemap;
        if (!t->age) {
                r = zsw_age_new(&t->age);
                if (r < 0)
                        return r;
        }
        r = zsw_age_scan(t->age, pagemap, t->uffd, ranges, n_ranges,
                         e->age_cost_percent < 100 ? &cost : NULL, &st);
        if (r < 0)
                return zsw_log_errno(e->log, LOG_DEBUG, r, "Age scan of %d failed: %m", t->pid);
        age_note_refaults(t);
        /* The cost includes finding the mappings (smaps walks the page
         * tables too). */
        st.duration_ns = zsw_now_ns() - start;
        zsw_mutex_lock(&t->age_stats_lock, ZSW_LOCK_AGE_STATS);
        t->age_last = st;
        t->age_scans++;
        t->age_scan_ns += st.duration_ns;
        zsw_mutex_unlock(&t->age_stats_lock);
        zsw_log(e->log, LOG_DEBUG,
                "Age scan of %d: %" PRIu64 " pages present, %" PRIu64 " idle, %" PRIu64
                " protected again (%" PRIu64 " runs could not be), %" PRIu64 " written left "
                "unprotected (hot pages' least level %" PRIu64 "), %" PRIu64 " us",
                t->pid, st.present_pages, st.idle_pages, st.protected_pages, st.protect_failures,
                st.unprotected_pages, st.rearm_floor, st.duration_ns / 1000);
        return 0;
}
