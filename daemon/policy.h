/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The policy manager: turns the configuration into work for the engine.
 *
 * Discovery: every few seconds (and at once after a reload) it walks /proc,
 * matches each process's cgroup and executable against the policies and
 * attaches to the processes of enabled policies. Processes are grouped by
 * (policy, cgroup): each such group is a unit of control with its own PSI
 * trigger, its own pressure readings and its own reclaim step.
 *
 * Control, in the spirit of Senpai and TMO: every period each group reads
 * its pressure (memory.pressure of its v2 group, or /proc/pressure/memory
 * when it has none) and its targets' refaults. While both stay below the
 * policy's bounds it reclaims a small, slowly growing step, never more
 * than MaxReclaimRate allows; when either rises, or a PSI trigger fires,
 * it halves the step and pauses, doubling the pause on each new backoff.
 * A policy with a MemoryBudget reclaims toward the budget at the rate cap
 * and holds there; its group's use is also checked every 20 ms between
 * periods, so that a fast allocation is caught early. Every decision is logged at debug level and kept for
 * `zswapctl policies`.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "config.h"
#include "engine.h"

/* One period of the control loop; discovery runs every SCAN_PERIODS. */
#define POLICY_PERIOD_USEC (1000 * 1000ull)
#define POLICY_SCAN_PERIODS 2

struct policy_manager;

/*
 * Creates a manager for ENGINE (not owned) with CONFIG (owned from now on,
 * also on failure). Registers the global PSI trigger of the config's
 * [Pressure] Threshold=, when the system has PSI. Logs its failures.
 */
int policy_manager_new(struct zsw_engine *engine, struct zsw_config *config,
                       struct policy_manager **ret);

/* Frees the manager; its targets stay attached until the engine is freed
 * (which gives every page back). Accepts NULL. */
struct policy_manager *policy_manager_free(struct policy_manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct policy_manager *, policy_manager_free);

struct reclaimer;

/* Runs the groups' reclaims on this worker (not owned; it must outlive m
 * or be freed first, and its finished requests be processed on the loop
 * that calls policy_manager_process()). Without one, they run inside
 * policy_manager_process(). */
void policy_manager_set_reclaimer(struct policy_manager *m, struct reclaimer *reclaimer);

/* A descriptor that polls readable when the manager's timers are due. */
int policy_manager_get_fd(const struct policy_manager *m);

/* Does the work that is due (discovery, control), without waiting.
 * Failures of single groups or targets are logged and contained. */
int policy_manager_process(struct policy_manager *m);

/* PSI triggers go straight into the caller's epoll instance loop_fd (with
 * EPOLLPRI, data.fd the trigger's descriptor), those registered so far
 * and all later ones: a trigger's event is consumed by the first poll of
 * its descriptor, and an epoll that held it inside another would have
 * that poll done by the outer one's readiness check, leaving the inner
 * epoll_wait nothing. The loop hands each such event to
 * policy_manager_trigger(). Returns 0 or a negative errno. */
int policy_manager_set_loop(struct policy_manager *m, int loop_fd);

/* Whether fd is one of the manager's PSI triggers; if so, acts on its
 * event (the group, or every group for the system's trigger, backs off). */
bool policy_manager_trigger(struct policy_manager *m, int fd);

/*
 * Replaces the configuration with CONFIG (owned from now on). Groups whose
 * policy is gone or disabled are detached from (every page given back);
 * the others keep their state and take the new control settings
 * (thresholds, budget, rates); the engine's per-target settings
 * (compressor, prefetch window, pool limit, writeback) stay as they were
 * at attach, new processes get the new ones. Discovery runs at once.
 */
void policy_manager_set_config(struct policy_manager *m, struct zsw_config *config);

const struct zsw_config *policy_manager_get_config(const struct policy_manager *m);

/* Runs discovery now: attaches to every new matching process, with its
 * policy's compressor, prefetch window, pool limit and writeback
 * (zsw_engine_attach_with()). Returns the number of processes attached. */
int policy_manager_scan(struct policy_manager *m);

/* Forgets PID, detached by hand: no policy attaches it again while it
 * lives (a reload gives it a fresh look). */
void policy_manager_forget(struct policy_manager *m, pid_t pid);

/* PID was attached by policy POLICY before zswapd re-executed itself: the
 * next discovery that matches it to that policy takes it over instead of
 * leaving it alone as attached by hand. -ENOMEM. */
int policy_manager_adopt(struct policy_manager *m, pid_t pid, const char *policy);

/* The policy (by name) that attached PID, or NULL if none did. */
const char *policy_manager_target_policy(const struct policy_manager *m, pid_t pid);

/* Listings for the control socket, as text for a person or one JSON value. */
int policy_manager_dump_policies(struct policy_manager *m, FILE *f, bool json);
int policy_manager_dump_targets(struct policy_manager *m, FILE *f, bool json);
int policy_manager_dump_status(struct policy_manager *m, FILE *f, bool json);

/* Whether a process may be attached by policy at all: not the daemon, not
 * a kernel thread, not a zombie or dead. Reads PID_DIR_FD's "stat"; 1 yes,
 * 0 no, negative errno if it cannot tell. */
int policy_process_eligible(int pid_dir_fd, pid_t pid);
