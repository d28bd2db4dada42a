/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Parsing zswapd.conf and policy.d/: the line syntax of systemd unit files
 * (sections, Key=Value, comments, continuation lines, optional quotes),
 * tables that map each key to the parser of its value and the field it
 * sets, the checks that span several keys, and writing the result back.
 * Finding the files is config-files.c's job, matching config-match.c's.
 *
 * The parser never stops at the first problem: a person fixing a config
 * wants every mistake at once. It counts errors while it goes on, and the
 * loader throws the whole result away if there was any, so that a reload
 * never leaves the daemon half on the new config.
 */
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "conf-values.h"
#include "config.h"
#include "engine.h"

#define DEFAULT_SOCKET "/run/zswapd/zswapd.sock"
/* A directory: the backing file is an unnamed O_TMPFILE in it, which
 * nobody else can open and which a crash cannot leave behind. */
#define DEFAULT_SWAPFILE "/var/lib/zswapd"
#define UNIT_NAME_MAX 255
#define POLICY_NAME_MAX 200

static const struct zsw_config global_defaults = {
        .socket_path = (char *) DEFAULT_SOCKET,
        .log_level = LOG_INFO,
        /* Resolved to ZSW_COMPRESSOR_DEFAULT once read (compressor_set). */
        .compressor = ZSW_COMPRESSOR_INHERIT,
        .incompressible = ZSW_INCOMPRESSIBLE_REJECT,
        .dictionaries = true,
        /* zswap's own default, max_pool_percent=20. */
        .pool_limit = { ZSW_LIMIT_RELATIVE, 20 * 100 },
        .accept_threshold = 90,
        .swapfile = (char *) DEFAULT_SWAPFILE,
        .swapfile_size = UINT64_C(1) << 30,
        /* 10% of the time over 1s: a system that starts to feel slow. */
        .pressure = { .stall_usec = 100 * ZSW_USEC_PER_MSEC, .window_usec = ZSW_USEC_PER_SEC },
};

/* Fields a policy inherits from the global settings start "unset" here:
 * compressor invalid, level 0, pressure window 0. */
static const struct zsw_policy policy_defaults = {
        .enabled = true,
        .compressor = ZSW_COMPRESSOR_INHERIT,
        .memory_budget = { ZSW_LIMIT_NONE, 0 },
        .min_cold_age_usec = 30 * ZSW_USEC_PER_SEC,
        .max_reclaim_rate = UINT64_C(32) << 20,
        .writeback = true,
        .pool_limit = { ZSW_LIMIT_NONE, 0 },
        /* As the kernel's swap readahead with vm.page-cluster=3. */
        .prefetch_window = 8,
        /* Measured in docs/performance.md ("Zero-fill window"). */
        .zero_window = 64,
        .refault_limit = { ZSW_LIMIT_RELATIVE, 5 * 100 },
};

static const char *const compressor_names[_ZSW_COMPRESSOR_MAX] = {
        [ZSW_COMPRESSOR_LZ4] = "lz4",
        [ZSW_COMPRESSOR_ZSTD] = "zstd",
};

static const char *const incompressible_names[_ZSW_INCOMPRESSIBLE_MAX] = {
        [ZSW_INCOMPRESSIBLE_REJECT] = "reject",
        [ZSW_INCOMPRESSIBLE_KEEP] = "keep",
};

static const char *const log_level_names[] = {
        [LOG_ERR] = "err",   [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};


/* ---- the parsers of single keys ------------------------------------------ */

typedef int (*assign_fn)(struct conf_ctx *c, const char *v, void *field, unsigned arg);

enum field_kind {
        FIELD_PLAIN,  /* reset to default by copying bytes */
        FIELD_STRING, /* char *, reset by strdup of the default */
        FIELD_LIST,   /* char **, an empty assignment clears it */
};

struct key_def {
        const char *section;
        const char *name;
        assign_fn parse;
        size_t offset;
        size_t size;
        enum field_kind kind;
        unsigned arg;
};

static int lookup_name(struct conf_ctx *c, const char *v, const char *const *names, size_t n,
                       const char *what) {
        char list[128] = "";

        for (size_t i = 0; i < n; i++)
                if (names[i] && strcmp(v, names[i]) == 0)
                        return (int) i;
        for (size_t i = 0; i < n; i++)
                if (names[i])
                        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                                 list[0] ? ", " : "", names[i]);
        return conf_error(c, "unknown %s (use %s)", what, list);
}

static int assign_compressor(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        int r = lookup_name(c, v, compressor_names, ARRAY_SIZE(compressor_names), "compressor");

        if (r >= 0)
                *(enum zsw_compressor *) field = r;
        return r;
}

static int assign_incompressible(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        int r = lookup_name(c, v, incompressible_names, ARRAY_SIZE(incompressible_names), "value");

        if (r >= 0)
                *(enum zsw_incompressible *) field = r;
        return r;
}

static int assign_log_level(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        int r = lookup_name(c, v, log_level_names, ARRAY_SIZE(log_level_names), "log level");

        if (r >= 0)
                *(int *) field = r;
        return r;
}

/* Whether the compressor has that level is checked once the whole file is
 * read: Compressor= may come after CompressionLevel=, or be inherited. */
static int assign_level(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        unsigned level;
        int r = conf_parse_unsigned(c, v, ZSW_LEVEL_MIN, ZSW_ZSTD_LEVEL_MAX, &level);

        if (r >= 0)
                *(int *) field = (int) level;
        return r;
}

static int assign_bool(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        return conf_parse_bool(c, v, field);
}

static int assign_limit(struct conf_ctx *c, const char *v, void *field, unsigned flags) {
        return conf_parse_limit(c, v, flags, field);
}

static int assign_rate(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        struct zsw_limit l;
        int r = conf_parse_limit(c, v, LIMIT_INFINITY | LIMIT_PER_SEC | LIMIT_NONZERO, &l);

        if (r >= 0)
                *(uint64_t *) field = l.kind == ZSW_LIMIT_NONE ? UINT64_MAX : l.value;
        return r;
}

static int assign_percent(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        size_t n = strlen(v);
        _cleanup_free_ char *num = strndup(v, n > 0 && v[n - 1] == '%' ? n - 1 : n);

        if (!num)
                return -ENOMEM;
        return conf_parse_unsigned(c, num, 1, 100, field);
}

static int assign_uint(struct conf_ctx *c, const char *v, void *field, unsigned max) {
        return conf_parse_unsigned(c, v, 0, max, field);
}

static int assign_timespan(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        return conf_parse_timespan(c, v, field);
}

static int assign_pressure(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        return conf_parse_pressure(c, v, field);
}

static int assign_swapfile_size(struct conf_ctx *c, const char *v, void *field, unsigned arg) {
        uint64_t size, page = (uint64_t) ZSW_PAGE_SIZE;
        int r = conf_parse_size(c, v, &size);

        if (r < 0)
                return r;
        if (size == 0 || size % page != 0)
                return conf_error(c, "must be a positive multiple of the page size (%" PRIu64 ")",
                                  page);
        *(uint64_t *) field = size;
        return 0;
}

/* Characters that could not be written back unambiguously (quotes,
 * backslashes that would read as a continuation) or that no sane path has. */
static bool has_bad_chars(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f || *s == '"' || *s == '\'' ||
                    *s == '\\')
                        return true;
        return false;
}

static int check_path(struct conf_ctx *c, const char *v, const char *what) {
        if (v[0] != '/')
                return conf_error(c, "'%s' is not an absolute %s", v, what);
        if (strlen(v) >= CONF_PATH_MAX)
                return conf_error(c, "%s too long", what);
        if (has_bad_chars(v))
                return conf_error(c, "%s contains control characters, quotes or backslashes", what);
        return 0;
}

static int assign_path(struct conf_ctx *c, const char *v, void *field, unsigned max_len) {
        char *copy;
        int r;

        r = check_path(c, v, "path");
        if (r < 0)
                return r;
        if (max_len > 0 && strlen(v) > max_len)
                return conf_error(c, "path longer than %u bytes", max_len);
        copy = strdup(v);
        if (!copy)
                return -ENOMEM;
        free(*(char **) field);
        *(char **) field = copy;
        return 0;
}

static bool unit_char_ok(char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               strchr(":-_.@*?[]!", ch);
}

static int check_unit(struct conf_ctx *c, const char *w) {
        size_t n = strlen(w);

        if (n == 0 || n > UNIT_NAME_MAX)
                return conf_error(c, "'%s' is not a unit name", w);
        for (const char *p = w; *p; p++)
                if (!unit_char_ok(*p))
                        return conf_error(c, "invalid character in unit name '%s'", w);
        if (!(has_suffix(w, ".service") && n > 8) && !(has_suffix(w, ".scope") && n > 6) &&
            !(has_suffix(w, ".slice") && n > 6))
                return conf_error(c, "'%s' is not a .service, .scope or .slice unit", w);
        return 0;
}

static int check_cgroup_path(struct conf_ctx *c, const char *w) {
        int r = check_path(c, w, "cgroup path");

        if (r < 0)
                return r;
        if (strcmp(w, "/") == 0)
                return 0;
        if (strstr(w, "//") || has_suffix(w, "/") || strstr(w, "/./") || strstr(w, "/../") ||
            has_suffix(w, "/.") || has_suffix(w, "/.."))
                return conf_error(
                        c, "cgroup path '%s' is not normalized (no //, /./, /../ or trailing /)",
                        w);
        return 0;
}

static int check_executable(struct conf_ctx *c, const char *w) {
        if (w[0] == '/')
                return check_path(c, w, "executable path");
        if (w[0] == '\0')
                return conf_error(c, "empty executable name");
        if (strchr(w, '/'))
                return conf_error(c, "'%s' is neither an executable name nor an absolute path", w);
        if (strlen(w) > 255 || has_bad_chars(w))
                return conf_error(c, "'%s' is not a valid executable name", w);
        return 0;
}

/*
 * Splits a list value into words at whitespace; a word may be quoted with
 * '...' or "..." to hold whitespace. Returns 1 with the next word, 0 at the
 * end, <0 on unbalanced quotes.
 */
static int next_word(struct conf_ctx *c, const char **p, char **ret) {
        const char *s = *p + strspn(*p, " \t"), *e;
        char *w;

        if (*s == '\0')
                return 0;
        if (*s == '"' || *s == '\'') {
                e = strchr(s + 1, *s);
                if (!e)
                        return conf_error(c, "unbalanced quotes");
                if (e[1] != '\0' && e[1] != ' ' && e[1] != '\t')
                        return conf_error(c, "garbage after closing quote");
                w = strndup(s + 1, (size_t) (e - s - 1));
                e++;
        } else {
                e = s + strcspn(s, " \t");
                w = strndup(s, (size_t) (e - s));
        }
        if (!w)
                return -ENOMEM;
        *p = e;
        *ret = w;
        return 1;
}

enum { LIST_UNIT, LIST_CGROUP, LIST_EXECUTABLE };

static int assign_list(struct conf_ctx *c, const char *v, void *field, unsigned which) {
        static int (*const check[])(struct conf_ctx *, const char *) = {
                [LIST_UNIT] = check_unit,
                [LIST_CGROUP] = check_cgroup_path,
                [LIST_EXECUTABLE] = check_executable,
        };
        const char *p = v;
        int r = 0, ret = 0;

        for (;;) {
                _cleanup_free_ char *w = NULL;

                r = next_word(c, &p, &w);
                if (r <= 0)
                        break;
                /* Check every word so that each bad one is named. */
                if (check[which](c, w) < 0) {
                        ret = -EINVAL;
                        continue;
                }
                if (strv_push(field, w) < 0)
                        return -ENOMEM;
                w = NULL;
        }
        return r < 0 ? r : ret;
}

#define KEY(sec, key, fn, type, member, kind, arg) \
        { sec, key, fn, offsetof(type, member), sizeof(((type *) 0)->member), kind, arg }
#define G(sec, key, fn, member, kind, arg) KEY(sec, key, fn, struct zsw_config, member, kind, arg)
#define P(sec, key, fn, member, kind, arg) KEY(sec, key, fn, struct zsw_policy, member, kind, arg)

static const struct key_def global_keys[] = {
        G("Daemon", "Socket", assign_path, socket_path, FIELD_STRING, 107),
        G("Daemon", "LogLevel", assign_log_level, log_level, FIELD_PLAIN, 0),
        G("Store", "Compressor", assign_compressor, compressor, FIELD_PLAIN, 0),
        G("Store", "CompressionLevel", assign_level, compression_level, FIELD_PLAIN, 0),
        G("Store", "Incompressible", assign_incompressible, incompressible, FIELD_PLAIN, 0),
        G("Store", "Dictionaries", assign_bool, dictionaries, FIELD_PLAIN, 0),
        G("Pool", "Limit", assign_limit, pool_limit, FIELD_PLAIN, LIMIT_PERCENT | LIMIT_NONZERO),
        G("Pool", "AcceptThreshold", assign_percent, accept_threshold, FIELD_PLAIN, 0),
        G("Writeback", "Enabled", assign_bool, writeback, FIELD_PLAIN, 0),
        G("Writeback", "Swapfile", assign_path, swapfile, FIELD_STRING, 0),
        G("Writeback", "SwapfileSize", assign_swapfile_size, swapfile_size, FIELD_PLAIN, 0),
        G("Pressure", "Threshold", assign_pressure, pressure, FIELD_PLAIN, 0),
};

#define BUDGET_FLAGS (LIMIT_PERCENT | LIMIT_INFINITY | LIMIT_NONZERO)
#define REFAULT_FLAGS (LIMIT_PERCENT | LIMIT_INFINITY | LIMIT_PER_SEC | LIMIT_COUNT)

static const struct key_def policy_keys[] = {
        P("Match", "Unit", assign_list, units, FIELD_LIST, LIST_UNIT),
        P("Match", "CgroupPath", assign_list, cgroup_paths, FIELD_LIST, LIST_CGROUP),
        P("Match", "Executable", assign_list, executables, FIELD_LIST, LIST_EXECUTABLE),
        P("Policy", "Enabled", assign_bool, enabled, FIELD_PLAIN, 0),
        P("Policy", "Compressor", assign_compressor, compressor, FIELD_PLAIN, 0),
        P("Policy", "CompressionLevel", assign_level, compression_level, FIELD_PLAIN, 0),
        P("Policy", "MemoryBudget", assign_limit, memory_budget, FIELD_PLAIN, BUDGET_FLAGS),
        P("Policy", "PressureThreshold", assign_pressure, pressure, FIELD_PLAIN, 0),
        P("Policy", "MinColdAge", assign_timespan, min_cold_age_usec, FIELD_PLAIN, 0),
        P("Policy", "MaxReclaimRate", assign_rate, max_reclaim_rate, FIELD_PLAIN, 0),
        P("Policy", "Writeback", assign_bool, writeback, FIELD_PLAIN, 0),
        P("Policy", "PoolLimit", assign_limit, pool_limit, FIELD_PLAIN, BUDGET_FLAGS),
        P("Policy", "PrefetchWindow", assign_uint, prefetch_window, FIELD_PLAIN, ZSW_PREFETCH_MAX),
        P("Policy", "ZeroFillWindow", assign_uint, zero_window, FIELD_PLAIN, ZSW_ZERO_WINDOW_MAX),
        P("Policy", "RefaultLimit", assign_limit, refault_limit, FIELD_PLAIN, REFAULT_FLAGS),
};

/* ---- the line syntax ------------------------------------------------------ */

struct parser {
        struct conf_ctx ctx;
        const struct key_def *keys;
        size_t n_keys;
        void *target;
        const void *defaults;
        const char *section; /* NULL before the first header */
        bool in_unknown_section;
        unsigned key_lines[16]; /* where each key was last set, 0 if never */
};

/* Edit distance of two short strings, ignoring case, capped to keep it cheap. */
static unsigned edit_distance(const char *a, const char *b) {
        unsigned row[65], n = (unsigned) MIN(strlen(b), 64);

        if (strlen(a) > 64)
                return UINT32_MAX;
        for (unsigned j = 0; j <= n; j++)
                row[j] = j;
        for (unsigned i = 1; a[i - 1]; i++) {
                unsigned diag = row[0];

                row[0] = i;
                for (unsigned j = 1; j <= n; j++) {
                        unsigned up = row[j];
                        unsigned sub = diag + ((a[i - 1] | 0x20) != (b[j - 1] | 0x20));

                        row[j] = MIN(MIN(row[j - 1] + 1, up + 1), sub);
                        diag = up;
                }
        }
        return row[n];
}

static int unknown_key(struct parser *p, const char *key) {
        const struct key_def *best = NULL;
        unsigned best_d = 3;

        for (size_t i = 0; i < p->n_keys; i++) {
                unsigned d = edit_distance(key, p->keys[i].name);

                if (d < best_d || (d == best_d && best && strcmp(best->section, p->section) != 0 &&
                                   strcmp(p->keys[i].section, p->section) == 0)) {
                        best = &p->keys[i];
                        best_d = d;
                }
        }
        if (best && strcmp(best->name, key) == 0)
                return conf_error(&p->ctx, "key %s= belongs in section [%s], not [%s]", key,
                                  best->section, p->section);
        if (best && strcmp(best->section, p->section) != 0)
                return conf_error(&p->ctx,
                                  "unknown key '%s' in section [%s] (did you mean %s= in [%s]?)",
                                  key, p->section, best->name, best->section);
        if (best)
                return conf_error(&p->ctx, "unknown key '%s' in section [%s] (did you mean %s=?)",
                                  key, p->section, best->name);
        return conf_error(&p->ctx, "unknown key '%s' in section [%s]", key, p->section);
}

static void strip_trailing_space(char *s) {
        size_t n = strlen(s);

        while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
                s[--n] = '\0';
}

static char *skip_space(char *s) {
        return s + strspn(s, " \t\r");
}

static int parse_section_header(struct parser *p, char *s) {
        char *end = strchr(s, ']');

        p->section = NULL;
        p->in_unknown_section = false;
        if (!end)
                return conf_error(&p->ctx, "missing ']' in section header");
        if (*skip_space(end + 1))
                return conf_error(&p->ctx, "garbage after section header: '%s'",
                                  skip_space(end + 1));
        *end = '\0';
        for (size_t i = 0; i < p->n_keys; i++)
                if (strcmp(p->keys[i].section, s + 1) == 0) {
                        p->section = p->keys[i].section;
                        return 0;
                }
        /* Its keys are not checked one by one: this one error says it all. */
        p->in_unknown_section = true;
        return conf_error(&p->ctx, "unknown section [%s]", s + 1);
}

/* Removes one pair of matching quotes around a whole scalar value. */
static int unquote(struct conf_ctx *c, char **v) {
        char *s = *v;
        size_t n = strlen(s);

        if (s[0] != '"' && s[0] != '\'')
                return 0;
        if (n < 2 || s[n - 1] != s[0] || memchr(s + 1, s[0], n - 2))
                return conf_error(c, "unbalanced quotes");
        s[n - 1] = '\0';
        *v = s + 1;
        return 0;
}

static int reset_field(const struct key_def *k, void *field, const void *defaults) {
        const void *def = (const char *) defaults + k->offset;

        switch (k->kind) {
        case FIELD_LIST:
                *(char ***) field = strv_free(*(char ***) field);
                return 0;
        case FIELD_STRING: {
                char *copy = strdup(*(char *const *) def);

                if (!copy)
                        return -ENOMEM;
                free(*(char **) field);
                *(char **) field = copy;
                return 0;
        }
        case FIELD_PLAIN:
                memcpy(field, def, k->size);
                return 0;
        }
        return -EINVAL;
}

static int parse_assignment(struct parser *p, char *s) {
        char *eq = strchr(s, '='), *key = s, *value;
        const struct key_def *k = NULL;
        void *field;
        int r;

        if (!eq)
                return conf_error(&p->ctx, "missing '=' (expected Key=Value)");
        *eq = '\0';
        strip_trailing_space(key);
        value = skip_space(eq + 1);
        if (!*key)
                return conf_error(&p->ctx, "missing key name before '='");
        if (p->in_unknown_section)
                return 0;
        if (!p->section)
                return conf_error(&p->ctx, "assignment %s= outside of any section", key);
        for (size_t i = 0; i < p->n_keys; i++)
                if (strcmp(p->keys[i].section, p->section) == 0 &&
                    strcmp(p->keys[i].name, key) == 0)
                        k = &p->keys[i];
        if (!k)
                return unknown_key(p, key);

        p->ctx.key = k->name;
        p->ctx.value = value;
        field = (char *) p->target + k->offset;
        p->key_lines[k - p->keys] = p->ctx.line;
        if (k->kind != FIELD_LIST) {
                r = unquote(&p->ctx, &value);
                if (r < 0)
                        goto out;
        }
        if (*value == '\0')
                r = reset_field(k, field, p->defaults);
        else
                r = k->parse(&p->ctx, value, field, k->arg);
out:
        p->ctx.key = p->ctx.value = NULL;
        return r;
}

static int parse_line(struct parser *p, char *line, unsigned lineno) {
        char *s = skip_space(line);

        p->ctx.line = lineno;
        strip_trailing_space(s);
        if (*s == '\0' || *s == '#' || *s == ';')
                return 0;
        if (*s == '[')
                return parse_section_header(p, s);
        return parse_assignment(p, s);
}

/* Appends LEN bytes to the growing logical line *buf. */
static int append(char **buf, size_t *len, const char *s, size_t n) {
        char *nb = realloc(*buf, *len + n + 1);

        if (!nb)
                return -ENOMEM;
        memcpy(nb + *len, s, n);
        *len += n;
        nb[*len] = '\0';
        *buf = nb;
        return 0;
}

/*
 * Splits TEXT into logical lines: a line ending in a backslash continues on
 * the next one (the backslash becomes a space), and comment lines inside
 * such a continuation are skipped, as in unit files. Errors are counted in
 * p->ctx; only running out of memory stops the parse.
 */
static int parse_text(struct parser *p, const char *text, size_t size) {
        _cleanup_free_ char *buf = NULL;
        const char *pos = text, *end = text + size;
        size_t len = 0;
        unsigned lineno = 0, first = 0;
        int r;

        if (size >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
                pos += 3;
        while (pos < end) {
                const char *l = pos, *nl = memchr(pos, '\n', (size_t) (end - pos));
                size_t n = nl ? (size_t) (nl - pos) : (size_t) (end - pos);

                pos = nl ? nl + 1 : end;
                lineno++;
                if (memchr(l, '\0', n)) {
                        p->ctx.line = lineno;
                        conf_error(&p->ctx, "line contains a NUL byte");
                        len = 0;
                        continue;
                }
                if (len > 0) {
                        /* The input is not NUL-terminated: scan within the line. */
                        const char *t = l;

                        while (t < l + n && (*t == ' ' || *t == '\t'))
                                t++;
                        if (t < l + n && (*t == '#' || *t == ';'))
                                continue;
                } else
                        first = lineno;
                if (append(&buf, &len, l, n) < 0)
                        return -ENOMEM;
                strip_trailing_space(buf);
                len = strlen(buf);
                if (len > 0 && buf[len - 1] == '\\') {
                        buf[len - 1] = ' ';
                        continue;
                }
                r = parse_line(p, buf, first);
                if (r == -ENOMEM)
                        return r;
                len = 0;
        }
        /* A continuation at the end of the file ends there. */
        if (len > 0 && parse_line(p, buf, first) == -ENOMEM)
                return -ENOMEM;
        return 0;
}

/* ---- loading --------------------------------------------------------------- */

static void policy_done(struct zsw_policy *p) {
        free(p->name);
        free(p->path);
        strv_free(p->units);
        strv_free(p->cgroup_paths);
        strv_free(p->executables);
}

struct zsw_config *config_free(struct zsw_config *c) {
        if (!c)
                return NULL;
        free(c->socket_path);
        free(c->swapfile);
        for (size_t i = 0; i < c->n_policies; i++)
                policy_done(&c->policies[i]);
        free(c->policies);
        free(c);
        return NULL;
}

static struct zsw_config *config_new(void) {
        _cleanup_(config_freep) struct zsw_config *c = calloc(1, sizeof(*c));

        if (!c)
                return NULL;
        *c = global_defaults;
        c->socket_path = strdup(global_defaults.socket_path);
        c->swapfile = strdup(global_defaults.swapfile);
        if (!c->socket_path || !c->swapfile)
                return NULL;
        return TAKE_PTR(c);
}

static size_t key_index(const struct key_def *keys, size_t n, const char *name) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(keys[i].name, name) == 0)
                        return i;
        abort(); /* a name missing from our own table is a bug here */
}

/* Levels are the compressor's own (lz4 up to 12); level 0 is "not set". */
static int check_level(struct parser *p, enum zsw_compressor comp, int level) {
        size_t i = key_index(p->keys, p->n_keys, "CompressionLevel");
        char value[16];

        if (zsw_compress_level(comp, level) >= 0)
                return 0;
        snprintf(value, sizeof(value), "%d", level);
        p->ctx.line = p->key_lines[i];
        p->ctx.key = "CompressionLevel";
        p->ctx.value = value;
        if (comp == ZSW_COMPRESSOR_LZ4)
                conf_error(&p->ctx, "lz4 levels are 1 to %d (set Compressor=zstd for up to %d)",
                           ZSW_LZ4_LEVEL_MAX, ZSW_ZSTD_LEVEL_MAX);
        else
                conf_error(&p->ctx, "%s levels are 1 to %d", compressor_names[comp],
                           ZSW_ZSTD_LEVEL_MAX);
        p->ctx.key = p->ctx.value = NULL;
        return -EINVAL;
}

static int resolve_level(enum zsw_compressor comp, int level) {
        int r = zsw_compress_level(comp, level);

        return r < 0 ? level : r;
}

/* What the global settings leave unset once read. */
static void global_resolve(struct zsw_config *c) {
        c->compressor_set = c->compressor != ZSW_COMPRESSOR_INHERIT;
        if (!c->compressor_set)
                c->compressor = ZSW_COMPRESSOR_DEFAULT;
}

static int parse_global(struct zsw_config *c, const struct zsw_config_source *src,
                        const struct zsw_log *log, unsigned *n_errors) {
        struct parser p = {
                .ctx = { .log = log, .path = src->path },
                .keys = global_keys,
                .n_keys = ARRAY_SIZE(global_keys),
                .target = c,
                .defaults = &global_defaults,
        };
        int r;

        r = parse_text(&p, src->text, src->size);
        if (r < 0)
                return r;
        global_resolve(c);
        check_level(&p, c->compressor, c->compression_level);
        c->compression_level_set = c->compression_level != 0;
        c->compression_level = resolve_level(c->compressor, c->compression_level);
        *n_errors += p.ctx.n_errors;
        return 0;
}

/* "policy.d/firefox.conf" is policy "firefox". */
static int policy_name(struct conf_ctx *ctx, const char *path, char **ret) {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t n = strlen(base);
        char *name;

        if (has_suffix(base, ".conf"))
                n -= 5;
        if (n == 0 || n > POLICY_NAME_MAX)
                return conf_error(ctx, "not a valid policy file name");
        for (size_t i = 0; i < n; i++)
                if (!unit_char_ok(base[i]) || strchr("*?[]!", base[i]))
                        return conf_error(
                                ctx,
                                "policy file names may only hold letters, digits and \":-_.@\"");
        name = strndup(base, n);
        if (!name)
                return -ENOMEM;
        *ret = name;
        return 0;
}

static int parse_policy(struct zsw_config *c, struct zsw_policy *pol,
                        const struct zsw_config_source *src, const struct zsw_log *log,
                        unsigned *n_errors) {
        struct parser p = {
                .ctx = { .log = log, .path = src->path },
                .keys = policy_keys,
                .n_keys = ARRAY_SIZE(policy_keys),
                .target = pol,
                .defaults = &policy_defaults,
        };
        int r;

        *pol = policy_defaults;
        pol->path = strdup(src->path);
        if (!pol->path)
                return -ENOMEM;
        r = policy_name(&p.ctx, src->path, &pol->name);
        if (r == -ENOMEM)
                return r;
        r = parse_text(&p, src->text, src->size);
        if (r < 0)
                return r;
        p.ctx.line = 0;
        if (!pol->units && !pol->cgroup_paths && !pol->executables)
                conf_error(
                        &p.ctx,
                        "policy has no [Match] condition (set Unit=, CgroupPath= or Executable=)");
        /* The global compressor when [Store] names one or a level (a level
         * is a compressor's), or the policy a level; else the one for the
         * policy's mode. A global level carries over as long as the
         * compressor does. */
        if (pol->compressor == ZSW_COMPRESSOR_INHERIT)
                pol->compressor = c->compressor_set || c->compression_level_set ||
                                                  pol->compression_level != 0 ||
                                                  pol->memory_budget.kind != ZSW_LIMIT_NONE
                                          ? c->compressor
                                          : ZSW_COMPRESSOR_BY_AGE;
        if (pol->compressor == c->compressor && pol->compression_level == 0 &&
            c->compression_level_set)
                pol->compression_level = c->compression_level;
        check_level(&p, pol->compressor, pol->compression_level);
        pol->compression_level = resolve_level(pol->compressor, pol->compression_level);
        if (pol->pressure.window_usec == 0)
                pol->pressure = c->pressure;
        *n_errors += p.ctx.n_errors;
        return 0;
}

int config_load_sources(const struct zsw_config_source *global,
                        const struct zsw_config_source *policies, size_t n_policies,
                        const struct zsw_log *log, struct zsw_config **ret_config) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        unsigned n_errors = 0;
        int r;

        _Static_assert(ARRAY_SIZE(global_keys) <= ARRAY_SIZE(((struct parser *) 0)->key_lines), "");
        _Static_assert(ARRAY_SIZE(policy_keys) <= ARRAY_SIZE(((struct parser *) 0)->key_lines), "");

        c = config_new();
        if (!c)
                return -ENOMEM;
        if (global) {
                r = parse_global(c, global, log, &n_errors);
                if (r < 0)
                        return r;
        } else {
                global_resolve(c);
                c->compression_level = resolve_level(c->compressor, 0);
        }
        if (n_policies > 0) {
                c->policies = calloc(n_policies, sizeof(struct zsw_policy));
                if (!c->policies)
                        return -ENOMEM;
        }
        /* Policies are parsed even after errors in the global file, so that
         * the user sees all of them in one go. */
        for (size_t i = 0; i < n_policies; i++) {
                c->n_policies++;
                r = parse_policy(c, &c->policies[i], &policies[i], log, &n_errors);
                if (r < 0)
                        return r;
        }
        if (n_errors > 0)
                return -EINVAL;
        *ret_config = TAKE_PTR(c);
        return 0;
}

/* ---- writing the effective config back ----------------------------------- */

/* Words and values with whitespace are quoted; has_bad_chars() kept quotes
 * out of them, so that is unambiguous. */
static void write_word(FILE *f, const char *w) {
        if (w[strcspn(w, " \t")] || w[0] == '\0')
                fprintf(f, "\"%s\"", w);
        else
                fputs(w, f);
}

static void write_list(FILE *f, const char *key, char *const *l) {
        if (!l)
                return;
        fprintf(f, "%s=", key);
        for (size_t i = 0; l[i]; i++) {
                if (i > 0)
                        fputc(' ', f);
                write_word(f, l[i]);
        }
        fputc('\n', f);
}

/* A level left out reads back as the default it was resolved from. */
/* An unset global compressor is written as a comment: read back, it must
 * stay unset (policies without a budget then take their own). */
static void write_level(FILE *f, enum zsw_compressor comp, bool comp_set, int level, bool set) {
        fprintf(f, "%sCompressor=%s\n", comp_set ? "" : "#", compressor_names[comp]);
        if (set)
                fprintf(f, "CompressionLevel=%d\n", level);
}

static int stream_result(FILE *f) {
        if (fflush(f) != 0 || ferror(f))
                return errno > 0 ? -errno : -EIO;
        return 0;
}

int config_dump_global(const struct zsw_config *c, FILE *f) {
        char b[CONF_FORMAT_MAX];

        fputs("[Daemon]\nSocket=", f);
        write_word(f, c->socket_path);
        fprintf(f, "\nLogLevel=%s\n\n[Store]\n", log_level_names[c->log_level]);
        write_level(f, c->compressor, c->compressor_set, c->compression_level,
                    c->compression_level_set);
        fprintf(f, "Incompressible=%s\nDictionaries=%s\n\n",
                incompressible_names[c->incompressible], c->dictionaries ? "yes" : "no");
        fprintf(f, "[Pool]\nLimit=%s\nAcceptThreshold=%u%%\n\n",
                conf_format_limit(b, &c->pool_limit, 0), c->accept_threshold);
        fprintf(f, "[Writeback]\nEnabled=%s\nSwapfile=", c->writeback ? "yes" : "no");
        write_word(f, c->swapfile);
        fprintf(f, "\nSwapfileSize=%s\n\n", conf_format_size(b, c->swapfile_size));
        fprintf(f, "[Pressure]\nThreshold=%s\n", conf_format_pressure(b, &c->pressure));
        return stream_result(f);
}

int policy_dump(const struct zsw_policy *p, FILE *f) {
        char b[CONF_FORMAT_MAX];

        fputs("[Match]\n", f);
        write_list(f, "Unit", p->units);
        write_list(f, "CgroupPath", p->cgroup_paths);
        write_list(f, "Executable", p->executables);
        fprintf(f, "\n[Policy]\nEnabled=%s\n", p->enabled ? "yes" : "no");
        write_level(f, p->compressor, true, p->compression_level, true);
        fprintf(f, "MemoryBudget=%s\n", conf_format_limit(b, &p->memory_budget, 0));
        fprintf(f, "PressureThreshold=%s\n", conf_format_pressure(b, &p->pressure));
        fprintf(f, "MinColdAge=%s\n", conf_format_timespan(b, p->min_cold_age_usec));
        fprintf(f, "MaxReclaimRate=%s\n",
                p->max_reclaim_rate == UINT64_MAX
                        ? "infinity"
                        : strcat(conf_format_size(b, p->max_reclaim_rate), "/s"));
        fprintf(f, "Writeback=%s\n", p->writeback ? "yes" : "no");
        fprintf(f, "PoolLimit=%s\n", conf_format_limit(b, &p->pool_limit, 0));
        fprintf(f, "PrefetchWindow=%u\n", p->prefetch_window);
        fprintf(f, "ZeroFillWindow=%u\n", p->zero_window);
        fprintf(f, "RefaultLimit=%s\n",
                conf_format_limit(b, &p->refault_limit, LIMIT_COUNT | LIMIT_PER_SEC));
        return stream_result(f);
}

int config_dump(const struct zsw_config *c, FILE *f) {
        int r = config_dump_global(c, f);

        for (size_t i = 0; r >= 0 && i < c->n_policies; i++) {
                fprintf(f, "\n# Policy %s (%s)\n", c->policies[i].name, c->policies[i].path);
                r = policy_dump(&c->policies[i], f);
        }
        return r;
}
