/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The first-touch hold: a group at its memory budget gets no fresh page
 * until reclaim has made room, as a task over a memcg limit waits in
 * direct reclaim. Pages the engine took and a fault brings back are held
 * the same way: they add a page to the group as a first touch does (the
 * kernel charges a swap-in as an allocation), and a process reading back
 * what was taken would otherwise run the group far past its budget.
 *
 * The room is the group's own counter (memory.current, or v1's
 * memory.usage_in_bytes: the one its peak is kept of), read by the fault
 * thread itself, so that room made by any eviction (of this target or of
 * another of the group) or any free counts, and nothing has to hand out
 * allowances. A read is ~1 us; it is not paid per fault: a read that finds
 * R pages of room lets first touches fill a chunk of R/HOLD_SHARE pages
 * (at most HOLD_CHUNK_MAX) before the next read. So up to HOLD_SHARE
 * targets of a group filling at once cannot together take more than the
 * room they saw. The zero-fill window and prefetch are cut to the chunk.
 *
 * A fault with no room is parked: its message is kept, its thread
 * left asleep (never blocking the fault thread, which goes on serving
 * every other target). The fault thread serves parked faults, oldest
 * first, once a read finds room: when it handles the target's next
 * messages, when an eviction round of the target ends (hold_kick()), and
 * every HOLD_POLL_NS while any is parked (the room another target's
 * eviction makes), on the target's timerfd.
 *
 * Why no parked fault can deadlock an eviction. A round stops every thread
 * of the target with ptrace. A thread asleep in a userfault it took in
 * user mode leaves its wait for the interrupt, stops, and faults again
 * once let go (its parked message is then stale, which serving it late
 * tolerates: a message of a thread that left is what a signal makes too,
 * and serving one is what a fault right now would get). A thread asleep in
 * a userfault taken in kernel mode (a read(2) into a fresh buffer) cannot
 * stop: interrupted, it retries the fault in the kernel until somebody
 * serves it, and the round's stop would wait for a room that only the
 * round can make. So only faults whose thread is seen asleep outside any
 * system call are parked (hold_park()); the others, and those of threads
 * not asleep yet, are served at once, one page. The one kernel-mode fault
 * outside a system call, a signal frame written to a fresh stack page on
 * return from an interrupt, reads as user mode there; it is released at
 * HOLD_MAX_NS, well within the stop's ZSW_REMOTE_STOP_TIMEOUT_MS. That
 * bound is also what keeps a target from waiting for good when reclaim
 * cannot make room (nothing left to take, a limit below what the group
 * holds outside its targets): a parked fault is served, one page, after
 * HOLD_MAX_NS whatever the room, so a held target slows down but never
 * stops; the policy turns the hold off when its reclaim cannot progress.
 *
 * Parked faults are released, woken to fault again, when the hold goes
 * off (the policy, detach, engine stop), and those in a range the target
 * unmaps or moves away (their addresses mean nothing any more); a target
 * that exits or execs has its threads killed out of their waits. What a
 * released or late-served fault finds is handled by the usual rules: a
 * page that became present, stored or part of a round is no first touch
 * any more (fault.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "hold.h"
#include "uffd.h"

#define HOLD_SHARE 8u
#define HOLD_CHUNK_MAX 1024u
/* The room a round in flight lends, at most 1/HOLD_CREDIT_SHARE of the
 * limit (2.5%): the group's peak stays within it over the limit. */
#define HOLD_CREDIT_SHARE 40u

int hold_new(int memory_dir_fd, struct target_hold **ret) {
        struct target_hold *h;
        int fd;

        fd = openat(memory_dir_fd, "memory.current", O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
                fd = openat(memory_dir_fd, "memory.usage_in_bytes", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        h = calloc(1, sizeof(*h));
        if (!h) {
                close(fd);
                return -ENOMEM;
        }
        h->usage_fd = fd;
        h->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (h->timer_fd < 0) {
                int r = -errno;

                hold_free(h);
                return r;
        }
        *ret = h;
        return 0;
}

struct target_hold *hold_free(struct target_hold *h) {
        if (!h)
                return NULL;
        safe_close(h->usage_fd);
        safe_close(h->timer_fd);
        free(h);
        return NULL;
}

static struct target_hold *hold_of(struct zsw_target *t) {
        return atomic_load_explicit(&t->hold, memory_order_acquire);
}

static void timer_set(struct target_hold *h, uint64_t ns) {
        struct itimerspec its = { .it_value = { .tv_sec = (time_t) (ns / 1000000000),
                                                .tv_nsec = (long) (ns % 1000000000) } };

        (void) timerfd_settime(h->timer_fd, 0, &its, NULL);
}

void hold_kick(struct zsw_target *t) {
        struct target_hold *h = hold_of(t);

        /* The fault thread may re-arm it for HOLD_POLL_NS meanwhile: the
         * kick is then late by that much, never lost. */
        if (h)
                timer_set(h, 1);
}

bool hold_on(struct zsw_target *t) {
        struct target_hold *h = hold_of(t);

        return h && atomic_load_explicit(&h->limit_bytes, memory_order_relaxed) > 0;
}

void hold_set_limit(struct zsw_target *t, uint64_t limit_bytes) {
        struct target_hold *h = hold_of(t);

        if (!h || atomic_exchange(&h->limit_bytes, limit_bytes) == limit_bytes)
                return;
        hold_kick(t);
}

void hold_set_credit(struct zsw_target *t, uint64_t n) {
        struct target_hold *h = hold_of(t);

        if (h)
                atomic_store_explicit(&h->credit_pages, n, memory_order_relaxed);
}

/* Pages of room the group has now, 0 if none or unreadable (a group
 * whose use cannot be read holds nothing: the hold goes off). The pages
 * of a round in flight count as room, up to a share of the limit: the
 * round's drop gives them back within milliseconds, and a fault that
 * waited for it would wait for the whole round to be read and stored. */
static uint64_t read_room(struct target_hold *h, uint64_t limit, bool *ret_readable) {
        uint64_t credit = atomic_load_explicit(&h->credit_pages, memory_order_relaxed);
        char buf[32];
        ssize_t n = pread(h->usage_fd, buf, sizeof(buf) - 1, 0);
        uint64_t usage;

        *ret_readable = false;
        if (n <= 0)
                return 0;
        buf[n] = 0;
        if (sscanf(buf, "%" SCNu64, &usage) != 1)
                return 0;
        *ret_readable = true;
        limit += MIN(credit * ZSW_PAGE_SIZE, limit / HOLD_CREDIT_SHARE);
        return usage < limit ? (limit - usage) / ZSW_PAGE_SIZE : 0;
}

uint64_t hold_admit(struct zsw_target *t, uint64_t want) {
        struct target_hold *h = hold_of(t);
        uint64_t limit, room;
        bool readable;

        if (!h)
                return want;
        limit = atomic_load_explicit(&h->limit_bytes, memory_order_relaxed);
        if (limit == 0)
                return want;
        if (h->chunk == 0) {
                room = read_room(h, limit, &readable);
                if (!readable)
                        return want;
                h->chunk = MIN(DIV_ROUND_UP(room, HOLD_SHARE), (uint64_t) HOLD_CHUNK_MAX);
        }
        return MIN(want, h->chunk);
}

void hold_spend(struct zsw_target *t, uint64_t n) {
        struct target_hold *h = hold_of(t);

        if (h)
                h->chunk -= MIN(n, h->chunk);
}

/* Whether thread tid of pid sleeps in a fault it took in user mode: its
 * syscall file says "-1 ..." outside a system call (the page fault entry
 * sets orig_ax to -1), a number inside one, "running" when it is not
 * asleep (yet, or any more). */
static bool asleep_in_user_fault(pid_t pid, uint32_t tid) {
        char path[64], buf[8];
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%d/task/%" PRIu32 "/syscall", pid, tid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        n = read(fd, buf, sizeof(buf));
        close(fd);
        return n >= 3 && buf[0] == '-' && buf[1] == '1' && buf[2] == ' ';
}

bool hold_park(struct zsw_target *t, uint64_t addr, bool write, uint32_t tid) {
        struct target_hold *h = hold_of(t);
        uint64_t now = zsw_now_ns();
        unsigned i;

        if (!h || t->pid <= 0 || tid == 0 || !asleep_in_user_fault(t->pid, tid))
                return false;
        /* A thread faults once at a time: an older message of its own is
         * one it left (a signal), and it has waited since then. */
        for (i = 0; i < h->n_parked && h->parked[i].tid != tid; i++)
                ;
        if (i < h->n_parked)
                now = h->parked[i].since_ns;
        else if (h->n_parked == HOLD_PARKED_MAX)
                return false;
        else
                h->n_parked++;
        h->parked[i] =
                (struct parked_fault) { .addr = addr, .since_ns = now, .tid = tid, .write = write };
        atomic_fetch_add_explicit(&h->held, 1, memory_order_relaxed);
        hold_rearm(t);
        return true;
}

static void drop_parked(struct target_hold *h, unsigned i) {
        atomic_fetch_add_explicit(&h->held_ns, zsw_now_ns() - h->parked[i].since_ns,
                                  memory_order_relaxed);
        for (unsigned j = i + 1; j < h->n_parked; j++)
                h->parked[j - 1] = h->parked[j];
        h->n_parked--;
}

bool hold_unpark(struct zsw_target *t, struct parked_fault *ret, bool *ret_pass) {
        struct target_hold *h = hold_of(t);
        bool pass;

        if (!h || h->n_parked == 0)
                return false;
        /* Oldest first: the first one parked is the first to wait out
         * HOLD_MAX_NS, and to get room. */
        pass = zsw_now_ns() - h->parked[0].since_ns >= HOLD_MAX_NS;
        if (!pass && hold_admit(t, 1) == 0)
                return false;
        if (pass)
                atomic_fetch_add_explicit(&h->timeouts, 1, memory_order_relaxed);
        *ret = h->parked[0];
        *ret_pass = pass;
        drop_parked(h, 0);
        return true;
}

void hold_rearm(struct zsw_target *t) {
        struct target_hold *h = hold_of(t);
        uint64_t v;

        if (!h)
                return;
        /* Fired (or kicked): it is disarmed now; read it, or epoll keeps
         * reporting it. */
        if (read(h->timer_fd, &v, sizeof(v)) == sizeof(v))
                h->timer_armed = false;
        if (h->n_parked > 0 && !h->timer_armed) {
                timer_set(h, HOLD_POLL_NS);
                h->timer_armed = true;
        } else if (h->n_parked == 0 && h->timer_armed) {
                timer_set(h, 0);
                h->timer_armed = false;
        }
}

void hold_stop(struct zsw_target *t) {
        if (!hold_of(t))
                return;
        hold_set_limit(t, 0);
        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
        hold_release(t, 0, UINT64_MAX);
        zsw_mutex_unlock(&t->serve_lock);
}

void hold_release(struct zsw_target *t, uint64_t start, uint64_t end) {
        struct target_hold *h = hold_of(t);

        if (!h)
                return;
        for (unsigned i = 0; i < h->n_parked;)
                if (h->parked[i].addr >= start && h->parked[i].addr < end) {
                        zsw_uffd_wake(t->uffd, h->parked[i].addr & ~(uint64_t) (ZSW_PAGE_SIZE - 1),
                                      ZSW_PAGE_SIZE);
                        drop_parked(h, i);
                } else
                        i++;
}
