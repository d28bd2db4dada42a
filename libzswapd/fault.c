/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fault service: the threads that give pages back.
 *
 * One thread per CPU, each pinned to its CPU and blocked in epoll_wait(2)
 * on an epoll set of its own that holds every target's userfaultfd; a
 * fault wakes them all and one wins the target's serve_lock (see
 * fault_threads_add()). Nothing slow (compression, the control socket,
 * ptrace) ever runs on these threads.
 *
 * A target's messages are read and handled under its serve_lock, in the
 * order the kernel queued them; see engine-internal.h for why.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "uffd.h"

#define MSGS_PER_READ 16u

struct fault_buf {
        /* One page for the faulting address and the prefetch window behind
         * it, contiguous so that one UFFDIO_COPY fills them all. */
        _Alignas(4096) uint8_t pages[(1 + FAULT_PREFETCH_MAX) * ZSW_PAGE_SIZE];
};

static _Thread_local struct fault_buf *tls_buf;

/* A page we cannot give back correctly (the disk copy is unreadable, the
 * payload does not decode): the kernel answers a swap read error with
 * SIGBUS, and so do we, rather than hand the target wrong data. The page
 * is poisoned: a user access gets SIGBUS at that address, an access by the
 * kernel on the target's behalf (read(2) into it) gets EFAULT, exactly as
 * for a hardware-poisoned page; nothing retries forever. */
static void fail_fault(struct zsw_target *t, uint64_t addr, int error) {
        int r;

        zsw_log(t->engine->log, LOG_ERR,
                "Cannot restore page 0x%" PRIx64 " of process %d: %s; poisoning it, the process "
                "gets SIGBUS there as the kernel gives on a swap read error",
                addr, t->pid, strerror(-error));
        r = zsw_uffd_poison(t->uffd, addr, ZSW_PAGE_SIZE);
        if (r < 0 && r != -EEXIST)
                zsw_log(t->engine->log, LOG_ERR, "Cannot poison page 0x%" PRIx64 " of %d: %s",
                        addr, t->pid, strerror(-r));
}

/* Brings back the stored pages after pgno, up to the prefetch window,
 * and returns how many. Shared loads: an entry is dropped only once its
 * page is in place, so a copy that stops early loses nothing. */
static unsigned prefetch(struct fault_thread *ft, struct zsw_target *t, uint64_t pgno) {
        unsigned window = MIN(t->engine->config.prefetch_window, FAULT_PREFETCH_MAX), n = 0;
        ssize_t copied;

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
        zsw_store_invalidate(t->owner, pgno + 1, n);
        atomic_fetch_add_explicit(&t->prefetched, n, memory_order_relaxed);
        return n;
}

static void serve_missing(struct fault_thread *ft, struct zsw_target *t, uint64_t addr) {
        uint64_t pgno = addr / ZSW_PAGE_SIZE, page = pgno * ZSW_PAGE_SIZE;
        uint64_t start = zsw_now_ns();
        /* A fault right after the pages we brought back last time: a
         * sequential stream, which used every one of them. */
        bool sequential = pgno == t->next_fault_pgno;
        ssize_t copied;
        int r;

        if (sequential)
                atomic_fetch_add_explicit(&t->prefetch_hits, t->prefetched_last,
                                          memory_order_relaxed);
        t->prefetched_last = 0;

        r = zsw_store_load(ft->worker, t->owner, pgno, tls_buf->pages, ZSW_LOAD_EXCLUSIVE);
        if (r == -ENOENT) {
                /* Never taken by us: a first touch, zero-filled as the
                 * kernel would. */
                copied = zsw_uffd_zeropage(t->uffd, page, ZSW_PAGE_SIZE, false);
                atomic_fetch_add_explicit(&t->zero_faults, 1, memory_order_relaxed);
        } else if (r < 0) {
                fail_fault(t, page, r);
                return;
        } else {
                copied = zsw_uffd_copy(t->uffd, page, tls_buf->pages, ZSW_PAGE_SIZE, 0);
                /* Back unprotected: the next age scan finds it used. */
                if (copied > 0) {
                        atomic_fetch_add_explicit(&t->refaults, 1, memory_order_relaxed);
                        target_note_refault(t, pgno);
                }
                if (copied == -EAGAIN) {
                        /* The mappings are changing under an event we have
                         * not read yet: keep the page, let the thread fault
                         * again once the event is handled. */
                        const void *p = tls_buf->pages;

                        if (zsw_store_pages(ft->worker, t->owner, &pgno, &p, 1, NULL) < 0)
                                fail_fault(t, page, -ENOMEM);
                }
        }

        if (copied == -EEXIST || copied == -EAGAIN)
                /* Somebody filled it first, or the thread must retry: wake
                 * it either way, a spurious wake only costs a refault. */
                zsw_uffd_wake(t->uffd, page, ZSW_PAGE_SIZE);

        atomic_fetch_add_explicit(&t->faults, 1, memory_order_relaxed);
        zsw_histogram_record(&t->fault_hist, zsw_now_ns() - start);

        /* After the faulting thread is on its way: prefetch only costs
         * the target if it waits for one of these pages meanwhile. */
        if (sequential || pgno == t->last_fault_pgno + 1)
                t->prefetched_last = r >= 0 && copied > 0 ? prefetch(ft, t, pgno) : 0;
        t->last_fault_pgno = pgno;
        t->next_fault_pgno = pgno + 1 + t->prefetched_last;
}

static void handle_msg(struct fault_thread *ft, struct zsw_target *t, const struct uffd_msg *m) {
        switch (m->event) {
        case UFFD_EVENT_PAGEFAULT:
                if (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP) {
                        atomic_fetch_add_explicit(&t->wp_faults, 1, memory_order_relaxed);
                        if (!evict_on_wp_fault(t, m->arg.pagefault.address))
                                zsw_uffd_writeprotect(t->uffd,
                                                      m->arg.pagefault.address & ~(uint64_t) (ZSW_PAGE_SIZE - 1),
                                                      ZSW_PAGE_SIZE, false, false);
                } else
                        serve_missing(ft, t, m->arg.pagefault.address);
                break;
        case UFFD_EVENT_FORK:
                engine_add_fork_child(t->engine, t, (int) m->arg.fork.ufd);
                break;
        case UFFD_EVENT_REMAP:
                evict_on_remove(t, m->arg.remap.from, m->arg.remap.from + m->arg.remap.len, true);
                zsw_store_move(t->owner, m->arg.remap.from / ZSW_PAGE_SIZE,
                               m->arg.remap.to / ZSW_PAGE_SIZE, m->arg.remap.len / ZSW_PAGE_SIZE);
                break;
        case UFFD_EVENT_REMOVE:
        case UFFD_EVENT_UNMAP:
                /* Our own drop raises REMOVE too; the target's own
                 * DONTNEED/FREE/munmap means those pages now read as zeros. */
                if (evict_on_remove(t, m->arg.remove.start, m->arg.remove.end,
                                    m->event == UFFD_EVENT_UNMAP))
                        break;
                zsw_store_invalidate(t->owner, m->arg.remove.start / ZSW_PAGE_SIZE,
                                     (m->arg.remove.end - m->arg.remove.start) / ZSW_PAGE_SIZE);
                break;
        default:
                zsw_log(t->engine->log, LOG_WARNING, "Unexpected userfaultfd event %u from %d, ignoring",
                        m->event, t->pid);
        }
}

static void serve_target(struct fault_thread *ft, struct zsw_target *t) {
        struct uffd_msg msgs[MSGS_PER_READ];
        int n;

        pthread_mutex_lock(&t->serve_lock);
        /* A short read emptied the queue: stop there rather than pay one
         * more read for its EAGAIN; what arrives later wakes epoll again. */
        do {
                n = zsw_uffd_read_msgs(t->uffd, msgs, MSGS_PER_READ);
                for (int i = 0; i < n; i++)
                        handle_msg(ft, t, &msgs[i]);
        } while (n == (int) MSGS_PER_READ);
        pthread_mutex_unlock(&t->serve_lock);
        if (n < 0 && n != -EAGAIN) {
                zsw_log(t->engine->log, LOG_DEBUG, "Reading the userfaultfd of %d failed: %s",
                        t->pid, strerror(-n));
                engine_mark_dead(t->engine, t);
        }
}

static void *fault_thread_main(void *userdata) {
        struct fault_thread *ft = userdata;
        struct zsw_engine *e = ft->engine;
        struct epoll_event evs[16];

        tls_buf = aligned_alloc(4096, sizeof(struct fault_buf));
        if (!tls_buf) {
                zsw_log(e->log, LOG_ERR, "Fault thread has no memory for its buffer");
                return NULL;
        }
        for (;;) {
                int n = epoll_wait(ft->epfd, evs, (int) ARRAY_SIZE(evs), -1);
                bool stop = false;

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        zsw_log_errno(e->log, LOG_ERR, errno, "epoll_wait failed in fault thread: %m");
                        break;
                }
                pthread_rwlock_rdlock(&e->targets_lock);
                for (int i = 0; i < n; i++) {
                        if (!evs[i].data.ptr)
                                stop = true;
                        else
                                serve_target(ft, evs[i].data.ptr);
                }
                pthread_rwlock_unlock(&e->targets_lock);
                if (stop)
                        break;
        }
        free(tls_buf);
        tls_buf = NULL;
        return NULL;
}

int fault_threads_add(struct zsw_engine *e, struct zsw_target *t) {
        /* Every fault thread wakes for every fault. EPOLLEXCLUSIVE (one
         * idle thread woken) halved fault latency in zswapd-bench-fault
         * (p50 80 -> 43 us) but a CI run then hung a target in an
         * unserved fault once, not yet understood: see docs/design.md. */
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = t };

        for (unsigned i = 0; i < e->n_threads; i++)
                if (epoll_ctl(e->threads[i].epfd, EPOLL_CTL_ADD, t->uffd, &ev) < 0) {
                        int r = -errno;

                        while (i-- > 0)
                                epoll_ctl(e->threads[i].epfd, EPOLL_CTL_DEL, t->uffd, NULL);
                        return r;
                }
        return 0;
}

/* After this returns no fault thread uses t: it is gone from every epoll
 * set, and taking targets_lock for writing waits out any thread that got
 * t from epoll before. */
void fault_threads_remove(struct zsw_engine *e, struct zsw_target *t) {
        for (unsigned i = 0; i < e->n_threads; i++)
                epoll_ctl(e->threads[i].epfd, EPOLL_CTL_DEL, t->uffd, NULL);
        pthread_rwlock_wrlock(&e->targets_lock);
        pthread_rwlock_unlock(&e->targets_lock);
}

static int fault_thread_init(struct zsw_engine *e, struct fault_thread *ft, int cpu) {
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
        int r;

        ft->engine = e;
        ft->cpu = cpu;
        ft->epfd = epoll_create1(EPOLL_CLOEXEC);
        ft->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (ft->epfd < 0 || ft->stop_fd < 0)
                return -errno;
        if (epoll_ctl(ft->epfd, EPOLL_CTL_ADD, ft->stop_fd, &ev) < 0)
                return -errno;
        r = zsw_worker_new(e->store, &ft->worker);
        if (r < 0)
                return r;
        r = -pthread_create(&ft->thread, NULL, fault_thread_main, ft);
        if (r < 0)
                return r;
        ft->started = true;
        if (cpu >= 0) {
                cpu_set_t set;

                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                pthread_setaffinity_np(ft->thread, sizeof(set), &set);
        }
        pthread_setname_np(ft->thread, "zswapd-fault");
        return 0;
}

int fault_threads_start(struct zsw_engine *e) {
        cpu_set_t allowed;
        int cpus[CPU_SETSIZE];
        unsigned n = 0;

        if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
                for (int c = 0; c < CPU_SETSIZE; c++)
                        if (CPU_ISSET(c, &allowed))
                                cpus[n++] = c;
        if (e->config.fault_threads > 0)
                n = e->config.fault_threads;
        if (n == 0)
                n = 1;

        e->threads = calloc(n, sizeof(struct fault_thread));
        if (!e->threads)
                return -ENOMEM;
        for (unsigned i = 0; i < n; i++)
                e->threads[i].epfd = e->threads[i].stop_fd = -EBADF;
        e->n_threads = n;
        for (unsigned i = 0; i < n; i++) {
                int r = fault_thread_init(e, &e->threads[i],
                                          e->config.fault_threads ? -1 : cpus[i]);
                if (r < 0)
                        return zsw_log_errno(e->log, LOG_ERR, r, "Failed to start fault thread: %m");
        }
        return 0;
}

void fault_threads_stop(struct zsw_engine *e) {
        for (unsigned i = 0; i < e->n_threads; i++) {
                struct fault_thread *ft = &e->threads[i];

                if (ft->started) {
                        uint64_t one = 1;

                        if (write(ft->stop_fd, &one, sizeof(one)) < 0)
                                zsw_log_errno(e->log, LOG_ERR, errno, "Failed to stop fault thread: %m");
                        pthread_join(ft->thread, NULL);
                }
                zsw_worker_free(ft->worker);
                safe_close(ft->epfd);
                safe_close(ft->stop_fd);
        }
        free(e->threads);
        e->threads = NULL;
        e->n_threads = 0;
}
