/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Numbers and time spans as zswapd's configuration and zswapctl write
 * them (zswapd.conf(5)). No dependency beyond libc: zswapctl links this
 * without the engine.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Room for any reason the parsers give. */
#define TIMESPAN_REASON_MAX 128

/* Reads "DIGITS[.DIGITS]" at *p scaled by unit, truncating what is below
 * one unit of the result, and advances *p past it. -EINVAL when there is
 * no number, -ERANGE when it does not fit 64 bits; *ret_frac says whether
 * it had a fraction. */
int decimal_scan(const char **p, uint64_t unit, uint64_t *ret, bool *ret_frac);

/* Reads a time span at *p ("1min 30s": components add up) up to a '/' or
 * the end, and advances *p past it. On -EINVAL, why says what is wrong. */
int timespan_scan(const char **p, uint64_t *ret_usec, char why[static TIMESPAN_REASON_MAX]);

/* The whole of s is a time span. */
int timespan_parse(const char *s, uint64_t *ret_usec, char why[static TIMESPAN_REASON_MAX]);
