/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The control loop's arithmetic, apart from its I/O: what a group reclaims
 * in a period from what the period measured, how it backs off, and
 * MaxReclaimRate= as a token bucket. policy.c reads pressure, refaults and
 * memory use, calls these, and runs the reclaims; nothing here reads a
 * file or a clock, so that a test can play a sequence of periods.
 *
 * The probing step (groups without a MemoryBudget=) starts at 1/64 of the
 * group's use and grows by a quarter after each reclaim that took all it
 * asked for; it never exceeds policy_step_max(): MaxReclaimRate='s share
 * of a period, and the group's use (the most a reclaim could take, and the
 * bound without a rate). So a backoff's halving takes effect at once, and
 * a step does not grow while there is nothing to take.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define POLICY_STEP_MIN_BYTES (256u * 1024u)
#define POLICY_PAUSE_MAX_PERIODS 16u

/* What a group's control loop carries from period to period; all zero but
 * backoff_pause (1) at the start: policy_step_init(). */
struct policy_step {
        uint64_t step_bytes;    /* the next probing reclaim; 0 before the first */
        bool grow;              /* the last reclaim took all it asked for */
        unsigned pause_periods; /* left before reclaiming again */
        unsigned backoff_pause; /* the next backoff pauses this long, >= 1 */
        uint64_t rate_credit;   /* bytes MaxReclaimRate= lets it take now */
        uint64_t credit_usec;   /* when rate_credit was last topped up */
};

/* What the policy allows. */
struct policy_step_limits {
        uint64_t max_reclaim_rate; /* bytes per second; UINT64_MAX: no cap */
        uint64_t period_usec;      /* of the control loop */
        uint64_t page_size;
        bool budget; /* MemoryBudget= set: reclaim toward it */
};

/* What one period measured. */
struct policy_period {
        uint64_t now_usec;
        uint64_t usage_bytes;  /* the group's memory use */
        uint64_t budget_bytes; /* with a budget */
        const char *backoff;   /* why to back off (stall, refaults), or NULL */
        bool reclaiming;       /* the group's last reclaim is still running */
};

void policy_step_init(struct policy_step *s);

/* The largest step: MaxReclaimRate='s share of a period and the group's
 * use USAGE, whichever is less; at least a page. */
uint64_t policy_step_max(const struct policy_step_limits *l, uint64_t usage);

/* Backs off: halves the step (not below POLICY_STEP_MIN_BYTES unless the
 * rate's share of a period is less), pauses for backoff_pause periods and
 * doubles that for the next backoff, up to POLICY_PAUSE_MAX_PERIODS. */
void policy_step_backoff(struct policy_step *s, const struct policy_step_limits *l);

/* Tops up the rate credit for the time since the last call (at most a
 * second's worth is kept, so a calm spell does not build up a burst) and
 * returns it; UINT64_MAX without a rate. */
uint64_t policy_step_credit(struct policy_step *s, const struct policy_step_limits *l,
                            uint64_t now_usec);

/* A reclaim of the group asked for WANT bytes and took GOT: the credit
 * pays for it, and taking all it asked for lets the next step grow. */
void policy_step_reclaimed(struct policy_step *s, const struct policy_step_limits *l, uint64_t want,
                           uint64_t got);

/*
 * One period of a group that has processes: backs off if P says so, else
 * counts down a pause, else decides a reclaim within the rate credit.
 * Returns the bytes to reclaim now (0: none) and in *ret_decision what it
 * decided ("paused", "at budget", "rate limited", "reclaiming", or P's
 * backoff reason).
 */
uint64_t policy_step_period(struct policy_step *s, const struct policy_step_limits *l,
                            const struct policy_period *p, const char **ret_decision);

/*
 * The marks of a budget, as kswapd's watermarks: reclaim starts once the
 * group is above the low mark (budget - budget/16), while still under its
 * budget, and goes down to the target mark (budget - budget/8), so that a
 * process filling memory meets the throttle (over the budget itself) only
 * when it outruns reclaim.
 */
uint64_t policy_budget_low_mark(uint64_t budget);

/* What a reclaim that starts at USAGE should take: down to the target
 * mark, and at least a step's worth (not past half a tiny budget). */
uint64_t policy_budget_want(uint64_t usage, uint64_t budget);
