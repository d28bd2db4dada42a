/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control socket: a SOCK_SEQPACKET Unix socket, so that every request
 * and every reply is one message whose boundaries the kernel keeps, and a
 * client that disconnects half-way can leave nothing half-read behind.
 *
 * Protocol. A request is one message holding one line of words separated
 * by spaces (a trailing newline is allowed):
 *
 *     attach PID
 *     detach PID
 *     reclaim PID all [min-age MS]
 *     reclaim PID bytes N [min-age MS]
 *                               N > 0, decimal, in bytes; MS: take only
 *                               pages unused for MS milliseconds or more
 *     stats [PID]
 *     reload                    re-read the configuration
 *     policies                  the policies and their groups' control state
 *     targets                   every attached process, with its policy
 *     status                    one screen: store, pressure, policies, targets
 *     reexec                    replace the running binary, keeping every page
 *                               (the reply comes from the new binary)
 *
 * and any of them may end with the word "json". The reply is one message:
 * a first line "ok" or "error NAME", where NAME is the errno name
 * (ESRCH, EPERM, ...), then the body: human-readable text, or with "json"
 * one JSON object; after an error the body is one line for a person that
 * says what went wrong and what to do. A request that does not parse gets
 * "error EINVAL" and changes nothing. Requests longer than
 * CONTROL_REQUEST_MAX bytes get "error EMSGSIZE".
 *
 * Only root may ask: peers' credentials are taken with SO_PEERCRED when they
 * connect, and anybody else gets "error EPERM" as the reply to their first
 * request and is disconnected. The socket is also created 0600, so this
 * check is the second line. An empty message cannot be told from the end
 * of the connection, so it ends it.
 *
 * Connections. At most CLIENTS_MAX at once. A connection with no request
 * in progress for CONTROL_IDLE_TIMEOUT_USEC (30 s) is closed, and when
 * all are taken a new one closes the one idle for longest; at most
 * CLIENTS_MAX - CLIENTS_RESERVED may wait for a reclaim (the next gets
 * "error EBUSY"), so there is always an idle one to close and no client,
 * however many connections it opens, can lock root's zswapctl out. A
 * connection refused all the same gets "error EBUSY" before it is closed,
 * its request read first (a close with unread data would reset the
 * connection and lose the reply).
 *
 * Requests run on the daemon's main loop, one after the other, except
 * reclaims, which go to the reclaim worker (reclaim.h) when the daemon has
 * one: other clients are served meanwhile, and the reclaiming client gets
 * its reply when the reclaim is done (its further requests wait for it,
 * so replies keep the order of requests). The engine serves faults from
 * its own threads, so nothing here delays a target.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>

#include "control.h"
#include "json.h"
#include "log.h"
#include "reclaim.h"

#define CLIENTS_MAX 64
#define CLIENTS_RESERVED 8
#define MIB (1024.0 * 1024.0)

struct client {
        struct control *control;
        int fd;
        struct ucred cred;
        uint64_t active_usec; /* connected, or last request or reply */
        /* A reclaim running for it on the reclaim worker: its next
         * request is read once this one is answered, so replies come in
         * the order of the requests. */
        struct reclaim_request *pending;
        struct control_request pending_req;
};

struct control {
        struct zsw_engine *engine;
        struct reclaimer *reclaimer;
        const struct control_hooks *hooks;
        char *path;
        dev_t sock_dev;
        ino_t sock_ino;
        int listen_fd;
        int epoll_fd;
        int timer_fd; /* sweeps idle connections */
        uint64_t idle_timeout_usec;
        bool stopping; /* only stats, listings and detach are served */
        unsigned n_clients;
        unsigned n_pending; /* clients waiting for a reclaim */
        struct client *clients[CLIENTS_MAX];
};

static uint64_t now_usec(void) {
        return zsw_now_ns() / 1000;
}

/* ---- requests ---------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *ret) {
        uint64_t v = 0;

        if (!*s)
                return -EINVAL;
        for (; *s; s++) {
                if (*s < '0' || *s > '9')
                        return -EINVAL;
                if (v > (UINT64_MAX - (uint64_t) (*s - '0')) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t) (*s - '0');
        }
        *ret = v;
        return 0;
}

static int parse_pid(const char *s, pid_t *ret) {
        uint64_t v;

        /* Leading zeros, signs and spaces are refused: a PID is written one way. */
        if (s[0] == '0' || parse_u64(s, &v) < 0 || v > INT32_MAX)
                return -EINVAL;
        *ret = (pid_t) v;
        return 0;
}

int control_parse_request(const char *text, size_t len, struct control_request *ret,
                          const char **reason) {
        char buf[CONTROL_REQUEST_MAX + 1], *words[8], *save = NULL;
        struct control_request req = { .max_bytes = UINT64_MAX };
        size_t n = 0;

        *reason = "request too long";
        if (len > CONTROL_REQUEST_MAX)
                return -EMSGSIZE;
        memcpy(buf, text, len);
        buf[len] = 0;
        if (len > 0 && buf[len - 1] == '\n')
                buf[--len] = 0;
        *reason = "request contains a NUL byte or a control character";
        for (size_t i = 0; i < len; i++)
                if ((unsigned char) buf[i] < 0x20)
                        return -EINVAL;

        for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
                *reason = "too many words";
                if (n >= ARRAY_SIZE(words))
                        return -EINVAL;
                words[n++] = w;
        }
        if (n > 0 && strcmp(words[n - 1], "json") == 0) {
                req.json = true;
                n--;
        }
        *reason = "empty request; expected attach, detach, reclaim or stats";
        if (n == 0)
                return -EINVAL;

        if (strcmp(words[0], "attach") == 0 || strcmp(words[0], "detach") == 0) {
                req.verb = words[0][0] == 'a' ? CONTROL_ATTACH : CONTROL_DETACH;
                *reason = "expected: attach|detach PID";
                if (n != 2 || parse_pid(words[1], &req.pid) < 0)
                        return -EINVAL;
        } else if (strcmp(words[0], "reclaim") == 0) {
                req.verb = CONTROL_RECLAIM;
                *reason = "expected: reclaim PID all | reclaim PID bytes N (N > 0), "
                          "then optionally min-age MS";
                if (n < 3 || parse_pid(words[1], &req.pid) < 0)
                        return -EINVAL;
                if (n >= 5 && strcmp(words[n - 2], "min-age") == 0) {
                        if (parse_u64(words[n - 1], &req.min_age_ms) < 0)
                                return -EINVAL;
                        n -= 2;
                }
                if (n == 3 && strcmp(words[2], "all") == 0)
                        req.max_bytes = UINT64_MAX;
                else if (n == 4 && strcmp(words[2], "bytes") == 0) {
                        if (parse_u64(words[3], &req.max_bytes) < 0 || req.max_bytes == 0)
                                return -EINVAL;
                } else
                        return -EINVAL;
        } else if (strcmp(words[0], "stats") == 0) {
                req.verb = CONTROL_STATS;
                *reason = "expected: stats [PID]";
                if (n > 2 || (n == 2 && parse_pid(words[1], &req.pid) < 0))
                        return -EINVAL;
        } else if (strcmp(words[0], "reexec") == 0) {
                req.verb = CONTROL_REEXEC;
                *reason = "expected no argument";
                if (n != 1)
                        return -EINVAL;
        } else if (strcmp(words[0], "reload") == 0 || strcmp(words[0], "policies") == 0 ||
                   strcmp(words[0], "targets") == 0 || strcmp(words[0], "status") == 0) {
                req.verb = words[0][0] == 'r'   ? CONTROL_RELOAD
                           : words[0][0] == 'p' ? CONTROL_POLICIES
                           : words[0][1] == 'a' ? CONTROL_TARGETS
                                                : CONTROL_STATUS;
                *reason = "expected no argument";
                if (n != 1)
                        return -EINVAL;
        } else {
                *reason = "unknown command; expected attach, detach, reclaim, stats, reload, "
                          "policies, targets, status or reexec";
                return -EINVAL;
        }

        *ret = req;
        return 0;
}

/* ---- replies ----------------------------------------------------------- */

/* Advice for the errors the engine documents, when it gave no message. */
static const char *errno_advice(int error) {
        switch (error) {
        case ESRCH:
                return "no such process";
        case EPERM:
                return "cannot ptrace it: is it a kernel thread, or is the daemon missing "
                       "CAP_SYS_PTRACE?";
        case EALREADY:
                return "already attached (see 'zswapctl stats')";
        case EBUSY:
                return "traced by another process (a debugger?); detach that first";
        case EINVAL:
                return "it cannot be attached (a zombie, or zswapd itself)";
        case ENOENT:
                return "not attached; attach it first with 'zswapctl attach PID'";
        case EOPNOTSUPP:
                return "not supported on this architecture or kernel";
        default:
                return strerror(error);
        }
}

static const char *verb_name(enum control_verb verb) {
        static const char *const names[] = {
                [CONTROL_ATTACH] = "attach to",
                [CONTROL_DETACH] = "detach from",
                [CONTROL_RECLAIM] = "reclaim from",
                [CONTROL_STATS] = "get stats of",
                [CONTROL_RELOAD] = "reload the configuration",
                [CONTROL_POLICIES] = "list policies",
                [CONTROL_TARGETS] = "list targets",
                [CONTROL_STATUS] = "get the status",
                [CONTROL_REEXEC] = "re-execute zswapd",
        };
        return names[verb];
}

static double ratio(uint64_t pages, uint64_t pool_bytes) {
        return pool_bytes > 0 ? (double) pages * (double) ZSW_PAGE_SIZE / (double) pool_bytes : 0;
}

static void stats_json_global(struct json *j, const struct zsw_engine_stats *g) {
        json_object_open(j, "global");
        json_u64(j, "targets", g->targets);
        json_u64(j, "stored_pages", g->stored_pages);
        json_u64(j, "payload_bytes", g->payload_bytes);
        json_u64(j, "pool_bytes", g->pool_bytes);
        json_u64(j, "pool_used_bytes", g->pool_used_bytes);
        json_u64(j, "pool_cached_bytes", g->pool_cached_bytes);
        json_u64(j, "pool_compacted_objects", g->pool_compacted_objects);
        json_u64(j, "pool_compacted_bytes", g->pool_compacted_bytes);
        json_u64(j, "meta_bytes", g->meta_bytes);
        json_u64(j, "dictionary_bytes", g->dict_bytes);
        json_u64(j, "same_filled_pages", g->same_filled_pages);
        json_u64(j, "lost_pages", g->lost_pages);
        json_u64(j, "incompressible_pages", g->incompressible_pages);
        json_u64(j, "faults", g->faults);
        json_u64(j, "refaults", g->refaults);
        json_u64(j, "wp_faults", g->wp_faults);
        json_u64(j, "age_scan_ns", g->age_scan_ns_total);
        json_u64(j, "evicted_pages", g->evicted_pages);
        json_u64(j, "evict_aborted", g->evict_aborted);
        json_u64(j, "stops", g->stops);
        json_u64(j, "stopped_ns", g->stopped_ns);
        json_u64(j, "fault_ns_p50", g->fault_ns_p50);
        json_u64(j, "fault_ns_p95", g->fault_ns_p95);
        json_u64(j, "fault_ns_p99", g->fault_ns_p99);
        json_u64(j, "page_size", (uint64_t) ZSW_PAGE_SIZE);
        json_double(j, "ratio", ratio(g->stored_pages, g->pool_bytes));
        json_object_open(j, "writeback");
        json_u64(j, "pool_limit_bytes", g->pool_limit_bytes);
        json_u64(j, "pool_limit_hit", g->pool_limit_hit);
        json_u64(j, "refused_limit", g->refused_limit);
        json_u64(j, "refused_pool_limit", g->refused_pool_limit);
        json_u64(j, "refused_writeback_off", g->refused_writeback_off);
        json_u64(j, "refused_reclaim_fail", g->refused_reclaim_fail);
        json_u64(j, "shrink_wakeups", g->shrink_wakeups);
        json_u64(j, "shrink_steps", g->shrink_steps);
        json_u64(j, "written_back_pages", g->written_back_pages);
        json_u64(j, "write_requests", g->write_requests);
        json_double(j, "pages_per_write",
                    g->write_requests ? (double) g->written_back_pages / g->write_requests : 0.0);
        json_u64(j, "bytes_written", g->bytes_written);
        json_u64(j, "write_failures", g->write_failures);
        json_u64(j, "disk_reads", g->disk_reads);
        json_u64(j, "disk_pages", g->disk_pages);
        json_u64(j, "disk_bytes_in_use", g->disk_bytes_in_use);
        json_object_close(j);
        json_object_close(j);
}

static double stopped_percent(const struct zsw_target_stats *t) {
        return t->attached_ns ? 100.0 * (double) t->stopped_ns / (double) t->attached_ns : 0.0;
}

static double age_cost_percent(const struct zsw_target_stats *t) {
        return t->attached_ns ? 100.0 * (double) t->age_cost_ns / (double) t->attached_ns : 0.0;
}

static void stats_json_target(struct json *j, const struct zsw_target_stats *t) {
        json_object_open(j, NULL);
        json_i64(j, "pid", t->pid);
        json_u64(j, "resident_bytes", t->resident_bytes);
        json_u64(j, "stored_pages", t->stored_pages);
        json_u64(j, "payload_bytes", t->payload_bytes);
        json_u64(j, "pool_bytes", t->pool_bytes);
        json_u64(j, "dictionary_bytes", t->dict_bytes);
        json_u64(j, "same_filled_pages", t->same_filled_pages);
        json_u64(j, "lost_pages", t->lost_pages);
        json_u64(j, "evicted_pages", t->evicted_pages);
        json_u64(j, "evict_aborted", t->evict_aborted);
        json_u64(j, "faults", t->faults);
        json_u64(j, "zero_faults", t->zero_faults);
        json_u64(j, "zero_ahead_pages", t->zero_ahead_pages);
        json_u64(j, "throttled_faults", t->throttled_faults);
        json_bool(j, "throttled", t->throttled);
        json_object_open(j, "hold");
        json_u64(j, "limit_bytes", t->hold_limit_bytes);
        json_u64(j, "held_faults", t->held_faults);
        json_u64(j, "held_now", t->held_now);
        json_u64(j, "timeouts", t->hold_timeouts);
        json_u64(j, "held_ns", t->held_ns);
        json_object_close(j);
        json_u64(j, "refaults", t->refaults);
        json_u64(j, "wp_faults", t->wp_faults);
        json_u64(j, "prefetched_pages", t->prefetched_pages);
        json_u64(j, "prefetch_hits", t->prefetch_hits);
        json_u64(j, "fault_ns_p50", t->fault_ns_p50);
        json_u64(j, "fault_ns_p95", t->fault_ns_p95);
        json_u64(j, "fault_ns_p99", t->fault_ns_p99);
        json_u64(j, "remove_events", t->remove_events);
        json_object_open(j, "stops");
        json_u64(j, "count", t->stops);
        json_u64(j, "stopped_ns", t->stopped_ns);
        json_u64(j, "max_ns", t->stop_ns_max);
        json_u64(j, "p50_ns", t->stop_ns_p50);
        json_u64(j, "p99_ns", t->stop_ns_p99);
        json_u64(j, "over_5ms", t->stops_over_5ms);
        json_u64(j, "attached_ns", t->attached_ns);
        json_double(j, "stopped_percent", stopped_percent(t));
        json_object_close(j);
        json_object_open(j, "heat");
        json_u64(j, "uses", t->heat_uses);
        json_u64(j, "table_bytes", t->heat_table_bytes);
        json_object_close(j);
        json_double(j, "ratio", ratio(t->stored_pages, t->pool_bytes));
        json_string(j, "compressor", t->compressor ?: "");
        json_i64(j, "compression_level", t->compression_level);
        json_u64(j, "prefetch_window", t->prefetch_window);
        json_u64(j, "prefetch_window_now", t->prefetch_window_now);
        json_u64(j, "zero_window", t->zero_window);
        json_u64(j, "max_pool_pages", t->max_pool_bytes / ZSW_PAGE_SIZE);
        json_string(j, "writeback_allowed", t->no_writeback ? "no" : "yes");
        json_object_open(j, "age");
        json_u64(j, "scans", t->age_scans);
        json_u64(j, "present_pages", t->age_present_pages);
        json_u64(j, "idle_pages", t->age_idle_pages);
        json_u64(j, "protected_pages", t->age_protected_pages);
        json_u64(j, "table_bytes", t->age_table_bytes);
        json_u64(j, "scan_ns_last", t->age_scan_ns_last);
        json_u64(j, "scan_ns_total", t->age_scan_ns_total);
        json_u64(j, "unprotected_pages", t->age_unprotected_pages);
        json_u64(j, "wp_faults", t->age_wp_faults);
        json_u64(j, "wp_fault_ns", t->age_wp_fault_ns);
        json_u64(j, "cost_ns", t->age_cost_ns);
        json_double(j, "cost_percent", age_cost_percent(t));
        json_object_close(j);
        json_object_open(j, "writeback");
        json_u64(j, "written_back_pages", t->written_back_pages);
        json_u64(j, "disk_pages", t->disk_pages);
        json_u64(j, "disk_bytes", t->disk_bytes);
        json_u64(j, "disk_reads", t->disk_reads);
        json_u64(j, "refused_limit", t->refused_limit);
        json_u64(j, "refused_pool_limit", t->refused_pool_limit);
        json_u64(j, "refused_writeback_off", t->refused_writeback_off);
        json_u64(j, "refused_reclaim_fail", t->refused_reclaim_fail);
        json_object_close(j);
        json_object_close(j);
}

static void stats_text(FILE *f, const struct zsw_engine_stats *g, const struct zsw_target_stats *t,
                       size_t n, bool detail) {
        double page = ZSW_PAGE_SIZE;

        fprintf(f,
                "targets: %u   stored: %.1f MiB (%" PRIu64 " pages) in a %.1f MiB pool, "
                "ratio %.2f\n",
                g->targets, g->stored_pages * page / MIB, g->stored_pages, g->pool_bytes / MIB,
                ratio(g->stored_pages, g->pool_bytes));
        fprintf(f,
                "evicted: %" PRIu64 " pages (%" PRIu64 " cancelled by writes)   faults: %" PRIu64
                " (p50 %.1f us, p95 %.1f us, p99 %.1f us), %" PRIu64 " refaults\n",
                g->evicted_pages, g->evict_aborted, g->faults, g->fault_ns_p50 / 1e3,
                g->fault_ns_p95 / 1e3, g->fault_ns_p99 / 1e3, g->refaults);
        fprintf(f,
                "age scans: %.1f ms in all, %" PRIu64 " write-protect faults   "
                "targets stopped: %" PRIu64 " times, %.1f ms in all\n",
                g->age_scan_ns_total / 1e6, g->wp_faults, g->stops, g->stopped_ns / 1e6);
        fprintf(f, "same-filled: %" PRIu64 " pages   incompressible: %" PRIu64 " pages\n",
                g->same_filled_pages, g->incompressible_pages);
        fprintf(f,
                "pool: %.1f MiB of objects, %.1f MiB cached empty, %" PRIu64
                " objects moved by compaction (%.1f MiB)   bookkeeping: %.1f MiB"
                " (dictionaries %.1f MiB)\n",
                g->pool_used_bytes / MIB, g->pool_cached_bytes / MIB, g->pool_compacted_objects,
                g->pool_compacted_bytes / MIB, g->meta_bytes / MIB, g->dict_bytes / MIB);
        fprintf(f,
                "writeback: %" PRIu64 " pages on disk (%.1f MiB), %" PRIu64 " written in %" PRIu64
                " requests, %" PRIu64 " failed, %" PRIu64 " read back   pool limit hit %" PRIu64
                " times\n",
                g->disk_pages, g->disk_bytes_in_use / MIB, g->written_back_pages, g->write_requests,
                g->write_failures, g->disk_reads, g->pool_limit_hit);
        if (n == 0)
                return;

        fprintf(f, "\n%8s %12s %12s %12s %6s %10s %9s %9s %8s\n", "PID", "RESIDENT", "STORED",
                "POOL", "RATIO", "FAULTS", "P50(us)", "P99(us)", "ABORTED");
        for (size_t i = 0; i < n; i++)
                fprintf(f,
                        "%8d %8.1f MiB %8.1f MiB %8.1f MiB %6.2f %10" PRIu64
                        " %9.1f %9.1f %8" PRIu64 "\n",
                        t[i].pid, t[i].resident_bytes / MIB, t[i].stored_pages * page / MIB,
                        t[i].pool_bytes / MIB, ratio(t[i].stored_pages, t[i].pool_bytes),
                        t[i].faults, t[i].fault_ns_p50 / 1e3, t[i].fault_ns_p99 / 1e3,
                        t[i].evict_aborted);
        if (detail) {
                fprintf(f,
                        "\npid %d: payload %.1f MiB, %" PRIu64 " same-filled pages, %" PRIu64
                        " evicted in all, %" PRIu64 " refaults, %" PRIu64
                        " zero-fill faults (%" PRIu64 " pages filled ahead, %" PRIu64
                        " throttled over budget%s), %" PRIu64 " prefetched (%" PRIu64
                        " used), fault p95 %.1f us\n",
                        t->pid, t->payload_bytes / MIB, t->same_filled_pages, t->evicted_pages,
                        t->refaults, t->zero_faults, t->zero_ahead_pages, t->throttled_faults,
                        t->throttled ? ", throttled now" : "", t->prefetched_pages,
                        t->prefetch_hits, t->fault_ns_p95 / 1e3);
                fprintf(f,
                        "ages: %" PRIu64 " scans; at the last, %" PRIu64 " pages present, %" PRIu64
                        " idle since the scan before, %" PRIu64 " protected again, %" PRIu64
                        " written left unprotected, %.2f ms; table %.1f KiB; %" PRIu64
                        " write-protect faults\n",
                        t->age_scans, t->age_present_pages, t->age_idle_pages,
                        t->age_protected_pages, t->age_unprotected_pages, t->age_scan_ns_last / 1e6,
                        t->age_table_bytes / 1024.0, t->wp_faults);
                fprintf(f,
                        "age scans' cost to the process: %" PRIu64 " write-protect faults on pages "
                        "they protected, served in %.1f ms, about %.1f ms with the round trips "
                        "(%.3f%% of the time attached); no stops\n",
                        t->age_wp_faults, t->age_wp_fault_ns / 1e6, t->age_cost_ns / 1e6,
                        age_cost_percent(t));
                fprintf(f,
                        "stops: %" PRIu64 ", %.1f ms in all (%.2f%% of the %.0f s attached), "
                        "median %.2f ms, p99 %.2f ms, longest %.2f ms, %" PRIu64 " over 5 ms; "
                        "uses seen %" PRIu64 ", heat table %.1f KiB\n",
                        t->stops, t->stopped_ns / 1e6, stopped_percent(t), t->attached_ns / 1e9,
                        t->stop_ns_p50 / 1e6, t->stop_ns_p99 / 1e6, t->stop_ns_max / 1e6,
                        t->stops_over_5ms, t->heat_uses, t->heat_table_bytes / 1024.0);
                if (t->hold_limit_bytes > 0 || t->held_faults > 0)
                        fprintf(f,
                                "memory budget hold: %s, %" PRIu64 " faults held (%" PRIu64
                                " now), %.1f ms in all, %" PRIu64
                                " served at the time bound without room\n",
                                t->hold_limit_bytes > 0 ? "on" : "off", t->held_faults, t->held_now,
                                t->held_ns / 1e6, t->hold_timeouts);
        }
}

/* Stats of one target, or of every attached one. Targets that exit while
 * the list is walked are left out. */
static int do_stats(struct control *c, const struct control_request *req, FILE *body) {
        _cleanup_free_ struct zsw_target_stats *t = NULL;
        _cleanup_free_ pid_t *pids = NULL;
        struct zsw_engine_stats g;
        size_t n = 0, want = 64, total;
        int r;

        r = zsw_engine_get_stats(c->engine, &g);
        if (r < 0)
                return r;

        if (req->pid > 0) {
                pids = malloc(sizeof(pid_t));
                if (!pids)
                        return -ENOMEM;
                pids[0] = req->pid;
                total = 1;
        } else
                for (;;) {
                        free(pids);
                        pids = malloc(want * sizeof(pid_t));
                        if (!pids)
                                return -ENOMEM;
                        total = zsw_engine_list_targets(c->engine, pids, want);
                        if (total <= want)
                                break;
                        want = total + 16;
                }

        t = calloc(total ?: 1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < total; i++) {
                r = zsw_engine_get_target_stats(c->engine, pids[i], &t[n]);
                if (r == -ENOENT && req->pid == 0)
                        continue;
                if (r < 0)
                        return r;
                n++;
        }

        if (req->json) {
                struct json j;

                json_init(&j, body);
                json_object_open(&j, NULL);
                stats_json_global(&j, &g);
                json_array_open(&j, "targets");
                for (size_t i = 0; i < n; i++)
                        stats_json_target(&j, &t[i]);
                json_array_close(&j);
                json_object_close(&j);
                fputc('\n', body);
        } else
                stats_text(body, &g, t, n, req->pid > 0);
        return 0;
}

static void reclaim_body(struct zsw_engine *engine, const struct control_request *req,
                         const struct zsw_reclaim_result *r, FILE *body);

static int do_reclaim(struct control *c, const struct control_request *req, FILE *body,
                      struct zsw_engine_error *err) {
        struct zsw_reclaim_result res;
        int r;

        r = zsw_engine_reclaim_cold(c->engine, req->pid,
                                    &(struct zsw_reclaim_request) {
                                            .max_bytes = req->max_bytes,
                                            .min_cold_age_ms = req->min_age_ms,
                                    },
                                    &res, err);
        if (r < 0)
                return r;
        reclaim_body(c->engine, req, &res, body);
        return 0;
}

static void reclaim_body(struct zsw_engine *engine, const struct control_request *req,
                         const struct zsw_reclaim_result *r, FILE *body) {
        const struct zsw_reclaim_result res = *r;

        log_info("Reclaimed %" PRIu64 " pages from %d (%" PRIu64 " cancelled by writes, %" PRIu64
                 " refused, minimum age %" PRIu64 " ms).",
                 res.evicted_pages, req->pid, res.aborted_pages, res.refused_pages,
                 req->min_age_ms);

        if (req->json) {
                struct json j;

                json_init(&j, body);
                json_object_open(&j, NULL);
                json_i64(&j, "pid", req->pid);
                json_u64(&j, "scanned_pages", res.scanned_pages);
                json_u64(&j, "evicted_pages", res.evicted_pages);
                json_u64(&j, "aborted_pages", res.aborted_pages);
                json_u64(&j, "refused_pages", res.refused_pages);
                json_u64(&j, "min_age_ms", req->min_age_ms);
                json_u64(&j, "cold_pages", res.cold_pages);
                json_u64(&j, "duration_ns", res.duration_ns);
                json_object_close(&j);
                fputc('\n', body);
        } else
                fprintf(body,
                        "pid %d: evicted %" PRIu64 " of %" PRIu64
                        " present pages (%.1f MiB) in %.1f ms; %" PRIu64
                        " cancelled by writes, %" PRIu64 " refused by the store\n",
                        req->pid, res.evicted_pages, res.scanned_pages,
                        res.evicted_pages * (double) ZSW_PAGE_SIZE / MIB, res.duration_ns / 1e6,
                        res.aborted_pages, res.refused_pages);
        if (!req->json && req->min_age_ms > 0) {
                struct zsw_target_stats ts;

                if (zsw_engine_get_target_stats(engine, req->pid, &ts) >= 0 && ts.age_scans < 2)
                        fprintf(body,
                                "ages of pid %d are being measured from now on: pages "
                                "unused for %" PRIu64 " ms can be taken in about that "
                                "time\n",
                                req->pid, req->min_age_ms);
                else
                        fprintf(body,
                                "%" PRIu64 " pages had gone unused for %" PRIu64
                                " ms or more at the last age scan\n",
                                res.cold_pages, req->min_age_ms);
        }
}

/* Runs a parsed request; on failure err holds the engine's explanation, if
 * it gave one. */
static int execute(struct control *c, const struct control_request *req, FILE *body,
                   struct zsw_engine_error *err) {
        int r;
        LOG_FIELDS(.target_pid = req->pid);

        if (c->stopping && (req->verb == CONTROL_ATTACH || req->verb == CONTROL_RECLAIM ||
                            req->verb == CONTROL_RELOAD || req->verb == CONTROL_REEXEC)) {
                snprintf(err->message, sizeof(err->message),
                         "zswapd is stopping: it only gives "
                         "pages back now (stats, targets and detach are still served)");
                return -ESHUTDOWN;
        }
        switch (req->verb) {
        case CONTROL_ATTACH:
        case CONTROL_DETACH:
                if (req->verb == CONTROL_ATTACH)
                        r = zsw_engine_attach(c->engine, req->pid, err);
                else
                        r = zsw_engine_detach(c->engine, req->pid, err);
                if (r < 0)
                        return r;
                if (req->verb == CONTROL_DETACH && c->hooks && c->hooks->detached)
                        c->hooks->detached(c->hooks->userdata, req->pid);
                log_info("%s %d.", req->verb == CONTROL_ATTACH ? "Attached to" : "Detached from",
                         req->pid);
                if (req->json)
                        fprintf(body, "{\"pid\":%d}\n", req->pid);
                else
                        fprintf(body, "%s %d\n",
                                req->verb == CONTROL_ATTACH ? "attached to" : "detached from",
                                req->pid);
                return 0;
        case CONTROL_RECLAIM:
                return do_reclaim(c, req, body, err);
        case CONTROL_STATS:
                return do_stats(c, req, body);
        case CONTROL_RELOAD:
                if (!c->hooks)
                        return -EOPNOTSUPP;
                r = c->hooks->reload(c->hooks->userdata, err);
                if (r < 0)
                        return r;
                fputs(req->json ? "{\"reloaded\":true}\n" : "configuration reloaded\n", body);
                return 0;
        case CONTROL_POLICIES:
        case CONTROL_TARGETS:
        case CONTROL_STATUS:
                if (!c->hooks)
                        return -EOPNOTSUPP;
                return c->hooks->dump(c->hooks->userdata, req->verb, body, req->json);
        case CONTROL_REEXEC:
                /* Handled by handle_request(), which has the client. */
                return -EOPNOTSUPP;
        }
        return -EINVAL;
}

static void reply(int fd, const char *msg, size_t len) {
        /* A client that went away or stopped reading loses its reply; the
         * loop must not wait for it. */
        if (send(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                log_debug_errno(errno, "Failed to send a reply, ignoring: %m");
}

static void reply_error(int fd, int error, const char *fmt, ...) _printf_(3, 4);
static void reply_error(int fd, int error, const char *fmt, ...) {
        char buf[512];
        va_list ap;
        int n;

        n = snprintf(buf, sizeof(buf), "error %s\n", strerrorname_np(error) ?: "EIO");
        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
        va_end(ap);
        n = MIN(n, (int) sizeof(buf) - 2);
        buf[n++] = '\n';
        reply(fd, buf, n);
}

/* Sends the reply to a request that ran: the body, or the error. */
static void reply_result(int fd, const struct control_request *req, int r,
                         const struct zsw_engine_error *errp, const char *body, size_t body_len) {
        const struct zsw_engine_error err = *errp;
        char who[32] = "";

        if (r < 0) {
                if (req->pid > 0)
                        snprintf(who, sizeof(who), " %d", req->pid);
                if (err.message[0])
                        log_full(req->verb == CONTROL_STATS ? LOG_DEBUG : LOG_NOTICE,
                                 "Cannot %s%s: %s", verb_name(req->verb), who, err.message);
                else
                        log_full_errno(req->verb == CONTROL_STATS ? LOG_DEBUG : LOG_NOTICE, r,
                                       "Cannot %s%s: %m", verb_name(req->verb), who);
                reply_error(fd, -r, "cannot %s%s: %s", verb_name(req->verb), who,
                            err.message[0] ? err.message : errno_advice(-r));
                return;
        }
        if (body_len > CONTROL_REPLY_MAX) {
                reply_error(fd, EMSGSIZE, "reply of %zu bytes is too long; ask for one PID",
                            body_len);
                return;
        }
        reply(fd, body, body_len);
}

static void client_watch(struct client *cl, uint32_t events) {
        if (epoll_ctl(cl->control->epoll_fd, EPOLL_CTL_MOD, cl->fd,
                      &(struct epoll_event) { .events = events, .data.ptr = cl }) < 0)
                log_warning_errno(errno, "Failed to watch a connection, ignoring: %m");
}

/* On the main loop, when the reclaim worker is done with a client's
 * reclaim: its reply, and the client is read again. */
static void reclaim_done(void *userdata, const struct reclaim_request *rr) {
        struct client *cl = userdata;
        _cleanup_free_ char *body = NULL;
        size_t body_len = 0;
        FILE *f;
        int r = rr->r;
        LOG_FIELDS(.target_pid = cl->pending_req.pid);

        cl->pending = NULL;
        cl->control->n_pending--;
        cl->active_usec = now_usec();
        f = open_memstream(&body, &body_len);
        if (!f) {
                reply_error(cl->fd, ENOMEM, "out of memory");
                client_watch(cl, EPOLLIN);
                return;
        }
        fputs("ok\n", f);
        if (r >= 0)
                reclaim_body(cl->control->engine, &cl->pending_req, &rr->result, f);
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        reply_result(cl->fd, &cl->pending_req, r, &rr->err, body, body_len);
        client_watch(cl, EPOLLIN);
}

/* Hands a reclaim to the worker; returns 1 when it did (the reply comes
 * later), 0 when the request is to run here. */
static int defer_reclaim(struct control *c, struct client *cl, const struct control_request *req) {
        if (!c->reclaimer || req->verb != CONTROL_RECLAIM || c->stopping)
                return 0;
        if (c->n_pending >= CLIENTS_MAX - CLIENTS_RESERVED) {
                reply_error(cl->fd, EBUSY,
                            "cannot reclaim from %d: %u reclaims are queued "
                            "already; try again once they are done",
                            req->pid, c->n_pending);
                return 1;
        }
        cl->pending_req = *req;
        cl->pending = reclaimer_submit(c->reclaimer, &req->pid, 1,
                                       &(struct zsw_reclaim_request) {
                                               .max_bytes = req->max_bytes,
                                               .min_cold_age_ms = req->min_age_ms,
                                       },
                                       false, reclaim_done, cl);
        if (!cl->pending)
                return 0; /* out of memory: try here */
        c->n_pending++;
        /* Hang-ups are still reported (and close the client). */
        client_watch(cl, 0);
        return 1;
}

static void handle_request(struct control *c, struct client *cl, const char *msg, size_t len) {
        _cleanup_free_ char *body = NULL;
        struct zsw_engine_error err = {};
        struct control_request req;
        const char *reason;
        size_t body_len = 0;
        FILE *f;
        int r;

        r = control_parse_request(msg, len, &req, &reason);
        if (r < 0) {
                log_debug("Refused a malformed request: %s.", reason);
                reply_error(cl->fd, -r, "malformed request: %s", reason);
                return;
        }
        if (defer_reclaim(c, cl, &req) > 0)
                return;
        if (req.verb == CONTROL_REEXEC && !c->stopping) {
                r = c->hooks && c->hooks->reexec
                            ? c->hooks->reexec(c->hooks->userdata, cl->fd, &err)
                            : -EOPNOTSUPP;
                /* Back here only when it failed: zswapd runs on as it was. */
                reply_result(cl->fd, &req, r, &err, NULL, 0);
                return;
        }

        f = open_memstream(&body, &body_len);
        if (!f) {
                reply_error(cl->fd, ENOMEM, "out of memory");
                return;
        }
        fputs("ok\n", f);
        r = execute(c, &req, f, &err);
        if (fclose(f) != 0 && r >= 0)
                r = -ENOMEM;
        reply_result(cl->fd, &req, r, &err, body, body_len);
}

/* ---- connections ------------------------------------------------------- */

static void client_close(struct control *c, struct client *cl) {
        for (unsigned i = 0; i < c->n_clients; i++)
                if (c->clients[i] == cl) {
                        c->clients[i] = c->clients[--c->n_clients];
                        break;
                }
        if (cl->pending) {
                reclaim_request_orphan(cl->pending);
                c->n_pending--;
        }
        safe_close(cl->fd);
        free(cl);
}

/* Replies to a connection we do not keep and closes it: its request (if
 * it came already) is read first, since closing a Unix socket with unread
 * data resets the peer's, which then loses our reply. */
static void refuse(int fd, int error, const char *message) {
        char buf[CONTROL_REQUEST_MAX + 1];

        reply_error(fd, error, "%s", message);
        while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
        safe_close(fd);
}

/* The connection with no request in progress that has been idle longest. */
static struct client *oldest_idle(struct control *c) {
        struct client *best = NULL;

        for (unsigned i = 0; i < c->n_clients; i++)
                if (!c->clients[i]->pending &&
                    (!best || c->clients[i]->active_usec < best->active_usec))
                        best = c->clients[i];
        return best;
}

static void close_idle(struct control *c) {
        uint64_t now = now_usec(), timer_ticks;

        if (read(c->timer_fd, &timer_ticks, sizeof(timer_ticks)) < 0 && errno != EAGAIN)
                log_debug_errno(errno, "Failed to read the idle timer, ignoring: %m");
        for (unsigned i = 0; i < c->n_clients;) {
                struct client *cl = c->clients[i];

                if (cl->pending || now - cl->active_usec < c->idle_timeout_usec) {
                        i++;
                        continue;
                }
                log_debug("Closing the connection of pid %d: idle for %" PRIu64 " s.", cl->cred.pid,
                          (now - cl->active_usec) / 1000000);
                client_close(c, cl); /* moves the last one to i */
        }
}

static void client_process(struct control *c, struct client *cl, uint32_t events) {
        char buf[CONTROL_REQUEST_MAX + 1];
        ssize_t n;

        if (!(events & EPOLLIN)) {
                client_close(c, cl);
                return;
        }

        /* MSG_TRUNC makes recv() report the real length of a longer message,
         * which is then refused whole rather than read in pieces. */
        n = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n <= 0) {
                if (n < 0)
                        log_debug_errno(errno, "Failed to read a request, closing: %m");
                client_close(c, cl);
                return;
        }
        cl->active_usec = now_usec();
        if (cl->cred.uid != 0) {
                log_notice("Refused a request from uid %u (pid %d): only root may control zswapd.",
                           cl->cred.uid, cl->cred.pid);
                reply_error(cl->fd, EPERM,
                            "permission denied: only root may control zswapd "
                            "(run zswapctl as root)");
                client_close(c, cl);
                return;
        }
        if ((size_t) n > CONTROL_REQUEST_MAX) {
                reply_error(cl->fd, EMSGSIZE, "request of %zd bytes is longer than %d bytes", n,
                            CONTROL_REQUEST_MAX);
                return;
        }
        handle_request(c, cl, buf, n);
}

static void accept_one(struct control *c, int fd) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        struct client *cl;
        int sndbuf = CONTROL_REPLY_MAX + 4096;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                log_warning_errno(errno, "Failed to get peer credentials, refusing: %m");
                safe_close(fd);
                return;
        }
        if (c->n_clients >= CLIENTS_MAX) {
                struct client *old = oldest_idle(c);

                if (!old) {
                        log_warning("Refused a connection from pid %d: %d clients connected "
                                    "already, each waiting for a reply.",
                                    cred.pid, CLIENTS_MAX);
                        refuse(fd, EBUSY,
                               "too many clients connected, each waiting for a reply; "
                               "try again");
                        return;
                }
                log_notice("Closing the connection of pid %d, idle for %" PRIu64 " ms, to make "
                           "room for pid %d: %d clients connected.",
                           old->cred.pid, (now_usec() - old->active_usec) / 1000, cred.pid,
                           CLIENTS_MAX);
                client_close(c, old);
        }
        /* A reply is one message, and a message must fit in the send buffer. */
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
                log_debug_errno(errno, "Failed to enlarge a send buffer, ignoring: %m");

        cl = malloc(sizeof(*cl));
        if (!cl) {
                log_oom();
                safe_close(fd);
                return;
        }
        *cl = (struct client) { .control = c, .fd = fd, .cred = cred, .active_usec = now_usec() };
        if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, fd,
                      &(struct epoll_event) { .events = EPOLLIN, .data.ptr = cl }) < 0) {
                log_warning_errno(errno, "Failed to watch a connection, closing it: %m");
                safe_close(fd);
                free(cl);
                return;
        }
        c->clients[c->n_clients++] = cl;
}

static void accept_all(struct control *c) {
        for (;;) {
                int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                log_warning_errno(errno, "Failed to accept a connection: %m");
                        return;
                }
                accept_one(c, fd);
        }
}

int control_process(struct control *c) {
        struct epoll_event ev[16];
        int n;

        n = epoll_wait(c->epoll_fd, ev, ARRAY_SIZE(ev), 0);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        for (int i = 0; i < n; i++) {
                if (ev[i].data.ptr == c)
                        close_idle(c);
                else if (ev[i].data.ptr)
                        client_process(c, ev[i].data.ptr, ev[i].events);
                else
                        accept_all(c);
        }
        return 0;
}

int control_set_idle_timeout(struct control *c, uint64_t usec) {
        /* Checked four times per timeout: a connection goes within 1.25x. */
        uint64_t every = MAX(usec / 4, 1000u);
        struct itimerspec its = {
                .it_interval = { .tv_sec = every / 1000000, .tv_nsec = (every % 1000000) * 1000 },
        };

        if (usec == 0)
                return -EINVAL;
        its.it_value = its.it_interval;
        if (timerfd_settime(c->timer_fd, 0, &its, NULL) < 0)
                return -errno;
        c->idle_timeout_usec = usec;
        return 0;
}

void control_set_stopping(struct control *c) {
        c->stopping = true;
}

void control_set_reclaimer(struct control *c, struct reclaimer *reclaimer) {
        c->reclaimer = reclaimer;
}

void control_set_hooks(struct control *c, const struct control_hooks *hooks) {
        c->hooks = hooks;
}

int control_get_fd(const struct control *c) {
        return c->epoll_fd;
}

/* ---- the listening socket ---------------------------------------------- */

static int mkdir_parents(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        return 0;
}

/* Removes a socket nobody listens on any more (a daemon that died). */
static int remove_stale(const char *path, const struct sockaddr_un *sa, socklen_t salen) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISSOCK(st.st_mode))
                return -EEXIST;

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (const struct sockaddr *) sa, salen) == 0)
                return -EADDRINUSE;
        if (errno != ECONNREFUSED)
                return -errno;
        if (unlink(path) < 0 && errno != ENOENT)
                return -errno;
        log_info("Removed the stale socket %s.", path);
        return 0;
}

static int listen_socket(const char *path, int *ret_fd, struct stat *ret_st) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        socklen_t salen;
        mode_t old;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path))
                return log_error_errno(ENAMETOOLONG,
                                       "Socket path %s is too long (at most %zu bytes).", path,
                                       sizeof(sa.sun_path) - 1);
        strcpy(sa.sun_path, path);
        salen = offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1;

        r = mkdir_parents(path, 0755);
        if (r < 0)
                return log_error_errno(r, "Failed to create the directory of %s: %m", path);
        r = remove_stale(path, &sa, salen);
        if (r == -EADDRINUSE)
                return log_error_errno(r,
                                       "Another zswapd is listening on %s already (or the "
                                       "rescue task of one that died is saving its state: "
                                       "try again in a moment); stop it first or choose "
                                       "another socket with --socket.",
                                       path);
        if (r == -EEXIST)
                return log_error_errno(r, "%s exists and is not a socket; refusing to replace it.",
                                       path);
        if (r < 0)
                return log_error_errno(r, "Failed to check the existing socket %s: %m", path);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create the control socket: %m");
        /* Never reachable by anybody but root, not even for a moment. */
        old = umask(0177);
        r = bind(fd, (const struct sockaddr *) &sa, salen);
        umask(old);
        if (r < 0)
                return log_error_errno(errno, "Failed to bind the control socket to %s: %m", path);
        if (listen(fd, 16) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %m", path);
        if (stat(path, ret_st) < 0)
                return log_error_errno(errno, "Failed to stat %s: %m", path);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

static int control_make(const char *path, int inherited_fd, struct zsw_engine *engine,
                        struct control **ret) {
        _cleanup_(control_freep) struct control *c = NULL;
        struct stat st;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c) {
                safe_close(inherited_fd);
                return log_oom();
        }
        c->listen_fd = c->epoll_fd = c->timer_fd = -EBADF;
        c->engine = engine;

        if (inherited_fd >= 0) {
                c->listen_fd = inherited_fd;
                if (fcntl(inherited_fd, F_SETFD, FD_CLOEXEC) < 0 || stat(path, &st) < 0)
                        return log_error_errno(
                                errno, "Failed to take over the control socket %s: %m", path);
        } else {
                r = listen_socket(path, &c->listen_fd, &st);
                if (r < 0)
                        return r;
        }
        c->path = strdup(path);
        if (!c->path)
                return log_oom();
        c->sock_dev = st.st_dev;
        c->sock_ino = st.st_ino;

        c->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (c->epoll_fd < 0)
                return log_error_errno(errno, "Failed to create an epoll instance: %m");
        if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->listen_fd,
                      &(struct epoll_event) { .events = EPOLLIN, .data.ptr = NULL }) < 0)
                return log_error_errno(errno, "Failed to watch the control socket: %m");
        c->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (c->timer_fd < 0 ||
            epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->timer_fd,
                      &(struct epoll_event) { .events = EPOLLIN, .data.ptr = c }) < 0)
                return log_error_errno(errno, "Failed to set up the idle timer: %m");
        r = control_set_idle_timeout(c, CONTROL_IDLE_TIMEOUT_USEC);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the idle timer: %m");

        *ret = TAKE_PTR(c);
        return 0;
}

int control_new(const char *path, struct zsw_engine *engine, struct control **ret) {
        return control_make(path, -EBADF, engine, ret);
}

int control_new_from_fd(const char *path, int fd, struct zsw_engine *engine, struct control **ret) {
        return control_make(path, fd, engine, ret);
}

int control_get_listen_fd(const struct control *c) {
        return c->listen_fd;
}

struct control *control_free(struct control *c) {
        struct stat st;

        if (!c)
                return NULL;
        while (c->n_clients > 0)
                client_close(c, c->clients[0]);
        /* Another daemon may have replaced the path meanwhile: only remove
         * the socket this one created. */
        if (c->path && stat(c->path, &st) == 0 && st.st_dev == c->sock_dev &&
            st.st_ino == c->sock_ino)
                (void) unlink(c->path);
        safe_close(c->listen_fd);
        safe_close(c->epoll_fd);
        safe_close(c->timer_fd);
        free(c->path);
        free(c);
        return NULL;
}
