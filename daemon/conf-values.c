/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "conf-values.h"
#include "timespan.h"

/* PSI refuses windows outside these bounds (kernel/sched/psi.c). */
#define PSI_WINDOW_MIN_USEC (500 * ZSW_USEC_PER_MSEC)
#define PSI_WINDOW_MAX_USEC (10 * ZSW_USEC_PER_SEC)
#define PSI_WINDOW_DEFAULT_USEC ZSW_USEC_PER_SEC

int conf_error(struct conf_ctx *c, const char *format, ...) {
        char msg[512];
        va_list ap;

        va_start(ap, format);
        vsnprintf(msg, sizeof(msg), format, ap);
        va_end(ap);

        c->n_errors++;
        /* Values are user input of any length: cut them so the one line
         * that says what is wrong stays readable. */
        if (c->key)
                zsw_log(c->log, LOG_ERR, "%s:%u: %s=%.64s%s: %s", c->path, c->line, c->key,
                        c->value, strlen(c->value) > 64 ? "..." : "", msg);
        else if (c->line > 0)
                zsw_log(c->log, LOG_ERR, "%s:%u: %s", c->path, c->line, msg);
        else
                zsw_log(c->log, LOG_ERR, "%s: %s", c->path, msg);
        return -EINVAL;
}

static bool is_digit(char ch) {
        return ch >= '0' && ch <= '9';
}

static bool is_space(char ch) {
        return ch == ' ' || ch == '\t';
}


int conf_parse_bool(struct conf_ctx *c, const char *v, bool *ret) {
        static const char *const yes[] = { "1", "yes", "y", "true", "t", "on" };
        static const char *const no[] = { "0", "no", "n", "false", "f", "off" };

        for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
                if (strcasecmp(v, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcasecmp(v, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return conf_error(c, "not a boolean (use yes, no, true, false, on, off, 1 or 0)");
}

int conf_parse_unsigned(struct conf_ctx *c, const char *v, unsigned min, unsigned max,
                        unsigned *ret) {
        const char *p = v;
        uint64_t n;
        bool frac;
        int r;

        if (*p == '-')
                return conf_error(c, "must not be negative");
        r = decimal_scan(&p, 1, &n, &frac);
        if (r == -EINVAL || frac)
                return conf_error(c, "not a whole number");
        if (*p)
                return conf_error(c, "trailing garbage '%s' after the number", p);
        if (r < 0 || n < min || n > max)
                return conf_error(c, "out of range (%u ... %u)", min, max);
        *ret = (unsigned) n;
        return 0;
}

static const struct {
        char suffix;
        uint64_t factor;
} size_suffixes[] = {
        { 'K', UINT64_C(1) << 10 },
        { 'M', UINT64_C(1) << 20 },
        { 'G', UINT64_C(1) << 30 },
        { 'T', UINT64_C(1) << 40 },
};

/* The letters after a number, up to a '/' or the end. */
static size_t suffix_len(const char *p) {
        return strcspn(p, "/");
}

/*
 * Reads an amount with an optional size suffix (or none if COUNT), a
 * percentage if PERCENT, and a "/s" if PER_SEC; the caller has handled
 * "infinity". Sets *ret_percent for "N%", whose value is then permyriad.
 */
static int parse_amount(struct conf_ctx *c, const char *v, unsigned flags, uint64_t *ret,
                        bool *ret_percent) {
        const char *p = v, *what = flags & LIMIT_COUNT ? "number" : "size";
        uint64_t n, factor = 1;
        bool frac;
        size_t len;
        int r;

        if (*p == '-')
                return conf_error(c, "%s must not be negative", what);
        /* Read once in plain units to learn where the number ends. */
        r = decimal_scan(&p, 1, &n, &frac);
        if (r == -EINVAL)
                return conf_error(c, "not a %s", what);
        len = suffix_len(p);
        *ret_percent = false;
        if (len == 1 && *p == '%' && (flags & LIMIT_PERCENT)) {
                factor = 100;
                *ret_percent = true;
        } else if (len == 1 && !(flags & LIMIT_COUNT)) {
                factor = 0;
                for (size_t i = 0; i < ARRAY_SIZE(size_suffixes); i++)
                        if (*p == size_suffixes[i].suffix)
                                factor = size_suffixes[i].factor;
        } else if (len > 0)
                factor = 0;
        if (factor == 0)
                return conf_error(c, "unknown %s suffix '%.*s' (use %s%s)", what, (int) len, p,
                                  flags & LIMIT_COUNT ? "a plain number" : "K, M, G, T",
                                  flags & LIMIT_PERCENT ? " or %" : "");
        p += len;
        if (*p == '/') {
                if (!(flags & LIMIT_PER_SEC) || strcmp(p, "/s") != 0)
                        return conf_error(c, "trailing garbage '%s'%s", p,
                                          flags & LIMIT_PER_SEC ? " (only \"/s\" may follow)" : "");
                if (*ret_percent)
                        return conf_error(c, "a percentage is not a rate, drop the \"/s\"");
        }
        if (frac && factor == 1)
                return conf_error(c, "fractional %s needs a suffix", what);
        if (*ret_percent && frac) {
                const char *dot = strchr(v, '.');
                if (strspn(dot + 1, "0123456789") > 2)
                        return conf_error(c, "percentages have at most two decimals");
        }
        p = v;
        r = decimal_scan(&p, factor, &n, &frac);
        if (r < 0)
                return conf_error(c, "%s too large", what);
        if (*ret_percent && n > ZSW_PERMYRIAD_MAX)
                return conf_error(c, "percentage above 100%%");
        *ret = n;
        return 0;
}

int conf_parse_size(struct conf_ctx *c, const char *v, uint64_t *ret) {
        bool percent = false;
        uint64_t n = 0;
        int r;

        r = parse_amount(c, v, 0, &n, &percent);
        if (r < 0)
                return r;
        *ret = n;
        return 0;
}

int conf_parse_limit(struct conf_ctx *c, const char *v, unsigned flags, struct zsw_limit *ret) {
        bool percent = false;
        uint64_t n = 0;
        int r;

        if ((flags & LIMIT_INFINITY) && strcmp(v, "infinity") == 0) {
                *ret = (struct zsw_limit) { .kind = ZSW_LIMIT_NONE };
                return 0;
        }
        r = parse_amount(c, v, flags, &n, &percent);
        if (r < 0)
                return r;
        if ((flags & LIMIT_NONZERO) && n == 0)
                return conf_error(c, "must be greater than 0%s",
                                  flags & LIMIT_INFINITY ? " (\"infinity\" means no limit)" : "");
        *ret = (struct zsw_limit) {
                .kind = percent ? ZSW_LIMIT_RELATIVE : ZSW_LIMIT_ABSOLUTE,
                .value = n,
        };
        return 0;
}

/* "1min 30s", "90s", "1.5h": components add up. Stops at '/' or the end. */
static int scan_timespan(struct conf_ctx *c, const char **p, uint64_t *ret_usec) {
        char why[TIMESPAN_REASON_MAX];
        int r;

        r = timespan_scan(p, ret_usec, why);
        if (r < 0)
                return conf_error(c, "%s", why);
        return 0;
}

int conf_parse_timespan(struct conf_ctx *c, const char *v, uint64_t *ret_usec) {
        const char *p = v;
        uint64_t usec;
        int r;

        r = scan_timespan(c, &p, &usec);
        if (r < 0)
                return r;
        if (*p)
                return conf_error(c, "trailing garbage '%s' after the time span", p);
        *ret_usec = usec;
        return 0;
}

/* "[some|full] STALL[/WINDOW]" or "[some|full] PERCENT%[/WINDOW]". */
int conf_parse_pressure(struct conf_ctx *c, const char *v, struct zsw_pressure *ret) {
        struct zsw_pressure pr = { .window_usec = PSI_WINDOW_DEFAULT_USEC };
        const char *p = v, *slash;
        size_t head_len;
        int r;

        if (strncmp(p, "some", 4) == 0 && is_space(p[4]))
                p += 4;
        else if (strncmp(p, "full", 4) == 0 && is_space(p[4])) {
                pr.full = true;
                p += 4;
        }
        p += strspn(p, " \t");
        if (!is_digit(*p) && *p != '-')
                return conf_error(c,
                                  "not a pressure threshold (e.g. 10%%, 150ms/1s or full 5%%/2s)");
        slash = strchr(p, '/');
        if (slash) {
                const char *w = slash + 1;

                r = scan_timespan(c, &w, &pr.window_usec);
                if (r < 0)
                        return r;
                if (*w)
                        return conf_error(c, "trailing garbage '%s' after the window", w);
                if (pr.window_usec < PSI_WINDOW_MIN_USEC || pr.window_usec > PSI_WINDOW_MAX_USEC)
                        return conf_error(
                                c, "window must be between 500ms and 10s (the kernel's bounds)");
        }
        head_len = slash ? (size_t) (slash - p) : strlen(p);
        if (head_len > 0 && p[head_len - 1] == '%') {
                _cleanup_free_ char *pct = strndup(p, head_len);
                struct zsw_limit l;

                if (!pct)
                        return -ENOMEM;
                r = conf_parse_limit(c, pct, LIMIT_PERCENT | LIMIT_COUNT, &l);
                if (r < 0)
                        return r;
                if (l.kind != ZSW_LIMIT_RELATIVE)
                        return conf_error(c, "not a percentage");
                pr.stall_usec = (uint64_t) ((unsigned __int128) pr.window_usec * l.value /
                                            ZSW_PERMYRIAD_MAX);
        } else {
                r = scan_timespan(c, &p, &pr.stall_usec);
                if (r < 0)
                        return r;
                if (*p != '\0' && *p != '/')
                        return conf_error(c, "trailing garbage '%s'", p);
        }
        if (pr.stall_usec == 0)
                return conf_error(c, "stall threshold must be greater than 0");
        if (pr.stall_usec > pr.window_usec)
                return conf_error(c, "stall threshold is longer than its window");
        *ret = pr;
        return 0;
}

char *conf_format_size(char buf[static CONF_FORMAT_MAX], uint64_t bytes) {
        for (size_t i = ARRAY_SIZE(size_suffixes); i > 0; i--) {
                uint64_t f = size_suffixes[i - 1].factor;

                if (bytes >= f && bytes % f == 0) {
                        snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64 "%c", bytes / f,
                                 size_suffixes[i - 1].suffix);
                        return buf;
                }
        }
        snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64, bytes);
        return buf;
}

char *conf_format_timespan(char buf[static CONF_FORMAT_MAX], uint64_t usec) {
        static const struct {
                const char *name;
                uint64_t usec;
        } units[] = {
                { "d", 86400 * ZSW_USEC_PER_SEC }, { "h", 3600 * ZSW_USEC_PER_SEC },
                { "min", 60 * ZSW_USEC_PER_SEC },  { "s", ZSW_USEC_PER_SEC },
                { "ms", ZSW_USEC_PER_MSEC },       { "us", 1 },
        };

        for (size_t i = 0; i < ARRAY_SIZE(units); i++)
                if (usec >= units[i].usec && usec % units[i].usec == 0) {
                        snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64 "%s", usec / units[i].usec,
                                 units[i].name);
                        return buf;
                }
        snprintf(buf, CONF_FORMAT_MAX, "0");
        return buf;
}

char *conf_format_permyriad(char buf[static CONF_FORMAT_MAX], uint64_t permyriad) {
        uint64_t whole = permyriad / 100, frac = permyriad % 100;

        if (frac == 0)
                snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64 "%%", whole);
        else if (frac % 10 == 0)
                snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64 ".%" PRIu64 "%%", whole, frac / 10);
        else
                snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64 ".%02" PRIu64 "%%", whole, frac);
        return buf;
}

char *conf_format_limit(char buf[static CONF_FORMAT_MAX], const struct zsw_limit *l,
                        unsigned flags) {
        switch (l->kind) {
        case ZSW_LIMIT_NONE:
                snprintf(buf, CONF_FORMAT_MAX, "infinity");
                break;
        case ZSW_LIMIT_RELATIVE:
                conf_format_permyriad(buf, l->value);
                break;
        case ZSW_LIMIT_ABSOLUTE:
                if (flags & LIMIT_COUNT)
                        snprintf(buf, CONF_FORMAT_MAX, "%" PRIu64, l->value);
                else
                        conf_format_size(buf, l->value);
                if (flags & LIMIT_PER_SEC)
                        strcat(buf, "/s");
                break;
        }
        return buf;
}

char *conf_format_pressure(char buf[static CONF_FORMAT_MAX], const struct zsw_pressure *p) {
        char stall[CONF_FORMAT_MAX], window[CONF_FORMAT_MAX];

        snprintf(buf, CONF_FORMAT_MAX, "%s %s/%s", p->full ? "full" : "some",
                 conf_format_timespan(stall, p->stall_usec),
                 conf_format_timespan(window, p->window_usec));
        return buf;
}

/* ---- small helpers shared by the config files ---- */

void *mfree(void *p) {
        free(p);
        return NULL;
}

char **strv_free(char **l) {
        for (char **i = l; i && *i; i++)
                free(*i);
        free(l);
        return NULL;
}

size_t strv_length(char *const *l) {
        size_t n = 0;

        while (l && l[n])
                n++;
        return n;
}

int strv_push(char ***l, char *s) {
        size_t n = strv_length(*l);
        char **nl = realloc(*l, (n + 2) * sizeof(char *));

        if (!nl)
                return -ENOMEM;
        nl[n] = s;
        nl[n + 1] = NULL;
        *l = nl;
        return 0;
}

bool has_suffix(const char *s, const char *suffix) {
        size_t n = strlen(s), m = strlen(suffix);

        return n >= m && strcmp(s + n - m, suffix) == 0;
}
