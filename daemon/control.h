/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control socket server: how zswapctl (or any root client) tells the
 * daemon to attach, reclaim, detach and report. The protocol is described
 * at the top of control.c and in zswapctl(8).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "control-protocol.h"
#include "engine.h"

/* A connection with no request in progress is closed after this long. */
#define CONTROL_IDLE_TIMEOUT_USEC (30 * 1000000ull)

enum control_verb {
        CONTROL_ATTACH,
        CONTROL_DETACH,
        CONTROL_RECLAIM,
        CONTROL_STATS,
        CONTROL_RELOAD,
        CONTROL_POLICIES,
        CONTROL_TARGETS,
        CONTROL_STATUS,
        CONTROL_REEXEC,
};

struct control_request {
        enum control_verb verb;
        pid_t pid;           /* 0 for "stats" of everything */
        uint64_t max_bytes;  /* reclaim: UINT64_MAX means all */
        uint64_t min_age_ms; /* reclaim: only pages unused this long, 0 any */
        bool json;
};

/* Parses one request message of len bytes (no terminating NUL needed).
 * On -EINVAL, *reason points to a static sentence saying what is wrong. */
int control_parse_request(const char *text, size_t len, struct control_request *ret,
                          const char **reason);

struct control;

/* Creates the socket directory (0755) and a listening socket (0600) at path,
 * replacing a stale socket left by a dead daemon. -EADDRINUSE if a daemon is
 * listening there, -EEXIST if path is something other than a socket. */
int control_new(const char *path, struct zsw_engine *engine, struct control **ret);

/* control_new() on a listening socket inherited across exec (fd, bound
 * to path), which it owns from now on. */
int control_new_from_fd(const char *path, int fd, struct zsw_engine *engine, struct control **ret);

/* The listening socket, to keep across exec. */
int control_get_listen_fd(const struct control *c);

/* Closes every connection and removes the socket, if it is still ours. */
struct control *control_free(struct control *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct control *, control_free);

/* What the daemon does for the requests beyond the engine's: reload the
 * configuration, and the policy manager's listings. */
struct control_hooks {
        void *userdata;
        /* Returns 0, or -errno with a one-line reason in err->message. */
        int (*reload)(void *userdata, struct zsw_engine_error *err);
        /* CONTROL_POLICIES, CONTROL_TARGETS or CONTROL_STATUS, written to f. */
        int (*dump)(void *userdata, enum control_verb verb, FILE *f, bool json);
        /* A client detached pid by hand: policies must not take it back. */
        void (*detached)(void *userdata, pid_t pid);
        /* CONTROL_REEXEC from the client on client_fd: returns only on
         * failure (-errno, a reason in err->message), with everything as
         * it was; on success the process has become the new binary, which
         * answers the client. */
        int (*reexec)(void *userdata, int client_fd, struct zsw_engine_error *err);
};

/* Without hooks those requests get "error EOPNOTSUPP". hooks must outlive c. */
void control_set_hooks(struct control *c, const struct control_hooks *hooks);

struct reclaimer;

/* Runs reclaims on this worker (not owned; it must outlive c, and its
 * finished requests be processed on the loop that calls control_process())
 * instead of on the caller's thread. */
void control_set_reclaimer(struct control *c, struct reclaimer *reclaimer);

/* Closes connections idle for usec (default CONTROL_IDLE_TIMEOUT_USEC),
 * within a quarter of that more. -EINVAL for 0. */
int control_set_idle_timeout(struct control *c, uint64_t usec);

/* From now on attach, reclaim and reload are refused ("error ESHUTDOWN"):
 * a stopping daemon only gives pages back. */
void control_set_stopping(struct control *c);

/* A descriptor that polls readable when a client connects or sends, or a
 * connection may have gone idle. */
int control_get_fd(const struct control *c);

/* Accepts connections and answers requests that are ready, without waiting
 * for more. Failures of single clients are logged and contained. */
int control_process(struct control *c);
