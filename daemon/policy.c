/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The policy manager (see policy.h): discovery of processes by policy and
 * the per-group control loop. Everything here runs on the daemon's main
 * loop, except the reclaims, which go to the reclaim worker (reclaim.h)
 * when the daemon gave the manager one: a long reclaim delays neither the
 * control socket nor the other groups' decisions; a group waits for its
 * own last step before taking the next.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>

#include "cgroup.h"
#include "json.h"
#include "log.h"
#include "policy-internal.h"
#include "psi.h"
#include "reclaim.h"

#define PF_KTHREAD 0x00200000u

static uint64_t now_usec(void) {
        return zsw_now_ns() / 1000;
}

/* ---- groups ----------------------------------------------------------------- */

static void target_done(struct policy_target *t) {
        proc_exe_done(&t->exe);
        free(t->match_unit);
        free(t->match_cgroup_path);
        free(t->match_executable);
}

/* Forgets the group's I-th target; the last one takes its place. */
static void group_drop_target(struct policy_group *g, size_t i) {
        target_done(&g->pids[i]);
        g->pids[i] = g->pids[--g->n_pids];
}

static struct policy_group *group_free(struct policy_group *g) {
        if (!g)
                return NULL;
        if (g->reclaiming)
                reclaim_request_orphan(g->reclaiming);
        while (g->n_pids > 0)
                group_drop_target(g, 0);
        safe_close(g->trigger_fd);
        safe_close(g->psi_dir_fd);
        safe_close(g->memory_fd);
        free(g->policy_name);
        free(g->cgroup);
        free(g->psi_path);
        free(g->pids);
        free(g);
        return NULL;
}

static bool group_has_budget(const struct policy_group *g) {
        return g->policy->memory_budget.kind != ZSW_LIMIT_NONE;
}

static const struct zsw_policy *find_policy(const struct zsw_config *c, const char *name) {
        for (size_t i = 0; i < c->n_policies; i++)
                if (strcmp(c->policies[i].name, name) == 0)
                        return &c->policies[i];
        return NULL;
}

/* Watches a PSI trigger in the loop's epoll (policy_manager_set_loop()),
 * once the loop is known; until then it is watched from there on. */
static int trigger_watch(struct policy_manager *m, int fd) {
        if (m->loop_fd < 0)
                return 0;
        return epoll_ctl(m->loop_fd, EPOLL_CTL_ADD, fd,
                         &(struct epoll_event) { .events = EPOLLPRI, .data.fd = fd }) < 0
                       ? -errno
                       : 0;
}

static int trigger_close(struct policy_manager *m, int fd) {
        if (fd >= 0 && m->loop_fd >= 0)
                (void) epoll_ctl(m->loop_fd, EPOLL_CTL_DEL, fd, NULL);
        return safe_close(fd);
}

/* Registers the group's PSI trigger from its policy's threshold. A group
 * without one still works from the averages, one period later. */
static void group_arm_trigger(struct policy_manager *m, struct policy_group *g) {
        const struct zsw_pressure *pr = &g->policy->pressure;
        uint64_t stall, window;
        int r;

        g->trigger_fd = trigger_close(m, g->trigger_fd);
        if (g->psi_dir_fd < 0)
                return;
        r = zsw_psi_trigger_open_widen_at(g->psi_dir_fd, g->psi_name, pr->full, pr->stall_usec,
                                          pr->window_usec, &g->trigger_fd, &stall, &window);
        if (r < 0) {
                log_warning_errno(r,
                                  "Policy %s, group %s: cannot register a PSI trigger on "
                                  "%s/%s, backing off from averages only: %m",
                                  g->policy_name, g->cgroup, g->psi_path, g->psi_name);
                return;
        }
        r = trigger_watch(m, g->trigger_fd);
        if (r < 0) {
                log_warning_errno(r, "Cannot watch a PSI trigger, ignoring: %m");
                g->trigger_fd = safe_close(g->trigger_fd);
                return;
        }
        log_full(r > 0 ? LOG_INFO : LOG_DEBUG,
                 "Policy %s, group %s: PSI trigger \"%s %" PRIu64 " %" PRIu64 "\" on %s/%s%s.",
                 g->policy_name, g->cgroup, pr->full ? "full" : "some", stall, window, g->psi_path,
                 g->psi_name,
                 r > 0 ? " (window widened: no CAP_SYS_RESOURCE for shorter ones)" : "");
}

static int open_dir(const char *root, const char *path) {
        _cleanup_free_ char *p = NULL;

        if (!root || !path || asprintf(&p, "%s%s", root, path) < 0)
                return -EBADF;
        return open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Where the group's pressure and memory use are read: its v2 group (which
 * has memory.pressure even on a hybrid system without v2 controllers), the
 * v1 memory group for usage when there is one. */
static void group_open_files(struct policy_manager *m, struct policy_group *g,
                             const struct zsw_proc_cgroups *cg) {
        if (cg->v2 && strcmp(cg->v2, "/") != 0) {
                g->psi_dir_fd = open_dir(m->layout.v2_root, cg->v2);
                if (g->psi_dir_fd >= 0 &&
                    faccessat(g->psi_dir_fd, "memory.pressure", R_OK, 0) == 0) {
                        g->psi_name = "memory.pressure";
                        g->psi_path = strjoin2(m->layout.v2_root, cg->v2);
                } else
                        g->psi_dir_fd = safe_close(g->psi_dir_fd);
        }
        if (g->psi_dir_fd < 0) {
                /* The root group's pressure is the system's. */
                g->psi_dir_fd = open("/proc/pressure", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                g->psi_name = "memory";
                g->psi_path = strdup("/proc/pressure");
        }
        if (m->layout.memory_root && cg->memory && strcmp(cg->memory, "/") != 0)
                g->memory_fd = open_dir(m->layout.memory_root, cg->memory);
        else if (!m->layout.memory_root && cg->v2 && strcmp(cg->v2, "/") != 0)
                g->memory_fd = open_dir(m->layout.v2_root, cg->v2);
}

static struct policy_group *group_find(struct policy_manager *m, const char *policy,
                                       const char *cgroup) {
        for (size_t i = 0; i < m->n_groups; i++)
                if (strcmp(m->groups[i]->policy_name, policy) == 0 &&
                    strcmp(m->groups[i]->cgroup, cgroup) == 0)
                        return m->groups[i];
        return NULL;
}

static int group_new(struct policy_manager *m, const struct zsw_policy *p, const char *cgroup,
                     const struct zsw_proc_cgroups *cg, struct policy_group **ret) {
        struct policy_group *g, **a;

        a = realloc(m->groups, (m->n_groups + 1) * sizeof(*a));
        if (!a)
                return -ENOMEM;
        m->groups = a;
        g = calloc(1, sizeof(*g));
        if (!g)
                return -ENOMEM;
        g->trigger_fd = g->psi_dir_fd = g->memory_fd = -EBADF;
        g->manager = m;
        g->policy = p;
        g->policy_name = strdup(p->name);
        g->cgroup = strdup(cgroup);
        if (!g->policy_name || !g->cgroup) {
                group_free(g);
                return -ENOMEM;
        }
        policy_step_init(&g->step);
        g->decision = "new";
        group_open_files(m, g, cg);
        if (g->psi_dir_fd >= 0) {
                struct zsw_psi psi;

                if (zsw_psi_read_at(g->psi_dir_fd, g->psi_name, &psi) >= 0)
                        g->psi_total_prev = psi.some.total_usec;
        }
        g->time_prev = now_usec();
        /* The budget's base now, so that the checks between periods hold
         * it from the start, not from the first period on. */
        if (g->memory_fd >= 0)
                (void) zsw_cgroup_read_memory_at(g->memory_fd, &g->budget_base);
        group_arm_trigger(m, g);
        m->groups[m->n_groups++] = g;
        log_info("Policy %s manages group %s (pressure from %s/%s%s).", p->name, cgroup,
                 g->psi_path ?: "?", g->psi_name ?: "?",
                 g->memory_fd >= 0 ? ", usage from its memory group" : "");
        *ret = g;
        return 0;
}

static char *strdup_or_null(const char *s, bool *oom) {
        char *d = s ? strdup(s) : NULL;

        if (s && !d)
                *oom = true;
        return d;
}

/* Adds PID, matched as MATCH says, taking over the names in *EXE. */
static int group_add_pid(struct policy_group *g, pid_t pid, struct zsw_proc_exe *exe,
                         const struct zsw_match *match) {
        struct policy_target *t, n = {
                .pid = pid,
                .match_form = match->executable_form,
        };
        bool oom = false;

        n.match_unit = strdup_or_null(match->unit, &oom);
        n.match_cgroup_path = strdup_or_null(match->cgroup_path, &oom);
        n.match_executable = strdup_or_null(match->executable, &oom);
        t = oom ? NULL : realloc(g->pids, (g->n_pids + 1) * sizeof(*t));
        if (!t) {
                target_done(&n);
                return -ENOMEM;
        }
        n.exe = *exe;
        *exe = (struct zsw_proc_exe) {};
        g->pids = t;
        g->pids[g->n_pids++] = n;
        return 0;
}

/* Detaches every target of the group (the policy went away or was
 * disabled: leave its processes alone, every page given back). */
static void group_detach_all(struct policy_manager *m, struct policy_group *g, const char *why) {
        for (size_t i = 0; i < g->n_pids; i++) {
                LOG_FIELDS(.target_pid = g->pids[i].pid, .policy = g->policy_name,
                           .cgroup = g->cgroup);
                struct zsw_engine_error err = {};
                int r = zsw_engine_detach(m->engine, g->pids[i].pid, &err);

                if (r < 0 && r != -ENOENT) {
                        log_warning_errno(r, "Cannot detach from %d: %s", g->pids[i].pid,
                                          err.message[0] ? err.message : "%m");
                        /* Still attached, no policy's any more. */
                        (void) zsw_engine_set_label(m->engine, g->pids[i].pid, NULL);
                } else if (r >= 0)
                        log_info("Detached from %d: policy %s %s.", g->pids[i].pid, g->policy_name,
                                 why);
        }
        while (g->n_pids > 0)
                group_drop_target(g, 0);
}

static void group_remove(struct policy_manager *m, size_t i) {
        struct policy_group *g = m->groups[i];

        g->trigger_fd = trigger_close(m, g->trigger_fd);
        group_free(g);
        m->groups[i] = m->groups[--m->n_groups];
}

const char *policy_manager_target_policy(const struct policy_manager *m, pid_t pid) {
        for (size_t i = 0; i < m->n_groups; i++)
                for (size_t j = 0; j < m->groups[i]->n_pids; j++)
                        if (m->groups[i]->pids[j].pid == pid)
                                return m->groups[i]->policy_name;
        return NULL;
}

/* ---- discovery ---------------------------------------------------------------- */

int policy_process_eligible(int pid_dir_fd, pid_t pid) {
        char buf[1024], state;
        const char *p;
        unsigned flags;
        ssize_t n;
        int fd;

        if (pid == getpid())
                return 0;
        fd = openat(pid_dir_fd, "stat", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT || errno == ESRCH ? 0 : -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        safe_close(fd);
        if (n <= 0)
                return n == 0 || errno == ESRCH ? 0 : -errno;
        buf[n] = 0;
        /* The command name may hold anything, ')' too: the last one ends it. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %u", &state, &flags) != 2)
                return -EBADMSG;
        if (state == 'Z' || state == 'X' || (flags & PF_KTHREAD))
                return 0;
        return 1;
}

static bool pid_listed(const pid_t *l, size_t n, pid_t pid) {
        for (size_t i = 0; i < n; i++)
                if (l[i] == pid)
                        return true;
        return false;
}

static bool is_managed(const struct policy_manager *m, pid_t pid) {
        return policy_manager_target_policy(m, pid) != NULL;
}

/* Remembers a process discovery must not try again (refused by the
 * engine, or attached by hand). */
static void ignore_pid(struct policy_manager *m, pid_t pid) {
        pid_t *l;

        if (pid_listed(m->ignored, m->n_ignored, pid))
                return;
        l = realloc(m->ignored, (m->n_ignored + 1) * sizeof(pid_t));
        if (!l)
                return; /* tried again next scan: harmless */
        m->ignored = l;
        m->ignored[m->n_ignored++] = pid;
}

void policy_manager_forget(struct policy_manager *m, pid_t pid) {
        for (size_t i = 0; i < m->n_groups; i++)
                for (size_t k = 0; k < m->groups[i]->n_pids; k++)
                        if (m->groups[i]->pids[k].pid == pid) {
                                log_info("Policy %s lets go of %d, detached by hand.",
                                         m->groups[i]->policy_name, pid);
                                group_drop_target(m->groups[i], k);
                                ignore_pid(m, pid);
                                return;
                        }
}

/* What the engine keeps per target from policy P: compressor, prefetch
 * window, pool limit (a percentage is of the engine's pool limit) and
 * whether its pages may be written back. */
static void policy_target_config(struct policy_manager *m, const struct zsw_policy *p,
                                 struct zsw_target_config *ret) {
        struct zsw_engine_limits el = {};
        uint64_t limit;

        (void) zsw_engine_get_limits(m->engine, &el);
        limit = p->pool_limit.kind == ZSW_LIMIT_RELATIVE && el.pool_limit_bytes == 0
                        ? UINT64_MAX
                        : limit_resolve(&p->pool_limit, el.pool_limit_bytes);
        *ret = (struct zsw_target_config) {
                .compressor = zsw_compressor_to_string(p->compressor),
                .compression_level = p->compression_level,
                .prefetch_window = p->prefetch_window,
                .zero_window = p->zero_window,
                /* At least a byte (the engine makes it a page): 0 would
                 * mean no limit at all. */
                .max_pool_bytes = limit == UINT64_MAX ? 0 : MAX(limit, 1u),
                .no_writeback = !p->writeback,
                .label = p->name,
        };
}

/* Whether PID was P's before a re-exec (policy_manager_adopt()); it is
 * then P's again. */
static bool take_adopted(struct policy_manager *m, pid_t pid, const char *policy) {
        for (size_t i = 0; i < m->n_adopted; i++)
                /* A state keeps the first ZSW_ENGINE_LABEL_MAX - 1 bytes
                 * of a policy's name (the attach's label). */
                if (m->adopted[i].pid == pid &&
                    strncmp(m->adopted[i].policy, policy, ZSW_ENGINE_LABEL_MAX - 1) == 0) {
                        free(m->adopted[i].policy);
                        m->adopted[i] = m->adopted[--m->n_adopted];
                        log_info("Process %d is policy %s's again after the re-exec.", pid, policy);
                        return true;
                }
        return false;
}

int policy_manager_adopt(struct policy_manager *m, pid_t pid, const char *policy) {
        struct policy_adopted *v;
        char *name;

        if (!policy || !policy[0])
                return 0;
        v = realloc(m->adopted, (m->n_adopted + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        m->adopted = v;
        name = strdup(policy);
        if (!name)
                return -ENOMEM;
        m->adopted[m->n_adopted++] = (struct policy_adopted) { .pid = pid, .policy = name };
        return 0;
}

/* Attaches to PID for policy P in its group; 1 attached, 0 not. Takes
 * over the names in *EXE when it attaches. */
static int scan_attach(struct policy_manager *m, const struct zsw_policy *p, pid_t pid,
                       const char *cgroup, const struct zsw_proc_cgroups *cg,
                       struct zsw_proc_exe *exe, const struct zsw_match *match) {
        const char *name = exe->path ?: exe->comm ?: "?";
        struct zsw_engine_error err = {};
        struct zsw_target_config tc;
        struct policy_group *g;
        char why[512];
        bool started;
        int r;
        LOG_FIELDS(.target_pid = pid, .policy = p->name, .cgroup = cgroup);

        policy_target_config(m, p, &tc);
        r = zsw_engine_attach_with(m->engine, pid, &tc, &err);
        if (r == -EALREADY && take_adopted(m, pid, p->name))
                r = 0;
        else if (r == -EALREADY) {
                log_debug("Process %d (%s) matches policy %s but is attached already (by "
                          "hand, or followed through a fork); leaving it as it is.",
                          pid, name, p->name);
                ignore_pid(m, pid);
                return 0;
        }
        if (r < 0) {
                log_debug_errno(r, "Process %d (%s) matches policy %s, cannot attach: %s", pid,
                                name, p->name, err.message[0] ? err.message : "%m");
                ignore_pid(m, pid);
                return 0;
        }
        policy_match_format(why, sizeof(why), match->unit, match->cgroup_path, match->executable,
                            match->executable_form);
        started = exe->argv0 && (!exe->path || strcmp(exe->argv0, exe->path) != 0);
        log_info("Attached to %d (%s%s%s; cgroup %s): policy %s, by %s.", pid, name,
                 started ? ", started as " : "", started ? exe->argv0 : "", cgroup, p->name, why);
        g = group_find(m, p->name, cgroup);
        if (!g && group_new(m, p, cgroup, cg, &g) < 0) {
                (void) zsw_engine_detach(m->engine, pid, NULL);
                return log_oom();
        }
        if (group_add_pid(g, pid, exe, match) < 0) {
                (void) zsw_engine_detach(m->engine, pid, NULL);
                return log_oom();
        }
        return 1;
}

/* Looks at one /proc entry: matches it and attaches when it should. */
static int scan_one(struct policy_manager *m, int proc_fd, pid_t pid) {
        _cleanup_(proc_exe_done) struct zsw_proc_exe exe = {};
        struct zsw_proc_cgroups cg = {};
        _cleanup_free_ char *unit_path = NULL;
        _cleanup_close_ int fd = -EBADF;
        const struct zsw_policy *p;
        struct zsw_match match;
        char name[16];
        int r;

        snprintf(name, sizeof(name), "%d", pid);
        fd = openat(proc_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return 0; /* gone meanwhile */
        if (policy_process_eligible(fd, pid) <= 0)
                return 0;
        if (proc_cgroup_read(fd, &unit_path) < 0)
                unit_path = NULL;
        if (proc_exe_read(fd, m->config, &exe) < 0)
                return 0;
        p = config_match(m->config, unit_path, &exe, &match);
        if (!p || !p->enabled)
                return 0;
        /* All its names, for `zswapctl targets`; what matched is in them. */
        proc_exe_done(&exe);
        if (proc_exe_read(fd, NULL, &exe) < 0)
                return 0;
        if (zsw_proc_cgroups_read(fd, &cg) < 0)
                return 0;
        r = scan_attach(m, p, pid, unit_path ?: "/", &cg, &exe, &match);
        zsw_proc_cgroups_done(&cg);
        return r;
}

int policy_manager_scan(struct policy_manager *m) {
        _cleanup_free_ pid_t *seen = NULL;
        size_t n_seen = 0, cap = 0;
        struct dirent *de;
        DIR *d;
        int attached = 0;

        if (m->config->n_policies == 0)
                return 0;
        d = opendir("/proc");
        if (!d)
                return log_error_errno(errno, "Cannot open /proc: %m");
        while ((de = readdir(d))) {
                char *end;
                long v = strtol(de->d_name, &end, 10);
                pid_t pid = (pid_t) v;

                if (*end || v <= 0 || v > INT32_MAX)
                        continue;
                if (n_seen == cap) {
                        pid_t *s = realloc(seen, (cap = cap ? cap * 2 : 512) * sizeof(pid_t));

                        if (!s)
                                break;
                        seen = s;
                }
                seen[n_seen++] = pid;
                if (is_managed(m, pid) || pid_listed(m->ignored, m->n_ignored, pid))
                        continue;
                if (scan_one(m, dirfd(d), pid) > 0)
                        attached++;
        }
        closedir(d);

        /* Forget refusals of processes that are gone: their pids may be
         * reused by processes that deserve a fresh look. */
        for (size_t i = 0; i < m->n_ignored;)
                if (!pid_listed(seen, n_seen, m->ignored[i]))
                        m->ignored[i] = m->ignored[--m->n_ignored];
                else
                        i++;
        return attached;
}

/* ---- control -------------------------------------------------------------------- */

/* Sums the engine's view of the group's targets and forgets the ones the
 * engine reaped (exit, exec). Returns resident bytes; refaults and evicted
 * pages of this period through the pointers. */
static uint64_t group_collect(struct policy_manager *m, struct policy_group *g,
                              uint64_t *ret_refaults, uint64_t *ret_evicted) {
        uint64_t resident = 0, refaults = 0, evicted = 0;

        for (size_t i = 0; i < g->n_pids;) {
                struct policy_target *t = &g->pids[i];
                struct zsw_target_stats s;
                uint64_t rf;

                if (zsw_engine_get_target_stats(m->engine, t->pid, &s) < 0) {
                        log_debug("Target %d of policy %s is gone.", t->pid, g->policy_name);
                        group_drop_target(g, i);
                        continue;
                }
                /* Pages the engine took that came back; first touches of
                 * pages never taken cost nothing the policy caused. */
                rf = s.refaults;
                refaults += rf - MIN(t->refaults_prev, rf);
                evicted += s.evicted_pages - MIN(t->evicted_prev, s.evicted_pages);
                t->refaults_prev = rf;
                t->evicted_prev = s.evicted_pages;
                resident += s.resident_bytes;
                i++;
        }
        *ret_refaults = refaults;
        *ret_evicted = evicted;
        return resident;
}

/* How many refaults this period are too many. */
static uint64_t refault_limit(const struct policy_group *g, uint64_t elapsed_usec) {
        const struct zsw_limit *l = &g->policy->refault_limit;

        switch (l->kind) {
        case ZSW_LIMIT_ABSOLUTE:
                return MAX(l->value * elapsed_usec / ZSW_USEC_PER_SEC, 1u);
        case ZSW_LIMIT_RELATIVE:
                /* Of what was taken lately; nothing taken, nothing to
                 * come back, and a handful of faults is not a trend. */
                return MAX(g->evicted_recent * l->value / ZSW_PERMYRIAD_MAX, 8u);
        default:
                return UINT64_MAX;
        }
}

static void group_backed_off(struct policy_group *g, const char *why) {
        g->backoffs++;
        g->decision = why;
        log_debug("Policy %s, group %s: backing off (%s): step %" PRIu64 " KiB, pausing %u "
                  "periods; stall %u.%02u%%, refaults %" PRIu64 " (limit %" PRIu64 ").",
                  g->policy_name, g->cgroup, why, g->step.step_bytes / 1024, g->step.pause_periods,
                  g->pressure_pm / 100, g->pressure_pm % 100, g->refaults_last,
                  g->refault_limit_last);
}

static void group_backoff(struct policy_group *g, const char *why) {
        struct policy_step_limits l = policy_group_limits(g);

        policy_step_backoff(&g->step, &l);
        group_backed_off(g, why);
}

/* The group's targets in the order a reclaim tries them; returns how many
 * went to PIDS (room for all of them). Each reclaim starts with the next
 * target, so that the stops reclaim costs (and the pages it takes) are
 * spread over the group, not always paid by its first process. */
static size_t group_reclaim_order(struct policy_group *g, pid_t *pids) {
        size_t n = g->n_pids, first = n > 0 ? g->reclaim_next % n : 0;

        for (size_t k = 0; k < n; k++)
                pids[k] = g->pids[(first + k) % n].pid;
        g->reclaim_next = first + 1;
        return n;
}

/* The rate credit now (policy_step_credit()). */
static uint64_t group_rate_credit(struct policy_group *g, uint64_t now) {
        struct policy_step_limits l = policy_group_limits(g);

        return policy_step_credit(&g->step, &l, now);
}

/* What a reclaim of the group took: the listings and the debug log. */
static void group_reclaimed(struct policy_group *g, uint64_t got) {
        struct policy_step_limits l = policy_group_limits(g);

        policy_step_reclaimed(&g->step, &l, g->reclaim_want, got);
        /* A reclaim that took nothing cannot make room: held first
         * touches would wait for nothing (group_throttle()). */
        g->reclaim_stalled = got == 0;
        g->reclaimed_last = got;
        g->reclaimed_total += got;
        g->decision = got > 0 ? "reclaimed" : "nothing to reclaim";
        log_debug("Policy %s, group %s: reclaimed %" PRIu64 " of %" PRIu64 " KiB.", g->policy_name,
                  g->cgroup, got / 1024, g->reclaim_want / 1024);
}

/* A group with a MemoryBudget is also checked every BUDGET_CHECK_USEC
 * between periods: a process can allocate hundreds of MiB within one
 * period, and a budget looked at once a period is exceeded by that much.
 * A check is one read of the group's usage; it reclaims only while the
 * group is above its low mark (policy_budget_low_mark()) and not backing
 * off, within MaxReclaimRate. Groups whose usage cannot be read (no memory
 * group) wait for the period. */
#define BUDGET_CHECK_USEC (20 * 1000ull)

static void group_check_budget(struct policy_manager *m, struct policy_group *g);

static void group_reclaim_done(void *userdata, const struct reclaim_request *req) {
        struct policy_group *g = userdata;
        LOG_FIELDS(.policy = g->policy_name, .cgroup = g->cgroup);

        g->reclaiming = NULL;
        group_reclaimed(g, req->result.evicted_pages * (uint64_t) ZSW_PAGE_SIZE);
        /* Over budget, the next reclaim need not wait for the next check. */
        if (group_has_budget(g))
                group_check_budget(g->manager, g);
}

static void group_register_done(void *userdata, const struct reclaim_request *req) {
        struct policy_group *g = userdata;

        (void) req;
        g->reclaiming = NULL;
}

/* A held group whose use grew by 1/16 of its budget since its targets'
 * mappings were last registered, past half of it: registers them again on
 * the reclaim worker (a reclaim does too). Memory a process maps after
 * the attach (malloc's arenas, a large allocation) is not the engine's
 * to hold before; waiting for the first reclaim, at the low mark, let
 * bench/compare's writers run 10-25 MiB past the budget meanwhile. */
static void group_register(struct policy_manager *m, struct policy_group *g, uint64_t usage,
                           uint64_t budget) {
        _cleanup_free_ pid_t *pids = NULL;
        size_t n;

        if (!g->holding || !m->reclaimer || g->reclaiming || usage < budget / 2 ||
            usage < g->registered_usage + budget / 16)
                return;
        pids = malloc(MAX(g->n_pids, 1u) * sizeof(pid_t));
        if (!pids)
                return;
        n = group_reclaim_order(g, pids);
        g->reclaiming = reclaimer_submit(m->reclaimer, pids, n, &(struct zsw_reclaim_request) {},
                                         true, group_register_done, g);
        if (g->reclaiming)
                g->registered_usage = usage;
}

/* Reclaims up to WANT bytes of pages unused for MinColdAge from the
 * group's targets (group_reclaim_order()): on the reclaim worker when the
 * manager has one (the result comes back in group_reclaim_done), else
 * here. The engine's age scans tell a page's age: a process attached less
 * than MinColdAge ago has none old enough yet. */
static void group_reclaim(struct policy_manager *m, struct policy_group *g, uint64_t want) {
        _cleanup_free_ pid_t *pids = malloc(MAX(g->n_pids, 1u) * sizeof(pid_t));
        struct zsw_reclaim_request what = {
                .max_bytes = want,
                .min_cold_age_ms = DIV_ROUND_UP(g->policy->min_cold_age_usec, 1000),
        };
        uint64_t got = 0, page = (uint64_t) ZSW_PAGE_SIZE;
        size_t n;

        if (!pids) {
                log_oom();
                return;
        }
        n = group_reclaim_order(g, pids);
        g->reclaim_want = want;
        g->reclaimed_last = 0;
        if (m->reclaimer && n > 0) {
                /* New mappings of every target under the hold. */
                g->reclaiming = reclaimer_submit(m->reclaimer, pids, n, &what, g->holding,
                                                 group_reclaim_done, g);
                if (g->reclaiming) {
                        g->decision = "reclaiming";
                        return;
                }
        }
        for (size_t i = 1; g->holding && i < n; i++)
                (void) zsw_engine_register(m->engine, pids[i]);
        for (size_t i = 0; i < n && got + page <= want; i++) {
                struct zsw_reclaim_result res = {};
                struct zsw_engine_error err = {};
                int r;

                what.max_bytes = want - got;
                r = zsw_engine_reclaim_cold(m->engine, pids[i], &what, &res, &err);
                if (r < 0) {
                        log_debug_errno(r, "Policy %s: cannot reclaim from %d: %s", g->policy_name,
                                        pids[i], err.message[0] ? err.message : "%m");
                        continue;
                }
                got += res.evicted_pages * page;
        }
        group_reclaimed(g, got);
}

static void group_read_pressure(struct policy_group *g, uint64_t elapsed) {
        struct zsw_psi psi;

        g->pressure_pm = 0;
        if (g->psi_dir_fd < 0 || zsw_psi_read_at(g->psi_dir_fd, g->psi_name, &psi) < 0)
                return;
        g->pressure_pm = zsw_psi_stall_permyriad(g->psi_total_prev, psi.some.total_usec, elapsed);
        if (g->policy->pressure.full && psi.has_full)
                g->pressure_pm =
                        zsw_psi_stall_permyriad(g->psi_total_prev, psi.full.total_usec, elapsed);
        g->psi_total_prev = g->policy->pressure.full && psi.has_full ? psi.full.total_usec
                                                                     : psi.some.total_usec;
        g->avg10 = g->policy->pressure.full && psi.has_full ? psi.full.avg10 : psi.some.avg10;
}

/* A group with a budget has its first touches held at it
 * (zsw_engine_set_hold()): the engine reads the group's use and lets a
 * fault that adds a page place only the room left, and one at the budget
 * waits until reclaim has made room, as an allocation over a memcg limit
 * waits in direct reclaim (a group backing off still reclaims at the
 * budget itself: group_check_budget()). Only while reclaim can make that
 * room: not after a reclaim that took nothing (nothing left to take, a
 * target that cannot be stopped), until one takes something again; a
 * held fault would otherwise wait out the engine's bound (100 ms) at
 * every page. Then, as over its budget without a hold, first touches are
 * throttled (one page per fault, no zero-fill window) until a check finds
 * it back under. */
static void group_throttle(struct policy_manager *m, struct policy_group *g, uint64_t usage,
                           uint64_t budget) {
        bool budgeted = group_has_budget(g), on = budgeted && usage > budget;
        bool hold = budgeted && g->memory_fd >= 0 && budget > 0 && !g->reclaim_stalled;

        /* Every time, not only on a change: targets that joined since get
         * it too, and a group made anew by a reload (throttled false)
         * lets go of targets an older one throttled. */
        for (size_t i = 0; i < g->n_pids; i++) {
                int r = zsw_engine_set_hold(m->engine, g->pids[i].pid, g->memory_fd,
                                            hold ? budget : 0);

                if (r < 0 && r != -ENOENT && hold != g->holding)
                        log_warning_errno(r,
                                          "Policy %s, group %s: cannot hold the first touches "
                                          "of %d at the budget, throttling them only: %m",
                                          g->policy_name, g->cgroup, g->pids[i].pid);
                (void) zsw_engine_set_throttle(m->engine, g->pids[i].pid, on);
        }
        if (on != g->throttled)
                log_debug("Policy %s, group %s: first touches %s.", g->policy_name, g->cgroup,
                          on ? "throttled (over budget)" : "no longer throttled");
        if (hold != g->holding && budgeted)
                log_debug("Policy %s, group %s: first touches %s.", g->policy_name, g->cgroup,
                          hold ? "held at the budget"
                               : "no longer held (reclaim cannot make room now)");
        g->throttled = on;
        g->holding = hold;
        if (on)
                g->throttle_checks++;
}

/* One period of one group: measure, then decide. */
static void group_tick(struct policy_manager *m, struct policy_group *g, bool global_fired) {
        const struct zsw_policy *p = g->policy;
        uint64_t now = now_usec(), elapsed = now - g->time_prev, refaults, evicted, resident;
        uint64_t threshold = p->pressure.stall_usec * ZSW_PERMYRIAD_MAX / p->pressure.window_usec;
        struct policy_step_limits l = policy_group_limits(g);
        struct policy_period period;
        uint64_t want;
        LOG_FIELDS(.policy = g->policy_name, .cgroup = g->cgroup);

        g->time_prev = now;
        g->periods++;
        resident = group_collect(m, g, &refaults, &evicted);
        g->evicted_recent = g->evicted_recent / 2 + evicted;
        g->refaults_last = refaults;
        g->refault_limit_last = refault_limit(g, elapsed);
        group_read_pressure(g, elapsed);
        if (g->memory_fd < 0 || zsw_cgroup_read_memory_at(g->memory_fd, &g->usage_bytes) < 0)
                g->usage_bytes = resident;
        if (g->budget_base == 0)
                g->budget_base = g->usage_bytes;
        g->budget_bytes = limit_resolve(&p->memory_budget, g->budget_base);
        group_throttle(m, g, g->usage_bytes, g->budget_bytes);

        if (g->n_pids == 0) {
                g->decision = "no processes";
                return;
        }
        if (g->trigger_fired) {
                /* Backed off when it fired; this period only waits. */
                g->trigger_fired = false;
                return;
        }
        period = (struct policy_period) {
                .now_usec = now,
                .usage_bytes = g->usage_bytes,
                .budget_bytes = g->budget_bytes,
                .backoff = global_fired                       ? "system pressure"
                           : g->pressure_pm >= threshold      ? "pressure"
                           : refaults > g->refault_limit_last ? "refaults"
                                                              : NULL,
                .reclaiming = g->reclaiming != NULL,
        };
        want = policy_step_period(&g->step, &l, &period, &g->decision);
        if (period.backoff) {
                group_backed_off(g, period.backoff);
                return;
        }
        if (want == 0) {
                log_debug("Policy %s, group %s: %s (%u periods of pause left, usage %" PRIu64
                          " KiB, budget %" PRIu64 " KiB).",
                          g->policy_name, g->cgroup, g->decision, g->step.pause_periods,
                          g->usage_bytes / 1024, group_has_budget(g) ? g->budget_bytes / 1024 : 0);
                return;
        }
        g->rate_cap_last = p->max_reclaim_rate == UINT64_MAX ? UINT64_MAX : g->step.rate_credit;
        log_debug("Policy %s, group %s: stall %u.%02u%% < %u.%02u%%, refaults %" PRIu64
                  " <= %" PRIu64 ", usage %" PRIu64 " KiB: reclaiming %" PRIu64
                  " KiB (step %" PRIu64 " KiB, "
                  "rate cap %" PRIu64 " KiB).",
                  g->policy_name, g->cgroup, g->pressure_pm / 100, g->pressure_pm % 100,
                  (unsigned) threshold / 100, (unsigned) threshold % 100, refaults,
                  g->refault_limit_last, g->usage_bytes / 1024, want / 1024,
                  g->step.step_bytes / 1024,
                  g->rate_cap_last == UINT64_MAX ? 0 : g->rate_cap_last / 1024);
        group_reclaim(m, g, want);
}

static void group_check_budget(struct policy_manager *m, struct policy_group *g) {
        const struct zsw_policy *p = g->policy;
        uint64_t usage, budget, cap, want;
        LOG_FIELDS(.policy = g->policy_name, .cgroup = g->cgroup);

        if (!group_has_budget(g) || g->n_pids == 0 || g->budget_base == 0 || g->memory_fd < 0 ||
            zsw_cgroup_read_memory_at(g->memory_fd, &usage) < 0)
                return;
        budget = limit_resolve(&p->memory_budget, g->budget_base);
        group_throttle(m, g, usage, budget);
        /* Backing off (pressure) pauses reclaim between the marks, not at
         * the budget itself: there the group's faults wait for it (the
         * hold), as an allocation over a memcg limit reclaims whatever the
         * pressure. */
        group_register(m, g, usage, budget);
        if (usage <= policy_budget_low_mark(budget) || g->reclaiming ||
            ((g->step.pause_periods > 0 || g->trigger_fired) && usage < budget - budget / 64))
                return;
        cap = group_rate_credit(g, now_usec());
        if (cap < (uint64_t) ZSW_PAGE_SIZE)
                return;
        /* Down to the target mark: each reclaim stops the targets a
         * moment, fewer and larger ones cost them less than one per check. */
        want = policy_budget_want(usage, budget);
        log_debug("Policy %s, group %s: near or over budget (%" PRIu64 " KiB of %" PRIu64 " KiB): "
                  "reclaiming %" PRIu64 " KiB.",
                  g->policy_name, g->cgroup, usage / 1024, budget / 1024, MIN(want, cap) / 1024);
        /* It registers the targets' new mappings too. */
        g->registered_usage = usage;
        group_reclaim(m, g, MIN(want, cap));
        if (g->reclaiming)
                g->decision = "reclaiming to budget";
}

/* Runs the budget checks while some group has a budget, and only then. */
static void manager_arm_budget_checks(struct policy_manager *m) {
        struct itimerspec its = {};
        bool want = false;

        for (size_t i = 0; i < m->n_groups && !want; i++)
                want = group_has_budget(m->groups[i]);
        if (want == m->budget_armed || m->budget_timer_fd < 0)
                return;
        if (want)
                its.it_value = its.it_interval =
                        (struct timespec) { .tv_nsec = BUDGET_CHECK_USEC * 1000 };
        if (timerfd_settime(m->budget_timer_fd, 0, &its, NULL) < 0) {
                log_warning_errno(errno, "Cannot set the budget check timer, ignoring: %m");
                return;
        }
        m->budget_armed = want;
}

static void manager_tick(struct policy_manager *m) {
        bool global_fired = m->global_fired;

        m->global_fired = false;
        if (m->ticks++ % POLICY_SCAN_PERIODS == 0)
                (void) policy_manager_scan(m);
        for (size_t i = 0; i < m->n_groups; i++)
                group_tick(m, m->groups[i], global_fired);
        /* Groups whose processes are all gone go too; a new process of the
         * same policy and cgroup starts a fresh group. */
        for (size_t i = 0; i < m->n_groups;)
                if (m->groups[i]->n_pids == 0)
                        group_remove(m, i);
                else
                        i++;
        manager_arm_budget_checks(m);
}

int policy_manager_process(struct policy_manager *m) {
        struct epoll_event ev[16];
        int n;

        n = epoll_wait(m->epoll_fd, ev, ARRAY_SIZE(ev), 0);
        if (n < 0)
                return errno == EINTR ? 0 : -errno;
        for (int i = 0; i < n; i++) {
                void *what = ev[i].data.ptr;
                uint64_t ticks;

                if (what == m) {
                        if (read(m->timer_fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                                return -errno;
                        manager_tick(m);
                } else if (what == &m->budget_timer_fd) {
                        if (read(m->budget_timer_fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                                return -errno;
                        for (size_t k = 0; k < m->n_groups; k++)
                                group_check_budget(m, m->groups[k]);
                }
        }
        return 0;
}

int policy_manager_set_loop(struct policy_manager *m, int loop_fd) {
        int r;

        m->loop_fd = loop_fd;
        if (m->global_trigger_fd >= 0 && (r = trigger_watch(m, m->global_trigger_fd)) < 0)
                return r;
        for (size_t i = 0; i < m->n_groups; i++)
                if (m->groups[i]->trigger_fd >= 0 &&
                    (r = trigger_watch(m, m->groups[i]->trigger_fd)) < 0)
                        return r;
        return 0;
}

bool policy_manager_trigger(struct policy_manager *m, int fd) {
        if (fd < 0)
                return false;
        if (fd == m->global_trigger_fd) {
                m->global_fired = true;
                m->global_events++;
                log_debug("System memory pressure crossed the threshold.");
                return true;
        }
        for (size_t i = 0; i < m->n_groups; i++) {
                struct policy_group *g = m->groups[i];

                if (g->trigger_fd != fd)
                        continue;
                /* Act now, not at the next period: that is what the
                 * trigger is for. */
                g->trigger_events++;
                g->trigger_fired = true;
                group_backoff(g, "PSI trigger");
                return true;
        }
        return false;
}

/* ---- the manager --------------------------------------------------------------- */

static void arm_global_trigger(struct policy_manager *m) {
        const struct zsw_pressure *pr = &m->config->pressure;
        int r;

        m->global_trigger_fd = trigger_close(m, m->global_trigger_fd);
        r = zsw_psi_trigger_open_widen_at(AT_FDCWD, "/proc/pressure/memory", pr->full,
                                          pr->stall_usec, pr->window_usec, &m->global_trigger_fd,
                                          NULL, NULL);
        if (r < 0) {
                log_warning_errno(r, "Cannot register a trigger on /proc/pressure/memory, "
                                     "ignoring: %m");
                return;
        }
        r = trigger_watch(m, m->global_trigger_fd);
        if (r < 0) {
                log_warning_errno(r, "Cannot watch the system PSI trigger, ignoring: %m");
                m->global_trigger_fd = safe_close(m->global_trigger_fd);
        }
}

int policy_manager_new(struct zsw_engine *engine, struct zsw_config *config,
                       struct policy_manager **ret) {
        _cleanup_(policy_manager_freep) struct policy_manager *m = NULL;
        struct itimerspec its = {
                .it_interval = { .tv_sec = POLICY_PERIOD_USEC / ZSW_USEC_PER_SEC,
                                 .tv_nsec = POLICY_PERIOD_USEC % ZSW_USEC_PER_SEC * 1000 },
                .it_value = { .tv_nsec = 1 }, /* the first scan at once */
        };
        int r;

        m = calloc(1, sizeof(*m));
        if (!m) {
                config_free(config);
                return log_oom();
        }
        m->engine = engine;
        m->config = config;
        m->epoll_fd = m->loop_fd = m->timer_fd = m->global_trigger_fd = m->budget_timer_fd = -EBADF;

        r = zsw_cgroup_layout_detect(&m->layout);
        if (r < 0)
                log_warning_errno(r, "Cannot find the cgroup hierarchies, matching by "
                                     "executable only: %m");
        else
                log_info("Cgroups: v2 at %s, v1 memory at %s, name=systemd at %s.",
                         m->layout.v2_root ?: "-", m->layout.memory_root ?: "-",
                         m->layout.systemd_root ?: "-");

        m->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (m->epoll_fd < 0)
                return log_error_errno(errno, "Failed to create an epoll instance: %m");
        m->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (m->timer_fd < 0 || timerfd_settime(m->timer_fd, 0, &its, NULL) < 0)
                return log_error_errno(errno, "Failed to set up the policy timer: %m");
        if (epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, m->timer_fd,
                      &(struct epoll_event) { .events = EPOLLIN, .data.ptr = m }) < 0)
                return log_error_errno(errno, "Failed to watch the policy timer: %m");
        m->budget_timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (m->budget_timer_fd < 0)
                return log_error_errno(errno, "Failed to create the budget check timer: %m");
        if (epoll_ctl(m->epoll_fd, EPOLL_CTL_ADD, m->budget_timer_fd,
                      &(struct epoll_event) { .events = EPOLLIN,
                                              .data.ptr = &m->budget_timer_fd }) < 0)
                return log_error_errno(errno, "Failed to watch the budget check timer: %m");
        arm_global_trigger(m);

        *ret = TAKE_PTR(m);
        return 0;
}

struct policy_manager *policy_manager_free(struct policy_manager *m) {
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->n_groups; i++)
                group_free(m->groups[i]);
        free(m->groups);
        free(m->ignored);
        for (size_t i = 0; i < m->n_adopted; i++)
                free(m->adopted[i].policy);
        free(m->adopted);
        safe_close(m->global_trigger_fd);
        safe_close(m->budget_timer_fd);
        safe_close(m->timer_fd);
        safe_close(m->epoll_fd);
        zsw_cgroup_layout_done(&m->layout);
        config_free(m->config);
        free(m);
        return NULL;
}

int policy_manager_get_fd(const struct policy_manager *m) {
        return m->epoll_fd;
}

void policy_manager_set_reclaimer(struct policy_manager *m, struct reclaimer *reclaimer) {
        m->reclaimer = reclaimer;
}

const struct zsw_config *policy_manager_get_config(const struct policy_manager *m) {
        return m->config;
}

void policy_manager_set_config(struct policy_manager *m, struct zsw_config *config) {
        for (size_t i = 0; i < m->n_groups;) {
                struct policy_group *g = m->groups[i];
                const struct zsw_policy *p = find_policy(config, g->policy_name);

                if (!p || !p->enabled) {
                        group_detach_all(m, g, p ? "disabled" : "removed");
                        group_remove(m, i);
                        continue;
                }
                g->policy = p;
                group_arm_trigger(m, g);
                i++;
        }
        config_free(m->config);
        m->config = config;
        m->n_ignored = 0;
        arm_global_trigger(m);
        (void) policy_manager_scan(m);
        manager_arm_budget_checks(m);
}
