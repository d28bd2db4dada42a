/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target for the config parser. The first byte picks what the
 * rest is: ('0') a zswapd.conf, ('1') a policy file, ('2') both, split at
 * the first NUL, ('3') the text of /proc/PID/cgroup.
 *
 * Beyond "does not crash", every config that loads must survive a round
 * trip: its dump parses again, to a config that dumps the same.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Formats every message, so that a bad format or argument shows up. */
static void fuzz_log(void *userdata, int priority, const char *file, int line, const char *func,
                     const char *format, va_list ap) {
        char buf[1024];

        vsnprintf(buf, sizeof(buf), format, ap);
}

static const struct zsw_log log_all = { .fn = fuzz_log, .max_priority = LOG_DEBUG };

static char *dump(const struct zsw_config *c, size_t policy) {
        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);

        if (!f)
                abort();
        if ((policy == SIZE_MAX ? config_dump_global(c, f) : policy_dump(&c->policies[policy], f)) <
            0)
                abort();
        fclose(f);
        return buf;
}

static void round_trip(const struct zsw_config *c) {
        struct zsw_config_source g = { "dump.conf", NULL, 0 }, p = { "dump/p.conf", NULL, 0 };
        struct zsw_config *c2 = NULL;
        char *g1 = dump(c, SIZE_MAX), *p1 = c->n_policies ? dump(c, 0) : NULL;

        g.text = g1;
        g.size = strlen(g1);
        if (p1) {
                p.text = p1;
                p.size = strlen(p1);
        }
        if (config_load_sources(&g, p1 ? &p : NULL, p1 ? 1 : 0, &log_all, &c2) < 0) {
                fprintf(stderr, "dump does not parse back:\n%s\n%s\n", g1, p1 ?: "");
                abort();
        }
        char *g2 = dump(c2, SIZE_MAX), *p2 = p1 ? dump(c2, 0) : NULL;
        if (strcmp(g1, g2) != 0 || (p1 && strcmp(p1, p2) != 0)) {
                fprintf(stderr, "dump changed:\n%s\n%s\n--- vs ---\n%s\n%s\n", g1, p1 ?: "", g2,
                        p2 ?: "");
                abort();
        }
        free(g1);
        free(g2);
        free(p1);
        free(p2);
        config_free(c2);
}

static void match_some(const struct zsw_config *c) {
        static const char *const groups[] = {
                "/",
                "/system.slice/nginx.service",
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox-1.scope",
                "//a//b.service/",
                NULL,
        };
        static const struct zsw_proc_exe exes[] = {
                { .path = (char *) "/usr/bin/firefox", .comm = (char *) "firefox" },
                { .path = (char *) "/usr/bin/redis-check-rdb",
                  .argv0 = (char *) "/usr/bin/redis-server",
                  .comm = (char *) "redis-server" },
                { .comm = (char *) "java" },
                { .path = (char *) "", .argv0 = (char *) "/", .comm = (char *) "" },
                {},
        };
        struct zsw_match m;

        for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
                for (size_t j = 0; j < sizeof(exes) / sizeof(exes[0]); j++)
                        if (config_match(c, groups[i], &exes[j], &m) && m.executable &&
                            !proc_exe_name(&exes[j], m.executable_form))
                                abort(); /* a match names what it matched */
                config_match(c, groups[i], NULL, NULL);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct zsw_config_source g = { "fuzz/zswapd.conf", NULL, 0 };
        struct zsw_config_source p = { "fuzz/policy.d/fuzz.conf", NULL, 0 };
        const char *text = (const char *) data + 1, *nul;
        struct zsw_config *c = NULL;
        char *path = NULL;
        size_t n = size - 1;
        int r = -1;

        if (size < 1 || size > 65536)
                return 0;
        switch (data[0] % 4) {
        case 0:
                g.text = text, g.size = n;
                r = config_load_sources(&g, NULL, 0, &log_all, &c);
                break;
        case 1:
                p.text = text, p.size = n;
                r = config_load_sources(NULL, &p, 1, &log_all, &c);
                break;
        case 2:
                nul = memchr(text, '\0', n);
                g.text = text, g.size = nul ? (size_t) (nul - text) : n;
                p.text = nul ? nul + 1 : "", p.size = nul ? n - g.size - 1 : 0;
                r = config_load_sources(&g, &p, 1, &log_all, &c);
                break;
        case 3:
                if (proc_cgroup_parse(text, n, &path) >= 0 && path[0] != '/')
                        abort();
                free(path);
                return 0;
        }
        if (r >= 0) {
                round_trip(c);
                match_some(c);
                config_free(c);
        } else if (c)
                abort(); /* a failed load hands nothing out */
        return 0;
}
