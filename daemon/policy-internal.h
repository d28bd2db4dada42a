/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The policy manager's state, shared by policy.c (discovery and control)
 * and policy-dump.c (listings). Nothing else includes this.
 */
#pragma once

#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "policy-step.h"
#include "policy.h"

struct policy_target {
        pid_t pid;
        uint64_t refaults_prev; /* faults on pages the engine had taken */
        uint64_t evicted_prev;

        /* Why discovery attached it, for `zswapctl targets`: the names of
         * its executable then, and the pattern of each [Match] key of its
         * policy that matched (copies: a reload frees the config's). */
        struct zsw_proc_exe exe;
        char *match_unit, *match_cgroup_path, *match_executable;
        enum zsw_exe_form match_form;
};

/* The processes of one policy in one cgroup: the unit of control. */
struct policy_group {
        struct policy_manager *manager;
        const struct zsw_policy *policy; /* into the manager's config */
        char *policy_name;
        char *cgroup; /* as policies match it: v2, or name=systemd */

        int psi_dir_fd;       /* the v2 group, or /proc/pressure */
        const char *psi_name; /* "memory.pressure" or "memory" */
        char *psi_path;       /* for messages */
        int trigger_fd;
        int memory_fd; /* where memory use is read, or -EBADF */

        struct policy_target *pids;
        size_t n_pids;

        /* The control loop. */
        uint64_t time_prev, psi_total_prev;
        struct policy_step step; /* step, pauses, rate credit */
        uint64_t evicted_recent; /* pages, decaying: halves each period */
        bool trigger_fired;      /* since the last period */

        /* What the last period saw and did, for the listings. */
        const char *decision;
        unsigned pressure_pm; /* stall over the last period, 1/10000 */
        unsigned avg10;       /* 1/10000 */
        uint64_t usage_bytes, budget_bytes;
        uint64_t refaults_last, refault_limit_last;
        uint64_t reclaimed_last, reclaimed_total; /* bytes */
        uint64_t rate_cap_last;                   /* the credit when the last reclaim started */
        uint64_t reclaim_want;                    /* what the last reclaim asked for */
        struct reclaim_request *reclaiming;       /* on the reclaim worker, or NULL */
        uint64_t periods, backoffs, trigger_events, budget_base;

        /* The budget checks between periods (policy.c). */
        size_t reclaim_next; /* the target group_reclaim() starts with */
        bool throttled;      /* over budget: first touches throttled (zsw_engine_set_throttle()) */
        uint64_t throttle_checks;  /* budget checks that found it over and throttled it */
        bool holding;              /* first touches held at the budget (zsw_engine_set_hold()) */
        bool reclaim_stalled;      /* the last reclaim took nothing */
        uint64_t registered_usage; /* usage when the targets' mappings were last registered */
};

struct policy_manager {
        struct zsw_engine *engine;
        struct reclaimer *reclaimer; /* NULL: reclaims run on the caller */
        struct zsw_config *config;
        struct zsw_cgroup_layout layout;

        struct policy_group **groups;
        size_t n_groups;

        pid_t *ignored; /* refused or attached by hand: not tried again */
        size_t n_ignored;

        /* Targets a policy had attached before a re-exec, taken over by
         * that policy when discovery meets them again. */
        struct policy_adopted {
                pid_t pid;
                char *policy;
        } * adopted;
        size_t n_adopted;

        int epoll_fd; /* the timers */
        /* The loop's epoll, where the PSI triggers are watched
         * (policy_manager_set_loop()); -EBADF until it is known. */
        int loop_fd;
        int timer_fd;
        int global_trigger_fd;
        int budget_timer_fd; /* armed while a group has a MemoryBudget */
        bool budget_armed;
        bool global_fired;
        uint64_t global_events;
        unsigned ticks;
};

/* What the group's policy allows its control loop. */
static inline struct policy_step_limits policy_group_limits(const struct policy_group *g) {
        return (struct policy_step_limits) {
                .max_reclaim_rate = g->policy->max_reclaim_rate,
                .period_usec = POLICY_PERIOD_USEC,
                .page_size = (uint64_t) ZSW_PAGE_SIZE,
                .budget = g->policy->memory_budget.kind != ZSW_LIMIT_NONE,
        };
}

static inline char *strjoin2(const char *a, const char *b) {
        char *s = malloc(strlen(a) + strlen(b) + 1);

        if (s)
                strcat(strcpy(s, a), b);
        return s;
}
