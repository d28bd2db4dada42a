/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fault service: the threads that give pages back.
 *
 * Up to one thread per CPU, not pinned, each blocked in epoll_wait(2) on
 * an epoll set of its own; each target's userfaultfd is in one of them
 * (targets go round the threads), so a fault wakes exactly one thread
 * (see fault_threads_add()). Nothing slow (compression, the control
 * socket, ptrace) ever runs on these threads.
 *
 * A target's messages are read and handled under its serve_lock, events
 * of a batch before its faults; see serve_target() and engine-internal.h.
 *
 * The rule that keeps targets from hanging: every fault message we read
 * ends with its thread woken, either by the ioctl that resolves it (COPY,
 * ZEROPAGE, WRITEPROTECT, POISON wake only on success) or by UFFDIO_WAKE
 * when that ioctl failed for any reason (wake_unresolved()). The kernel
 * never wakes a thread whose message was read; a missed wake is a thread
 * asleep forever. docs/design.md lists the other rules of this path.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "evict.h"
#include "fault.h"
#include "hold.h"
#include "uffd.h"

#define FAULT_ZEROS_PAGES 64u

struct fault_buf {
        /* One page for the faulting address and the prefetch window behind
         * it, contiguous so that one UFFDIO_COPY fills them all. */
        _Alignas(ZSW_PAGE_SIZE) uint8_t pages[(1 + FAULT_PREFETCH_MAX) * ZSW_PAGE_SIZE];
};

struct fault_thread {
        struct fault_threads *set;
        pthread_t thread;
        int epfd;
        int stop_fd;           /* eventfd: kicks the thread, or stops it */
        struct fault_buf *buf; /* its pages for UFFDIO_COPY */
        /* Batches of epoll events it finished, and whether it still runs:
         * see fault_threads_remove(). */
        atomic_uint_fast64_t batches;
        atomic_bool running;
        struct zsw_worker *worker;
        bool started;
        /* When the messages being handled were read (or the thread woke
         * for them): a WP fault's service time starts there. */
        uint64_t read_ns;
};

struct fault_threads {
        const struct zsw_log *log;
        struct fault_events events;
        struct fault_thread *threads;
        unsigned n_threads;
        atomic_uint next_fault_thread; /* the next target's (fault_threads_add()) */
        const uint8_t *zeros;          /* FAULT_ZEROS_PAGES of zeros, read-only: what
                                         * written fresh pages are filled from */
};

static _Thread_local struct fault_buf *tls_buf;
static _Thread_local const uint8_t *tls_zeros;

/* A fault we could not resolve (the mappings are changing under an event
 * not read yet, the range is gone, the kernel is short of memory, somebody
 * filled the page first): the faulting thread must not sleep on. Woken, it
 * takes the fault again: it finds its page, or raises a new message once
 * the event is handled, or meets whatever the kernel answers for a range
 * that is gone. A spurious wake only costs a refault; a missing one hangs
 * the target for good. */
static void wake_unresolved(struct zsw_target *t, uint64_t page, int error) {
        if (error != -EEXIST && error != -EAGAIN && error != -ESRCH)
                zsw_log(t->log, LOG_DEBUG,
                        "Fault at 0x%" PRIx64 " of %d not resolved: %s; "
                        "waking the thread to retry",
                        page, t->pid, strerror(-error));
        zsw_uffd_wake(t->uffd, page, ZSW_PAGE_SIZE);
}

/* A page we cannot give back correctly (the disk copy is unreadable, the
 * payload does not decode): the kernel answers a swap read error with
 * SIGBUS, and so do we, rather than hand the target wrong data. The page
 * is poisoned: a user access gets SIGBUS at that address, an access by the
 * kernel on the target's behalf (read(2) into it) gets EFAULT, exactly as
 * for a hardware-poisoned page; nothing retries forever. */
static void fail_fault(struct zsw_target *t, uint64_t addr, int error) {
        int r;

        zsw_log(t->log, LOG_ERR,
                "Cannot restore page 0x%" PRIx64 " of process %d: %s; poisoning it, the process "
                "gets SIGBUS there as the kernel gives on a swap read error",
                addr, t->pid, strerror(-error));
        r = zsw_uffd_poison(t->uffd, addr, ZSW_PAGE_SIZE);
        /* The poison marker (or a page placed first) is the page now: it
         * moves with mremap and stays after a detach; the entry goes. */
        if (r >= 0 || r == -EEXIST)
                evict_forget_restored(t, addr / ZSW_PAGE_SIZE, 1);
        if (r < 0) {
                if (r != -EEXIST && r != -EAGAIN)
                        zsw_log(t->log, LOG_ERR, "Cannot poison page 0x%" PRIx64 " of %d: %s", addr,
                                t->pid, strerror(-r));
                wake_unresolved(t, addr, r);
        }
}

/* Prefetch pays when the stream goes on into the pages it brought: of
 * the last PREFETCH_EPOCH prefetches, fewer than a quarter paid halves the
 * window (down to none), more than half paid doubles it (up to the
 * target's prefetch_window). Without a window, one prefetch of a single
 * page in PREFETCH_PROBE asks again whether streams came back. */
#define PREFETCH_EPOCH 16u
#define PREFETCH_PROBE 16u

static void prefetch_adapt(struct zsw_target *t) {
        if (t->prefetch_tries < PREFETCH_EPOCH)
                return;
        if (t->prefetch_paid * 4 < t->prefetch_tries)
                t->prefetch_now /= 2;
        else if (t->prefetch_paid * 2 > t->prefetch_tries)
                t->prefetch_now = MIN(MAX(t->prefetch_now * 2, 1u), t->prefetch_window);
        t->prefetch_tries = t->prefetch_paid = 0;
}

/* The window for a prefetch now: 0 for none. */
static unsigned prefetch_window(struct zsw_target *t) {
        if (t->prefetch_now > 0)
                return t->prefetch_now;
        if (t->prefetch_window == 0 || ++t->prefetch_skipped < PREFETCH_PROBE)
                return 0;
        t->prefetch_skipped = 0;
        return 1;
}

/* Brings back the stored pages after pgno, up to the prefetch window,
 * and returns how many. Shared loads: an entry is dropped only once its
 * page is in place, so a copy that stops early loses nothing. */
static unsigned prefetch(struct fault_thread *ft, struct zsw_target *t, uint64_t pgno) {
        unsigned want = prefetch_window(t), n = 0, window;
        ssize_t copied;

        /* Pages it brings count against the group's room (hold.c). */
        if (want > 0)
                want = (unsigned) hold_admit(t, want);
        if (want == 0)
                return 0;
        /* Not into the round in flight: its pages are the round's to serve. */
        window = (unsigned) (evict_first_in_round(t, pgno + 1, pgno + 1 + want) - (pgno + 1));

        for (; n < window; n++)
                if (zsw_store_load(ft->worker, t->owner, pgno + 1 + n,
                                   tls_buf->pages + (size_t) n * ZSW_PAGE_SIZE, 0) < 0)
                        break;
        if (n == 0)
                return 0;
        copied = zsw_uffd_copy(t->uffd, (pgno + 1) * ZSW_PAGE_SIZE, tls_buf->pages,
                               (uint64_t) n * ZSW_PAGE_SIZE, 0);
        if (copied <= 0)
                return 0;
        n = (unsigned) (copied / ZSW_PAGE_SIZE);
        hold_spend(t, n);
        evict_forget_restored(t, pgno + 1, n);
        atomic_fetch_add_explicit(&t->prefetched, n, memory_order_relaxed);
        t->prefetch_tries++;
        prefetch_adapt(t);
        return n;
}

/* Fills [pgno, end) with zeros, real pages when real (UFFDIO_COPY from
 * the fault threads' zeros), else the shared zero page (UFFDIO_ZEROPAGE), and
 * returns how many pages from pgno are filled, or a negative errno when
 * none is. A window that crosses the end of its mapping (one ioctl fills
 * one VMA) fails with ENOENT: it is tried shorter, down to pgno alone. */
static ssize_t fill_zeros(struct zsw_target *t, uint64_t pgno, uint64_t end, bool real) {
        for (;;) {
                uint64_t done = 0;
                ssize_t r = 0;

                /* A copy takes at most the zeros we have; ZEROPAGE all. */
                while (pgno + done < end) {
                        uint64_t n = real ? MIN(end - pgno - done, (uint64_t) FAULT_ZEROS_PAGES)
                                          : end - pgno - done;
                        uint64_t at = (pgno + done) * ZSW_PAGE_SIZE;

                        r = real ? zsw_uffd_copy(t->uffd, at, tls_zeros, n * ZSW_PAGE_SIZE, 0)
                                 : zsw_uffd_zeropage(t->uffd, at, n * ZSW_PAGE_SIZE, false);
                        if (r > 0)
                                done += (uint64_t) r / ZSW_PAGE_SIZE;
                        if (r < (ssize_t) (n * ZSW_PAGE_SIZE))
                                break;
                }
                if (done > 0)
                        return (ssize_t) done;
                if (r != -ENOENT || end == pgno + 1)
                        return r;
                end = pgno + MAX((end - pgno) / 2, 1u);
        }
}

/* A first touch of page pgno, a page we never took: zero-fills it and up
 * to zero_window pages after it, at most max pages in all (>= 1: what the
 * first-touch hold allows), and returns the pages filled (from pgno on) or
 * a negative errno. A target filling fresh memory then takes one
 * fault of ours per window instead of one per page.
 *
 * Which zeros: the shared zero page costs no memory, and a read of those
 * pages sees the zeros it must; but a write to it is a copy-on-write
 * fault of the kernel's (the zero page's PTE has no uffd-wp bit), which
 * under a hypervisor can cost far more than a first touch without us.
 * So the page of a write fault is filled with a real zeroed page, and so
 * is the whole window when the write comes right after our last window
 * (a stream filling fresh memory: malloc + memset, a growing heap), which
 * will write every page of it. A stream that stops leaves at most one
 * window of real zeros unused, as readahead leaves pages unread.
 *
 * Why a page of the window is never one whose content we hold: zero-filling
 * page p is what serving a missing fault on p right now would do, and we
 * take the same view: p is not in the store and not in the round in flight
 * (we stop short of every page of a round, cancelled ones included).
 * ZEROPAGE and COPY only fill missing PTEs and stop at the first present
 * page or guard marker (EEXIST, a short fill). A page can only become
 * "missing, content in the store" through our drop, and the drop zaps only
 * pages of a committed round (stored, then DROPPING) and the gaps that
 * round_bridge() made the round's (b->drop, published under batch_lock and
 * then serve_lock taken once, before the gap scan). We hold serve_lock
 * from our checks to the ioctl:
 *   - a round committed before our check is DROPPING
 *     (evict_first_in_round() stops at its pages and at b->drop) or IDLE
 *     with its entries in the store (zsw_store_next() stops there);
 *   - a round still collecting holds present pages only, where the fill
 *     stops with EEXIST; a gap bridged after our check waits for our
 *     serve_lock before its scan, which then sees what we filled as
 *     present and leaves it out;
 *   - where the drop is a MADV_DONTNEED (evict.c's round_zap()), one whose
 *     REMOVE is unread keeps the uffd's mmap_changing raised: the fill
 *     fails with EAGAIN and fills nothing (so do the target's own
 *     DONTNEED, munmap, mremap and fork while their events are unread).
 * The target's DONTNEED of a page we filled raises REMOVE as for any page;
 * its munmap leaves no VMA, where the fill fails with ENOENT. */
static ssize_t zero_fill(struct zsw_target *t, uint64_t pgno, bool window, bool write,
                         uint64_t max) {
        /* Not past the faulting page's 2 MiB region: no page table is
         * allocated for pages nobody touched. */
        uint64_t end, held;
        bool stream = write && pgno == t->zero_next_pgno;
        ssize_t r, ahead;

        /* A first touch while throttled (zsw_engine_set_throttle()): one
         * page per round trip. */
        if (window && atomic_load_explicit(&t->throttle, memory_order_relaxed)) {
                atomic_fetch_add_explicit(&t->throttled_faults, 1, memory_order_relaxed);
                window = stream = false;
        }
        end = MIN(pgno + MIN(1 + (window ? t->zero_window : 0), max), (pgno | 511) + 1);

        if (end > pgno + 1) {
                end = evict_first_in_round(t, pgno + 1, end);
                if (zsw_store_next(t->owner, pgno + 1, &held) && held < end)
                        end = held;
        }
        if (stream || !write || end == pgno + 1)
                r = fill_zeros(t, pgno, end, write);
        else {
                /* The written page real, the rest of the window zero. */
                r = fill_zeros(t, pgno, pgno + 1, true);
                ahead = r > 0 ? fill_zeros(t, pgno + 1, end, false) : 0;
                if (ahead > 0)
                        r += ahead;
        }
        if (r <= 0)
                return r;
        if (window && end > pgno + 1)
                t->zero_next_pgno = pgno + (uint64_t) r;
        if (r > 1)
                atomic_fetch_add_explicit(&t->zero_ahead, (uint64_t) r - 1, memory_order_relaxed);
        return r;
}

/* The copy has woken the faulting thread, most often on this CPU (the
 * fault thread of the faulting CPU usually wins the race for the target).
 * What remains (forgetting the entry, the counters, the unlock and its
 * futex wake, the way back into epoll) would run before it: a thread just
 * woken need not preempt the one that woke it. So yield, and finish once
 * the target runs. Not when prefetch follows (a sequential reader would
 * fault on the pages about to come), and only to a thread that also
 * raised the previous fault: serve_lock stays held, so other threads of
 * the target would wait for the yielded fault thread (figures in
 * docs/performance.md, "The wakeup and the CPU after a copy").
 * Returns when the fault was served, for the service time histogram. */
static uint64_t yield_to_target(struct zsw_target *t, uint64_t pgno, bool sequential,
                                bool same_thread) {
        uint64_t served = zsw_now_ns();

        if (!same_thread)
                return served;
        if (t->prefetch_window && (sequential || pgno == t->last_fault_pgno + 1))
                return served;
        sched_yield();
        return served;
}

/* Puts back the page pgno we took, loaded in the thread's buffer; returns
 * what the copy returned, and in *ret_served when the fault was served. */
static ssize_t restore_page(struct zsw_target *t, uint64_t pgno, bool sequential, bool same_thread,
                            uint64_t *ret_served) {
        ssize_t r = zsw_uffd_copy(t->uffd, pgno * ZSW_PAGE_SIZE, tls_buf->pages, ZSW_PAGE_SIZE, 0);

        if (r > 0)
                *ret_served = yield_to_target(t, pgno, sequential, same_thread);
        /* In place, ours or whoever was first: the copy is stale. */
        if (r > 0 || r == -EEXIST)
                evict_forget_restored(t, pgno, 1);
        /* Back unprotected: the next age scan finds it used. */
        if (r > 0) {
                atomic_fetch_add_explicit(&t->refaults, 1, memory_order_relaxed);
                target_note_refault(t, pgno);
                zsw_heat_touch(t->heat, pgno, 1, *ret_served);
        }
        return r;
}

/* Every message we read ends with its thread woken: by the ioctl that
 * resolves the fault (COPY, ZEROPAGE, POISON wake on success), by
 * wake_unresolved(), by the eviction round it waits for, or, for a fault
 * the hold parked, once hold.c lets it go (served here again, with
 * every check made anew) or releases it. The load is shared: the entry
 * goes only once its page is in place, so a failed copy loses nothing and
 * needs no store call to put the page back (which a full pool could
 * refuse). With pass, the fault gets one page whatever the hold says (it
 * waited HOLD_MAX_NS). */
static void serve_missing(struct fault_thread *ft, struct zsw_target *t, uint64_t addr, bool write,
                          uint32_t tid, bool pass) {
        uint64_t pgno = addr / ZSW_PAGE_SIZE, page = pgno * ZSW_PAGE_SIZE;
        uint64_t start = zsw_now_ns(), served = 0;
        bool same_thread = tid == t->last_fault_tid;
        /* A fault right after the pages we brought back last time: a
         * sequential stream, which used every one of them. */
        bool sequential = pgno == t->next_fault_pgno;
        /* Pages placed from pgno on: a zero fill may place more than one. */
        uint64_t placed = 1, max;
        ssize_t r;

        if (sequential && t->prefetched_last) {
                atomic_fetch_add_explicit(&t->prefetch_hits, t->prefetched_last,
                                          memory_order_relaxed);
                t->prefetch_paid++;
        }
        t->prefetched_last = 0;

        switch (evict_may_restore(t, pgno, true)) {
        case RESTORE_WAIT:
                /* The round wakes it once the drop is done. */
                return;
        case RESTORE_ZERO:
                /* Cancelled by the round: this page alone. */
                r = zero_fill(t, pgno, false, write, 1);
                if (r > 0)
                        hold_spend(t, (uint64_t) r);
                atomic_fetch_add_explicit(&t->zero_faults, 1, memory_order_relaxed);
                break;
        default:
                /* A page the fault adds to the group, a first touch or
                 * one we took coming back: as far as the group's room
                 * goes (hold.c); with none it waits, its thread asleep. */
                max = pass ? 1 : hold_admit(t, 1 + t->zero_window);
                if (max == 0 && hold_park(t, addr, write, tid))
                        return;
                r = zsw_store_load(ft->worker, t->owner, pgno, tls_buf->pages, 0);
                if (r == -ENOENT) {
                        /* Never taken by us: a first touch, zero-filled as
                         * the kernel would, with the window after it. */
                        r = zero_fill(t, pgno, true, write, MAX(max, 1u));
                        if (r > 0)
                                placed = (uint64_t) r;
                        atomic_fetch_add_explicit(&t->zero_faults, 1, memory_order_relaxed);
                } else if (r < 0) {
                        fail_fault(t, page, (int) r);
                        return;
                } else
                        r = restore_page(t, pgno, sequential, same_thread, &served);
                if (r > 0)
                        hold_spend(t, placed);
        }
        if (r < 0)
                wake_unresolved(t, page, (int) r);

        atomic_fetch_add_explicit(&t->faults, 1, memory_order_relaxed);
        zsw_histogram_record(&t->fault_hist, (served ?: zsw_now_ns()) - start);

        /* After the faulting thread is on its way: prefetch only costs
         * the target if it waits for one of these pages meanwhile. */
        if (placed == 1 && (sequential || pgno == t->last_fault_pgno + 1))
                t->prefetched_last = r > 0 ? prefetch(ft, t, pgno) : 0;
        t->last_fault_pgno = pgno + placed - 1;
        t->last_fault_tid = tid;
        t->next_fault_pgno = pgno + placed + t->prefetched_last;
}

/* A write to a write-protected page: the eviction round decides whether
 * the write goes through now (un-protect, which wakes the writer) or waits
 * for the drop (the round wakes it). */
static void serve_wp(struct fault_thread *ft, struct zsw_target *t, uint64_t addr) {
        uint64_t page = addr & ~(uint64_t) (ZSW_PAGE_SIZE - 1);
        bool round;
        int r;

        atomic_fetch_add_explicit(&t->wp_faults, 1, memory_order_relaxed);
        if (evict_on_wp_fault(t, page, &round))
                return;
        r = zsw_uffd_writeprotect(t->uffd, page, ZSW_PAGE_SIZE, false, false);
        if (r < 0)
                wake_unresolved(t, page, r);
        /* What age scans cost the target, for their budget. */
        if (!round) {
                atomic_fetch_add_explicit(&t->age_wp_faults, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&t->age_wp_fault_ns, zsw_now_ns() - ft->read_ns,
                                          memory_order_relaxed);
        }
}

static void handle_msg(struct fault_thread *ft, struct zsw_target *t, const struct uffd_msg *m) {
        switch (m->event) {
        case UFFD_EVENT_PAGEFAULT:
                if (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP)
                        serve_wp(ft, t, m->arg.pagefault.address);
                else
                        serve_missing(ft, t, m->arg.pagefault.address,
                                      m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE,
                                      m->arg.pagefault.feat.ptid, false);
                break;
        case UFFD_EVENT_FORK:
                ft->set->events.fork_child(ft->set->events.userdata, t, (int) m->arg.fork.ufd);
                break;
        case UFFD_EVENT_REMAP: {
                bool into_round;

                /* Faults parked there wait on pages that left. */
                hold_release(t, m->arg.remap.from, m->arg.remap.from + m->arg.remap.len);
                atomic_store_explicit(&t->reg_stale, true, memory_order_relaxed);
                evict_on_remove(t, m->arg.remap.from, m->arg.remap.from + m->arg.remap.len,
                                REMOVAL_MOVE);
                into_round =
                        evict_on_move_in(t, m->arg.remap.to, m->arg.remap.to + m->arg.remap.len);
                /* Over pages of the round in flight: no store of the round
                 * may write its copy of what was there over a moved entry
                 * (the move drops what was stored before it). */
                if (into_round)
                        zsw_rwlock_wrlock(&t->round_store_lock, ZSW_LOCK_ROUND_STORE);
                zsw_store_move(t->owner, m->arg.remap.from / ZSW_PAGE_SIZE,
                               m->arg.remap.to / ZSW_PAGE_SIZE, m->arg.remap.len / ZSW_PAGE_SIZE);
                if (into_round)
                        zsw_rwlock_unlock(&t->round_store_lock);
                break;
        }
        case UFFD_EVENT_REMOVE:
        case UFFD_EVENT_UNMAP:
                if (m->event == UFFD_EVENT_REMOVE)
                        atomic_fetch_add_explicit(&t->remove_events, 1, memory_order_relaxed);
                /* The target's own DONTNEED/FREE/munmap: those pages now
                 * read as zeros. Our own drop raises REMOVE only where it
                 * falls back to DONTNEED (evict.c's round_zap()). Faults
                 * parked in an unmapped range wait on nothing. */
                if (m->event == UFFD_EVENT_UNMAP) {
                        hold_release(t, m->arg.remove.start, m->arg.remove.end);
                        atomic_store_explicit(&t->reg_stale, true, memory_order_relaxed);
                }
                evict_on_remove(t, m->arg.remove.start, m->arg.remove.end,
                                m->event == UFFD_EVENT_UNMAP ? REMOVAL_UNMAP : REMOVAL_REMOVE);
                break;
        default:
                zsw_log(t->log, LOG_WARNING, "Unexpected userfaultfd event %u from %d, ignoring",
                        m->event, t->pid);
        }
}

/* Serves the faults the hold parked that may go now (hold.c),
 * oldest first, and polls again while any stays parked. serve_lock held. */
static void serve_parked(struct fault_thread *ft, struct zsw_target *t) {
        struct parked_fault p;
        bool pass;

        while (hold_unpark(t, &p, &pass))
                serve_missing(ft, t, p.addr, p.write, p.tid, pass);
        hold_rearm(t);
}

static void serve_target(struct fault_thread *ft, struct zsw_target *t) {
        struct target_hold *hold = atomic_load_explicit(&t->hold, memory_order_acquire);
        struct uffd_msg *msgs = t->msgs;
        int n;

        ft->read_ns = zsw_now_ns();
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        /* Parked faults before new ones: they are older. */
        if (hold && hold->n_parked > 0)
                serve_parked(ft, t);
        /* A short read emptied the queue: stop there rather than pay one
         * more read for its EAGAIN; what arrives later wakes epoll again.
         * Events first: read(2) hands out every pending fault before any
         * event, and the read itself releases the thread that raised the
         * event (its madvise zaps, its mremap returns) and lets COPY
         * succeed again. A fault served before an event of the same batch
         * could place a page the target has just discarded, or zero-fill
         * the destination of a move whose entries have not moved yet. */
        do {
                n = zsw_uffd_read_msgs(t->uffd, msgs, TARGET_MSGS);
                for (int i = 0; i < n; i++)
                        if (msgs[i].event != UFFD_EVENT_PAGEFAULT) {
                                handle_msg(ft, t, &msgs[i]);
                                atomic_store_explicit(&t->msgs_applied, (unsigned) i + 1,
                                                      memory_order_release);
                        }
                for (int i = 0; i < n; i++)
                        if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
                                handle_msg(ft, t, &msgs[i]);
                /* Empty again, for zswapd-rescue (target-internal.h). */
                for (int i = 0; i < n; i++)
                        msgs[i].event = 0;
                atomic_store_explicit(&t->msgs_applied, 0, memory_order_release);
                ft->read_ns = zsw_now_ns();
        } while (n == (int) TARGET_MSGS);
        zsw_mutex_unlock(&t->serve_lock);
        if (n < 0 && n != -EAGAIN) {
                zsw_log(t->log, LOG_DEBUG, "Reading the userfaultfd of %d failed: %s", t->pid,
                        strerror(-n));
                ft->set->events.dead(ft->set->events.userdata, t);
        }
}

/* A stop request on a fault thread's eventfd; smaller values are kicks
 * (see fault_threads_remove()). */
#define FAULT_THREAD_STOP (UINT64_C(1) << 32)
/* The epoll data of a target's hold timer: the target's address with its
 * lowest bit set (a target is aligned far beyond that); its uffd has the
 * address alone, the stop eventfd NULL. */
#define EV_HOLD_TIMER UINT64_C(1)

/* The hold timer of t fired (hold.c): a poll, or a kick. */
static void hold_tick(struct fault_thread *ft, struct zsw_target *t) {
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        serve_parked(ft, t);
        zsw_mutex_unlock(&t->serve_lock);
}

static void *fault_thread_main(void *userdata) {
        struct fault_thread *ft = userdata;
        struct fault_threads *e = ft->set;
        struct epoll_event evs[16];

        tls_buf = ft->buf;
        tls_zeros = e->zeros;
        for (;;) {
                int n = epoll_wait(ft->epfd, evs, (int) ARRAY_SIZE(evs), -1);
                bool stop = false;

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        zsw_log_errno(e->log, LOG_ERR, errno,
                                      "epoll_wait failed in fault thread: %m");
                        break;
                }
                for (int i = 0; i < n; i++) {
                        uint64_t v = 0;

                        if (evs[i].data.u64 & EV_HOLD_TIMER)
                                hold_tick(ft, (struct zsw_target *) (uintptr_t) (evs[i].data.u64 &
                                                                                 ~EV_HOLD_TIMER));
                        else if (evs[i].data.ptr)
                                serve_target(ft, evs[i].data.ptr);
                        else if (read(ft->stop_fd, &v, sizeof(v)) == sizeof(v) &&
                                 v >= FAULT_THREAD_STOP)
                                stop = true;
                }
                /* Done with every target pointer epoll gave us. */
                atomic_fetch_add_explicit(&ft->batches, 1, memory_order_release);
                if (stop)
                        break;
        }
        atomic_store_explicit(&ft->running, false, memory_order_release);
        tls_buf = NULL;
        tls_zeros = NULL;
        return NULL;
}

int fault_threads_add(struct fault_threads *e, struct zsw_target *t) {
        /* One thread per target, the targets dealt round the threads. A
         * target's messages are handled under its serve_lock anyway, one
         * at a time: more threads on one target only add wakeups (every
         * one of them woke for every fault) and a fight for the lock.
         * Not pinned: on the faulting CPU the target and its handler take
         * turns while the other CPU idles. EPOLLEXCLUSIVE on a shared set
         * woke the wrong thread (docs/design.md; figures in
         * docs/performance.md, "One fault thread per target"). */
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = t };
        unsigned i = atomic_fetch_add_explicit(&e->next_fault_thread, 1, memory_order_relaxed) %
                     e->n_threads;

        if (epoll_ctl(e->threads[i].epfd, EPOLL_CTL_ADD, t->uffd, &ev) < 0)
                return -errno;
        t->fault_thread = &e->threads[i];
        return 0;
}

int fault_threads_add_hold(struct fault_threads *e, struct zsw_target *t,
                           struct target_hold *hold) {
        struct epoll_event ev = { .events = EPOLLIN,
                                  .data.u64 = (uint64_t) (uintptr_t) t | EV_HOLD_TIMER };

        (void) e;
        if (!t->fault_thread)
                return -ESRCH;
        if (epoll_ctl(t->fault_thread->epfd, EPOLL_CTL_ADD, hold->timer_fd, &ev) < 0)
                return -errno;
        atomic_store_explicit(&t->hold, hold, memory_order_release);
        return 0;
}

/* After this returns no fault thread uses t. Once t's uffd is out of its
 * thread's epoll set no epoll_wait returns t any more, but the thread may
 * have got it just before and not be done with it (or not even have
 * started: it can be preempted right after epoll_wait returns, so no lock
 * it would take can tell us). Each thread counts the batches it finished;
 * kicked awake, it finishes its current batch and one more, so once its
 * count moved it holds no pointer it got before the removal. Callers hold the
 * engine's control_lock (one removal at a time) and no target lock. */
void fault_threads_remove(struct fault_threads *e, struct zsw_target *t) {
        struct fault_thread *ft = t->fault_thread;
        uint64_t kick = 1, seen;

        if (!ft)
                return;
        epoll_ctl(ft->epfd, EPOLL_CTL_DEL, t->uffd, NULL);
        if (atomic_load(&t->hold))
                epoll_ctl(ft->epfd, EPOLL_CTL_DEL, atomic_load(&t->hold)->timer_fd, NULL);
        seen = atomic_load_explicit(&ft->batches, memory_order_acquire);
        if (atomic_load_explicit(&ft->running, memory_order_acquire) &&
            write(ft->stop_fd, &kick, sizeof(kick)) < 0)
                zsw_log_errno(e->log, LOG_ERR, errno, "Cannot wake a fault thread: %m");
        while (atomic_load_explicit(&ft->batches, memory_order_acquire) == seen &&
               atomic_load_explicit(&ft->running, memory_order_acquire))
                nanosleep(&(struct timespec) { .tv_nsec = 20 * 1000 }, NULL);
        t->fault_thread = NULL;
}

static int fault_thread_init(struct fault_threads *e, struct zsw_store *store,
                             struct fault_thread *ft) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
        int r;

        ft->set = e;
        ft->buf = aligned_alloc(ZSW_PAGE_SIZE, sizeof(struct fault_buf));
        if (!ft->buf)
                return -ENOMEM;
        ft->epfd = epoll_create1(EPOLL_CLOEXEC);
        ft->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (ft->epfd < 0 || ft->stop_fd < 0)
                return -errno;
        if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->stop_fd, &ev) < 0)
                return -errno;
        r = zsw_worker_new(store, &ft->worker);
        if (r < 0)
                return r;
        atomic_store(&ft->running, true);
        r = -pthread_create(&ft->thread, NULL, fault_thread_main, ft);
        if (r < 0) {
                atomic_store(&ft->running, false);
                return r;
        }
        ft->started = true;
        pthread_setname_np(ft->thread, "zswapd-fault");
        return 0;
}

int fault_threads_start(struct zsw_store *store, unsigned n_threads, const struct zsw_log *log,
                        const struct fault_events *events, struct fault_threads **ret) {
        struct fault_threads *e;
        void *zeros;
        cpu_set_t allowed;
        unsigned n = 0;

        if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
                n = (unsigned) CPU_COUNT(&allowed);
        if (n_threads > 0)
                n = n_threads;
        if (n == 0)
                n = 1;

        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        e->log = log;
        e->events = *events;
        /* Never written: reads of it are all the kernel ever does. */
        zeros = mmap(NULL, FAULT_ZEROS_PAGES * ZSW_PAGE_SIZE, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (zeros == MAP_FAILED) {
                fault_threads_stop(e);
                return -ENOMEM;
        }
        e->zeros = zeros;
        e->threads = calloc(n, sizeof(struct fault_thread));
        if (!e->threads) {
                fault_threads_stop(e);
                return -ENOMEM;
        }
        for (unsigned i = 0; i < n; i++)
                e->threads[i].epfd = e->threads[i].stop_fd = -EBADF;
        e->n_threads = n;
        for (unsigned i = 0; i < n; i++) {
                int r = fault_thread_init(e, store, &e->threads[i]);
                if (r < 0) {
                        zsw_log_errno(log, LOG_ERR, r, "Failed to start fault thread: %m");
                        fault_threads_stop(e);
                        return r;
                }
        }
        *ret = e;
        return 0;
}

struct fault_threads *fault_threads_stop(struct fault_threads *e) {
        if (!e)
                return NULL;
        for (unsigned i = 0; i < e->n_threads; i++) {
                struct fault_thread *ft = &e->threads[i];

                if (ft->started) {
                        uint64_t stop = FAULT_THREAD_STOP;

                        if (write(ft->stop_fd, &stop, sizeof(stop)) < 0)
                                zsw_log_errno(e->log, LOG_ERR, errno,
                                              "Failed to stop fault thread: %m");
                        pthread_join(ft->thread, NULL);
                }
                zsw_worker_free(ft->worker);
                free(ft->buf);
                safe_close(ft->epfd);
                safe_close(ft->stop_fd);
        }
        free(e->threads);
        if (e->zeros)
                munmap((void *) e->zeros, FAULT_ZEROS_PAGES * ZSW_PAGE_SIZE);
        free(e);
        return NULL;
}
