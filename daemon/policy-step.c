/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control loop's arithmetic (see policy-step.h): pure functions of
 * their arguments, called by policy.c once it has read a period's
 * measurements.
 */
#include "config.h"
#include "policy-step.h"
#include "util.h"

#define BUDGET_LOW_SHARE 16
#define BUDGET_TARGET_SHARE 8

void policy_step_init(struct policy_step *s) {
        *s = (struct policy_step) { .backoff_pause = 1 };
}

/* MaxReclaimRate='s share of a period; UINT64_MAX without a rate. */
static uint64_t rate_per_period(const struct policy_step_limits *l) {
        if (l->max_reclaim_rate == UINT64_MAX)
                return UINT64_MAX;
        return (uint64_t) ((unsigned __int128) l->max_reclaim_rate * l->period_usec /
                           ZSW_USEC_PER_SEC);
}

uint64_t policy_step_max(const struct policy_step_limits *l, uint64_t usage) {
        return MAX(MIN(rate_per_period(l), usage), l->page_size);
}

void policy_step_backoff(struct policy_step *s, const struct policy_step_limits *l) {
        uint64_t floor =
                MIN((uint64_t) POLICY_STEP_MIN_BYTES, MAX(rate_per_period(l), l->page_size));

        s->step_bytes = MAX(s->step_bytes / 2, floor);
        s->grow = false;
        s->pause_periods = s->backoff_pause;
        s->backoff_pause = MIN(s->backoff_pause * 2, POLICY_PAUSE_MAX_PERIODS);
}

uint64_t policy_step_credit(struct policy_step *s, const struct policy_step_limits *l,
                            uint64_t now_usec) {
        uint64_t rate = l->max_reclaim_rate, add;

        if (rate == UINT64_MAX)
                return UINT64_MAX;
        add = (uint64_t) ((unsigned __int128) rate * (now_usec - MIN(s->credit_usec, now_usec)) /
                          ZSW_USEC_PER_SEC);
        s->credit_usec = now_usec;
        s->rate_credit = MIN(s->rate_credit + MIN(add, rate), MAX(rate, l->page_size));
        return s->rate_credit;
}

void policy_step_reclaimed(struct policy_step *s, const struct policy_step_limits *l, uint64_t want,
                           uint64_t got) {
        s->rate_credit -= MIN(got, s->rate_credit);
        /* Whole pages are taken: less than a page short is all of it. */
        s->grow = got > 0 && got + l->page_size > want;
}

/* The probing step for this period, within policy_step_max(). */
static uint64_t probe_step(struct policy_step *s, const struct policy_step_limits *l,
                           uint64_t usage) {
        if (s->step_bytes == 0)
                s->step_bytes = MAX(usage / 64, (uint64_t) POLICY_STEP_MIN_BYTES);
        else if (s->grow)
                s->step_bytes += s->step_bytes / 4;
        s->grow = false;
        s->step_bytes = MIN(s->step_bytes, policy_step_max(l, usage));
        return s->step_bytes;
}

uint64_t policy_step_period(struct policy_step *s, const struct policy_step_limits *l,
                            const struct policy_period *p, const char **ret_decision) {
        uint64_t credit, want;

        if (p->backoff) {
                policy_step_backoff(s, l);
                *ret_decision = p->backoff;
                return 0;
        }
        if (s->pause_periods > 0) {
                s->pause_periods--;
                *ret_decision = "paused";
                return 0;
        }
        s->backoff_pause = MAX(s->backoff_pause / 2, 1u);
        credit = policy_step_credit(s, l, p->now_usec);
        if (p->reclaiming) {
                /* One at a time, so that the rate cap holds. */
                *ret_decision = "reclaiming";
                return 0;
        }
        if (l->budget) {
                if (p->usage_bytes <= policy_budget_low_mark(p->budget_bytes)) {
                        *ret_decision = "at budget";
                        return 0;
                }
                want = MIN(policy_budget_want(p->usage_bytes, p->budget_bytes), credit);
        } else
                want = MIN(probe_step(s, l, p->usage_bytes), credit);
        if (credit < l->page_size) {
                *ret_decision = "rate limited";
                return 0;
        }
        *ret_decision = "reclaiming";
        return MAX(want, l->page_size);
}

uint64_t policy_budget_low_mark(uint64_t budget) {
        return budget - budget / BUDGET_LOW_SHARE;
}

uint64_t policy_budget_want(uint64_t usage, uint64_t budget) {
        uint64_t margin = MAX(budget / BUDGET_TARGET_SHARE,
                              MIN((uint64_t) POLICY_STEP_MIN_BYTES, budget / 2));
        uint64_t target = budget - margin;

        return usage > target ? usage - target : 0;
}
