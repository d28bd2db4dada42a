/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The engine: everything zswapd does to target processes, behind one
 * object. It attaches to processes (ptrace-injected userfaultfd), evicts
 * their cold anonymous pages into the compressed store, serves their faults
 * from fault-service threads, follows their fork/mremap/munmap/exec/exit,
 * and detaches leaving nothing behind. The daemon owns one engine and calls
 * it from its control loop; the engine owns its threads.
 *
 * All calls are thread-safe. Functions return 0 (or a count) on success and
 * a negative errno on failure, with ret_ parameters untouched on failure.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "page.h"
#include "target.h"
#include "util.h"

struct zsw_engine;

struct zsw_engine_config {
        const char *compressor;     /* "lz4" (default when NULL) or "zstd" */
        int compression_level;      /* 0: the compressor's default (compress.h) */
        bool reject_incompressible; /* refuse pages that do not shrink */
        bool no_dictionaries;       /* no compression dictionary per fork family */
        unsigned prefetch_window;   /* pages brought back around a fault, 0 = off */
        unsigned zero_window;       /* see struct zsw_target_config (target.h) */
        unsigned fault_threads; /* 0 = one per CPU we may run on; each target is served by one */
        /* The pool limit (object bytes in the pool), 0 for none; stores
         * are refused from the limit until the pool is back under
         * accept_threshold_percent of it (0 = 90). */
        uint64_t pool_limit_bytes;
        unsigned accept_threshold_percent;
        /* Writeback tier: at the limit, the coldest entries go to a
         * swapfile. swapfile names a directory (an unnamed O_TMPFILE in
         * it; NULL for ZSW_ENGINE_STATE_DIR) or a file to create. */
        bool writeback;
        const char *swapfile;
        uint64_t swapfile_max_bytes; /* 0 = ZSW_ENGINE_SWAPFILE_DEFAULT */
        /* Page ages: targets that were asked for a minimum age (see
         * zsw_engine_reclaim_cold()) are age-scanned this often (0 =
         * ZSW_ENGINE_AGE_INTERVAL_DEFAULT_MS, UINT32_MAX = never by itself,
         * only zsw_engine_age_scan()). The interval is the resolution of
         * a minimum cold age; see zsw_engine_age_scan() for the cost. */
        uint32_t age_interval_ms;
        /* The most of a target's time the write faults its age scans
         * cause may cost it, in percent (0 = ZSW_ENGINE_AGE_COST_PERCENT_DEFAULT).
         * Past it, a scan leaves written pages unprotected, young. 100 or
         * more: no limit, every written page is protected again at each
         * scan, whatever the faults cost (so that what a scan protects
         * does not depend on how fast the machine serves them). */
        uint32_t age_cost_percent;
        const struct zsw_log *log;
};

#define ZSW_ENGINE_AGE_INTERVAL_DEFAULT_MS 5000u
#define ZSW_ENGINE_AGE_COST_PERCENT_DEFAULT 1u

#define ZSW_ENGINE_STATE_DIR "/var/lib/zswapd"
#define ZSW_ENGINE_SWAPFILE_DEFAULT (4ull << 30)

/* Why an attach/request failed beyond the errno, for error messages that
 * tell the user what to do. */
struct zsw_engine_error {
        char message[256];
};

/* Makes the engine and starts its threads. -EOPNOTSUPP (and a log
 * message) on a machine whose pages are not ZSW_PAGE_SIZE bytes. */
int zsw_engine_new(const struct zsw_engine_config *config, struct zsw_engine **ret);

/* Detaches every target (every page put back) and frees the engine. A
 * live target whose pages cannot all be put back (zsw_engine_detach()
 * fails) is never dropped: the engine is then not freed at all, its fault
 * threads keep serving until the process exits, and the log says so.
 * Callers that must not lose pages detach every target first and retry
 * what fails. Returns NULL. */
struct zsw_engine *zsw_engine_free(struct zsw_engine *engine);

/* Attaches to pid. Errors: -ESRCH no such process, -EPERM a kernel thread or
 * not allowed to ptrace, -EALREADY attached already, -EBUSY traced by
 * another tracer, -EINVAL the daemon itself or a zombie. err, when not NULL,
 * receives a one-line explanation. The target gets the engine's settings. */
int zsw_engine_attach(struct zsw_engine *engine, pid_t pid, struct zsw_engine_error *err);

/* zsw_engine_attach() with the target's own settings; config NULL means
 * the engine's. -EINVAL (and a message in err) for an unknown compressor
 * or level, besides the errors of zsw_engine_attach(). */
int zsw_engine_attach_with(struct zsw_engine *engine, pid_t pid,
                           const struct zsw_target_config *config, struct zsw_engine_error *err);

/* Puts every stored page of pid back and releases it. -ENOENT if not
 * attached. When a page cannot be put back (-ENOMEM: the target's memory
 * cgroup is at its limit; any other error of UFFDIO_COPY), the target
 * stays attached with every page it has not got back, still served, and
 * err says so: try again later. */
int zsw_engine_detach(struct zsw_engine *engine, pid_t pid, struct zsw_engine_error *err);

/* Evicts present pages of pid's eligible mappings, up to max_bytes, the
 * coldest first as far as the engine can tell: pages never seen in use
 * before those that came back by a fault or were written while being
 * taken, the longest unused first, going round the address space from
 * where the last reclaim stopped (see heat.h). UINT64_MAX takes all of
 * them, in address order. The
 * engine's other calls, on other threads, go on meanwhile (stats, attach,
 * reclaim of other targets waits for the engine's compression worker);
 * detaching pid waits for the reclaim. */
int zsw_engine_reclaim(struct zsw_engine *engine, pid_t pid, uint64_t max_bytes,
                       struct zsw_reclaim_result *ret, struct zsw_engine_error *err);

struct zsw_reclaim_request {
        uint64_t max_bytes; /* UINT64_MAX: every page old enough */
        /* Only pages unused for at least this long (0: any page, as
         * zsw_engine_reclaim()); the coldest go first. "Unused" is as the
         * age scans see it: not written and not faulted back in since; a
         * page only read ages like an unused one (see age.h). */
        uint64_t min_cold_age_ms;
};

/* Evicts pid's pages as req says. The first call with a minimum age
 * starts the target's periodic age scans (targets never asked for one pay
 * nothing); nothing is taken until the scans have watched the target for
 * that long (at least two scans), and a page faulted back in is not taken
 * again before it has gone unused for twice the minimum age, longer if it
 * came back soon after it was taken (see heat.h). */
int zsw_engine_reclaim_cold(struct zsw_engine *engine, pid_t pid,
                            const struct zsw_reclaim_request *req, struct zsw_reclaim_result *ret,
                            struct zsw_engine_error *err);

/* Registers pid's mappings made since its attach or its last reclaim (a
 * reclaim registers them itself), so that its first touches there reach
 * the engine: the first-touch hold (zsw_engine_set_hold()) sees no
 * others. Reads its smaps, as a reclaim does. -ENOENT if not attached. */
int zsw_engine_register(struct zsw_engine *engine, pid_t pid);

/* Runs an age scan of pid now (the engine also runs them every
 * age_interval_ms). A scan finds the present pages with PAGEMAP_SCAN
 * (after re-reading smaps, to register new mappings), ages the ones still
 * write-protected since the last scan, and write-protects the others
 * again: its cost is a walk of the target's page tables plus one
 * userfaultfd write-protect fault (a round trip to a fault thread;
 * docs/performance.md) on the first write to each page after it was protected;
 * a page found written twice in a row is protected only every fourth
 * scan. -ENOENT if not attached. */
int zsw_engine_age_scan(struct zsw_engine *engine, pid_t pid, struct zsw_engine_error *err);

struct zsw_engine_stats {
        unsigned targets;
        uint64_t stored_pages;
        uint64_t payload_bytes;
        uint64_t pool_bytes;
        uint64_t pool_used_bytes;        /* of pool_bytes: objects, class-rounded */
        uint64_t pool_cached_bytes;      /* of pool_bytes: empty memory kept for reuse */
        uint64_t pool_compacted_objects; /* objects moved by compaction, in all */
        uint64_t pool_compacted_bytes;   /* memory compaction gave back, in all */
        uint64_t meta_bytes;             /* entries, index, pool bookkeeping, dictionaries */
        uint64_t dict_bytes;             /* of meta_bytes: compression dictionaries */
        uint64_t same_filled_pages;
        uint64_t lost_pages; /* lost with a dead zswapd's disk: a touch is SIGBUS */
        uint64_t incompressible_pages;
        uint64_t faults;
        uint64_t refaults;
        uint64_t wp_faults;
        uint64_t evicted_pages;
        uint64_t evict_aborted;
        uint64_t stops; /* all targets' eviction stops */
        uint64_t stopped_ns;
        uint64_t age_scan_ns_total; /* all targets' age scans */
        uint64_t fault_ns_p50, fault_ns_p95, fault_ns_p99;
        /* Limits and the writeback tier. */
        uint64_t pool_limit_bytes;
        uint64_t pool_limit_hit;
        uint64_t refused_limit; /* owners' own limits */
        uint64_t refused_pool_limit;
        uint64_t refused_writeback_off;
        uint64_t refused_reclaim_fail;
        uint64_t shrink_wakeups;
        uint64_t shrink_steps;
        uint64_t written_back_pages;
        uint64_t write_requests;
        uint64_t bytes_written;  /* disk bytes, sector-padded */
        uint64_t write_failures; /* pages kept in memory after a failed write */
        uint64_t disk_reads;
        uint64_t disk_pages;
        uint64_t disk_bytes_in_use; /* swapfile space allocated */
};

/* While on, first touches of the target (pages zswapd never took) are
 * filled one page per fault of ours, without the zero-fill window: a
 * process filling fresh memory slows down (a round trip per page) so
 * that reclaim can keep up,
 * as the kernel's allocations wait for reclaim over a memory limit. For
 * a group over its memory budget. -ENOENT if pid is not attached. */
int zsw_engine_set_throttle(struct zsw_engine *engine, pid_t pid, bool on);
/* Names pid's target for the state a re-exec or a dead zswapd leaves (a
 * policy's name, handed back by zsw_engine_load()'s adopted callback):
 * kept in the target, so that saving it reads nothing of the caller's
 * (after zswapd's death, its structures may be half changed). NULL or ""
 * for none; cut to ZSW_ENGINE_LABEL_MAX - 1 bytes. -ENOENT if pid is no
 * target. An attach sets it from zsw_target_config's label. */
int zsw_engine_set_label(struct zsw_engine *engine, pid_t pid, const char *label);

/* The first-touch hold: while the memory use of the cgroup whose memory
 * directory (v2, or v1's memory controller) is memory_dir_fd is at or
 * over limit_bytes, faults of pid that add a page (first touches of pages
 * zswapd never took, and pages it took coming back) wait until reclaim
 * has brought it under, as an allocation over a memcg limit waits in
 * direct reclaim; under it, they place no more than its room (the
 * zero-fill window and prefetch are cut to it). The fault threads read the group's use
 * themselves, so every target of a group can share one limit. A fault
 * waits at most 100 ms, then gets one page; faults taken inside a system
 * call (a read(2) into a fresh buffer) are never held (a held one would
 * keep the target from stopping for an eviction). limit_bytes 0 turns the
 * hold off and lets every held fault go, as detach does. The directory fd
 * stays the caller's. -ENOENT if pid is not attached; -errno if the
 * group's memory use cannot be opened. */
int zsw_engine_set_hold(struct zsw_engine *engine, pid_t pid, int memory_dir_fd,
                        uint64_t limit_bytes);

/* The limits the engine was made with, in bytes, defaults filled in. They
 * never change, so this takes no lock and builds no statistics: cheap
 * enough for every attach. */
struct zsw_engine_limits {
        uint64_t pool_limit_bytes;   /* 0: none */
        uint64_t swapfile_max_bytes; /* 0: no writeback */
};

int zsw_engine_get_limits(struct zsw_engine *engine, struct zsw_engine_limits *ret);

/* Every target's counters and fault latencies merged, with the store's
 * and the writeback tier's figures: takes control_lock, the target table
 * and each target's age figures. */
int zsw_engine_get_stats(struct zsw_engine *engine, struct zsw_engine_stats *ret);
int zsw_engine_get_target_stats(struct zsw_engine *engine, pid_t pid, struct zsw_target_stats *ret);

/* Fills up to n attached pids (children followed through fork included);
 * returns how many are attached in all (may exceed n). */
size_t zsw_engine_list_targets(struct zsw_engine *engine, pid_t *pids, size_t n);

/* ---- replacing the process (re-exec) -------------------------------------
 * zswapd replaces its binary without giving any page back: it freezes the
 * engine, saves its whole state into a descriptor, execve()s, and the new
 * process loads that state into a fresh engine. See docs/design.md. */

/*
 * Freezes the engine for a save: no attach, detach, reclaim, age scan or
 * writeback starts any more, the ones in flight are waited for (a round
 * always ends committed or rolled back), and no fault thread reads a
 * target's userfaultfd any more (faults wait in the kernel). -EBUSY (and
 * err) while a fork child is not named yet: try again. On failure the
 * engine runs on as before. Call zsw_engine_thaw() if the exec does not
 * happen.
 */
int zsw_engine_freeze(struct zsw_engine *engine, struct zsw_engine_error *err);

/* Undoes zsw_engine_freeze(): serving goes on. */
void zsw_engine_thaw(struct zsw_engine *engine);

/*
 * Writes the frozen engine's state to fd (a memfd; from its current
 * offset): every live target (process, start time, its userfaultfd, its
 * settings, its fork family, its label), every stored page with its
 * payload (pages written back are read into it), and clears FD_CLOEXEC on
 * the userfaultfds it names. Returns the number of targets saved; on
 * failure the descriptors keep FD_CLOEXEC.
 */
int zsw_engine_save(struct zsw_engine *engine, int fd, struct zsw_engine_error *err);

/* Fork children not named yet that a salvage saves at most. */
#define ZSW_SALVAGE_KEPT_MAX 64u

/* What zsw_engine_salvage() saved, and what it could not. */
struct zsw_engine_salvage_result {
        size_t targets;        /* saved */
        uint64_t entries;      /* stored pages saved, shared ones once */
        uint64_t bytes;        /* the state's size */
        unsigned unheld;       /* targets left out: no reference of their own to their uffd */
        unsigned unnamed;      /* fork children not named yet, saved: kept_fds are their uffds */
        unsigned unnamed_lost; /* more of them, left out: over ZSW_SALVAGE_KEPT_MAX */
        uint64_t lost;         /* pages saved without content: their disk copy could not be read */
        int kept_fds[ZSW_SALVAGE_KEPT_MAX]; /* ascending; unnamed of them */
};

/*
 * zsw_engine_save() for an engine whose process died: called by the one
 * task left in its memory (daemon/rescue.c), after every thread of the
 * engine is gone, in whatever state each left. Takes no lock, freezes
 * nothing, leaves every descriptor as it is, logs nothing. A target is
 * saved only if it holds its own reference to the uffd we served it
 * through (the next zswapd takes that one: zsw_engine_adopt()), or is a
 * fork child not named yet: its uffd is only in our descriptor table,
 * and the calling task must keep it open (kept_fds) until the next
 * zswapd has taken it from that task, the state's keeper. Returns the
 * number of targets saved, or -errno (and err).
 */
int zsw_engine_salvage(struct zsw_engine *engine, int fd, struct zsw_engine_salvage_result *ret,
                       struct zsw_engine_error *err);

/*
 * A descriptor the service manager kept for us (systemd's file descriptor
 * store): the uffd of a fork child not named yet, which a dead zswapd's
 * rescue task (keeper) held as its descriptor number and handed over
 * because it could not wait for the next zswapd. zsw_engine_adopt() takes
 * it for the state that names that child; the engine owns fd from now on.
 * 0, -EINVAL or -ENOMEM (fd stays the caller's).
 */
int zsw_engine_add_kept_uffd(struct zsw_engine *engine, pid_t keeper, int number, int fd);
/* Calls fn (may be NULL) for each of them with whether an adoption took
 * it, closes those none took and forgets them all; returns how many it
 * closed. */
typedef void (*zsw_engine_kept_fn)(void *userdata, pid_t keeper, int number, bool taken);
unsigned zsw_engine_drop_kept_uffds(struct zsw_engine *engine, zsw_engine_kept_fn fn,
                                    void *userdata);

/* For the same task, before zsw_engine_salvage(): waits until the
 * tracers of injections that were in flight have finished them and let
 * their targets go (each outlives the engine's process for that,
 * libzswapd/remote.c), at most the stop and call deadlines of one
 * injection: what they complete, a fork child given its uffd, is then
 * saved. -ETIMEDOUT if one is still there. */
int zsw_engine_wait_tracers(void);

/* A saved target the new engine took over, reported to the caller. */
typedef void (*zsw_engine_adopted_fn)(void *userdata, pid_t pid, const char *label);

/*
 * Loads the state saved by zsw_engine_save() into engine, which must have
 * no target yet: each target whose process still is the one saved (pidfd
 * and start time) is served again with all its pages, and every thread of
 * it waiting in a fault is woken so that the fault comes again to this
 * process; a target that exited meanwhile is freed. adopted (may be NULL)
 * is told of each target taken over. Returns the number of targets
 * adopted; -EPROTO (and err) for a state of another version or a
 * malformed one, in which case nothing was taken over and the
 * userfaultfds named in it are left open.
 */
int zsw_engine_load(struct zsw_engine *engine, int fd, zsw_engine_adopted_fn adopted,
                    void *userdata, struct zsw_engine_error *err);

/*
 * zsw_engine_load() of a state zsw_engine_salvage() left: each target's
 * uffd is taken from the target itself (pidfd_getfd() of the descriptor
 * the state names, which must still be a userfaultfd), and entries of
 * pages present in the target are dropped (a round or a fault the dead
 * process had not finished): the present page is the content.
 */
int zsw_engine_adopt(struct zsw_engine *engine, int fd, zsw_engine_adopted_fn adopted,
                     void *userdata, struct zsw_engine_error *err);
