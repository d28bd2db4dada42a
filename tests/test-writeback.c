/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The writeback tier on a real store and a real swapfile (O_DIRECT,
 * io_uring): tiny pool limits so that writeback happens, every byte checked
 * after it came back through the disk, the accept threshold, per-owner
 * limits and the writeback switch, round-robin fairness, races of loads and
 * invalidations with the switch to disk, a full disk and a failing device.
 */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store-helpers.h"
#include "writeback.h"
#include "test-disk.h"

struct fixture {
        char dir[PATH_MAX];
        struct zsw_swapfile *sf;
        struct zsw_store *s;
        struct zsw_worker *w;
        struct zsw_writeback *wb;
};

static void fixture_open(struct fixture *f, const char *dir, uint64_t pool_limit,
                         uint64_t file_max) {
        struct zsw_store_config sc = {
                .read_disk = zsw_writeback_read_disk,
                .read_disk_batch = zsw_writeback_read_disk_batch,
                .free_disk = zsw_writeback_free_disk,
        };

        static bool corpus_ready;

        if (!corpus_ready)
                helpers_init();
        corpus_ready = true;
        *f = (struct fixture) {};
        snprintf(f->dir, sizeof(f->dir), "%s", dir);
        ASSERT_OK(zsw_swapfile_open(dir, file_max, NULL, &f->sf));
        sc.disk_userdata = f->sf;
        ASSERT_OK(zsw_store_new(&sc, &f->s));
        ASSERT_OK(zsw_worker_new(f->s, &f->w));
        ASSERT_OK(zsw_writeback_new(
                f->s, f->sf, &(struct zsw_writeback_config) { .pool_limit_bytes = pool_limit },
                &f->wb));
}

static void fixture_close(struct fixture *f) {
        f->wb = zsw_writeback_free(f->wb);
        f->w = zsw_worker_free(f->w);
        f->s = zsw_store_free(f->s);
        f->sf = zsw_swapfile_close(f->sf);
}

static struct zsw_store_stats owner_stats(struct zsw_owner *o) {
        struct zsw_store_stats st;

        zsw_store_owner_get_stats(o, &st);
        return st;
}

static struct zsw_store_stats store_stats(struct fixture *f) {
        struct zsw_store_stats st;

        zsw_store_get_stats(f->s, &st);
        return st;
}

static struct zsw_writeback_stats wb_stats(struct fixture *f) {
        struct zsw_writeback_stats st;

        zsw_writeback_get_stats(f->wb, &st);
        return st;
}

/* Page pgno of an owner salted with salt: mostly data, some raw noise and
 * same-filled pages. */
static enum page_kind kind_of(uint64_t pgno) {
        return pgno % 17 == 0 ? PAGE_NOISE : pgno % 23 == 0 ? PAGE_SAME : PAGE_DATA;
}

/* Stores pages [first, first + n) in batches of 32, letting the shrinker
 * make room when a store is refused. Returns the pages stored (it stops
 * at a refusal that persists). */
static size_t store_range(struct fixture *f, struct zsw_owner *o, uint64_t salt, uint64_t first,
                          size_t n) {
        static uint8_t pages[ZSW_STORE_BATCH_MAX][ZSW_PAGE_SIZE];
        size_t stored = 0;

        for (uint64_t b = first; b < first + n; b += ZSW_STORE_BATCH_MAX) {
                const void *p[ZSW_STORE_BATCH_MAX];
                uint64_t pgnos[ZSW_STORE_BATCH_MAX];
                size_t m = MIN((size_t) (first + n - b), (size_t) ZSW_STORE_BATCH_MAX);
                int r = -ENOSPC;

                for (size_t i = 0; i < m; i++) {
                        pgnos[i] = b + i;
                        make_page(pages[i], kind_of(b + i), salt + b + i);
                        p[i] = pages[i];
                }
                for (unsigned tries = 0; tries < 8 && r == -ENOSPC; tries++) {
                        r = zsw_store_pages(f->w, o, pgnos, p, m, NULL);
                        if (r == -ENOSPC)
                                zsw_writeback_settle(f->wb);
                }
                if (r < 0) {
                        ASSERT_EQ(r, -ENOSPC);
                        return stored;
                }
                ASSERT_EQ(r, (int) m);
                stored += m;
        }
        return stored;
}

static void check_range(struct fixture *f, struct zsw_owner *o, uint64_t salt, uint64_t first,
                        size_t n, unsigned flags) {
        uint8_t buf[ZSW_PAGE_SIZE];

        for (uint64_t pgno = first; pgno < first + n; pgno++) {
                ASSERT_OK(zsw_store_load(f->w, o, pgno, buf, flags));
                assert_page(buf, kind_of(pgno), salt + pgno);
        }
}

TEST(every_byte_back_through_disk) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_store_stats st;
        struct zsw_writeback_stats ws;
        struct zsw_swapfile_stats ss;
        struct zsw_owner *o;
        struct fixture f;
        const size_t n = 8192;

        fixture_open(&f, dir, 512 << 10, 256 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        ASSERT_EQ(store_range(&f, o, 1000, 0, n), n);
        zsw_writeback_settle(f.wb);

        st = owner_stats(o);
        ws = wb_stats(&f);
        ASSERT_EQ_U(st.stored_pages, n);
        ASSERT_GT(st.disk_pages, n / 2);
        ASSERT_EQ_U(st.disk_pages, store_stats(&f).disk_pages);
        ASSERT_EQ_U(ws.written_back, st.written_back);
        ASSERT_GE(ws.written_back, st.disk_pages);
        ASSERT_GT(store_stats(&f).pool_limit_hit, 0);
        ASSERT_GT(st.rejects[ZSW_REJECT_POOL_LIMIT], 0);
        ASSERT_GT(ws.wakeups, 0);
        /* Cold entries written in batches: one request per batch or close. */
        ASSERT_GE(ws.written_back, 16 * ws.write_requests);

        /* Shared loads keep the entries (and their sectors). */
        check_range(&f, o, 1000, 0, n, 0);
        st = owner_stats(o);
        ASSERT_GT(st.disk_reads, 0);
        ASSERT_EQ_U(st.disk_pages, owner_stats(o).disk_pages);
        /* Exclusive loads free every sector. */
        check_range(&f, o, 1000, 0, n, ZSW_LOAD_EXCLUSIVE);
        st = store_stats(&f);
        ASSERT_EQ_U(st.stored_pages, 0);
        ASSERT_EQ_U(st.disk_pages, 0);
        ASSERT_EQ_U(st.disk_bytes, 0);
        zsw_swapfile_get_stats(f.sf, &ss);
        ASSERT_EQ_U(ss.disk_bytes_in_use, 0);
        zsw_store_owner_free(o);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(batches_of_cold_entries_merge_into_few_requests) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_writeback_stats ws;
        struct zsw_owner *o;
        struct fixture f;
        int r;

        /* No limit: only the steps we ask for. */
        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        ASSERT_EQ(store_range(&f, o, 7, 0, 32 * 32), 32 * 32);
        /* Every page but the same-filled ones. */
        while ((r = zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP)) > 0)
                ASSERT_LE(r, ZSW_WRITEBACK_STEP);
        ASSERT_EQ(r, 0);
        ws = wb_stats(&f);
        {
                uint64_t pooled = 0;

                for (uint64_t pgno = 0; pgno < 1024; pgno++)
                        pooled += kind_of(pgno) != PAGE_SAME;
                ASSERT_EQ_U(ws.written_back, pooled);
        }
        ASSERT_EQ_U(ws.steps, DIV_ROUND_UP(ws.written_back, 32));
        ASSERT_GE(ws.written_back, 16 * ws.write_requests);
        ASSERT_GE(ws.bytes_written, ws.payload_bytes_written);
        /* Same-filled pages never go to the LRU: the rest is on disk. */
        ASSERT_EQ(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        ASSERT_EQ_U(owner_stats(o).payload_bytes, 0);
        check_range(&f, o, 7, 0, 32 * 32, 0);
        /* Referenced by those loads, yet on disk already: nothing to do. */
        ASSERT_EQ(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        zsw_store_owner_free(o);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(prefetch_runs_read_neighbours_together) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        static uint8_t pages[ZSW_STORE_BATCH_MAX][ZSW_PAGE_SIZE];
        void *bufs[ZSW_STORE_BATCH_MAX];
        struct zsw_swapfile_stats before, after;
        struct zsw_owner *o;
        struct fixture f;

        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        ASSERT_EQ(store_range(&f, o, 13, 0, 96), 96);
        /* The first 64 (cold) go to disk in two steps. */
        ASSERT_GT(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        ASSERT_GT(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        ASSERT_OK(zsw_swapfile_drop_cache(f.sf));
        for (size_t i = 0; i < ZSW_STORE_BATCH_MAX; i++)
                bufs[i] = pages[i];

        /* A run of disk pages (and same-filled ones among them). */
        zsw_swapfile_get_stats(f.sf, &before);
        ASSERT_EQ(zsw_store_load_run(f.w, o, 16, 32, bufs), 32);
        zsw_swapfile_get_stats(f.sf, &after);
        for (size_t i = 0; i < 32; i++)
                assert_page(pages[i], kind_of(16 + i), 13 + 16 + i);
        ASSERT_GT(after.reads - before.reads, 16);
        /* Two write batches: at most one read request each. */
        ASSERT_LE(after.read_requests - before.read_requests, 2);
        /* Shared loads: everything is still there. */
        ASSERT_EQ_U(owner_stats(o).stored_pages, 96);

        /* A run across disk and memory, stopping at the first hole. */
        ASSERT_EQ(zsw_store_invalidate(o, 80, 1), 1);
        ASSERT_EQ(zsw_store_load_run(f.w, o, 50, 32, bufs), 30);
        for (size_t i = 0; i < 30; i++)
                assert_page(pages[i], kind_of(50 + i), 13 + 50 + i);
        ASSERT_EQ(zsw_store_load_run(f.w, o, 80, 32, bufs), 0);
        ASSERT_EQ(zsw_store_load_run(f.w, o, 200, 32, bufs), 0);
        zsw_store_owner_free(o);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(second_chance_for_referenced_entries) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        uint8_t buf[ZSW_PAGE_SIZE];
        struct zsw_owner *o;
        struct fixture f;

        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        /* 64 data pages (no 0 mod 17/23 among 1..64 except 17, 23, 34, 46,
         * 51: count what goes to disk instead of guessing). */
        ASSERT_EQ(store_range(&f, o, 3, 1, 64), 64);
        /* Page 1 is the coldest; a load marks it referenced. */
        ASSERT_OK(zsw_store_load(f.w, o, 1, buf, 0));
        ASSERT_GT(zsw_writeback_shrink_owner(f.wb, o, 1), 0);
        ASSERT_EQ_U(owner_stats(o).disk_pages, 1);
        /* Page 1 is still in memory: invalidating it frees no sector. */
        {
                uint64_t before = wb_stats(&f).disk_bytes_in_use;

                ASSERT_EQ(zsw_store_invalidate(o, 1, 1), 1);
                ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, before);
                ASSERT_EQ(zsw_store_invalidate(o, 2, 1), 1);
                ASSERT_LT(wb_stats(&f).disk_bytes_in_use, before);
        }
        zsw_store_owner_free(o);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

/* Fills one page at a time until a store is refused. */
static size_t fill_until_refused(struct fixture *f, struct zsw_owner *o, uint64_t first) {
        uint8_t page[ZSW_PAGE_SIZE];
        const void *p = page;

        for (uint64_t pgno = first;; pgno++) {
                int r;

                make_page(page, PAGE_DATA, pgno);
                r = zsw_store_pages(f->w, o, &pgno, &p, 1, NULL);
                if (r == -ENOSPC)
                        return pgno - first;
                ASSERT_EQ(r, 1);
                ASSERT_LT(pgno, first + 100000);
        }
}

static int store_one(struct fixture *f, struct zsw_owner *o, uint64_t pgno) {
        uint8_t page[ZSW_PAGE_SIZE];
        const void *p = page;

        make_page(page, PAGE_DATA, pgno);
        return zsw_store_pages(f->w, o, &pgno, &p, 1, NULL);
}

TEST(accept_threshold_hysteresis) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_owner_config oc = { .compressor = ZSW_COMPRESSOR_DEFAULT, .no_writeback = true };
        struct zsw_owner *o;
        struct fixture f;
        size_t k, refused;

        /* No writeback for this owner: only the threshold brings stores
         * back. */
        fixture_open(&f, dir, 1 << 20, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, &oc, &o));
        k = fill_until_refused(&f, o, 0);
        ASSERT_GT(k, 100);
        refused = owner_stats(o).rejects[ZSW_REJECT_POOL_LIMIT];
        ASSERT_EQ_U(refused, 1);
        ASSERT_EQ_U(store_stats(&f).pool_limit_hit, 1);

        /* 5% freed: under the limit, above the threshold: still refused. */
        ASSERT_EQ_U(zsw_store_invalidate(o, 0, k / 20), k / 20);
        ASSERT_ERRNO(store_one(&f, o, 1000000), ENOSPC);
        ASSERT_EQ_U(owner_stats(o).rejects[ZSW_REJECT_POOL_LIMIT], 2);
        /* Under the limit now: not a limit hit, a refusal by threshold. */
        ASSERT_EQ_U(store_stats(&f).pool_limit_hit, 1);
        /* 15% freed: under 90% of the limit: accepted again. */
        ASSERT_EQ_U(zsw_store_invalidate(o, k / 20, k / 10), k / 10);
        ASSERT_EQ(store_one(&f, o, 1000001), 1);
        /* And it takes reaching the limit again to refuse. */
        ASSERT_EQ(store_one(&f, o, 1000002), 1);
        ASSERT_GT(fill_until_refused(&f, o, 2000000), 0);
        ASSERT_EQ_U(store_stats(&f).pool_limit_hit, 2);
        ASSERT_EQ_U(store_stats(&f).disk_pages, 0);
        zsw_store_owner_free(o);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(owner_limits_and_writeback_switch) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_owner_config ca = { .compressor = ZSW_COMPRESSOR_DEFAULT, .max_pages = 64 };
        struct zsw_owner_config cb = ca;
        struct zsw_store_stats sa, sb;
        struct zsw_owner *a, *b;
        struct fixture f;
        size_t nb;

        cb.no_writeback = true;
        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, &ca, &a));
        ASSERT_OK(zsw_store_owner_new(f.s, &cb, &b));

        /* a: refused at its limit, written back, stored in the end. */
        ASSERT_EQ(store_range(&f, a, 11, 0, 1024), 1024);
        sa = owner_stats(a);
        ASSERT_GT(sa.rejects[ZSW_REJECT_LIMIT], 0);
        ASSERT_LE(sa.stored_pages - sa.disk_pages - sa.same_filled_pages, 64);
        ASSERT_GE(sa.disk_pages, 1024 - sa.same_filled_pages - 64);
        /* b: refused at its limit for good, nothing written back. */
        nb = store_range(&f, b, 22, 0, 1024);
        ASSERT_GE(nb, 32);
        ASSERT_LT(nb, 1024);
        sb = owner_stats(b);
        ASSERT_LE(sb.stored_pages - sb.same_filled_pages, 64);
        ASSERT_GT(sb.rejects[ZSW_REJECT_WRITEBACK_OFF], 0);
        ASSERT_EQ_U(sb.rejects[ZSW_REJECT_LIMIT], 0);
        ASSERT_EQ_U(sb.disk_pages, 0);
        ASSERT_EQ_U(sb.written_back, 0);
        ASSERT_EQ(zsw_writeback_shrink_owner(f.wb, b, 32) >= 0, true);

        check_range(&f, a, 11, 0, 1024, ZSW_LOAD_EXCLUSIVE);
        check_range(&f, b, 22, 0, nb, ZSW_LOAD_EXCLUSIVE);
        zsw_store_owner_free(a);
        zsw_store_owner_free(b);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(round_robin_between_owners) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_owner *o[3];
        struct zsw_store_stats st[3];
        struct fixture f;

        fixture_open(&f, dir, 256 << 10, 64 << 20);
        for (int i = 0; i < 3; i++)
                ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o[i]));
        /* Owners 0 and 1 fill the pool in turns; owner 2 stays empty. */
        for (uint64_t b = 0; b < 2048; b += 64)
                for (int i = 0; i < 2; i++)
                        ASSERT_EQ(store_range(&f, o[i], (uint64_t) i << 32, b, 64), 64);
        zsw_writeback_settle(f.wb);
        for (int i = 0; i < 3; i++)
                st[i] = owner_stats(o[i]);
        ASSERT_GT(st[0].written_back, 0);
        ASSERT_GT(st[1].written_back, 0);
        ASSERT_EQ_U(st[2].written_back, 0);
        /* Neither pays for the other: shares within a factor of two. */
        ASSERT_LE(st[0].written_back, 2 * st[1].written_back);
        ASSERT_LE(st[1].written_back, 2 * st[0].written_back);
        for (int i = 0; i < 2; i++)
                check_range(&f, o[i], (uint64_t) i << 32, 0, 2048, 0);
        for (int i = 0; i < 3; i++)
                zsw_store_owner_free(o[i]);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

/* ---- races with the switch to disk --------------------------------------- */

struct racer {
        struct fixture *f;
        struct zsw_owner *o;
        _Atomic bool stop;
        _Atomic size_t loads;
        size_t invalidations;
};

/* Loads and invalidates (then stores again) pages of the owner while the
 * main thread writes them back. Each page's content is fixed by its
 * number, so any load that succeeds must match. */
static void *racer_main(void *arg) {
        struct racer *rc = arg;
        struct zsw_worker *w;
        uint8_t buf[ZSW_PAGE_SIZE];
        unsigned seed = 1;

        ASSERT_OK(zsw_worker_new(rc->f->s, &w));
        while (!atomic_load(&rc->stop)) {
                uint64_t pgno = (uint64_t) rand_r(&seed) % 1024;
                unsigned what = (unsigned) rand_r(&seed) % 8;
                int r;

                if (what < 5) {
                        r = zsw_store_load(w, rc->o, pgno, buf, what == 0 ? ZSW_LOAD_EXCLUSIVE : 0);
                        if (r == -ENOENT)
                                continue;
                        ASSERT_OK(r);
                        assert_page(buf, kind_of(pgno), 5 + pgno);
                        rc->loads++;
                        if (what == 0) {
                                const void *p = buf;

                                ASSERT_EQ(zsw_store_pages(w, rc->o, &pgno, &p, 1, NULL), 1);
                        }
                } else {
                        const void *p = buf;

                        zsw_store_invalidate(rc->o, pgno, 1);
                        rc->invalidations++;
                        make_page(buf, kind_of(pgno), 5 + pgno);
                        ASSERT_EQ(zsw_store_pages(w, rc->o, &pgno, &p, 1, NULL), 1);
                }
        }
        zsw_worker_free(w);
        return NULL;
}

TEST(loads_and_invalidations_race_the_switch) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct racer rc = {};
        struct zsw_owner *o;
        struct fixture f;
        pthread_t t;

        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        ASSERT_EQ(store_range(&f, o, 5, 0, 1024), 1024);
        rc.f = &f;
        rc.o = o;
        ASSERT_OK(-pthread_create(&t, NULL, racer_main, &rc));
        /* Until the racer has loaded, however late the scheduler runs it
         * (on a loaded machine 2000 steps may all come first). */
        for (int i = 0; i < 2000 || atomic_load(&rc.loads) < 64; i++)
                ASSERT_GE(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        atomic_store(&rc.stop, true);
        ASSERT_OK(-pthread_join(t, NULL));
        ASSERT_GT(rc.loads, 0);
        ASSERT_GT(owner_stats(o).written_back, 0);

        check_range(&f, o, 5, 0, 1024, 0);
        /* Whatever raced, nothing is left on disk once the pages go. */
        zsw_store_owner_free(o);
        ASSERT_EQ_U(store_stats(&f).disk_pages, 0);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

TEST(clones_share_disk_entries) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct zsw_owner *parent, *child;
        struct fixture f;

        fixture_open(&f, dir, 0, 64 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &parent));
        ASSERT_EQ(store_range(&f, parent, 9, 0, 256), 256);
        ASSERT_OK(zsw_store_owner_clone(parent, &child));
        for (int i = 0; i < 8; i++)
                ASSERT_GE(zsw_writeback_shrink_owner(f.wb, parent, ZSW_WRITEBACK_STEP), 0);
        ASSERT_GT(store_stats(&f).disk_pages, 0);
        check_range(&f, parent, 9, 0, 256, ZSW_LOAD_EXCLUSIVE);
        /* The child still has every page, from disk or memory. */
        ASSERT_GT(wb_stats(&f).disk_bytes_in_use, 0);
        check_range(&f, child, 9, 0, 256, ZSW_LOAD_EXCLUSIVE);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        zsw_store_owner_free(child);
        zsw_store_owner_free(parent);
        fixture_close(&f);
        ASSERT_OK(rmdir(dir));
}

/* Fills the pool past what the disk takes; whatever was stored loads back
 * byte for byte, and the refusals say why. */
static void fill_past_failure(struct fixture *f, uint64_t salt) {
        struct zsw_writeback_stats ws;
        struct zsw_store_stats st;
        struct zsw_owner *o;
        size_t stored;

        ASSERT_OK(zsw_store_owner_new(f->s, NULL, &o));
        stored = store_range(f, o, salt, 0, 16384);
        ASSERT_LT(stored, 16384);
        ws = wb_stats(f);
        st = owner_stats(o);
        ASSERT_GT(ws.write_failures, 0);
        ASSERT_GT(ws.backoffs + ws.wakeups, 0);
        ASSERT_GT(st.rejects[ZSW_REJECT_RECLAIM_FAIL], 0);
        ASSERT_EQ_U(st.stored_pages, stored);
        check_range(f, o, salt, 0, stored, 0);
        check_range(f, o, salt, 0, stored, ZSW_LOAD_EXCLUSIVE);
        zsw_store_owner_free(o);
        ASSERT_EQ_U(wb_stats(f).disk_bytes_in_use, 0);
}

TEST(disk_full_loses_nothing) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        struct fixture f;
        pid_t pid;
        int status;

        /* A child: its mount namespace (and the tmpfs) dies with it. */
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                test_private_mounts();
                if (mount("tmpfs", dir, "tmpfs", 0, "size=512k,mode=0700") < 0)
                        TEST_SKIP("cannot mount a tmpfs: %m");
                fixture_open(&f, dir, 256 << 10, 64 << 20);
                fill_past_failure(&f, 77);
                fixture_close(&f);
                ASSERT_OK(umount(dir));
                _exit(EXIT_SUCCESS);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_OK(rmdir(dir));
        ASSERT_TRUE(WIFEXITED(status));
        if (WEXITSTATUS(status) == EXIT_TEST_SKIP)
                TEST_SKIP("see above");
        ASSERT_EQ(WEXITSTATUS(status), EXIT_SUCCESS);
}

/* The disk fails under written-back pages: their loads fail with EIO and
 * never hand out other bytes, the entries stay (a later try may work),
 * pages in memory load as before, and writeback fails cleanly. */
static void read_errors_body(const char *dir) {
        uint8_t buf[ZSW_PAGE_SIZE], junk[ZSW_PAGE_SIZE];
        size_t on_disk = 0, in_memory = 0;
        struct zsw_owner *o;
        struct fixture f;
        int fd;

        test_private_mounts();
        if (!test_ext4_on_loop(dir))
                TEST_SKIP("no loop device with ext4 here");
        fixture_open(&f, dir, 0, 32 << 20);
        ASSERT_OK(zsw_store_owner_new(f.s, NULL, &o));
        ASSERT_EQ(store_range(&f, o, 55, 0, 512), 512);
        for (int i = 0; i < 8; i++)
                ASSERT_GT(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        ASSERT_EQ_U(owner_stats(o).disk_pages, 8 * 32);
        /* The coldest pages went first: pages of the first batches. */
        ASSERT_OK(zsw_swapfile_drop_cache(f.sf));

        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        test_ext4_shutdown(fd);
        close(fd);

        /* A prefetch run over dead sectors: an error, nothing loaded. */
        {
                void *bufs[ZSW_STORE_BATCH_MAX];

                for (size_t i = 0; i < ZSW_STORE_BATCH_MAX; i++)
                        bufs[i] = buf;
                ASSERT_ERRNO(zsw_store_load_run(f.w, o, 0, 32, bufs), EIO);
        }
        for (uint64_t pgno = 0; pgno < 512; pgno++) {
                int r;

                memset(buf, 0x5a, sizeof(buf));
                memset(junk, 0x5a, sizeof(junk));
                r = zsw_store_load(f.w, o, pgno, buf, ZSW_LOAD_EXCLUSIVE);
                if (r == -EIO) {
                        /* Kept for another try, and nothing handed out. */
                        ASSERT_TRUE(zsw_store_contains(o, pgno));
                        on_disk++;
                        continue;
                }
                ASSERT_OK(r);
                assert_page(buf, kind_of(pgno), 55 + pgno);
                in_memory++;
        }
        ASSERT_EQ_U(on_disk, 8 * 32);
        ASSERT_EQ_U(in_memory, 512 - 8 * 32);
        ASSERT_EQ_U(owner_stats(o).stored_pages, 8 * 32);
        /* Writing back now fails and keeps the pages. */
        ASSERT_EQ(store_range(&f, o, 55, 1024, 256), 256);
        ASSERT_LT(zsw_writeback_shrink_owner(f.wb, o, ZSW_WRITEBACK_STEP), 0);
        ASSERT_GT(wb_stats(&f).write_failures, 0);
        check_range(&f, o, 55, 1024, 256, ZSW_LOAD_EXCLUSIVE);
        /* The lost pages can still be dropped, their sectors freed. */
        zsw_store_owner_free(o);
        ASSERT_EQ_U(wb_stats(&f).disk_bytes_in_use, 0);
        fixture_close(&f);
        ASSERT_OK(umount(dir));
}

TEST(read_errors_never_hand_out_wrong_data) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        int status;
        pid_t pid;

        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                read_errors_body(dir);
                _exit(EXIT_SUCCESS);
        }
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_OK(rmdir(dir));
        ASSERT_TRUE(WIFEXITED(status));
        if (WEXITSTATUS(status) == EXIT_TEST_SKIP)
                TEST_SKIP("see above");
        ASSERT_EQ(WEXITSTATUS(status), EXIT_SUCCESS);
}

/* zram past its mem_limit fails writes that need new memory with an I/O
 * error below ext4: real device errors. */
static void zram_body(int id, const char *dir) {
        struct fixture f;

        test_private_mounts();
        test_zram_ext4(id, "64M", dir);
        /* Room for ext4 and about 2 MiB of writes. */
        test_zram_limit(id, "6M");

        fixture_open(&f, dir, 256 << 10, 32 << 20);
        fill_past_failure(&f, 88);
        fixture_close(&f);
        ASSERT_OK(umount(dir));
}

TEST(device_errors_lose_nothing) {
        _cleanup_free_ char *dir = test_make_dir("test-writeback");
        int id = test_zram_add(), status;

        status = test_in_child(zram_body, id, dir);
        test_zram_remove(id);
        ASSERT_OK(rmdir(dir));
        ASSERT_EQ(status, EXIT_SUCCESS);
}
