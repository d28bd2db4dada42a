/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A minimal test harness: TEST(name) { ... } registers a case, ASSERT_*
 * aborts the current binary with the location and the values compared,
 * and a binary that cannot run here (no privilege, a kernel feature
 * missing) exits with 77, which meson reports as a skip.
 *
 * Each test binary includes this header exactly once and gets its main()
 * from it; define TEST_NO_MAIN to provide your own.
 */
#pragma once

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_TEST_SKIP 77

typedef void (*test_fn)(void);

struct test_case {
        const char *name;
        test_fn fn;
};

#define TEST_MAX 256
static struct test_case test_cases[TEST_MAX];
static unsigned test_count;

static inline void test_register(const char *name, test_fn fn) {
        if (test_count >= TEST_MAX) {
                fprintf(stderr, "too many tests\n");
                abort();
        }
        test_cases[test_count++] = (struct test_case) { name, fn };
}

#define TEST(name)                                                            \
        static void test_##name(void);                                        \
        __attribute__((constructor)) static void test_register_##name(void) { \
                test_register(#name, test_##name);                            \
        }                                                                     \
        static void test_##name(void)

#define TEST_FAIL(fmt, ...)                                                           \
        do {                                                                          \
                fprintf(stderr, "%s:%d: %s: " fmt "\n", __FILE__, __LINE__, __func__, \
                        ##__VA_ARGS__);                                               \
                abort();                                                              \
        } while (0)

#define ASSERT_TRUE(expr)                                         \
        do {                                                      \
                if (!(expr))                                      \
                        TEST_FAIL("assertion failed: %s", #expr); \
        } while (0)
#define ASSERT_FALSE(expr) ASSERT_TRUE(!(expr))

#define ASSERT_CMP_(a, op, b, fmt, type)                                                      \
        do {                                                                                  \
                type _a_ = (type) (a), _b_ = (type) (b);                                      \
                if (!(_a_ op _b_))                                                            \
                        TEST_FAIL("expected %s %s %s, got " fmt " vs " fmt, #a, #op, #b, _a_, \
                                  _b_);                                                       \
        } while (0)

#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b, "%" PRIdMAX, intmax_t)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b, "%" PRIdMAX, intmax_t)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b, "%" PRIdMAX, intmax_t)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b, "%" PRIdMAX, intmax_t)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b, "%" PRIdMAX, intmax_t)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b, "%" PRIdMAX, intmax_t)
#define ASSERT_EQ_U(a, b) ASSERT_CMP_(a, ==, b, "%" PRIuMAX, uintmax_t)

/* For functions returning a negative errno on failure. */
#define ASSERT_OK(expr)                                                          \
        do {                                                                     \
                intmax_t _r_ = (intmax_t) (expr);                                \
                if (_r_ < 0)                                                     \
                        TEST_FAIL("%s failed: %s", #expr, strerror((int) -_r_)); \
        } while (0)
#define ASSERT_ERRNO(expr, err)                                                                \
        do {                                                                                   \
                intmax_t _r_ = (intmax_t) (expr);                                              \
                if (_r_ != -(err))                                                             \
                        TEST_FAIL("%s returned %" PRIdMAX ", expected -%s", #expr, _r_, #err); \
        } while (0)

#define ASSERT_STREQ(a, b)                                                                        \
        do {                                                                                      \
                const char *_a_ = (a), *_b_ = (b);                                                \
                if (!_a_ || !_b_ || strcmp(_a_, _b_) != 0)                                        \
                        TEST_FAIL("expected \"%s\" == \"%s\"", _a_ ?: "(null)", _b_ ?: "(null)"); \
        } while (0)

#define ASSERT_MEMEQ(a, b, n) ASSERT_TRUE(memcmp((a), (b), (n)) == 0)

/* Skips the whole binary: the case cannot run on this machine. */
#define TEST_SKIP(fmt, ...)                                        \
        do {                                                       \
                fprintf(stderr, "SKIP: " fmt "\n", ##__VA_ARGS__); \
                exit(EXIT_TEST_SKIP);                              \
        } while (0)

/* Runs every case, or only those named in argv[1..argc-1]; the exit
 * status for main(). A failing case aborts before this returns. */
static inline int test_run_cases(int argc, char **argv) {
        unsigned ran = 0;

        for (unsigned i = 0; i < test_count; i++) {
                bool wanted = argc < 2;

                for (int a = 1; a < argc; a++)
                        if (strcmp(argv[a], test_cases[i].name) == 0)
                                wanted = true;
                if (!wanted)
                        continue;
                fprintf(stderr, "=== %s\n", test_cases[i].name);
                test_cases[i].fn();
                ran++;
        }
        fprintf(stderr, "%u passed, 0 failed\n", ran);
        return ran > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#ifndef TEST_NO_MAIN
int main(int argc, char **argv) {
        return test_run_cases(argc, argv);
}
#endif

/* A struct zsw_log function for tests: "<priority> file:line: message" on
 * stderr (the engine's own filter is its max_priority). */
static inline void test_log_stderr(void *userdata, int priority, const char *file, int line,
                                   const char *func, const char *format, va_list ap) {
        (void) userdata;
        (void) func;
        fprintf(stderr, "<%d> %s:%d: ", priority, file, line);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
}
