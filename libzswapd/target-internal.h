/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The target: one process the engine serves, its state and counters, and
 * its lifecycle. The engine makes (engine-attach.c, engine-fork.c),
 * publishes (engine-targets.c) and frees targets; the fault threads
 * (fault.c) and eviction (evict.c) work on them, under the locks they
 * carry, in the order of engine-internal.h. Not a public
 * interface (target.h is the public face).
 *
 * A target is freed only after fault_threads_remove(): out of every epoll
 * set, and every fault thread past the batch that may have held it.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/uio.h>

#include "age.h"
#include "heat.h"
#include "histogram.h"
#include "lockdep.h"
#include "store.h"
#include "target.h"
#include "uffd.h"
#include "vma.h"

/* Pages per eviction round: one ptrace stop and one injected drop. A stop
 * costs milliseconds (the target must be scheduled to stop), so a round takes
 * 16 MiB (evict.h says how it is read and stored). */
#define ZSW_EVICT_MAX_PAGES 4096u
/* Pages per round of a target held at a budget (its hold on), whose faults
 * may wait for the room a drop makes (evict.c, round_size()). */
#define ZSW_EVICT_HELD_PAGES 1024u
#define FAULT_PREFETCH_MAX 64u /* the most prefetch_window may be */
#define REFAULT_RING 1024u     /* refaults noted between two age scans */

struct target_hold;

enum evict_state {
        EVICT_IDLE,       /* no eviction in flight */
        EVICT_COLLECTING, /* write-protected, being read and stored */
        EVICT_DROPPING,   /* committed: the drop is being injected */
};

/* The eviction in flight of one target: the pages of one round. */
struct evict_batch {
        enum evict_state state;
        size_t n;
        uint64_t addrs[ZSW_EVICT_MAX_PAGES]; /* sorted */
        bool cancelled[ZSW_EVICT_MAX_PAGES];
        size_t n_cancelled;
        /* Pages of the drop (committed, not cancelled) whose
         * UFFD_EVENT_REMOVE has been seen: a drop by DONTNEED raises
         * exactly one per page, so a second one is the target's own. */
        bool drop_seen[ZSW_EVICT_MAX_PAGES];
        /* The drop raises no REMOVE (guard markers, evict.c's
         * round_zap()): every REMOVE is the target's, drop_seen unused. */
        bool drop_silent;
        /* The target moved other pages (and their entries) over these:
         * they are no longer the round's (evict_on_move_in()). */
        bool moved_in[ZSW_EVICT_MAX_PAGES];
        /* Threads that wrote during the drop wait for it to finish. */
        bool wake_pending;
        /* While the target is stopped for the drop: its ranges, sorted,
         * which join the round's runs across gaps that hold no page (see
         * evict.c's round_bridge()). Every page in them is the round's
         * until the drop is over: a fault there waits, and a REMOVE
         * there is ours unless drop_silent. NULL outside that time. */
        const struct iovec *drop;
        size_t n_drop;
};

/* Messages a fault thread reads from a target's uffd at once. */
#define TARGET_MSGS 16u

struct zsw_target {
        const struct zsw_log *log;      /* the engine's */
        pid_t pid;                      /* 0 while a fork child is unidentified */
        pid_t parent_pid;               /* of a fork child still to be named */
        struct zsw_target *fork_parent; /* its parent's target until then */
        uint64_t forked_ns;             /* when such a child's fork was read */
        uint64_t forked_tick;           /* the same in /proc start-time ticks */
        uint64_t wide_ns, wide_gap_ns;  /* its next search of every process */
        bool adopted_unnamed;           /* such a child taken over after a death */
        int pidfd;
        int uffd;                          /* the daemon's reference */
        int target_uffd;                   /* the target's own reference, -1 for fork children */
        struct fault_thread *fault_thread; /* the one that serves it (fault_threads_add()) */
        uint64_t scratch;                  /* scratch mapping inside the target, 0 if none */
        size_t scratch_size;
        struct zsw_owner *owner;
        struct zsw_owner_config owner_config; /* as the owner was made */
        unsigned prefetch_window;             /* pages, <= FAULT_PREFETCH_MAX */
        unsigned zero_window;                 /* pages, <= ZSW_ZERO_WINDOW_MAX */
        _Atomic bool dead;                    /* exited or exec'ed: to be reaped */
        /* A reclaim that could not stop the target (-ETIMEDOUT): no other
         * is tried before stuck_retry_ns, and the wait doubles each time
         * (STUCK_BACKOFF_*). Under evict_lock. */
        uint64_t stuck_retry_ns;
        unsigned stuck_backoff_s;
        char stuck_why[192];

        pthread_mutex_t serve_lock;
        pthread_mutex_t evict_lock;
        pthread_mutex_t batch_lock;
        struct evict_batch batch;
        /* Read-held by each store of the round's pages, write-held by a
         * move of entries into the round (evict_on_move_in()). */
        pthread_rwlock_t round_store_lock;

        /* The last batch of messages a fault thread read from the uffd,
         * under serve_lock, and how many of them it has applied (events
         * below msgs_applied are done). A slot whose event is 0 is empty:
         * each batch is cleared once handled. An event read and not
         * applied when zswapd dies (the kernel has let its caller go, so
         * it never comes again) is found here by zswapd-rescue, saved with
         * the state and applied at adoption (engine-load.c). */
        struct uffd_msg msgs[TARGET_MSGS];
        _Atomic unsigned msgs_applied;

        /* Prefetch heuristic: a fault next to the previous one means a
         * sequential stream. Under serve_lock. */
        uint64_t last_fault_pgno, next_fault_pgno;
        unsigned prefetched_last;
        /* The window prefetch uses now (<= prefetch_window), as its
         * recent prefetches paid (fault.c's prefetch_adapt()). Under
         * serve_lock. */
        unsigned prefetch_now;
        unsigned prefetch_tries, prefetch_paid, prefetch_skipped;
        uint32_t last_fault_tid; /* of the last missing fault (fault.c's yield) */
        /* The page after the last zero fill with a window: a write fault
         * there is a stream filling fresh memory (fault.c). Under
         * serve_lock. */
        uint64_t zero_next_pgno;
        _Atomic bool throttle; /* zsw_engine_set_throttle() */
        _Atomic uint64_t throttled_faults;
        /* The first-touch hold (hold.h), NULL until the engine first sets
         * one; then kept until the target is freed. */
        _Atomic(struct target_hold *) hold;
        /* Set at attach, later by zsw_engine_set_label() under
         * control_lock (target_set_label()); saved with the
         * target's state, by a rescue too (engine-state.c): the last byte
         * is never written but as the NUL. */
        char label[ZSW_ENGINE_LABEL_MAX];

        /* Page ages (age.c), under evict_lock; NULL before the first
         * age scan. */
        struct zsw_age *age;
        uint64_t next_age_ns;
        /* What the scans found, for stats: written under evict_lock and
         * age_stats_lock, read under age_stats_lock alone (stats must not
         * wait for a reclaim). */
        pthread_mutex_t age_stats_lock;
        struct zsw_age_scan_stats age_last;
        uint64_t age_scans, age_scan_ns;
        /* Periodic age scans, from the first reclaim that asked for a
         * minimum age on; under control_lock. */
        bool aging;
        /* Pages that came back by a fault, for the next age scan (see
         * zsw_age_note_refaults()): written by fault threads under
         * serve_lock, read by the age scan under evict_lock. A burst of
         * more than REFAULT_RING between two scans loses the oldest:
         * those pages only miss the longer wait. */
        _Atomic uint64_t refault_ring[REFAULT_RING];
        _Atomic uint64_t refault_head;
        uint64_t refault_tail;

        /* Last use seen of each page (refaults, writes that cancelled a
         * round): the order of eviction without a minimum age. */
        struct zsw_heat *heat;
        /* Where the next eviction without a minimum age starts: each one
         * goes on from where the last stopped, round the address space,
         * as a clock hand. Under evict_lock. */
        uint64_t hand;
        /* The last drop failed: rounds lend the hold no room until one
         * succeeds (evict.c). Under evict_lock. */
        bool credit_off;
        /* What evict_register_ranges() registered last, from maps whose
         * hash is reg_maps_hash, read whole (smaps) at reg_full_ns.
         * Under evict_lock. */
        struct zsw_range *reg_ranges;
        size_t n_reg_ranges, reg_foreign;
        uint64_t reg_maps_hash, reg_full_ns;
        /* Set by fault threads at an unmap or a move of registered
         * memory: the next registration reads the mappings whole (a range
         * unmapped and mapped again alike leaves maps as it was). */
        _Atomic bool reg_stale;
        /* Ptrace stops of the target by eviction drops: how many, their
         * total and longest time, from the first thread interrupted to the
         * last one let go, their distribution and how many lasted longer
         * than TARGET_STOP_LONG_NS. */
        _Atomic uint64_t stops, stopped_ns, stop_ns_max, stops_long;
        struct zsw_histogram stop_hist;
        /* UFFD_EVENT_REMOVE events read (each a round trip the target
         * waited for). */
        _Atomic uint64_t remove_events;
        uint64_t attached_at_ns;

        struct zsw_histogram fault_hist;
        _Atomic uint64_t faults, zero_faults, prefetched, prefetch_hits;
        /* Pages zero-filled after the faulting one by a first touch's
         * window (they take no fault of ours, ever). */
        _Atomic uint64_t zero_ahead;
        /* Faults that brought back a page we had taken; WP faults that a
         * write raised on a page an age scan or a round had protected. */
        _Atomic uint64_t refaults, wp_faults;
        /* Of the WP faults, those on pages an age scan protected, and
         * their service time (zsw_age_scan()'s budget). */
        _Atomic uint64_t age_wp_faults, age_wp_fault_ns;
        _Atomic uint64_t evicted, evict_aborted;

        struct zsw_target *next;
};

struct fault_thread;

/* A target's settings where its own config (struct zsw_target_config) says
 * nothing: the engine's. */
struct target_defaults {
        enum zsw_compressor compressor;
        int compression_level;
        unsigned prefetch_window;
        unsigned zero_window;
};

/* A new target of pid (0 for a fork child not yet named), with its locks
 * and heat table; NULL without memory. */
struct zsw_target *target_new(pid_t pid, const struct zsw_log *log);
/* Frees t, its owner in the store and its descriptors; accepts NULL and
 * returns NULL. */
struct zsw_target *target_free(struct zsw_target *t);
/* The owner settings and prefetch window of t from its config (NULL: the
 * defaults). -EINVAL for an unknown compressor. */
int target_configure(struct zsw_target *t, const struct target_defaults *d,
                     const struct zsw_target_config *tc);
/* t's figures; store is the engine's, for t's share of the pool. */
void target_fill_stats(struct zsw_target *t, struct zsw_store *store, struct zsw_target_stats *s);
/* Notes how a reclaim of t ended, with evict_lock held: a target that
 * could not be stopped (-ETIMEDOUT) is not tried again before
 * stuck_retry_ns, and stuck_why says what kept it; a reclaim that went
 * through ends the backoff. */
void target_note_reclaim(struct zsw_target *t, int r);
/* The mappings of t, from /proc/PID/smaps; -ESRCH for a fork child not
 * yet named. */
int target_read_vmas(struct zsw_target *t, struct zsw_vma_list *ret);
/* A hash of the target's /proc/PID/maps: its mappings, their bounds,
 * permissions and files, not their pages (no page table walk). */
int target_maps_hash(struct zsw_target *t, uint64_t *ret);
/* Sets t's label (NULL: none), cut to fit. */
void target_set_label(struct zsw_target *t, const char *label);

/* Notes that page pgno of t came back by a fault; serve_lock held. */
static inline void target_note_refault(struct zsw_target *t, uint64_t pgno) {
        uint64_t h = atomic_load_explicit(&t->refault_head, memory_order_relaxed);

        atomic_store_explicit(&t->refault_ring[h % REFAULT_RING], pgno, memory_order_relaxed);
        atomic_store_explicit(&t->refault_head, h + 1, memory_order_release);
}

/* A stop longer than this is counted apart: an application notices a
 * pause of its threads of that length in its tail latency. */
#define TARGET_STOP_LONG_NS (5 * 1000000ull)

/* Accounts a ptrace stop of t that lasted ns. */
static inline void target_count_stop_ns(struct zsw_target *t, uint64_t ns) {
        uint64_t max = atomic_load_explicit(&t->stop_ns_max, memory_order_relaxed);

        atomic_fetch_add_explicit(&t->stops, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->stopped_ns, ns, memory_order_relaxed);
        if (ns > TARGET_STOP_LONG_NS)
                atomic_fetch_add_explicit(&t->stops_long, 1, memory_order_relaxed);
        zsw_histogram_record(&t->stop_hist, ns);
        while (ns > max &&
               !atomic_compare_exchange_weak_explicit(&t->stop_ns_max, &max, ns,
                                                      memory_order_relaxed, memory_order_relaxed))
                ;
}
