/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The control protocol's request parser, on every shape of request. */
#include "control.h"
#include "test.h"

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

        ASSERT_OK(parse("stats", &req));
        ASSERT_EQ(req.verb, CONTROL_STATS);
        ASSERT_EQ(req.pid, 0);
        ASSERT_OK(parse("stats 2147483647 json", &req));
        ASSERT_EQ(req.pid, 2147483647);
}

TEST(parse_refuses_and_leaves_result_untouched) {
        static const char *const bad[] = {
                "", "\n", " ", "json", "frobnicate 1", "attach", "attach 0", "attach 01",
                "attach -1", "attach +1", "attach 1x", "attach 2147483648", "attach 1 2",
                "ATTACH 1", "detach", "reclaim", "reclaim 1", "reclaim x all", "reclaim 1 al",
                "reclaim 1 all 2", "reclaim 1 bytes", "reclaim 1 bytes 0", "reclaim 1 bytes 1K",
                "reclaim 1 bytes 18446744073709551616", "reclaim 1 bytes -1", "stats 1 2",
                "stats 0", "stats json json", "attach\t1", "attach 1\r", "attach 1\n\n",
                "a b c d e f g", "stats json extra",
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
