/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Time spans as zswapd's configuration and zswapctl write them: "90s",
 * "1min 30s", "1.5h", "500ms"; a bare number is seconds. Shared by the
 * daemon's config parser and zswapctl, so it depends on nothing but libc.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "timespan.h"

#define USEC_PER_MSEC UINT64_C(1000)
#define USEC_PER_SEC UINT64_C(1000000)

static bool is_digit(char ch) {
        return ch >= '0' && ch <= '9';
}

/* Writes why the value was refused; -EINVAL. */
__attribute__((format(printf, 2, 3))) static int fail(char *why, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        vsnprintf(why, TIMESPAN_REASON_MAX, format, ap);
        va_end(ap);
        return -EINVAL;
}

int decimal_scan(const char **p, uint64_t unit, uint64_t *ret, bool *ret_frac) {
        const char *s = *p;
        uint64_t whole = 0, frac = 0, scale = 1;
        bool overflow = false;

        if (!is_digit(*s))
                return -EINVAL;
        for (; is_digit(*s); s++)
                if (__builtin_mul_overflow(whole, 10, &whole) ||
                    __builtin_add_overflow(whole, (uint64_t) (*s - '0'), &whole))
                        overflow = true;
        *ret_frac = false;
        if (*s == '.') {
                if (!is_digit(s[1]))
                        return -EINVAL;
                *ret_frac = true;
                for (s++; is_digit(*s); s++)
                        /* Digits past the 18th decimal are dropped: no
                         * unit here (at most a day in us, 2^40 bytes) makes
                         * them worth one unit of the result. */
                        if (scale < UINT64_C(1000000000000000000)) {
                                frac = frac * 10 + (uint64_t) (*s - '0');
                                scale *= 10;
                        }
        }
        *p = s;
        if (overflow || __builtin_mul_overflow(whole, unit, &whole))
                return -ERANGE;
        /* frac / scale < 1, so frac * unit / scale < unit; do it in 128 bits
         * as frac * unit may not fit in 64. */
        if (__builtin_add_overflow(whole, (uint64_t) ((unsigned __int128) frac * unit / scale),
                                   &whole))
                return -ERANGE;
        *ret = whole;
        return 0;
}

static const struct {
        const char *name;
        uint64_t usec;
} time_units[] = {
        { "us", 1 },
        { "usec", 1 },
        { "ms", USEC_PER_MSEC },
        { "msec", USEC_PER_MSEC },
        { "s", USEC_PER_SEC },
        { "sec", USEC_PER_SEC },
        { "second", USEC_PER_SEC },
        { "seconds", USEC_PER_SEC },
        { "m", 60 * USEC_PER_SEC },
        { "min", 60 * USEC_PER_SEC },
        { "minute", 60 * USEC_PER_SEC },
        { "minutes", 60 * USEC_PER_SEC },
        { "h", 3600 * USEC_PER_SEC },
        { "hr", 3600 * USEC_PER_SEC },
        { "hour", 3600 * USEC_PER_SEC },
        { "hours", 3600 * USEC_PER_SEC },
        { "d", 86400 * USEC_PER_SEC },
        { "day", 86400 * USEC_PER_SEC },
        { "days", 86400 * USEC_PER_SEC },
};

/* Reads one "NUMBER[UNIT]" at *p; a bare number is seconds. */
static int scan_component(const char **p, uint64_t *ret, char *why) {
        const char *s = *p, *unit;
        uint64_t factor = USEC_PER_SEC, n;
        size_t len;
        bool frac;
        int r;

        if (*s == '-')
                return fail(why, "time span must not be negative");
        r = decimal_scan(&s, 1, &n, &frac);
        if (r == -EINVAL)
                return fail(why, "not a time span (e.g. 500ms, 30s, 5min, 1h)");
        unit = s;
        len = strcspn(s, " \t/0123456789.");
        if (len > 0) {
                factor = 0;
                for (size_t i = 0; i < sizeof(time_units) / sizeof(time_units[0]); i++)
                        if (strlen(time_units[i].name) == len &&
                            strncmp(time_units[i].name, s, len) == 0)
                                factor = time_units[i].usec;
                if (factor == 0)
                        return fail(why, "unknown time unit '%.*s' (use us, ms, s, min, h or d)",
                                    (int) len, s);
        }
        s = *p;
        r = decimal_scan(&s, factor, &n, &frac);
        if (r < 0)
                return fail(why, "time span too large");
        *p = unit + len;
        *ret = n;
        return 0;
}

/* "1min 30s", "90s", "1.5h": components add up. Stops at '/' or the end. */
int timespan_scan(const char **p, uint64_t *ret_usec, char why[static TIMESPAN_REASON_MAX]) {
        const char *s = *p;
        uint64_t total = 0, n = 0;
        int r;

        for (;;) {
                r = scan_component(&s, &n, why);
                if (r < 0)
                        return r;
                if (__builtin_add_overflow(total, n, &total))
                        return fail(why, "time span too large");
                s += strspn(s, " \t");
                if (*s == '\0' || *s == '/')
                        break;
        }
        *p = s;
        *ret_usec = total;
        return 0;
}

int timespan_parse(const char *s, uint64_t *ret_usec, char why[static TIMESPAN_REASON_MAX]) {
        uint64_t usec = 0;
        int r;

        r = timespan_scan(&s, &usec, why);
        if (r < 0)
                return r;
        if (*s)
                return fail(why, "trailing garbage '%.32s' after the time span", s);
        *ret_usec = usec;
        return 0;
}
