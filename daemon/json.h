/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A tiny JSON emitter for the control socket's machine-readable replies:
 * objects, arrays, strings, unsigned integers and finite decimals, written
 * to a stdio stream (an open_memstream() buffer in practice). It tracks
 * commas and nesting so callers only say what to write; keys are NULL for
 * array elements and the top-level value.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 8

struct json {
        FILE *f;
        unsigned depth;
        bool need_comma[JSON_MAX_DEPTH + 1];
};

void json_init(struct json *j, FILE *f);

void json_object_open(struct json *j, const char *key);
void json_object_close(struct json *j);
void json_array_open(struct json *j, const char *key);
void json_array_close(struct json *j);

void json_u64(struct json *j, const char *key, uint64_t v);
void json_i64(struct json *j, const char *key, int64_t v);
/* Non-finite values are written as null. */
void json_double(struct json *j, const char *key, double v);
void json_string(struct json *j, const char *key, const char *s);
void json_bool(struct json *j, const char *key, bool v);
