/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The policy manager's listings for the control socket: `zswapctl
 * policies`, `targets` and `status`, as text for a person or as JSON.
 * They show what the control loop saw and decided in its last period.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>

#include "json.h"
#include "policy-internal.h"
#include "psi.h"

#define MIB (1024.0 * 1024.0)

static double pct(unsigned permyriad) {
        return permyriad / 100.0;
}

static unsigned threshold_pm(const struct zsw_pressure *p) {
        return (unsigned) (p->stall_usec * ZSW_PERMYRIAD_MAX / p->window_usec);
}

static void group_json(struct json *j, const struct policy_group *g) {
        struct policy_step_limits l = policy_group_limits(g);
        char file[512];

        snprintf(file, sizeof(file), "%s/%s", g->psi_path ?: "", g->psi_name ?: "");
        json_object_open(j, NULL);
        json_string(j, "cgroup", g->cgroup);
        json_string(j, "pressure_file", file);
        json_u64(j, "targets", g->n_pids);
        json_string(j, "decision", g->decision);
        json_double(j, "stall_percent", pct(g->pressure_pm));
        json_double(j, "avg10_percent", pct(g->avg10));
        json_u64(j, "usage_bytes", g->usage_bytes);
        if (g->policy->memory_budget.kind != ZSW_LIMIT_NONE) {
                json_u64(j, "budget_bytes", g->budget_bytes);
                json_bool(j, "throttled", g->throttled);
                json_u64(j, "throttle_checks", g->throttle_checks);
                json_bool(j, "holding", g->holding);
        }
        json_u64(j, "step_bytes", g->step.step_bytes);
        json_u64(j, "step_max_bytes", policy_step_max(&l, g->usage_bytes));
        json_u64(j, "pause_periods", g->step.pause_periods);
        json_u64(j, "refaults_last", g->refaults_last);
        json_u64(j, "refault_limit_last",
                 g->refault_limit_last == UINT64_MAX ? 0 : g->refault_limit_last);
        json_u64(j, "reclaimed_last_bytes", g->reclaimed_last);
        json_u64(j, "rate_cap_last_bytes", g->rate_cap_last == UINT64_MAX ? 0 : g->rate_cap_last);
        json_u64(j, "reclaimed_bytes", g->reclaimed_total);
        json_u64(j, "periods", g->periods);
        json_u64(j, "backoffs", g->backoffs);
        json_u64(j, "trigger_events", g->trigger_events);
        json_object_close(j);
}

static void policies_json(struct policy_manager *m, FILE *f) {
        struct json j;

        json_init(&j, f);
        json_object_open(&j, NULL);
        json_u64(&j, "system_trigger_events", m->global_events);
        json_array_open(&j, "policies");
        for (size_t i = 0; i < m->config->n_policies; i++) {
                const struct zsw_policy *p = &m->config->policies[i];

                json_object_open(&j, NULL);
                json_string(&j, "name", p->name);
                json_string(&j, "file", p->path ?: "");
                json_string(&j, "enabled", p->enabled ? "yes" : "no");
                json_double(&j, "threshold_percent", pct(threshold_pm(&p->pressure)));
                json_array_open(&j, "groups");
                for (size_t k = 0; k < m->n_groups; k++)
                        if (m->groups[k]->policy == p)
                                group_json(&j, m->groups[k]);
                json_array_close(&j);
                json_object_close(&j);
        }
        json_array_close(&j);
        json_object_close(&j);
        fputc('\n', f);
}

static void policies_text(struct policy_manager *m, FILE *f) {
        if (m->config->n_policies == 0) {
                fputs("no policies (add files to /etc/zswapd/policy.d/, see zswapd.conf(5))\n", f);
                return;
        }
        fprintf(f, "%-16s %-28s %4s %-18s %7s %7s %9s %9s %9s %8s %7s\n", "POLICY", "CGROUP",
                "PIDS", "DECISION", "STALL%", "LIMIT%", "USAGE", "BUDGET", "RECLAIMED", "REFAULTS",
                "BACKOFF");
        for (size_t i = 0; i < m->config->n_policies; i++) {
                const struct zsw_policy *p = &m->config->policies[i];
                bool any = false;

                for (size_t k = 0; k < m->n_groups; k++) {
                        const struct policy_group *g = m->groups[k];
                        char budget[32] = "-";

                        if (g->policy != p)
                                continue;
                        any = true;
                        if (p->memory_budget.kind != ZSW_LIMIT_NONE)
                                snprintf(budget, sizeof(budget), "%.1fM", g->budget_bytes / MIB);
                        fprintf(f,
                                "%-16s %-28s %4zu %-18s %7.2f %7.2f %8.1fM %9s %8.1fM %8" PRIu64
                                " %7" PRIu64 "\n",
                                p->name, g->cgroup, g->n_pids, g->decision, pct(g->pressure_pm),
                                pct(threshold_pm(&p->pressure)), g->usage_bytes / MIB, budget,
                                g->reclaimed_total / MIB, g->refaults_last, g->backoffs);
                }
                if (!any)
                        fprintf(f, "%-16s %-28s %4d %-18s\n", p->name, "-", 0,
                                p->enabled ? "no processes" : "disabled");
        }
}

int policy_manager_dump_policies(struct policy_manager *m, FILE *f, bool json) {
        if (json)
                policies_json(m, f);
        else
                policies_text(m, f);
        return 0;
}

/* Every attached target, the policy's and those attached by hand. */
static int list_targets(struct policy_manager *m, pid_t **ret, size_t *ret_n) {
        size_t want = 64, total;
        pid_t *pids = NULL;

        for (;;) {
                pid_t *p = realloc(pids, want * sizeof(pid_t));

                if (!p) {
                        free(pids);
                        return -ENOMEM;
                }
                pids = p;
                total = zsw_engine_list_targets(m->engine, pids, want);
                if (total <= want)
                        break;
                want = total + 16;
        }
        *ret = pids;
        *ret_n = total;
        return 0;
}

/* The group and policy target of PID, if a policy attached it. */
static const struct policy_target *find_target(struct policy_manager *m, pid_t pid,
                                               const struct policy_group **ret_group) {
        for (size_t i = 0; i < m->n_groups; i++)
                for (size_t k = 0; k < m->groups[i]->n_pids; k++)
                        if (m->groups[i]->pids[k].pid == pid) {
                                *ret_group = m->groups[i];
                                return &m->groups[i]->pids[k];
                        }
        return NULL;
}

static void match_json(struct json *j, const char *key, const char *pattern, const char *form,
                       const char *value) {
        if (!pattern)
                return;
        json_object_open(j, NULL);
        json_string(j, "key", key);
        json_string(j, "pattern", pattern);
        if (form) {
                json_string(j, "form", form);
                json_string(j, "value", value ?: "");
        }
        json_object_close(j);
}

/* Why the policy attached T, and the names of its executable then. */
static void target_match_json(struct json *j, const struct policy_target *t) {
        const char *form = t && t->match_executable ? exe_form_to_string(t->match_form) : NULL;

        json_string(j, "exe", t && t->exe.path ? t->exe.path : "");
        json_string(j, "argv0", t && t->exe.argv0 ? t->exe.argv0 : "");
        json_string(j, "comm", t && t->exe.comm ? t->exe.comm : "");
        json_array_open(j, "match");
        if (t) {
                match_json(j, "Unit", t->match_unit, NULL, NULL);
                match_json(j, "CgroupPath", t->match_cgroup_path, NULL, NULL);
                match_json(j, "Executable", t->match_executable, form,
                           proc_exe_name(&t->exe, t->match_form));
        }
        json_array_close(j);
}

int policy_manager_dump_targets(struct policy_manager *m, FILE *f, bool json) {
        _cleanup_free_ pid_t *pids = NULL;
        double page = ZSW_PAGE_SIZE;
        struct json j;
        size_t n;
        int r;

        r = list_targets(m, &pids, &n);
        if (r < 0)
                return r;
        if (json) {
                json_init(&j, f);
                json_object_open(&j, NULL);
                json_array_open(&j, "targets");
        } else
                fprintf(f, "%8s %-16s %-28s %10s %10s %10s %9s %9s %s\n", "PID", "POLICY", "CGROUP",
                        "RESIDENT", "STORED", "EVICTED", "FAULTS", "P99(us)", "MATCH");
        for (size_t i = 0; i < n; i++) {
                const struct policy_group *g = NULL;
                const struct policy_target *t = find_target(m, pids[i], &g);
                const char *policy = g ? g->policy_name : NULL, *cg = g ? g->cgroup : NULL;
                struct zsw_target_stats s;
                char why[512] = "-";

                if (zsw_engine_get_target_stats(m->engine, pids[i], &s) < 0)
                        continue; /* exited meanwhile */
                if (json) {
                        json_object_open(&j, NULL);
                        json_i64(&j, "pid", s.pid);
                        json_string(&j, "policy", policy ?: "");
                        json_string(&j, "cgroup", cg ?: "");
                        json_u64(&j, "resident_bytes", s.resident_bytes);
                        json_u64(&j, "stored_pages", s.stored_pages);
                        json_u64(&j, "pool_bytes", s.pool_bytes);
                        json_u64(&j, "evicted_pages", s.evicted_pages);
                        json_u64(&j, "faults", s.faults);
                        json_u64(&j, "zero_faults", s.zero_faults);
                        json_u64(&j, "refaults", s.refaults);
                        json_u64(&j, "idle_pages", s.age_idle_pages);
                        json_u64(&j, "fault_ns_p99", s.fault_ns_p99);
                        target_match_json(&j, t);
                        json_object_close(&j);
                        continue;
                }
                if (t)
                        policy_match_format(why, sizeof(why), t->match_unit, t->match_cgroup_path,
                                            t->match_executable, t->match_form);
                fprintf(f, "%8d %-16s %-28s %9.1fM %9.1fM %10" PRIu64 " %9" PRIu64 " %9.1f %s\n",
                        s.pid, policy ?: "(by hand)", cg ?: "-", s.resident_bytes / MIB,
                        s.stored_pages * page / MIB, s.evicted_pages, s.faults,
                        s.fault_ns_p99 / 1e3, why);
        }
        if (json) {
                json_array_close(&j);
                json_object_close(&j);
                fputc('\n', f);
        }
        return 0;
}

int policy_manager_dump_status(struct policy_manager *m, FILE *f, bool json) {
        struct zsw_engine_stats s;
        struct zsw_psi psi = {};
        double page = ZSW_PAGE_SIZE;
        int r;

        r = zsw_engine_get_stats(m->engine, &s);
        if (r < 0)
                return r;
        (void) zsw_psi_read_at(AT_FDCWD, "/proc/pressure/memory", &psi);
        if (json) {
                struct json j;

                json_init(&j, f);
                json_object_open(&j, NULL);
                json_u64(&j, "targets", s.targets);
                json_u64(&j, "policies", m->config->n_policies);
                json_u64(&j, "groups", m->n_groups);
                json_u64(&j, "stored_pages", s.stored_pages);
                json_u64(&j, "pool_bytes", s.pool_bytes);
                json_u64(&j, "evicted_pages", s.evicted_pages);
                json_u64(&j, "faults", s.faults);
                json_u64(&j, "refaults", s.refaults);
                json_double(&j, "memory_some_avg10_percent", pct(psi.some.avg10));
                json_double(&j, "memory_full_avg10_percent", pct(psi.full.avg10));
                json_object_close(&j);
                fputc('\n', f);
                return 0;
        }
        fprintf(f, "zswapd: %u targets, %zu policies, %zu groups under control\n", s.targets,
                m->config->n_policies, m->n_groups);
        fprintf(f,
                "store:  %.1f MiB in %.1f MiB of pool (ratio %.2f), %" PRIu64
                " pages evicted, %" PRIu64 " faults (p50 %.1f us, p99 %.1f us), %" PRIu64
                " refaults\n",
                s.stored_pages * page / MIB, s.pool_bytes / MIB,
                s.pool_bytes ? s.stored_pages * page / s.pool_bytes : 0.0, s.evicted_pages,
                s.faults, s.fault_ns_p50 / 1e3, s.fault_ns_p99 / 1e3, s.refaults);
        fprintf(f,
                "system: memory pressure some %.2f%% full %.2f%% (avg10), %" PRIu64
                " trigger events\n\n",
                pct(psi.some.avg10), pct(psi.full.avg10), m->global_events);
        policies_text(m, f);
        fputc('\n', f);
        return policy_manager_dump_targets(m, f, false);
}
