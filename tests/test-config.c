/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "config.h"
#include "test.h"
#include "util.h"

#define POLICY_PATH "/etc/zswapd/policy.d/test.conf"
#define GLOBAL_PATH "/etc/zswapd/zswapd.conf"

static char messages[64][512];
static unsigned n_messages;

static void capture_log(void *userdata, int priority, const char *file, int line, const char *func,
                        const char *format, va_list ap) {
        ASSERT_EQ(priority, LOG_ERR);
        if (n_messages < ARRAY_SIZE(messages))
                vsnprintf(messages[n_messages], sizeof(messages[0]), format, ap);
        n_messages++;
}

static const struct zsw_log test_log = { .fn = capture_log, .max_priority = LOG_DEBUG };

static int load(const char *global, const char *policy, struct zsw_config **ret) {
        struct zsw_config_source g = { GLOBAL_PATH, global, global ? strlen(global) : 0 };
        struct zsw_config_source p = { POLICY_PATH, policy, policy ? strlen(policy) : 0 };

        n_messages = 0;
        return config_load_sources(global ? &g : NULL, policy ? &p : NULL, policy ? 1 : 0,
                                   &test_log, ret);
}

static bool logged(const char *msg) {
        for (unsigned i = 0; i < MIN(n_messages, ARRAY_SIZE(messages)); i++)
                if (strcmp(messages[i], msg) == 0)
                        return true;
        return false;
}

static void dump_messages(void) {
        for (unsigned i = 0; i < MIN(n_messages, ARRAY_SIZE(messages)); i++)
                fprintf(stderr, "  logged: %s\n", messages[i]);
}

/* The load fails, returns no config and logs exactly MSG (among others). */
#define ASSERT_LOAD_FAILS(global, policy, msg)                        \
        do {                                                          \
                struct zsw_config *_c_ = (struct zsw_config *) 0x1;   \
                ASSERT_ERRNO(load((global), (policy), &_c_), EINVAL); \
                ASSERT_TRUE(_c_ == (struct zsw_config *) 0x1);        \
                if (!logged(msg)) {                                   \
                        dump_messages();                              \
                        TEST_FAIL("expected message: %s", msg);       \
                }                                                     \
        } while (0)

/* A policy file with a match line, then BODY starting on line 3. */
#define MATCH "[Match]\nUnit=foo.service\n"

static void assert_policy_error(const char *body, const char *msg) {
        char text[1024];

        snprintf(text, sizeof(text), MATCH "%s", body);
        ASSERT_LOAD_FAILS(NULL, text, msg);
}

static void assert_global_error(const char *text, const char *msg) {
        ASSERT_LOAD_FAILS(text, NULL, msg);
}

TEST(defaults_without_any_file) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;

        ASSERT_OK(config_load("/nonexistent/zswapd", &test_log, &c));
        ASSERT_STREQ(c->socket_path, "/run/zswapd/zswapd.sock");
        ASSERT_EQ(c->log_level, LOG_INFO);
        ASSERT_EQ(c->compressor, ZSW_COMPRESSOR_LZ4);
        ASSERT_EQ(c->compression_level, 1);
        ASSERT_EQ(c->incompressible, ZSW_INCOMPRESSIBLE_REJECT);
        ASSERT_TRUE(c->dictionaries);
        ASSERT_EQ(c->pool_limit.kind, ZSW_LIMIT_RELATIVE);
        ASSERT_EQ(c->pool_limit.value, 2000);
        ASSERT_EQ(c->accept_threshold, 90);
        ASSERT_FALSE(c->writeback);
        ASSERT_STREQ(c->swapfile, "/var/lib/zswapd");
        ASSERT_EQ_U(c->swapfile_size, 1ull << 30);
        ASSERT_FALSE(c->pressure.full);
        ASSERT_EQ(c->pressure.stall_usec, 100000);
        ASSERT_EQ(c->pressure.window_usec, 1000000);
        ASSERT_EQ(c->n_policies, 0);
        ASSERT_EQ(n_messages, 0);
}

TEST(every_global_key) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;

        ASSERT_OK(load("[Daemon]\n"
                       "Socket=/run/z.sock\n"
                       "LogLevel=debug\n"
                       "[Store]\n"
                       "Compressor=zstd\n"
                       "CompressionLevel=7\n"
                       "Incompressible=keep\n"
                       "Dictionaries=no\n"
                       "[Pool]\n"
                       "Limit=2G\n"
                       "AcceptThreshold=80%\n"
                       "[Writeback]\n"
                       "Enabled=on\n"
                       "Swapfile=/var/swap/zswapd\n"
                       "SwapfileSize=512M\n"
                       "[Pressure]\n"
                       "Threshold=full 150ms/2s\n",
                       NULL, &c));
        ASSERT_STREQ(c->socket_path, "/run/z.sock");
        ASSERT_EQ(c->log_level, LOG_DEBUG);
        ASSERT_EQ(c->compressor, ZSW_COMPRESSOR_ZSTD);
        ASSERT_EQ(c->compression_level, 7);
        ASSERT_EQ(c->incompressible, ZSW_INCOMPRESSIBLE_KEEP);
        ASSERT_FALSE(c->dictionaries);
        ASSERT_EQ(c->pool_limit.kind, ZSW_LIMIT_ABSOLUTE);
        ASSERT_EQ_U(c->pool_limit.value, 2ull << 30);
        ASSERT_EQ(c->accept_threshold, 80);
        ASSERT_TRUE(c->writeback);
        ASSERT_STREQ(c->swapfile, "/var/swap/zswapd");
        ASSERT_EQ_U(c->swapfile_size, 512ull << 20);
        ASSERT_TRUE(c->pressure.full);
        ASSERT_EQ(c->pressure.stall_usec, 150000);
        ASSERT_EQ(c->pressure.window_usec, 2000000);
}

TEST(every_policy_key) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        const struct zsw_policy *p;

        ASSERT_OK(load(NULL,
                       "[Match]\n"
                       "Unit=app-firefox-*.scope firefox.service\n"
                       "Unit=other.slice\n"
                       "CgroupPath=/user.slice\n"
                       "Executable=firefox /usr/lib/firefox/firefox\n"
                       "[Policy]\n"
                       "Enabled=no\n"
                       "Compressor=zstd\n"
                       "CompressionLevel=19\n"
                       "MemoryBudget=1.5G\n"
                       "PressureThreshold=some 12.5%/2s\n"
                       "MinColdAge=1min 30s\n"
                       "MaxReclaimRate=64M/s\n"
                       "Writeback=false\n"
                       "PoolLimit=25%\n"
                       "PrefetchWindow=64\n"
                       "ZeroFillWindow=511\n"
                       "RefaultLimit=200/s\n",
                       &c));
        ASSERT_EQ(c->n_policies, 1);
        p = &c->policies[0];
        ASSERT_STREQ(p->name, "test");
        ASSERT_STREQ(p->path, POLICY_PATH);
        ASSERT_STREQ(p->units[0], "app-firefox-*.scope");
        ASSERT_STREQ(p->units[1], "firefox.service");
        ASSERT_STREQ(p->units[2], "other.slice");
        ASSERT_TRUE(p->units[3] == NULL);
        ASSERT_STREQ(p->cgroup_paths[0], "/user.slice");
        ASSERT_STREQ(p->executables[0], "firefox");
        ASSERT_STREQ(p->executables[1], "/usr/lib/firefox/firefox");
        ASSERT_FALSE(p->enabled);
        ASSERT_EQ(p->compressor, ZSW_COMPRESSOR_ZSTD);
        ASSERT_EQ(p->compression_level, 19);
        ASSERT_EQ(p->memory_budget.kind, ZSW_LIMIT_ABSOLUTE);
        ASSERT_EQ_U(p->memory_budget.value, 3ull << 29);
        ASSERT_FALSE(p->pressure.full);
        ASSERT_EQ(p->pressure.stall_usec, 250000);
        ASSERT_EQ(p->pressure.window_usec, 2000000);
        ASSERT_EQ_U(p->min_cold_age_usec, 90000000);
        ASSERT_EQ_U(p->max_reclaim_rate, 64ull << 20);
        ASSERT_FALSE(p->writeback);
        ASSERT_EQ(p->pool_limit.kind, ZSW_LIMIT_RELATIVE);
        ASSERT_EQ(p->pool_limit.value, 2500);
        ASSERT_EQ(p->prefetch_window, 64);
        ASSERT_EQ(p->zero_window, 511);
        ASSERT_EQ(p->refault_limit.kind, ZSW_LIMIT_ABSOLUTE);
        ASSERT_EQ(p->refault_limit.value, 200);
}

TEST(policy_defaults_and_inheritance) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        const struct zsw_policy *p;

        ASSERT_OK(load("[Store]\nCompressor=zstd\nCompressionLevel=9\n"
                       "[Pressure]\nThreshold=20%\n",
                       MATCH, &c));
        p = &c->policies[0];
        ASSERT_TRUE(p->enabled);
        ASSERT_EQ(p->compressor, ZSW_COMPRESSOR_ZSTD);
        ASSERT_EQ(p->compression_level, 9);
        ASSERT_EQ(p->pressure.stall_usec, 200000);
        ASSERT_EQ(p->pressure.window_usec, 1000000);
        ASSERT_EQ(p->memory_budget.kind, ZSW_LIMIT_NONE);
        ASSERT_EQ_U(p->min_cold_age_usec, 30000000);
        ASSERT_EQ_U(p->max_reclaim_rate, 32ull << 20);
        ASSERT_TRUE(p->writeback);
        ASSERT_EQ(p->pool_limit.kind, ZSW_LIMIT_NONE);
        ASSERT_EQ(p->prefetch_window, 8);
        ASSERT_EQ(p->zero_window, 64);
        ASSERT_EQ(p->refault_limit.kind, ZSW_LIMIT_RELATIVE);
        ASSERT_EQ(p->refault_limit.value, 500);
        c = config_free(c);


        /* Which compressor and level a policy gets:
         * - naming zstd over a global lz4 gives zstd's default level; only
         *   raising the level keeps the global compressor;
         * - lz4's levels above 1 are LZ4HC's;
         * - unless a compressor or a level is named (in [Store] or the
         *   policy), pages taken by age go to zstd, a budget's to lz4 (its
         *   faults may wait for a reclaim); a level alone is lz4's. */
        static const struct {
                const char *global, *policy;
                enum zsw_compressor comp;
                int level;
        } cases[] = {
                { NULL, "Compressor=zstd\n", ZSW_COMPRESSOR_ZSTD, 3 },
                { "Compressor=zstd\n", "CompressionLevel=12\n", ZSW_COMPRESSOR_ZSTD, 12 },
                { "Compressor=zstd\nCompressionLevel=8\n", "Compressor=zstd\n", ZSW_COMPRESSOR_ZSTD,
                  8 },
                { "Compressor=zstd\nCompressionLevel=5\n", "Compressor=lz4\n", ZSW_COMPRESSOR_LZ4,
                  1 },
                { "CompressionLevel=4\n", "Compressor=lz4\n", ZSW_COMPRESSOR_LZ4, 4 },
                { NULL, "MinColdAge=1m\n", ZSW_COMPRESSOR_ZSTD, ZSW_ZSTD_LEVEL_DEFAULT },
                { NULL, "MemoryBudget=1G\n", ZSW_COMPRESSOR_LZ4, 1 },
                { "Compressor=lz4\n", "MinColdAge=1m\n", ZSW_COMPRESSOR_LZ4, 1 },
                { "CompressionLevel=2\n", "MinColdAge=1m\n", ZSW_COMPRESSOR_LZ4, 2 },
                { NULL, "CompressionLevel=9\n", ZSW_COMPRESSOR_LZ4, 9 },
                { NULL, "Compressor=lz4\nMinColdAge=1m\n", ZSW_COMPRESSOR_LZ4, 1 },
        };

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_free_ char *g = NULL, *pol = NULL;

                if (cases[i].global)
                        ASSERT_GE(asprintf(&g, "[Store]\n%s", cases[i].global), 0);
                ASSERT_GE(asprintf(&pol, MATCH "[Policy]\n%s", cases[i].policy), 0);
                c = config_free(c);
                ASSERT_OK(load(g, pol, &c));
                ASSERT_EQ(c->policies[0].compressor, cases[i].comp);
                ASSERT_EQ(c->policies[0].compression_level, cases[i].level);
                /* [Store]'s own stays lz4 unless named, and says so. */
                ASSERT_EQ(c->compressor_set, g && strstr(g, "Compressor=") != NULL);
        }
}

TEST(syntax) {
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        const struct zsw_policy *p;

        ASSERT_OK(load(NULL,
                       "\xef\xbb\xbf# comment\n"
                       "; another comment\n"
                       "\n"
                       "  [Match]  \r\n"
                       "Unit = a.service \\\n"
                       "# a comment inside a continuation is skipped\n"
                       "   b.service\\\n"
                       "   \"c.service\"\n"
                       "Executable='/opt/my app/bin'\n"
                       "[Policy]\n"
                       "\tMinColdAge\t=\t5min\t\n"
                       "MinColdAge=10s\n" /* the last assignment wins */
                       "PrefetchWindow=3\n"
                       "PrefetchWindow=\n" /* empty resets to the default */
                       "Compressor=\"zstd\"\n"
                       "Enabled=Yes\n"
                       "[Policy]\n" /* a section may be reopened */
                       "Writeback=0\n"
                       "RefaultLimit=10", /* no newline at the end */
                       &c));
        p = &c->policies[0];
        ASSERT_STREQ(p->units[0], "a.service");
        ASSERT_STREQ(p->units[1], "b.service");
        ASSERT_STREQ(p->units[2], "c.service");
        ASSERT_TRUE(p->units[3] == NULL);
        ASSERT_STREQ(p->executables[0], "/opt/my app/bin");
        ASSERT_EQ_U(p->min_cold_age_usec, 10000000);
        ASSERT_EQ(p->prefetch_window, 8);
        ASSERT_EQ(p->compressor, ZSW_COMPRESSOR_ZSTD);
        ASSERT_TRUE(p->enabled);
        ASSERT_FALSE(p->writeback);
        ASSERT_EQ(p->refault_limit.kind, ZSW_LIMIT_ABSOLUTE);
        ASSERT_EQ(p->refault_limit.value, 10);
        c = config_free(c);

        /* An empty list assignment clears what came before. */
        ASSERT_OK(load(NULL, "[Match]\nUnit=a.service\nUnit=\nExecutable=x\n", &c));
        ASSERT_TRUE(c->policies[0].units == NULL);
        c = config_free(c);

        /* A continuation on the last line ends with the file. */
        ASSERT_OK(load(NULL, "[Match]\nUnit=a.service \\", &c));
        ASSERT_STREQ(c->policies[0].units[0], "a.service");
}

TEST(value_formats) {
        static const struct {
                const char *assignment;
                uint64_t bytes;
        } sizes[] = {
                { "MemoryBudget=4096", 4096 },
                { "MemoryBudget=4K", 4096 },
                { "MemoryBudget=0.5K", 512 },
                { "MemoryBudget=3M", 3 << 20 },
                { "MemoryBudget=1.25G", 5ull << 28 },
                { "MemoryBudget=16T", 16ull << 40 },
                { "MemoryBudget=18446744073709551615", UINT64_MAX },
        };
        static const struct {
                const char *assignment;
                uint64_t usec;
        } spans[] = {
                { "MinColdAge=0", 0 },
                { "MinColdAge=250ms", 250000 },
                { "MinColdAge=7us", 7 },
                { "MinColdAge=2", 2000000 },
                { "MinColdAge=1.5s", 1500000 },
                { "MinColdAge=5min", 300000000 },
                { "MinColdAge=1h 1m 1s", 3661000000 },
                { "MinColdAge=1d", 86400000000 },
        };
        char text[256];

        for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
                _cleanup_(config_freep) struct zsw_config *c = NULL;

                snprintf(text, sizeof(text), MATCH "[Policy]\n%s\n", sizes[i].assignment);
                ASSERT_OK(load(NULL, text, &c));
                ASSERT_EQ_U(c->policies[0].memory_budget.value, sizes[i].bytes);
        }
        for (size_t i = 0; i < ARRAY_SIZE(spans); i++) {
                _cleanup_(config_freep) struct zsw_config *c = NULL;

                snprintf(text, sizeof(text), MATCH "[Policy]\n%s\n", spans[i].assignment);
                ASSERT_OK(load(NULL, text, &c));
                ASSERT_EQ_U(c->policies[0].min_cold_age_usec, spans[i].usec);
        }

        _cleanup_(config_freep) struct zsw_config *c = NULL;
        ASSERT_OK(load(NULL,
                       MATCH
                       "[Policy]\nMaxReclaimRate=infinity\nMemoryBudget=33.33%\n"
                       "RefaultLimit=2.5%\nPressureThreshold=full 300ms\nPoolLimit=infinity\n",
                       &c));
        ASSERT_EQ_U(c->policies[0].max_reclaim_rate, UINT64_MAX);
        ASSERT_EQ(c->policies[0].memory_budget.kind, ZSW_LIMIT_RELATIVE);
        ASSERT_EQ(c->policies[0].memory_budget.value, 3333);
        ASSERT_EQ(c->policies[0].refault_limit.value, 250);
        ASSERT_TRUE(c->policies[0].pressure.full);
        ASSERT_EQ(c->policies[0].pressure.stall_usec, 300000);
        ASSERT_EQ(c->policies[0].pressure.window_usec, 1000000);
        ASSERT_EQ(c->policies[0].pool_limit.kind, ZSW_LIMIT_NONE);
}

TEST(syntax_errors) {
        assert_global_error("Socket=/x\n",
                            GLOBAL_PATH ":1: assignment Socket= outside of any section");
        assert_global_error("[Daemon\n", GLOBAL_PATH ":1: missing ']' in section header");
        assert_global_error("[Daemon] x\n", GLOBAL_PATH ":1: garbage after section header: 'x'");
        assert_global_error("\n[Deamon]\nSocket=/x\n", GLOBAL_PATH ":2: unknown section [Deamon]");
        assert_global_error("[Daemon]\nSocket\n",
                            GLOBAL_PATH ":2: missing '=' (expected Key=Value)");
        assert_global_error("[Daemon]\n=x\n", GLOBAL_PATH ":2: missing key name before '='");
        assert_global_error("[Daemon]\nsocket=/x\n", GLOBAL_PATH
                            ":2: unknown key 'socket' in section [Daemon] (did you mean Socket=?)");
        assert_global_error("[Daemon]\nCompressor=lz4\n", GLOBAL_PATH
                            ":2: key Compressor= belongs in section [Store], not [Daemon]");
        assert_global_error("[Daemon]\nCompresor=lz4\n",
                            GLOBAL_PATH ":2: unknown key 'Compresor' in section [Daemon] (did you "
                                        "mean Compressor= in [Store]?)");
        assert_global_error("[Daemon]\nFrobnicate=1\n",
                            GLOBAL_PATH ":2: unknown key 'Frobnicate' in section [Daemon]");
        assert_global_error("[Daemon]\nSocket=\"/x\n",
                            GLOBAL_PATH ":2: Socket=\"/x: unbalanced quotes");
        assert_policy_error("[Policy]\nUnit=a.service\n",
                            POLICY_PATH ":4: key Unit= belongs in section [Match], not [Policy]");
        /* Errors in continued lines name the line the assignment starts on. */
        assert_policy_error(
                "[Policy]\nMinColdAge=1s \\\n  2x\n", POLICY_PATH
                ":4: MinColdAge=1s    2x: unknown time unit 'x' (use us, ms, s, min, h or d)");
}

TEST(nul_byte) {
        static const char text[] = MATCH "[Policy]\nEnabled=y\0s\n";
        struct zsw_config_source p = { POLICY_PATH, text, sizeof(text) - 1 };
        struct zsw_config *c = NULL;

        n_messages = 0;
        ASSERT_ERRNO(config_load_sources(NULL, &p, 1, &test_log, &c), EINVAL);
        ASSERT_TRUE(c == NULL);
        ASSERT_TRUE(logged(POLICY_PATH ":4: line contains a NUL byte"));
}

TEST(value_errors) {
        static const struct {
                const char *body; /* on line 4 of a policy */
                const char *msg;
        } cases[] = {
                { "MemoryBudget=12X",
                  "MemoryBudget=12X: unknown size suffix 'X' (use K, M, G, T or %)" },
                { "MemoryBudget=12MB",
                  "MemoryBudget=12MB: unknown size suffix 'MB' (use K, M, G, T or %)" },
                { "MemoryBudget=-1G", "MemoryBudget=-1G: size must not be negative" },
                { "MemoryBudget=lots", "MemoryBudget=lots: not a size" },
                { "MemoryBudget=0",
                  "MemoryBudget=0: must be greater than 0 (\"infinity\" means no limit)" },
                { "MemoryBudget=1.5", "MemoryBudget=1.5: fractional size needs a suffix" },
                { "MemoryBudget=17000000T", "MemoryBudget=17000000T: size too large" },
                { "MemoryBudget=18446744073709551616",
                  "MemoryBudget=18446744073709551616: size too large" },
                { "MemoryBudget=101%", "MemoryBudget=101%: percentage above 100%" },
                { "MemoryBudget=1.234%",
                  "MemoryBudget=1.234%: percentages have at most two decimals" },
                { "MemoryBudget=1G/s", "MemoryBudget=1G/s: trailing garbage '/s'" },
                { "MemoryBudget=1.G", "MemoryBudget=1.G: not a size" },
                { "MaxReclaimRate=64M/min",
                  "MaxReclaimRate=64M/min: trailing garbage '/min' (only \"/s\" may follow)" },
                { "MaxReclaimRate=0",
                  "MaxReclaimRate=0: must be greater than 0 (\"infinity\" means no limit)" },
                { "MaxReclaimRate=10%",
                  "MaxReclaimRate=10%: unknown size suffix '%' (use K, M, G, T)" },
                { "RefaultLimit=5K/s",
                  "RefaultLimit=5K/s: unknown number suffix 'K' (use a plain number or %)" },
                { "RefaultLimit=5%/s",
                  "RefaultLimit=5%/s: a percentage is not a rate, drop the \"/s\"" },
                { "PoolLimit=infinite", "PoolLimit=infinite: not a size" },
                { "Enabled=maybe",
                  "Enabled=maybe: not a boolean (use yes, no, true, false, on, off, 1 or 0)" },
                { "Compressor=lzo", "Compressor=lzo: unknown compressor (use lz4, zstd)" },
                { "CompressionLevel=20", "CompressionLevel=20: out of range (1 ... 19)" },
                { "CompressionLevel=0", "CompressionLevel=0: out of range (1 ... 19)" },
                { "CompressionLevel=3x",
                  "CompressionLevel=3x: trailing garbage 'x' after the number" },
                { "CompressionLevel=-3", "CompressionLevel=-3: must not be negative" },
                { "PrefetchWindow=65", "PrefetchWindow=65: out of range (0 ... 64)" },
                { "PrefetchWindow=99999999999999999999",
                  "PrefetchWindow=99999999999999999999: out of range (0 ... 64)" },
                { "PrefetchWindow=1.5", "PrefetchWindow=1.5: not a whole number" },
                { "ZeroFillWindow=512", "ZeroFillWindow=512: out of range (0 ... 511)" },
                { "MinColdAge=5 minutes ago",
                  "MinColdAge=5 minutes ago: not a time span (e.g. 500ms, 30s, 5min, 1h)" },
                { "MinColdAge=5y",
                  "MinColdAge=5y: unknown time unit 'y' (use us, ms, s, min, h or d)" },
                { "MinColdAge=-5s", "MinColdAge=-5s: time span must not be negative" },
                { "MinColdAge=99999999999999d", "MinColdAge=99999999999999d: time span too large" },
                { "MinColdAge=5s/1s",
                  "MinColdAge=5s/1s: trailing garbage '/1s' after the time span" },
                { "PressureThreshold=150ms/100ms", "PressureThreshold=150ms/100ms: window must be "
                                                   "between 500ms and 10s (the kernel's bounds)" },
                { "PressureThreshold=2s/1s",
                  "PressureThreshold=2s/1s: stall threshold is longer than its window" },
                { "PressureThreshold=0%",
                  "PressureThreshold=0%: stall threshold must be greater than 0" },
                { "PressureThreshold=half 10%", "PressureThreshold=half 10%: not a pressure "
                                                "threshold (e.g. 10%, 150ms/1s or full 5%/2s)" },
                { "PressureThreshold=10%/1s x",
                  "PressureThreshold=10%/1s x: not a time span (e.g. 500ms, 30s, 5min, 1h)" },
                { "PressureThreshold=150ms/1s/2s",
                  "PressureThreshold=150ms/1s/2s: trailing garbage '/2s' after the window" },
                { "PressureThreshold=10K%",
                  "PressureThreshold=10K%: unknown number suffix 'K%' (use a plain number or %)" },
        };
        char body[256], msg[512];

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                snprintf(body, sizeof(body), "[Policy]\n%s\n", cases[i].body);
                snprintf(msg, sizeof(msg), POLICY_PATH ":4: %s", cases[i].msg);
                assert_policy_error(body, msg);
        }
}

TEST(match_errors) {
        ASSERT_LOAD_FAILS(
                NULL, "[Policy]\nEnabled=yes\n",
                POLICY_PATH
                ": policy has no [Match] condition (set Unit=, CgroupPath= or Executable=)");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=nginx\n",
                          POLICY_PATH
                          ":2: Unit=nginx: 'nginx' is not a .service, .scope or .slice unit");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=.service\n",
                          POLICY_PATH
                          ":2: Unit=.service: '.service' is not a .service, .scope or .slice unit");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=a/b.service\n",
                          POLICY_PATH
                          ":2: Unit=a/b.service: invalid character in unit name 'a/b.service'");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=\"a.service\n",
                          POLICY_PATH ":2: Unit=\"a.service: unbalanced quotes");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=\"a.service\"x\n",
                          POLICY_PATH ":2: Unit=\"a.service\"x: garbage after closing quote");
        ASSERT_LOAD_FAILS(
                NULL, "[Match]\nCgroupPath=system.slice\n",
                POLICY_PATH
                ":2: CgroupPath=system.slice: 'system.slice' is not an absolute cgroup path");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nCgroupPath=/a//b\n",
                          POLICY_PATH ":2: CgroupPath=/a//b: cgroup path '/a//b' is not normalized "
                                      "(no //, /./, /../ or trailing /)");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nCgroupPath=/a/../b\n",
                          POLICY_PATH ":2: CgroupPath=/a/../b: cgroup path '/a/../b' is not "
                                      "normalized (no //, /./, /../ or trailing /)");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nExecutable=bin/firefox\n",
                          POLICY_PATH ":2: Executable=bin/firefox: 'bin/firefox' is neither an "
                                      "executable name nor an absolute path");
        ASSERT_LOAD_FAILS(NULL, "[Match]\nExecutable=\"\"\n",
                          POLICY_PATH ":2: Executable=\"\": empty executable name");
        /* Each bad word of a list is named. */
        ASSERT_LOAD_FAILS(NULL, "[Match]\nUnit=x y.service z\n",
                          POLICY_PATH
                          ":2: Unit=x y.service z: 'z' is not a .service, .scope or .slice unit");
        ASSERT_TRUE(logged(POLICY_PATH
                           ":2: Unit=x y.service z: 'x' is not a .service, .scope or .slice unit"));
}

TEST(global_value_errors) {
        assert_global_error(
                "[Daemon]\nLogLevel=verbose\n", GLOBAL_PATH
                ":2: LogLevel=verbose: unknown log level (use err, warning, notice, info, debug)");
        assert_global_error("[Daemon]\nSocket=run/z.sock\n", GLOBAL_PATH
                            ":2: Socket=run/z.sock: 'run/z.sock' is not an absolute path");
        assert_global_error(
                "[Daemon]\nSocket=/run/"
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                GLOBAL_PATH
                ":2: Socket=/run/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...: "
                "path longer than 107 bytes");
        assert_global_error("[Store]\nIncompressible=drop\n", GLOBAL_PATH
                            ":2: Incompressible=drop: unknown value (use reject, keep)");
        assert_global_error("[Store]\nCompressionLevel=13\nCompressor=lz4\n",
                            GLOBAL_PATH ":2: CompressionLevel=13: lz4 levels are 1 to 12 "
                                        "(set Compressor=zstd for up to 19)");
        assert_global_error("[Pool]\nLimit=0%\n",
                            GLOBAL_PATH ":2: Limit=0%: must be greater than 0");
        assert_global_error("[Pool]\nLimit=infinity\n",
                            GLOBAL_PATH ":2: Limit=infinity: not a size");
        assert_global_error("[Pool]\nAcceptThreshold=0\n",
                            GLOBAL_PATH ":2: AcceptThreshold=0: out of range (1 ... 100)");
        assert_global_error("[Pool]\nAcceptThreshold=150%\n",
                            GLOBAL_PATH ":2: AcceptThreshold=150%: out of range (1 ... 100)");
        assert_global_error(
                "[Writeback]\nSwapfileSize=1000\n", GLOBAL_PATH
                ":2: SwapfileSize=1000: must be a positive multiple of the page size (4096)");
        assert_global_error(
                "[Writeback]\nSwapfile=/var/a\\b\n", GLOBAL_PATH
                ":2: Swapfile=/var/a\\b: path contains control characters, quotes or backslashes");
        /* The level a policy sets is checked against the compressor it
         * inherits. */
        ASSERT_LOAD_FAILS(NULL, MATCH "[Policy]\nCompressionLevel=14\n",
                          POLICY_PATH ":4: CompressionLevel=14: lz4 levels are 1 to 12 (set "
                                      "Compressor=zstd for up to 19)");
}

TEST(every_error_is_reported) {
        struct zsw_config_source g = { GLOBAL_PATH, "[Store]\nCompressor=zlib\n[Pool]\nLimit=5Q\n",
                                       42 };
        struct zsw_config_source p[2] = {
                { "/p/10-a.conf", "[Match]\nUnit=a\n[Policy]\nEnabled=perhaps\nMinColdAge=1x\n",
                  0 },
                { "/p/20-b.conf", "[Policy]\nBogus=1\n", 0 },
        };
        struct zsw_config *c = NULL;

        g.size = strlen(g.text);
        p[0].size = strlen(p[0].text);
        p[1].size = strlen(p[1].text);
        n_messages = 0;
        ASSERT_ERRNO(config_load_sources(&g, p, 2, &test_log, &c), EINVAL);
        ASSERT_TRUE(c == NULL);
        ASSERT_EQ(n_messages, 8);
        ASSERT_TRUE(logged(GLOBAL_PATH ":2: Compressor=zlib: unknown compressor (use lz4, zstd)"));
        ASSERT_TRUE(
                logged(GLOBAL_PATH ":4: Limit=5Q: unknown size suffix 'Q' (use K, M, G, T or %)"));
        ASSERT_TRUE(logged("/p/10-a.conf:2: Unit=a: 'a' is not a .service, .scope or .slice unit"));
        ASSERT_TRUE(logged("/p/10-a.conf:4: Enabled=perhaps: not a boolean (use yes, no, true, "
                           "false, on, off, 1 or 0)"));
        ASSERT_TRUE(logged("/p/10-a.conf:5: MinColdAge=1x: unknown time unit 'x' (use us, ms, s, "
                           "min, h or d)"));
        ASSERT_TRUE(logged("/p/10-a.conf: policy has no [Match] condition (set Unit=, CgroupPath= "
                           "or Executable=)"));
        ASSERT_TRUE(logged("/p/20-b.conf:2: unknown key 'Bogus' in section [Policy]"));
        ASSERT_TRUE(logged("/p/20-b.conf: policy has no [Match] condition (set Unit=, CgroupPath= "
                           "or Executable=)"));
}

/* ---- loading from directories -------------------------------------------- */

static void write_file(int dir_fd, const char *name, const char *text) {
        int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
}

static char *make_fixture(void) {
        char *dir = strdup("/tmp/test-config-XXXXXX");

        ASSERT_TRUE(dir && mkdtemp(dir));
        return dir;
}

static void remove_fixture(char *dir) {
        char cmd[256];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_EQ(system(cmd), 0);
        free(dir);
}

TEST(load_directory) {
        char *dir = make_fixture(), path[256];
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), pfd = -EBADF;

        /* An empty directory: defaults. */
        ASSERT_OK(config_load(dir, &test_log, &c));
        ASSERT_EQ(c->n_policies, 0);
        c = config_free(c);

        write_file(fd, "zswapd.conf", "[Store]\nCompressor=zstd\n");
        ASSERT_EQ(mkdirat(fd, "policy.d", 0755), 0);
        pfd = openat(fd, "policy.d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(pfd, 0);
        write_file(pfd, "50-build.conf", "[Match]\nUnit=build.service\n");
        write_file(pfd, "10-browser.conf", "[Match]\nUnit=app-firefox-*.scope\n");
        write_file(pfd, "20-z.conf", "[Match]\nExecutable=z\n");
        write_file(pfd, "README", "not a config");
        write_file(pfd, "30-old.conf.bak", "not a config");
        write_file(pfd, ".40-hidden.conf", "not a config");
        ASSERT_OK(config_load_at(fd, dir, &test_log, &c));
        ASSERT_EQ(c->compressor, ZSW_COMPRESSOR_ZSTD);
        ASSERT_EQ(c->n_policies, 3);
        ASSERT_STREQ(c->policies[0].name, "10-browser");
        ASSERT_STREQ(c->policies[1].name, "20-z");
        ASSERT_STREQ(c->policies[2].name, "50-build");
        snprintf(path, sizeof(path), "%s/policy.d/10-browser.conf", dir);
        ASSERT_STREQ(c->policies[0].path, path);
        ASSERT_EQ(c->policies[0].compression_level, 3);
        c = config_free(c);

        /* Oversized files are refused, and the error is the read error. */
        {
                int big = openat(pfd, "54-big.conf", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

                ASSERT_GE(big, 0);
                ASSERT_EQ(ftruncate(big, 2 * ZSW_CONFIG_FILE_MAX), 0);
                close(big);
                n_messages = 0;
                ASSERT_ERRNO(config_load(dir, &test_log, &c), EFBIG);
                snprintf(path, sizeof(path), "%s/policy.d/54-big.conf: larger than 1048576 bytes",
                         dir);
                ASSERT_TRUE(logged(path));
                ASSERT_EQ(n_messages, 1);
                ASSERT_EQ(unlinkat(pfd, "54-big.conf", 0), 0);
        }

        /* A FIFO does not hang the reader; it is refused like a directory. */
        ASSERT_EQ(mkfifoat(pfd, "55-fifo.conf", 0644), 0);
        n_messages = 0;
        ASSERT_ERRNO(config_load(dir, &test_log, &c), EINVAL);
        snprintf(path, sizeof(path), "%s/policy.d/55-fifo.conf: not a regular file", dir);
        ASSERT_TRUE(logged(path));
        ASSERT_EQ(unlinkat(pfd, "55-fifo.conf", 0), 0);

        /* A directory where a file should be is an error naming it. */
        ASSERT_EQ(mkdirat(pfd, "60-dir.conf", 0755), 0);
        n_messages = 0;
        ASSERT_ERRNO(config_load(dir, &test_log, &c), EINVAL);
        snprintf(path, sizeof(path), "%s/policy.d/60-dir.conf: not a regular file", dir);
        ASSERT_TRUE(logged(path));
        ASSERT_TRUE(c == NULL);

        remove_fixture(dir);
}

TEST(reload_keeps_nothing_of_a_bad_config) {
        char *dir = make_fixture();
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct zsw_config *old = NULL, *new = NULL;

        ASSERT_GE(fd, 0);
        write_file(fd, "zswapd.conf", "[Pool]\nLimit=1G\n");
        ASSERT_OK(config_load(dir, &test_log, &old));
        ASSERT_EQ_U(old->pool_limit.value, 1ull << 30);

        /* The new file is half good: nothing of it comes through. */
        write_file(fd, "zswapd.conf", "[Pool]\nLimit=2G\nAcceptThreshold=x\n");
        new = (struct zsw_config *) 0x1;
        n_messages = 0;
        ASSERT_ERRNO(config_load(dir, &test_log, &new), EINVAL);
        ASSERT_TRUE(new == (struct zsw_config *) 0x1);
        ASSERT_EQ(n_messages, 1);
        ASSERT_EQ_U(old->pool_limit.value, 1ull << 30);

        write_file(fd, "zswapd.conf", "[Pool]\nLimit=2G\n");
        ASSERT_OK(config_load(dir, &test_log, &new));
        ASSERT_EQ_U(new->pool_limit.value, 2ull << 30);
        config_free(old);
        config_free(new);
        remove_fixture(dir);
}

/* ---- matching ---------------------------------------------------------------- */

/* EXE as /proc/PID/exe reads (a path) or, for a bare name, as comm. */
static const char *match_name(const struct zsw_config *c, const char *cgroup, const char *exe) {
        struct zsw_proc_exe e = {
                .path = exe && exe[0] == '/' ? (char *) exe : NULL,
                .comm = exe && exe[0] != '/' ? (char *) exe : NULL,
        };
        const struct zsw_policy *p = config_match(c, cgroup, exe ? &e : NULL, NULL);

        return p ? p->name : "(none)";
}

static struct zsw_config *load_policies(size_t n, const char *const *paths,
                                        const char *const *texts) {
        struct zsw_config_source src[8];
        struct zsw_config *c = NULL;

        for (size_t i = 0; i < n; i++)
                src[i] = (struct zsw_config_source) { paths[i], texts[i], strlen(texts[i]) };
        n_messages = 0;
        ASSERT_OK(config_load_sources(NULL, src, n, &test_log, &c));
        return c;
}

TEST(match_precedence_and_kinds) {
        static const char *const paths[] = {
                "p/00-off.conf",  "p/10-firefox.conf", "p/20-nginx.conf", "p/30-tree.conf",
                "p/40-both.conf", "p/50-exe.conf",     "p/60-user.conf",
        };
        static const char *const texts[] = {
                "[Match]\nExecutable=secret-agent\n[Policy]\nEnabled=no\n",
                "[Match]\nUnit=app-firefox-*.scope\n",
                "[Match]\nUnit=nginx.service\n",
                "[Match]\nCgroupPath=/system.slice/build-*.service/jobs\n",
                "[Match]\nUnit=postgresql.service\nExecutable=/usr/lib/postgresql/*/bin/postgres\n",
                "[Match]\nExecutable=java node\n",
                "[Match]\nUnit=user@1000.service\n",
        };
        _cleanup_(config_freep) struct zsw_config *c = load_policies(7, paths, texts);
        static const char user[] = "/user.slice/user-1000.slice/user@1000.service/app.slice/";

        ASSERT_STREQ(match_name(c, "/system.slice/nginx.service", "/usr/sbin/nginx"), "20-nginx");
        ASSERT_STREQ(match_name(c, "/system.slice/nginx.service/worker", NULL), "20-nginx");
        ASSERT_STREQ(match_name(c, "/system.slice/nginx-old.service", NULL), "(none)");
        ASSERT_STREQ(match_name(c, "/system.slice/xnginx.service", NULL), "(none)");
        /* The first file in lexical order wins over later ones. */
        ASSERT_STREQ(match_name(c,
                                "/user.slice/user-1000.slice/user@1000.service/app.slice/"
                                "app-firefox-1234.scope",
                                "/usr/lib/firefox/firefox"),
                     "10-firefox");
        ASSERT_STREQ(
                match_name(
                        c,
                        "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-x.scope",
                        "/usr/bin/gedit"),
                "60-user");
        /* A disabled policy is a match too: it excludes. */
        ASSERT_STREQ(match_name(c, "/system.slice/nginx.service", "/usr/bin/secret-agent"),
                     "00-off");
        ASSERT_FALSE(config_match(c, "/",
                                  &(struct zsw_proc_exe) { .comm = (char *) "secret-agent" }, NULL)
                             ->enabled);
        /* CgroupPath: the group and below, one glob per component. */
        ASSERT_STREQ(match_name(c, "/system.slice/build-42.service/jobs", NULL), "30-tree");
        ASSERT_STREQ(match_name(c, "/system.slice/build-42.service/jobs/cc1", NULL), "30-tree");
        ASSERT_STREQ(match_name(c, "/system.slice/build-42.service/jobs2", NULL), "(none)");
        ASSERT_STREQ(match_name(c, "/system.slice/build-42.service", NULL), "(none)");
        /* Conditions of different keys must all hold. */
        ASSERT_STREQ(match_name(c, "/system.slice/postgresql.service",
                                "/usr/lib/postgresql/15/bin/postgres"),
                     "40-both");
        ASSERT_STREQ(match_name(c, "/system.slice/postgresql.service", "/usr/bin/psql"), "(none)");
        ASSERT_STREQ(match_name(c, "/system.slice/postgresql.service", NULL), "(none)");
        /* '*' in a path pattern does not cross '/'. */
        ASSERT_STREQ(match_name(c, "/system.slice/postgresql.service",
                                "/usr/lib/postgresql/15/x/bin/postgres"),
                     "(none)");
        /* Executable names compare with the file name. */
        ASSERT_STREQ(match_name(c, "/", "/usr/bin/node"), "50-exe");
        ASSERT_STREQ(match_name(c, "/", "node"), "50-exe");
        ASSERT_STREQ(match_name(c, "/", "/usr/bin/nodejs"), "(none)");
        ASSERT_STREQ(match_name(c, NULL, NULL), "(none)");
        ASSERT_STREQ(match_name(c, user, NULL), "60-user");
}

TEST(match_cgroup_root) {
        static const char *const paths[] = { "p/all.conf" };
        static const char *const texts[] = { "[Match]\nCgroupPath=/\n" };
        _cleanup_(config_freep) struct zsw_config *c = load_policies(1, paths, texts);

        ASSERT_STREQ(match_name(c, "/", NULL), "all");
        ASSERT_STREQ(match_name(c, "/a/b", NULL), "all");
        ASSERT_STREQ(match_name(c, NULL, "x"), "(none)");
}

/* ---- /proc/PID/cgroup --------------------------------------------------------- */

static void assert_cgroup(const char *text, const char *expected) {
        _cleanup_free_ char *path = NULL;

        ASSERT_OK(proc_cgroup_parse(text, strlen(text), &path));
        ASSERT_STREQ(path, expected);
}

TEST(proc_cgroup_parse) {
        char *path = (char *) 0x1;

        /* Pure cgroup v2. */
        assert_cgroup("0::/system.slice/nginx.service\n", "/system.slice/nginx.service");
        /* Hybrid: v2 and name=systemd agree. */
        assert_cgroup("12:memory:/system.slice/a.service\n1:name=systemd:/system.slice/a.service\n"
                      "0::/system.slice/a.service\n",
                      "/system.slice/a.service");
        /* Legacy, or an unused v2 tree: the v2 line says "/". */
        assert_cgroup("9:name=systemd:/user.slice/u.scope\n4:memory:/x\n0::/\n",
                      "/user.slice/u.scope");
        assert_cgroup("1:cpu,name=systemd:/a.slice\n", "/a.slice");
        assert_cgroup("4:memory:/x\n0::/\n", "/");
        assert_cgroup("0::/with:colon.service", "/with:colon.service");
        ASSERT_ERRNO(proc_cgroup_parse("4:memory:/x\n", 12, &path), ENODATA);
        ASSERT_ERRNO(proc_cgroup_parse("", 0, &path), ENODATA);
        ASSERT_ERRNO(proc_cgroup_parse("0:/x\n", 5, &path), EBADMSG);
        ASSERT_ERRNO(proc_cgroup_parse("x::/x\n", 6, &path), EBADMSG);
        ASSERT_ERRNO(proc_cgroup_parse("0::x\n", 5, &path), EBADMSG);
        ASSERT_ERRNO(proc_cgroup_parse("0::/a\0b\n", 8, &path), EBADMSG);
        ASSERT_TRUE(path == (char *) 0x1);
}

TEST(proc_cgroup_read) {
        char *dir = make_fixture();
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int self = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_free_ char *path = NULL, *real = NULL;

        ASSERT_ERRNO(proc_cgroup_read(fd, &path), ENOENT);
        write_file(fd, "cgroup", "1:name=systemd:/system.slice/x.service\n0::/\n");
        ASSERT_OK(proc_cgroup_read(fd, &path));
        ASSERT_STREQ(path, "/system.slice/x.service");
        /* The real file of this process parses, whatever the layout here. */
        ASSERT_GE(self, 0);
        ASSERT_OK(proc_cgroup_read(self, &real));
        ASSERT_TRUE(real[0] == '/');
        remove_fixture(dir);
}

/* ---- executables ------------------------------------------------------------- */

/* Debian's redis-server: a symlink to redis-check-rdb, which /proc/PID/exe
 * names. A user writes the link's name or path; each form matches and says
 * which it was. */
TEST(match_executable_forms) {
        static const char *const paths[] = {
                "p/10-svc.conf",
                "p/20-path.conf",
                "p/30-glob.conf",
                "p/40-comm.conf",
        };
        static const char *const texts[] = {
                "[Match]\nUnit=redis.service\nExecutable=redis-server\n",
                "[Match]\nExecutable=/usr/bin/redis-server\n",
                "[Match]\nExecutable=redis-*\n",
                "[Match]\nExecutable=myscript\n",
        };
        _cleanup_(config_freep) struct zsw_config *c = load_policies(4, paths, texts);
        struct zsw_proc_exe redis = {
                .path = (char *) "/usr/bin/redis-check-rdb",
                .argv0 = (char *) "/usr/bin/redis-server",
                .comm = (char *) "redis-server",
        };
        struct zsw_proc_exe no_argv0 = { .path = redis.path, .comm = redis.comm };
        struct zsw_proc_exe script = { .path = (char *) "/usr/bin/python3.11",
                                       .argv0 = (char *) "/usr/bin/python3",
                                       .comm = (char *) "myscript" };
        struct zsw_match m;

        ASSERT_STREQ(config_match(c, "/system.slice/redis.service", &redis, &m)->name, "10-svc");
        ASSERT_STREQ(m.unit, "redis.service");
        ASSERT_TRUE(m.cgroup_path == NULL);
        ASSERT_STREQ(m.executable, "redis-server");
        ASSERT_EQ(m.executable_form, ZSW_EXE_ARGV0_NAME);
        ASSERT_STREQ(proc_exe_name(&redis, m.executable_form), "redis-server");

        ASSERT_STREQ(config_match(c, "/", &redis, &m)->name, "20-path");
        ASSERT_TRUE(m.unit == NULL);
        ASSERT_EQ(m.executable_form, ZSW_EXE_ARGV0);
        ASSERT_STREQ(exe_form_to_string(m.executable_form), "argv0");

        /* Not started through the link's path: the name still is its comm. */
        ASSERT_STREQ(config_match(c, "/system.slice/redis.service", &no_argv0, &m)->name, "10-svc");
        ASSERT_EQ(m.executable_form, ZSW_EXE_COMM);
        /* A path pattern is not compared with names; the glob finds the
         * resolved file first. */
        ASSERT_STREQ(config_match(c, "/", &no_argv0, &m)->name, "30-glob");
        ASSERT_EQ(m.executable_form, ZSW_EXE_PATH_NAME);
        ASSERT_STREQ(proc_exe_name(&no_argv0, m.executable_form), "redis-check-rdb");

        /* A script: the kernel names the process after it. */
        ASSERT_STREQ(config_match(c, "/", &script, &m)->name, "40-comm");
        ASSERT_EQ(m.executable_form, ZSW_EXE_COMM);

        ASSERT_TRUE(config_match(c, "/", NULL, &m) == NULL);
        ASSERT_TRUE(config_match(c, "/", &(struct zsw_proc_exe) {}, NULL) == NULL);
        ASSERT_STREQ(exe_form_to_string(ZSW_EXE_PATH), "exe");
        ASSERT_STREQ(exe_form_to_string(ZSW_EXE_PATH_NAME), "exe-name");
        ASSERT_STREQ(exe_form_to_string(ZSW_EXE_ARGV0_NAME), "argv0-name");
        ASSERT_TRUE(exe_form_to_string(_ZSW_EXE_FORM_MAX) == NULL);
}

static void write_bytes(int dir_fd, const char *name, const char *data, size_t size) {
        int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        ASSERT_GE(fd, 0);
        ASSERT_EQ(write(fd, data, size), (ssize_t) size);
        close(fd);
}

static void relink(int dir_fd, const char *name, const char *target) {
        (void) unlinkat(dir_fd, name, 0);
        ASSERT_OK(symlinkat(target, dir_fd, name));
}

/* argv[0] as CMDLINE (SIZE bytes, NULs included) read from the fixture
 * process PID_FD: the path it names, or "(none)". */
static char *argv0_of(int pid_fd, const char *cmdline, size_t size) {
        struct zsw_proc_exe e = {};
        char *s;

        write_bytes(pid_fd, "cmdline", cmdline, size);
        ASSERT_OK(proc_exe_read(pid_fd, NULL, &e));
        s = strdup(e.argv0 ?: "(none)");
        proc_exe_done(&e);
        return s;
}

#define ASSERT_ARGV0(fd, cmdline, expected)                                           \
        do {                                                                          \
                _cleanup_free_ char *_a = argv0_of(fd, cmdline, sizeof(cmdline) - 1); \
                ASSERT_STREQ(_a, expected);                                           \
        } while (0)

/* A /proc/PID-like directory: "exe" and "cwd" symlinks into the fixture,
 * "root" to "/", the files "comm", "cmdline" and "environ". */
TEST(proc_exe_read) {
        char *dir = make_fixture(), p[512], link[256], real[256], other[256], cmd[512];
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), pid = -EBADF;
        struct zsw_proc_exe e = {};

        ASSERT_OK(mkdirat(fd, "bin", 0755));
        ASSERT_OK(mkdirat(fd, "pid", 0755));
        pid = openat(fd, "pid", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(pid, 0);
        write_file(fd, "bin/real", "#!/bin/true\n");
        write_file(fd, "other", "#!/bin/true\n");
        ASSERT_OK(symlinkat("real", fd, "bin/link"));
        snprintf(link, sizeof(link), "%s/bin/link", dir);
        snprintf(real, sizeof(real), "%s/bin/real", dir);
        snprintf(other, sizeof(other), "%s/other", dir);

        ASSERT_ERRNO(proc_exe_read(pid, NULL, &e), ENOENT); /* nothing to read */
        write_file(pid, "comm", "renamed\n");
        ASSERT_OK(proc_exe_read(pid, NULL, &e)); /* a kernel thread: comm only */
        ASSERT_TRUE(!e.path && !e.argv0);
        ASSERT_STREQ(e.comm, "renamed");
        proc_exe_done(&e);

        relink(pid, "exe", real);
        relink(pid, "root", "/");
        snprintf(p, sizeof(p), "%s/bin", dir);
        relink(pid, "cwd", p);
        snprintf(cmd, sizeof(cmd), "%s%c-x%c", link, 0, 0);
        write_bytes(pid, "cmdline", cmd, strlen(link) + 4);
        ASSERT_OK(proc_exe_read(pid, NULL, &e));
        ASSERT_STREQ(e.path, real);
        ASSERT_STREQ(e.argv0, link); /* the link it was started through */
        ASSERT_STREQ(e.comm, "renamed");
        ASSERT_FALSE(e.deleted);
        proc_exe_done(&e);

        /* Relative to the current directory, shown simplified. */
        ASSERT_ARGV0(pid, "./link\0-x\0", link);
        ASSERT_ARGV0(pid, "../bin/./link\0", link);
        ASSERT_ARGV0(pid, "..//bin/../bin/link\0", link);
        /* A title written over the command line. */
        snprintf(cmd, sizeof(cmd), "%s *:6379 [cluster]", link);
        {
                _cleanup_free_ char *a = argv0_of(pid, cmd, strlen(cmd));
                ASSERT_STREQ(a, link);
        }
        /* Paths to another file or to none are not what it was started as. */
        snprintf(cmd, sizeof(cmd), "%s", other);
        {
                _cleanup_free_ char *a = argv0_of(pid, cmd, strlen(cmd) + 1);
                ASSERT_STREQ(a, "(none)");
        }
        ASSERT_ARGV0(pid, "/nonexistent/link\0", "(none)");
        ASSERT_ARGV0(pid, "\0", "(none)");
        /* A bare name: found in the PATH of its environment, or not at all. */
        ASSERT_ARGV0(pid, "link\0", "(none)");
        write_bytes(pid, "environ", cmd,
                    (size_t) snprintf(cmd, sizeof(cmd),
                                      "HOME=/%cPATH=/nonexistent:%s/bin:/usr/bin%c", 0, dir, 0));
        ASSERT_ARGV0(pid, "link\0", link);
        ASSERT_ARGV0(pid, "other\0", "(none)");
        /* Titles of programs started that way (redis-server from a shell). */
        ASSERT_ARGV0(pid, "link *:6379", link);
        ASSERT_ARGV0(pid, "link unixsocket:/run/redis.sock\0", link);
        /* An environment without PATH (redis-server overwrites it): the
         * default one, here for a real file found there. */
        write_bytes(pid, "environ", "\0\0\0\0", 4);
        ASSERT_ARGV0(pid, "link\0", "(none)");
        if (access("/usr/bin/env", X_OK) == 0 && access("/usr/local/bin/env", F_OK) < 0 &&
            access("/usr/local/sbin/env", F_OK) < 0 && access("/usr/sbin/env", F_OK) < 0) {
                relink(pid, "exe", "/usr/bin/env");
                ASSERT_ARGV0(pid, "env --version\0", "/usr/bin/env");
                relink(pid, "exe", real);
        }
        write_bytes(pid, "environ", cmd,
                    (size_t) snprintf(cmd, sizeof(cmd), "PATH=%s/bin%c", dir, 0));
        /* With a config, only names its patterns could match are looked
         * up: the link's name must fit a name or a path's last part. */
        write_bytes(pid, "cmdline", "./link", 7);
        {
                static const char *const files[] = { "p/a.conf", "p/b.conf" };
                static const char *const unit[] = { "[Match]\nUnit=a.service\n" };
                static const char *const other_name[] = { "[Match]\nExecutable=redis-*\n" };
                static const char *const by_path[] = { "[Match]\nUnit=a.service\n",
                                                       "[Match]\nExecutable=/opt/*/l?nk\n" };
                _cleanup_(config_freep) struct zsw_config *c1 = load_policies(1, files, unit);
                _cleanup_(config_freep) struct zsw_config *c2 = load_policies(1, files, other_name);
                _cleanup_(config_freep) struct zsw_config *c3 = load_policies(2, files, by_path);

                ASSERT_OK(proc_exe_read(pid, c1, &e));
                ASSERT_TRUE(e.argv0 == NULL && e.comm == NULL);
                ASSERT_STREQ(e.path, real);
                proc_exe_done(&e);
                ASSERT_OK(proc_exe_read(pid, c2, &e));
                ASSERT_TRUE(e.argv0 == NULL);
                ASSERT_STREQ(e.comm, "renamed");
                proc_exe_done(&e);
                ASSERT_OK(proc_exe_read(pid, c3, &e));
                ASSERT_STREQ(e.argv0, link);
                proc_exe_done(&e);
                write_bytes(pid, "cmdline", "link", 5); /* through PATH */
                ASSERT_OK(proc_exe_read(pid, c3, &e));
                ASSERT_STREQ(e.argv0, link);
                proc_exe_done(&e);
                ASSERT_OK(proc_exe_read(pid, c2, &e));
                ASSERT_TRUE(e.argv0 == NULL);
                proc_exe_done(&e);
        }

        /* Replaced by an upgrade: the path it ran from still counts, and
         * so does a link that leads there now. */
        snprintf(p, sizeof(p), "%s (deleted)", real);
        relink(pid, "exe", p);
        snprintf(cmd, sizeof(cmd), "%s", link);
        write_bytes(pid, "cmdline", cmd, strlen(cmd) + 1);
        ASSERT_OK(proc_exe_read(pid, NULL, &e));
        ASSERT_STREQ(e.path, real);
        ASSERT_TRUE(e.deleted);
        ASSERT_STREQ(e.argv0, link);
        proc_exe_done(&e);
        snprintf(cmd, sizeof(cmd), "%s", other);
        {
                _cleanup_free_ char *a = argv0_of(pid, cmd, strlen(cmd) + 1);
                ASSERT_STREQ(a, "(none)");
        }
        remove_fixture(dir);
}

/* ---- dumping ------------------------------------------------------------------ */

static char *dump_to_string(int (*fn)(const void *, FILE *), const void *obj) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        ASSERT_TRUE(f);
        ASSERT_OK(fn(obj, f));
        fclose(f);
        return buf;
}

TEST(dump_parses_back_to_the_same) {
        static const char global[] =
                "[Store]\nCompressor=zstd\nCompressionLevel=11\n[Pool]\nLimit=12.5%\n"
                "[Writeback]\nEnabled=yes\nSwapfile=\"/var/my swap\"\nSwapfileSize=3G\n"
                "[Pressure]\nThreshold=full 33.33%/3s\n";
        static const char policy[] =
                "[Match]\nUnit=a.service \"b*.scope\"\nExecutable=\"/opt/my app/x\" y\n"
                "[Policy]\nMemoryBudget=1536M\nMinColdAge=90s\nMaxReclaimRate=1000/s\n"
                "RefaultLimit=50/s\nPoolLimit=7.5%\n";
        _cleanup_(config_freep) struct zsw_config *c = NULL, *c2 = NULL;
        _cleanup_free_ char *g1 = NULL, *p1 = NULL, *g2 = NULL, *p2 = NULL, *all = NULL;

        ASSERT_OK(load(global, policy, &c));
        g1 = dump_to_string((int (*)(const void *, FILE *)) config_dump_global, c);
        p1 = dump_to_string((int (*)(const void *, FILE *)) policy_dump, &c->policies[0]);
        ASSERT_OK(load(g1, p1, &c2));
        g2 = dump_to_string((int (*)(const void *, FILE *)) config_dump_global, c2);
        p2 = dump_to_string((int (*)(const void *, FILE *)) policy_dump, &c2->policies[0]);
        ASSERT_STREQ(g1, g2);
        ASSERT_STREQ(p1, p2);
        ASSERT_TRUE(strstr(g1, "Limit=12.5%\n"));
        ASSERT_TRUE(strstr(g1, "Swapfile=\"/var/my swap\"\n"));
        ASSERT_TRUE(strstr(g1, "Threshold=full 999900us/3s\n"));
        ASSERT_TRUE(strstr(p1, "Unit=a.service b*.scope\n"));
        ASSERT_TRUE(strstr(p1, "MemoryBudget=1536M\n"));
        ASSERT_TRUE(strstr(p1, "MinColdAge=90s\n"));
        ASSERT_TRUE(strstr(p1, "MaxReclaimRate=1000/s\n"));
        ASSERT_TRUE(strstr(p1, "RefaultLimit=50/s\n"));
        ASSERT_TRUE(strstr(p1, "CompressionLevel=11\n"));
        all = dump_to_string((int (*)(const void *, FILE *)) config_dump, c);
        ASSERT_TRUE(strstr(all, "# Policy test (" POLICY_PATH ")\n[Match]\n"));
}

/* Compressors and levels chosen by default or by hand stay what they are
 * through a dump and back; so does an unset global compressor (dumped as
 * a comment), which a policy without a budget read later still sees. */
TEST(compressors_dump_back) {
        static const struct {
                const char *global, *policy;
                enum zsw_compressor comp;
                int level;
                enum zsw_compressor fresh; /* of another policy without a budget */
        } cases[] = {
                { "[Store]\nCompressionLevel=1\n", MATCH "[Policy]\nMinColdAge=1m\n",
                  ZSW_COMPRESSOR_LZ4, 1, ZSW_COMPRESSOR_LZ4 },
                { NULL, MATCH "[Policy]\nCompressionLevel=1\n", ZSW_COMPRESSOR_LZ4, 1,
                  ZSW_COMPRESSOR_ZSTD },
                { NULL, MATCH "[Policy]\nMinColdAge=1m\n", ZSW_COMPRESSOR_ZSTD,
                  ZSW_ZSTD_LEVEL_DEFAULT, ZSW_COMPRESSOR_ZSTD },
                { NULL, MATCH "[Policy]\nMemoryBudget=1G\n", ZSW_COMPRESSOR_LZ4, 1,
                  ZSW_COMPRESSOR_ZSTD },
                { "[Store]\nCompressor=lz4\n", MATCH "[Policy]\nMinColdAge=1m\n",
                  ZSW_COMPRESSOR_LZ4, 1, ZSW_COMPRESSOR_LZ4 },
        };

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                _cleanup_(config_freep) struct zsw_config *c = NULL, *c2 = NULL, *c3 = NULL;
                _cleanup_free_ char *g1 = NULL, *p1 = NULL, *g2 = NULL, *p2 = NULL;

                ASSERT_OK(load(cases[i].global, cases[i].policy, &c));
                ASSERT_EQ(c->policies[0].compressor, cases[i].comp);
                ASSERT_EQ(c->policies[0].compression_level, cases[i].level);
                g1 = dump_to_string((int (*)(const void *, FILE *)) config_dump_global, c);
                p1 = dump_to_string((int (*)(const void *, FILE *)) policy_dump, &c->policies[0]);
                ASSERT_OK(load(g1, p1, &c2));
                ASSERT_EQ(c2->policies[0].compressor, cases[i].comp);
                ASSERT_EQ(c2->policies[0].compression_level, cases[i].level);
                g2 = dump_to_string((int (*)(const void *, FILE *)) config_dump_global, c2);
                p2 = dump_to_string((int (*)(const void *, FILE *)) policy_dump, &c2->policies[0]);
                ASSERT_STREQ(g1, g2);
                ASSERT_STREQ(p1, p2);
                ASSERT_OK(load(g1, MATCH "[Policy]\nMinColdAge=1m\n", &c3));
                ASSERT_EQ(c3->policies[0].compressor, cases[i].fresh);
        }
}

TEST(limit_resolve) {
        struct zsw_limit none = { ZSW_LIMIT_NONE, 0 }, abs = { ZSW_LIMIT_ABSOLUTE, 4096 },
                         rel = { ZSW_LIMIT_RELATIVE, 2500 };

        ASSERT_EQ_U(limit_resolve(&none, 100), UINT64_MAX);
        ASSERT_EQ_U(limit_resolve(&abs, 100), 4096);
        ASSERT_EQ_U(limit_resolve(&rel, 1000), 250);
        ASSERT_EQ_U(limit_resolve(&rel, UINT64_MAX), UINT64_MAX / 4);
        ASSERT_STREQ(zsw_compressor_to_string(ZSW_COMPRESSOR_ZSTD), "zstd");
        ASSERT_TRUE(zsw_compressor_to_string(ZSW_COMPRESSOR_INHERIT) == NULL);
}

/* The sample policies shipped in docs/examples/ load, and match what they
 * say they match. meson gives the source tree in ZSWAPD_SOURCE_ROOT; run
 * by hand, from the source tree. */
TEST(examples_load) {
        const char *root = getenv("ZSWAPD_SOURCE_ROOT") ?: ".";
        char dir[4096];
        _cleanup_close_ int fd = -EBADF;
        _cleanup_(config_freep) struct zsw_config *c = NULL;
        struct zsw_config_source src[2];
        static const char *const names[] = { "browser.conf", "build-service.conf" };
        char *texts[2] = {};

        snprintf(dir, sizeof(dir), "%s/docs/examples", root);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                TEST_FAIL("cannot open %s: %s", dir, strerror(errno));
        for (size_t i = 0; i < 2; i++) {
                int f = openat(fd, names[i], O_RDONLY | O_CLOEXEC);
                ssize_t n;

                ASSERT_GE(f, 0);
                texts[i] = calloc(1, 8192);
                n = read(f, texts[i], 8191);
                ASSERT_GT(n, 0);
                close(f);
                src[i] = (struct zsw_config_source) { names[i], texts[i], (size_t) n };
        }
        n_messages = 0;
        if (config_load_sources(NULL, src, 2, &test_log, &c) < 0) {
                dump_messages();
                TEST_FAIL("examples do not load");
        }
        ASSERT_STREQ(match_name(c,
                                "/user.slice/user-1000.slice/user@1000.service/app.slice/"
                                "app-gnome-firefox-77.scope",
                                "/usr/lib/firefox/firefox"),
                     "browser");
        ASSERT_STREQ(
                match_name(c, "/system.slice/build-agent.service", "/usr/lib/jvm/java-17/bin/java"),
                "build-service");
        ASSERT_STREQ(match_name(c, "/system.slice/build-agent.service", "/usr/bin/cc1"), "(none)");
        free(texts[0]);
        free(texts[1]);
}
