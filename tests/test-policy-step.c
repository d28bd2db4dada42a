/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control loop's arithmetic over sequences of periods, with the
 * periods' measurements made up: the step never exceeds MaxReclaimRate='s
 * share of a period nor the group's use, it grows only after reclaims that
 * took all they asked for, a backoff halves it at once and pauses 1, 2, 4
 * ... 16 periods, and the rate credit bounds what every reclaim asks for.
 */
#include "config.h"
#include "policy-step.h"
#include "test.h"
#include "util.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define PERIOD ZSW_USEC_PER_SEC
#define PAGE UINT64_C(4096)

static const struct policy_step_limits rate_32m = {
        .max_reclaim_rate = 32 * MIB,
        .period_usec = PERIOD,
        .page_size = PAGE,
};

static const struct policy_step_limits no_rate = {
        .max_reclaim_rate = UINT64_MAX,
        .period_usec = PERIOD,
        .page_size = PAGE,
};

/* A simulated group: the clock, its use, what its reclaims find. */
struct sim {
        struct policy_step s;
        const struct policy_step_limits *l;
        uint64_t now, usage;
        const char *decision;
};

static void sim_init(struct sim *x, const struct policy_step_limits *l, uint64_t usage) {
        *x = (struct sim) { .l = l, .now = 1000 * PERIOD, .usage = usage };
        policy_step_init(&x->s);
}

/* One period, calm unless BACKOFF; a reclaim it decides finds AVAILABLE
 * bytes at most (the group's use stays: its process refills as fast).
 * Returns what it asked for. */
static uint64_t sim_period(struct sim *x, const char *backoff, uint64_t available) {
        struct policy_period p = {
                .now_usec = x->now,
                .usage_bytes = x->usage,
                .backoff = backoff,
        };
        uint64_t want;

        x->now += PERIOD;
        want = policy_step_period(&x->s, x->l, &p, &x->decision);
        /* The invariant the issue was about: at every period. */
        ASSERT_LE(x->s.step_bytes, policy_step_max(x->l, x->usage));
        if (want > 0) {
                uint64_t got = MIN(want, available) / PAGE * PAGE;

                policy_step_reclaimed(&x->s, x->l, want, got);
        }
        return want;
}

TEST(step_is_capped_by_the_rate_and_does_not_grow_on_nothing) {
        struct sim x;
        uint64_t want;

        sim_init(&x, &rate_32m, 1 * GIB);
        ASSERT_EQ_U(policy_step_max(&rate_32m, x.usage), 32 * MIB);

        /* A minute with nothing cold to take: the step stays where it
         * started (1/64 of the use), the asks stay within the rate. */
        for (int i = 0; i < 60; i++) {
                want = sim_period(&x, NULL, 0);
                ASSERT_STREQ(x.decision, "reclaiming");
                ASSERT_EQ_U(want, 16 * MIB);
                ASSERT_EQ_U(x.s.step_bytes, 16 * MIB);
        }

        /* Pages turn cold: each reclaim takes all it asked for, the step
         * grows by a quarter, up to the rate's share and no further. */
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 16 * MIB);
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 20 * MIB);
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 25 * MIB);
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 32 * MIB - 768 * KIB);
        for (int i = 0; i < 100; i++) {
                want = sim_period(&x, NULL, UINT64_MAX);
                ASSERT_EQ_U(x.s.step_bytes, 32 * MIB);
                ASSERT_LE(want, 32 * MIB);
        }

        /* A backoff halves it at once: the next reclaim asks for half. */
        ASSERT_EQ_U(sim_period(&x, "pressure", UINT64_MAX), 0);
        ASSERT_STREQ(x.decision, "pressure");
        ASSERT_EQ_U(x.s.step_bytes, 16 * MIB);
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 0);
        ASSERT_STREQ(x.decision, "paused");
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 16 * MIB);
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 20 * MIB);

        /* Backoffs in a row: each halves; never below the minimum. */
        for (int i = 0; i < 10; i++)
                (void) sim_period(&x, "refaults", UINT64_MAX);
        ASSERT_EQ_U(x.s.step_bytes, POLICY_STEP_MIN_BYTES);
}

TEST(step_without_a_rate_is_capped_by_the_use) {
        struct sim x;
        uint64_t want, prev = 0;

        sim_init(&x, &no_rate, 1 * GIB);
        ASSERT_EQ_U(policy_step_max(&no_rate, x.usage), 1 * GIB);
        /* Nothing to take: no growth at all, however long. */
        for (int i = 0; i < 300; i++)
                ASSERT_EQ_U(sim_period(&x, NULL, 0), 16 * MIB);
        /* Everything it asks for is there: it grows up to the use, no
         * further. */
        for (int i = 0; i < 40; i++) {
                want = sim_period(&x, NULL, UINT64_MAX);
                ASSERT_GE(want, prev);
                ASSERT_LE(want, 1 * GIB);
                prev = want;
        }
        ASSERT_EQ_U(x.s.step_bytes, 1 * GIB);
        /* The group shrinks: the step follows at once, and a backoff
         * halves what is left. */
        x.usage = 100 * MIB;
        ASSERT_EQ_U(sim_period(&x, NULL, 0), 100 * MIB);
        ASSERT_EQ_U(sim_period(&x, "pressure", 0), 0);
        ASSERT_EQ_U(x.s.step_bytes, 50 * MIB);
}

TEST(backoff_pauses_double_then_relax) {
        static const unsigned pauses[] = { 1, 2, 4, 8, 16, 16, 16 };
        struct sim x;

        sim_init(&x, &rate_32m, 1 * GIB);
        for (size_t i = 0; i < ARRAY_SIZE(pauses); i++) {
                ASSERT_EQ_U(sim_period(&x, "pressure", 0), 0);
                ASSERT_EQ(x.s.pause_periods, pauses[i]);
        }
        /* Calm: the pause is sat out period by period... */
        for (unsigned i = 0; i < 16; i++) {
                ASSERT_EQ_U(sim_period(&x, NULL, 0), 0);
                ASSERT_STREQ(x.decision, "paused");
        }
        /* ...then every calm period that reclaims halves the next pause. */
        ASSERT_GT(sim_period(&x, NULL, 0), 0);
        ASSERT_EQ(x.s.backoff_pause, 8);
        ASSERT_GT(sim_period(&x, NULL, 0), 0);
        ASSERT_GT(sim_period(&x, NULL, 0), 0);
        ASSERT_GT(sim_period(&x, NULL, 0), 0);
        ASSERT_EQ(x.s.backoff_pause, 1);
        ASSERT_EQ_U(sim_period(&x, "pressure", 0), 0);
        ASSERT_EQ(x.s.pause_periods, 1);
}

TEST(rate_credit_bounds_every_reclaim) {
        const struct policy_step_limits slow = {
                .max_reclaim_rate = 256 * KIB,
                .period_usec = PERIOD,
                .page_size = PAGE,
        };
        struct sim x;
        uint64_t asked = 0, start;

        /* Below the minimum step: the rate's share is the step. */
        sim_init(&x, &slow, 1 * GIB);
        ASSERT_EQ_U(policy_step_max(&slow, x.usage), 256 * KIB);
        start = x.now;
        for (int i = 0; i < 50; i++) {
                uint64_t want = sim_period(&x, NULL, UINT64_MAX);

                ASSERT_LE(want, 256 * KIB);
                asked += want;
        }
        /* At most the rate over the time, plus one full bucket. */
        ASSERT_LE(asked, (x.now - start) / PERIOD * 256 * KIB + 256 * KIB);
        ASSERT_EQ_U(x.s.step_bytes, 256 * KIB);
        /* A backoff does not go below the minimum step (256 KiB), when
         * the rate allows that much. */
        (void) sim_period(&x, "pressure", 0);
        ASSERT_EQ_U(x.s.step_bytes, POLICY_STEP_MIN_BYTES);

        /* Half a period after a full reclaim: half the rate is there. */
        policy_step_init(&x.s);
        ASSERT_EQ_U(policy_step_credit(&x.s, &slow, 5000 * PERIOD), 256 * KIB);
        policy_step_reclaimed(&x.s, &slow, 256 * KIB, 256 * KIB);
        ASSERT_EQ_U(policy_step_credit(&x.s, &slow, 5000 * PERIOD + PERIOD / 2), 128 * KIB);
        /* A long calm spell keeps one second's worth, not more. */
        ASSERT_EQ_U(policy_step_credit(&x.s, &slow, 9000 * PERIOD), 256 * KIB);
        ASSERT_EQ_U(policy_step_credit(&x.s, &no_rate, 9000 * PERIOD), UINT64_MAX);

        /* Less than a page of credit: nothing is asked for. */
        policy_step_reclaimed(&x.s, &slow, 256 * KIB, 256 * KIB);
        x.now = 9000 * PERIOD + 1000;
        ASSERT_EQ_U(sim_period(&x, NULL, UINT64_MAX), 0);
        ASSERT_STREQ(x.decision, "rate limited");
}

TEST(budget_marks_and_reclaims_in_flight) {
        const struct policy_step_limits budget = {
                .max_reclaim_rate = 32 * MIB,
                .period_usec = PERIOD,
                .page_size = PAGE,
                .budget = true,
        };
        struct policy_step s;
        const char *decision;
        struct policy_period p = {
                .now_usec = 1000 * PERIOD,
                .budget_bytes = 160 * MIB,
                .usage_bytes = 150 * MIB, /* the low mark exactly */
        };

        ASSERT_EQ_U(policy_budget_low_mark(160 * MIB), 150 * MIB);
        ASSERT_EQ_U(policy_budget_want(150 * MIB, 160 * MIB), 10 * MIB);
        ASSERT_EQ_U(policy_budget_want(130 * MIB, 160 * MIB), 0);
        /* A tiny budget keeps a minimum step's margin, not past half. */
        ASSERT_EQ_U(policy_budget_want(1 * MIB, 1 * MIB), POLICY_STEP_MIN_BYTES);
        ASSERT_EQ_U(policy_budget_want(64 * KIB, 64 * KIB), 32 * KIB);

        policy_step_init(&s);
        ASSERT_EQ_U(policy_step_period(&s, &budget, &p, &decision), 0);
        ASSERT_STREQ(decision, "at budget");
        /* Far over: down to the target mark, within the rate's credit. */
        p.usage_bytes = 400 * MIB;
        p.now_usec += PERIOD;
        ASSERT_EQ_U(policy_step_period(&s, &budget, &p, &decision), 32 * MIB);
        ASSERT_STREQ(decision, "reclaiming");
        ASSERT_EQ_U(s.step_bytes, 0); /* budgets do not probe */
        /* The last reclaim still running: nothing more meanwhile. */
        p.reclaiming = true;
        p.now_usec += PERIOD;
        ASSERT_EQ_U(policy_step_period(&s, &budget, &p, &decision), 0);
        ASSERT_STREQ(decision, "reclaiming");
}
