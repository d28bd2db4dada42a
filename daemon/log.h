/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The daemon's logging. Under systemd (stderr is the stream $JOURNAL_STREAM
 * names), each message goes to the journal as an entry with structured
 * fields, in the journal's native protocol: MESSAGE, PRIORITY,
 * SYSLOG_IDENTIFIER, CODE_FILE/CODE_LINE/CODE_FUNC, and, when the calling
 * thread set them with LOG_FIELDS(), ZSWAPD_TARGET_PID, ZSWAPD_POLICY,
 * ZSWAPD_CGROUP and ZSWAPD_UNIT (`journalctl ZSWAPD_UNIT=nginx.service`).
 * If journald cannot be reached, that message goes to stderr with a "<N>"
 * syslog priority prefix. Otherwise one line per message on stderr with a
 * plain "error: " style prefix.
 *
 * Entries are sent as sd_journal_send(3) would, but never waiting
 * (MSG_DONTWAIT), as dbus-broker does: sd_journal_send blocks while
 * journald's queue is full, which under memory pressure would stall a
 * fault thread.
 *
 * It is the struct zsw_log the daemon hands to the engine, so the engine's
 * fault-service threads log through it too: each message is formatted on
 * the caller's stack and written with one non-blocking call, so a journal
 * that stops reading under memory pressure costs lost lines, never a
 * blocked fault thread. Lost lines are counted and reported later.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "util.h"

/* Detects the journal and sets the maximum priority logged. */
void log_setup(int max_priority);

/* Whether messages go to the journal as structured entries. */
bool log_to_journal(void);

/* Whether fd is the stream journal_stream (the value of $JOURNAL_STREAM,
 * "DEVICE:INODE") names: how systemd's own tools detect the journal. */
bool log_fd_is_journal_stream(const char *journal_stream, int fd);

/* Fields of the calling thread's journal entries; zero/NULL ones are left
 * out. The strings must live while they are set. */
struct log_fields {
        pid_t target_pid;
        const char *policy;
        const char *cgroup; /* ZSWAPD_UNIT is its last component, if a unit */
};

struct log_fields log_fields_push(const struct log_fields *f);
void log_fields_pop(struct log_fields *saved);

/* Sets the calling thread's fields until the end of the scope. */
#define LOG_FIELDS(...)                                                           \
        _cleanup_(log_fields_pop) _unused_ struct log_fields _log_fields_saved_ = \
                log_fields_push(&(struct log_fields) { __VA_ARGS__ })

/* The logger, for the daemon's own messages and for the engine. */
const struct zsw_log *log_get(void);

#define log_full_errno(prio, error, ...) zsw_log_errno(log_get(), prio, error, __VA_ARGS__)
#define log_full(prio, ...) zsw_log(log_get(), prio, __VA_ARGS__)

#define log_error_errno(error, ...) log_full_errno(LOG_ERR, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, error, __VA_ARGS__)
#define log_notice_errno(error, ...) log_full_errno(LOG_NOTICE, error, __VA_ARGS__)
#define log_debug_errno(error, ...) log_full_errno(LOG_DEBUG, error, __VA_ARGS__)

#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)

/* Logs an out-of-memory failure and evaluates to -ENOMEM. */
#define log_oom() log_error_errno(ENOMEM, "Out of memory.")
