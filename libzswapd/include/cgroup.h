/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Control groups as the daemon sees them: where the hierarchies are
 * mounted, which groups a process is in, which processes a group holds and
 * how much memory it uses. Two layouts are supported:
 *
 *  - pure cgroup v2 (real workstations): one hierarchy, usually at
 *    /sys/fs/cgroup, where memory.current and memory.pressure live together;
 *  - hybrid (older distributions, some containers): the v1 memory controller at
 *    /sys/fs/cgroup/memory holds limits and memory.usage_in_bytes, the
 *    name=systemd hierarchy names units, and a controller-less v2 hierarchy
 *    at /sys/fs/cgroup/unified still has a memory.pressure in every group.
 *
 * Discovery uses libcgroup to find the v1 memory controller; readers of
 * /proc and cgroup files take a directory fd or the text, so tests feed
 * them fixtures as well as the real files.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

struct zsw_cgroup_layout {
        char *v2_root;      /* the cgroup2 mount, NULL if there is none */
        char *memory_root;  /* the v1 memory controller, NULL on pure v2 */
        char *systemd_root; /* the v1 name=systemd hierarchy, NULL on pure v2 */
};

/* Fills a layout from the text of /proc/self/mountinfo. Returns 0, or
 * -ENOMEDIUM when no cgroup hierarchy is mounted at all. */
int zsw_cgroup_layout_parse(const char *mountinfo, size_t size, struct zsw_cgroup_layout *ret);

/* The layout of this system: /proc/self/mountinfo, and libcgroup's view of
 * the memory controller. Call from one thread: libcgroup keeps global
 * state. */
int zsw_cgroup_layout_detect(struct zsw_cgroup_layout *ret);

/* Frees the strings of a layout and zeroes it. */
void zsw_cgroup_layout_done(struct zsw_cgroup_layout *l);

/* A process's groups, as paths below each hierarchy's root ("/" for the
 * root group), NULL where the process is in no such hierarchy. */
struct zsw_proc_cgroups {
        char *v2;
        char *memory;
        char *systemd;
};

/* Parses the text of /proc/PID/cgroup. -EBADMSG if malformed. */
int zsw_proc_cgroups_parse(const char *text, size_t size, struct zsw_proc_cgroups *ret);

/* Reads "cgroup" under PID_DIR_FD (an open /proc/PID). */
int zsw_proc_cgroups_read(int pid_dir_fd, struct zsw_proc_cgroups *ret);

void zsw_proc_cgroups_done(struct zsw_proc_cgroups *c);

/* The pids in "cgroup.procs" under GROUP_FD, in the kernel's order. Returns
 * their count (possibly 0) and a new array in *ret_pids. */
int zsw_cgroup_read_procs_at(int group_fd, pid_t **ret_pids);

/* The group's memory use in bytes: memory.current (v2), or
 * memory.usage_in_bytes (v1) if there is no memory.current. -ENOENT when the
 * group has neither (a v2 group without the memory controller). */
int zsw_cgroup_read_memory_at(int group_fd, uint64_t *ret_bytes);
