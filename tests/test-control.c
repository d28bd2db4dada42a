/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The control protocol's request parser, on every shape of request, and
 * the server's handling of idle connections, on real sockets. */
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "json.h"
#include "log.h"
#include "util.h"
#include "test.h"
#include "test-procs.h"

static int parse(const char *s, struct control_request *req) {
        const char *reason = NULL;
        int r = control_parse_request(s, strlen(s), req, &reason);

        if (r < 0)
                ASSERT_TRUE(reason && *reason);
        return r;
}

TEST(parse_valid_requests) {
        struct control_request req;

        ASSERT_OK(parse("attach 1234", &req));
        ASSERT_EQ(req.verb, CONTROL_ATTACH);
        ASSERT_EQ(req.pid, 1234);
        ASSERT_FALSE(req.json);

        ASSERT_OK(parse("detach 7 json\n", &req));
        ASSERT_EQ(req.verb, CONTROL_DETACH);
        ASSERT_EQ(req.pid, 7);
        ASSERT_TRUE(req.json);

        ASSERT_OK(parse("reclaim 99 all", &req));
        ASSERT_EQ(req.verb, CONTROL_RECLAIM);
        ASSERT_EQ_U(req.max_bytes, UINT64_MAX);

        ASSERT_OK(parse("  reclaim  99 bytes 1048576  json ", &req));
        ASSERT_EQ_U(req.max_bytes, 1048576);
        ASSERT_TRUE(req.json);

        ASSERT_OK(parse("reclaim 1 bytes 18446744073709551615", &req));
        ASSERT_EQ_U(req.max_bytes, UINT64_MAX);
        ASSERT_EQ_U(req.min_age_ms, 0);

        ASSERT_OK(parse("reclaim 5 all min-age 30000", &req));
        ASSERT_EQ_U(req.max_bytes, UINT64_MAX);
        ASSERT_EQ_U(req.min_age_ms, 30000);
        ASSERT_OK(parse("reclaim 5 bytes 4096 min-age 1 json", &req));
        ASSERT_EQ_U(req.max_bytes, 4096);
        ASSERT_EQ_U(req.min_age_ms, 1);
        ASSERT_TRUE(req.json);

        ASSERT_OK(parse("stats", &req));
        ASSERT_EQ(req.verb, CONTROL_STATS);
        ASSERT_EQ(req.pid, 0);
        ASSERT_OK(parse("stats 2147483647 json", &req));
        ASSERT_EQ(req.pid, 2147483647);

        ASSERT_OK(parse("reexec\n", &req));
        ASSERT_EQ(req.verb, CONTROL_REEXEC);
        ASSERT_EQ(req.pid, 0);
}

TEST(parse_refuses_and_leaves_result_untouched) {
        static const char *const bad[] = {
                "",
                "\n",
                " ",
                "json",
                "frobnicate 1",
                "attach",
                "attach 0",
                "attach 01",
                "attach -1",
                "attach +1",
                "attach 1x",
                "attach 2147483648",
                "attach 1 2",
                "ATTACH 1",
                "detach",
                "reclaim",
                "reclaim 1",
                "reclaim x all",
                "reclaim 1 al",
                "reclaim 1 all 2",
                "reclaim 1 bytes",
                "reclaim 1 bytes 0",
                "reclaim 1 bytes 1K",
                "reclaim 1 bytes 18446744073709551616",
                "reclaim 1 bytes -1",
                "stats 1 2",
                "stats 0",
                "stats json json",
                "attach\t1",
                "attach 1\r",
                "attach 1\n\n",
                "a b c d e f g h i",
                "stats json extra",
                "reclaim 1 all min-age",
                "reclaim 1 all min-age x",
                "reclaim 1 min-age 5",
                "reclaim 1 all min-age -1",
                "reclaim 1 all min-age 5 min-age 6",
                "reclaim 1 bytes min-age 5",
                "reexec 1",
                "reexec now",
                "REEXEC",
        };
        struct control_request req = { .pid = 4242 };

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
                if (parse(bad[i], &req) != -EINVAL)
                        TEST_FAIL("'%s' was accepted", bad[i]);
        ASSERT_EQ(req.pid, 4242);
}

TEST(parse_binary_and_oversized) {
        struct control_request req;
        const char *reason;
        char big[CONTROL_REQUEST_MAX + 1];

        ASSERT_ERRNO(control_parse_request("stats\0 1", 8, &req, &reason), EINVAL);
        memset(big, ' ', sizeof(big));
        memcpy(big, "stats", 5);
        ASSERT_OK(control_parse_request(big, CONTROL_REQUEST_MAX, &req, &reason));
        ASSERT_ERRNO(control_parse_request(big, sizeof(big), &req, &reason), EMSGSIZE);
}

/* The request the parser understood, written back in the protocol's words. */
static void format_request(const struct control_request *req, char *buf, size_t size) {
        static const char *const verbs[] = {
                [CONTROL_ATTACH] = "attach",
                [CONTROL_DETACH] = "detach",
                [CONTROL_RECLAIM] = "reclaim",
                [CONTROL_STATS] = "stats",
        };
        int n = snprintf(buf, size, "%s", verbs[req->verb]);

        if (req->pid > 0)
                n += snprintf(buf + n, size - n, " %d", req->pid);
        if (req->verb == CONTROL_RECLAIM && req->max_bytes == UINT64_MAX)
                n += snprintf(buf + n, size - n, " all");
        else if (req->verb == CONTROL_RECLAIM)
                n += snprintf(buf + n, size - n, " bytes %" PRIu64, req->max_bytes);
        if (req->json)
                snprintf(buf + n, size - n, " json");
}

/* Random sentences of protocol words and stray bytes: the parser never
 * reads out of bounds (the ASan build checks), answers each with a result
 * or a reason, and what it accepts means the same when written back. */
TEST(parse_random_requests_round_trip) {
        static const char *const words[] = {
                "attach",     "detach",
                "reclaim",    "stats",
                "json",       "all",
                "bytes",      "1",
                "42",         "0",
                "-1",         "2147483647",
                "2147483648", "18446744073709551615",
                "x",          " ",
                "  ",         "\n",
                "\t",         "\xff",
                "",
        };
        uint64_t x = 0x2545f4914f6cdd1dull;
        unsigned accepted = 0;

        for (unsigned i = 0; i < 200000; i++) {
                char text[CONTROL_REQUEST_MAX + 64] = "", again[CONTROL_REQUEST_MAX + 1];
                struct control_request req, req2;
                size_t len = 0;
                unsigned n;

                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                n = x % 7;
                for (unsigned w = 0; w < n; w++) {
                        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                        len += snprintf(text + len, sizeof(text) - len, "%s%s",
                                        words[x % ARRAY_SIZE(words)], (x >> 32) % 4 ? " " : "");
                }
                if (parse(text, &req) < 0)
                        continue;
                accepted++;
                ASSERT_TRUE(req.verb == CONTROL_STATS || req.pid > 0);
                format_request(&req, again, sizeof(again));
                ASSERT_OK(parse(again, &req2));
                ASSERT_EQ(req2.verb, req.verb);
                ASSERT_EQ(req2.pid, req.pid);
                ASSERT_EQ_U(req2.max_bytes, req.max_bytes);
                ASSERT_EQ(req2.json, req.json);
        }
        /* The generator must reach the accepting paths too. */
        ASSERT_GT(accepted, 1000);
}

TEST(json_emitter_nests_and_escapes) {
        _cleanup_free_ char *s = NULL;
        size_t len = 0;
        struct json j;
        FILE *f = open_memstream(&s, &len);

        ASSERT_TRUE(f);
        json_init(&j, f);
        json_object_open(&j, NULL);
        json_u64(&j, "a", UINT64_MAX);
        json_object_open(&j, "o");
        json_object_close(&j);
        json_array_open(&j, "l");
        json_i64(&j, NULL, -3);
        json_object_open(&j, NULL);
        json_string(&j, "s", "q\"b\\n\n\x01");
        json_object_close(&j);
        json_double(&j, NULL, 1.0 / 3);
        json_double(&j, NULL, NAN);
        json_array_close(&j);
        json_array_open(&j, "e");
        json_array_close(&j);
        json_object_close(&j);
        ASSERT_EQ(fclose(f), 0);
        ASSERT_STREQ(
                s,
                "{\"a\":18446744073709551615,\"o\":{},\"l\":[-3,{\"s\":\"q\\\"b\\\\n\\n\\u0001\"},"
                "0.333,null],\"e\":[]}");
}

/* Serves c until fd is readable (a reply, or the end of the connection). */
static void serve_until_readable(struct control *c, int fd) {
        for (int i = 0; i < 600; i++) {
                struct pollfd p[2] = { { .fd = control_get_fd(c), .events = POLLIN },
                                       { .fd = fd, .events = POLLIN } };

                ASSERT_GE(poll(p, 2, 100), 0);
                if (p[1].revents)
                        return;
                if (p[0].revents)
                        ASSERT_OK(control_process(c));
        }
        TEST_FAIL("the server never answered nor closed connection %d", fd);
}

TEST(idle_connections_are_closed) {
        char dir[] = "/tmp/zswapd-test-control.XXXXXX", path[64], buf[256];
        struct control *c = NULL;
        int idle, busy;
        ssize_t n;

        log_setup(LOG_WARNING);
        ASSERT_TRUE(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/ctl.sock", dir);
        ASSERT_OK(control_new(path, NULL, &c));
        ASSERT_ERRNO(control_set_idle_timeout(c, 0), EINVAL);
        ASSERT_OK(control_set_idle_timeout(c, 200 * 1000));

        /* One that never sends is closed, without a reply and without a
         * reset. */
        idle = connect_seqpacket(path);
        serve_until_readable(c, idle);
        ASSERT_EQ(recv(idle, buf, sizeof(buf), 0), 0);
        close(idle);

        /* One that asks is answered, then closed once idle in turn. */
        busy = connect_seqpacket(path);
        ASSERT_EQ(send(busy, "hello", 5, 0), 5);
        serve_until_readable(c, busy);
        n = recv(busy, buf, sizeof(buf) - 1, 0);
        ASSERT_GT(n, 0);
        buf[n] = 0;
        ASSERT_TRUE(strncmp(buf, "error EINVAL\n", 13) == 0);
        serve_until_readable(c, busy);
        ASSERT_EQ(recv(busy, buf, sizeof(buf), 0), 0);
        close(busy);

        c = control_free(c);
        ASSERT_OK(rmdir(dir));
}
