/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The first-touch hold (hold.c): while a target's group uses its memory
 * limit, the target's faults that would add a page (first touches, and
 * pages the engine took coming back) wait, as an allocation over a memcg
 * limit waits in direct reclaim. The fault threads (fault.c) ask it how
 * many pages a fault may place, park the faults it refuses and serve them
 * when it lets them go; the engine turns it on and off
 * (zsw_engine_set_hold()). Not a public interface.
 */
#pragma once

#include "target-internal.h"

/* A parked fault waits at most this long: then it is served, one page,
 * whatever the group's use. See hold.c for why the hold must be bounded. */
#define HOLD_MAX_NS (100ull * 1000 * 1000)
/* While faults are parked, the group's use is read again this often. */
#define HOLD_POLL_NS (2ull * 1000 * 1000)
/* Faults parked per target at most (one per thread, a thread faults once
 * at a time); past that a fault is served as if the hold were off. */
#define HOLD_PARKED_MAX 64u

/* A fault message read and neither resolved nor woken: its thread sleeps
 * until hold_unpark() hands it back, or a release wakes it. */
struct parked_fault {
        uint64_t addr;
        uint64_t since_ns;
        uint32_t tid;
        bool write;
};

struct target_hold {
        int usage_fd;                 /* the group's memory.current or memory.usage_in_bytes */
        int timer_fd;                 /* in the fault thread's epoll set (fault.c) */
        _Atomic uint64_t limit_bytes; /* 0: off */
        /* Pages of the target's eviction round in flight, which its drop
         * takes off the group's use (hold_set_credit()). */
        _Atomic uint64_t credit_pages;
        /* Under the target's serve_lock: pages first touches may fill
         * before the group's use is read again, and the parked faults,
         * oldest first. */
        uint64_t chunk;
        struct parked_fault parked[HOLD_PARKED_MAX];
        unsigned n_parked;
        bool timer_armed;
        /* For stats: faults parked, those served at HOLD_MAX_NS, and the
         * time they waited. */
        _Atomic uint64_t held, timeouts, held_ns;
};

/* A hold of the group whose memory directory is memory_dir_fd (v2 or v1):
 * off until hold_set_limit(). */
int hold_new(int memory_dir_fd, struct target_hold **ret);
struct target_hold *hold_free(struct target_hold *h);

/* Sets t's limit (0: off) and wakes the fault thread to apply it. */
void hold_set_limit(struct zsw_target *t, uint64_t limit_bytes);
/* Wakes t's fault thread to look at its parked faults again (the group's
 * use may have gone down: an eviction round of t ended). */
void hold_kick(struct zsw_target *t);
/* Whether t's hold is on (a limit is set): its faults may wait for room. */
bool hold_on(struct zsw_target *t);
/* From the evicting thread: n pages of t are in a round that will drop
 * them (0 once it did, or gave up); faults may count on up to
 * limit / HOLD_CREDIT_SHARE of them as room. */
void hold_set_credit(struct zsw_target *t, uint64_t n);

/* With t's serve_lock held, from a fault thread: */
/* How many pages, at most want, a fault may place now (want with the
 * hold off); 0 when the group is at its limit. */
uint64_t hold_admit(struct zsw_target *t, uint64_t want);
/* Counts n pages placed against what hold_admit() allowed. */
void hold_spend(struct zsw_target *t, uint64_t n);
/* Parks the fault of thread tid at addr if the hold may: false when it
 * must be served now (see hold.c for which faults are never parked). */
bool hold_park(struct zsw_target *t, uint64_t addr, bool write, uint32_t tid);
/* The next parked fault to serve now, if any, taken off the list: with
 * *ret_pass true it waited HOLD_MAX_NS and gets one page whatever the use. */
bool hold_unpark(struct zsw_target *t, struct parked_fault *ret, bool *ret_pass);
/* After the timer fired or faults were parked: polls while any is. */
void hold_rearm(struct zsw_target *t);

/* Turns t's hold off and releases every fault it parked; takes t's
 * serve_lock. */
void hold_stop(struct zsw_target *t);

/* With t's serve_lock held, from any thread: wakes the parked faults in
 * [start, end) (all of them: 0, UINT64_MAX) and forgets them. Woken, a
 * thread takes its fault again and raises a new message. */
void hold_release(struct zsw_target *t, uint64_t start, uint64_t end);
