/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Parsers and formatters for the values of config assignments: booleans,
 * sizes, percentages, time spans, rates and PSI triggers. Internal to
 * config.c. Each parser takes the whole (unquoted) value, rejects anything
 * it does not fully understand, and reports why through conf_error(), which
 * prefixes the file, line and assignment; the formatters write what the
 * parsers read back to the same value.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

/* Where an assignment came from, for messages. */
struct conf_ctx {
        const struct zsw_log *log;
        const char *path;
        unsigned line;
        const char *key;
        const char *value;
        unsigned n_errors;
};

/* Logs "PATH:LINE: KEY=VALUE: MESSAGE" (or without the assignment if key is
 * NULL), counts the error, returns -EINVAL. */
_printf_(2, 3) int conf_error(struct conf_ctx *c, const char *format, ...);

enum {
        LIMIT_PERCENT = 1 << 0,  /* "N%" allowed */
        LIMIT_INFINITY = 1 << 1, /* "infinity" allowed: no limit */
        LIMIT_PER_SEC = 1 << 2,  /* an optional "/s" after the amount */
        LIMIT_COUNT = 1 << 3,    /* a plain count: no size suffixes */
        LIMIT_NONZERO = 1 << 4,  /* 0 and 0% refused */
};

int conf_parse_bool(struct conf_ctx *c, const char *v, bool *ret);
int conf_parse_unsigned(struct conf_ctx *c, const char *v, unsigned min, unsigned max,
                        unsigned *ret);
int conf_parse_size(struct conf_ctx *c, const char *v, uint64_t *ret);
int conf_parse_limit(struct conf_ctx *c, const char *v, unsigned flags, struct zsw_limit *ret);
int conf_parse_timespan(struct conf_ctx *c, const char *v, uint64_t *ret_usec);
int conf_parse_pressure(struct conf_ctx *c, const char *v, struct zsw_pressure *ret);

/* Big enough for any value the formatters write. */
#define CONF_FORMAT_MAX 48

char *conf_format_size(char buf[static CONF_FORMAT_MAX], uint64_t bytes);
char *conf_format_timespan(char buf[static CONF_FORMAT_MAX], uint64_t usec);
char *conf_format_permyriad(char buf[static CONF_FORMAT_MAX], uint64_t permyriad);
char *conf_format_limit(char buf[static CONF_FORMAT_MAX], const struct zsw_limit *l,
                        unsigned flags);
char *conf_format_pressure(char buf[static CONF_FORMAT_MAX], const struct zsw_pressure *p);

/* The longest path accepted in a config; PATH_MAX. */
#define CONF_PATH_MAX 4096

/* Small helpers shared by the config sources. */
void *mfree(void *p);
char **strv_free(char **l);
size_t strv_length(char *const *l);
int strv_push(char ***l, char *s); /* appends S, taking it over on success */
bool has_suffix(const char *s, const char *suffix);
