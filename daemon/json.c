/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <inttypes.h>
#include <math.h>

#include "json.h"

void json_init(struct json *j, FILE *f) {
        *j = (struct json) { .f = f };
}

static void write_string(FILE *f, const char *s) {
        fputc('"', f);
        for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
                if (*p == '"' || *p == '\\')
                        fprintf(f, "\\%c", *p);
                else if (*p == '\n')
                        fputs("\\n", f);
                else if (*p < 0x20)
                        fprintf(f, "\\u%04x", *p);
                else
                        fputc(*p, f);
        }
        fputc('"', f);
}

/* Separator and key before any value. */
static void begin_value(struct json *j, const char *key) {
        if (j->need_comma[j->depth])
                fputc(',', j->f);
        j->need_comma[j->depth] = true;
        if (key) {
                write_string(j->f, key);
                fputc(':', j->f);
        }
}

static void open_container(struct json *j, const char *key, char c) {
        begin_value(j, key);
        fputc(c, j->f);
        assert(j->depth < JSON_MAX_DEPTH);
        j->need_comma[++j->depth] = false;
}

static void close_container(struct json *j, char c) {
        assert(j->depth > 0);
        j->depth--;
        fputc(c, j->f);
}

void json_object_open(struct json *j, const char *key) {
        open_container(j, key, '{');
}

void json_object_close(struct json *j) {
        close_container(j, '}');
}

void json_array_open(struct json *j, const char *key) {
        open_container(j, key, '[');
}

void json_array_close(struct json *j) {
        close_container(j, ']');
}

void json_u64(struct json *j, const char *key, uint64_t v) {
        begin_value(j, key);
        fprintf(j->f, "%" PRIu64, v);
}

void json_i64(struct json *j, const char *key, int64_t v) {
        begin_value(j, key);
        fprintf(j->f, "%" PRId64, v);
}

void json_double(struct json *j, const char *key, double v) {
        begin_value(j, key);
        if (isfinite(v))
                fprintf(j->f, "%.3f", v);
        else
                fputs("null", j->f);
}

void json_bool(struct json *j, const char *key, bool v) {
        begin_value(j, key);
        fputs(v ? "true" : "false", j->f);
}

void json_string(struct json *j, const char *key, const char *s) {
        begin_value(j, key);
        write_string(j->f, s);
}
