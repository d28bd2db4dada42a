/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The daemon's logging: one line per message on stderr, with a "<N>"
 * syslog priority prefix when stderr is connected to the journal (systemd
 * sets $JOURNAL_STREAM) and a plain "error: " style prefix otherwise.
 *
 * It is the struct zsw_log the daemon hands to the engine, so the engine's
 * fault-service threads log through it too: each message is formatted on
 * the caller's stack and written with one non-blocking call, so a journal
 * that stops reading under memory pressure costs lost lines, never a
 * blocked fault thread. Lost lines are counted and reported later.
 */
#pragma once

#include <stdbool.h>

#include "util.h"

/* Detects the journal and sets the maximum priority logged. */
void log_setup(int max_priority);

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
