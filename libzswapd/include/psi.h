/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Pressure stall information (PSI): reading the "some"/"full" lines of a
 * pressure file (/proc/pressure/memory, or a cgroup v2 group's
 * memory.pressure, which exists on hybrid systems too) and registering
 * triggers on them. A trigger is a line such as "some 150000 1000000"
 * written to the open file: the kernel then raises POLLPRI on that
 * descriptor whenever tasks stalled for 150 ms within any 1 s window. The
 * daemon's control loop reads the averages every period and polls the
 * triggers to back off at once when a group starts to stall.
 *
 * Every function takes a directory fd and a file name, so tests can feed
 * fixture files as well as the kernel's.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* The kernel's bounds for a trigger's window (kernel/sched/psi.c). */
#define ZSW_PSI_WINDOW_MIN_USEC UINT64_C(500000)
#define ZSW_PSI_WINDOW_MAX_USEC UINT64_C(10000000)
/* Without CAP_SYS_RESOURCE the window must be a multiple of this (even for
 * root: containers often drop that capability). */
#define ZSW_PSI_WINDOW_UNPRIV_USEC UINT64_C(2000000)

struct zsw_psi_line {
        /* Percentages of time some (or all) tasks stalled, in hundredths
         * of a percent as the kernel prints them with two decimals. */
        unsigned avg10, avg60, avg300;
        uint64_t total_usec; /* stall time since boot (or group creation) */
};

struct zsw_psi {
        struct zsw_psi_line some;
        struct zsw_psi_line full;
        bool has_full; /* the "full" line was there (not for cpu before 5.13) */
};

/*
 * Parses the text of a pressure file. Returns 0, or -EBADMSG if there is no
 * well-formed "some" line or a "full" line is malformed; *ret is untouched
 * then. Unknown keys in a line are skipped, so newer kernels still parse.
 */
int zsw_psi_parse(const char *text, size_t size, struct zsw_psi *ret);

/* Reads and parses NAME under DIR_FD (AT_FDCWD for a path). */
int zsw_psi_read_at(int dir_fd, const char *name, struct zsw_psi *ret);

/*
 * Opens NAME under DIR_FD and registers a trigger on it: wake up when tasks
 * stalled (all of them when FULL, else some) for STALL_USEC within any
 * WINDOW_USEC. Returns 0 and a descriptor in *ret_fd that raises POLLPRI
 * (EPOLLPRI) on every event; closing it removes the trigger. -EINVAL for a
 * window or stall out of the kernel's bounds; otherwise the errno of the
 * open or of the kernel refusing the trigger (-EOPNOTSUPP: PSI disabled).
 */
int zsw_psi_trigger_open_at(int dir_fd, const char *name, bool full, uint64_t stall_usec,
                            uint64_t window_usec, int *ret_fd);

/*
 * The same, but when the kernel refuses the window because the caller
 * lacks CAP_SYS_RESOURCE, retries with the window rounded up to a multiple
 * of ZSW_PSI_WINDOW_UNPRIV_USEC and the stall scaled to the same fraction.
 * Returns 0 for the trigger as asked, 1 for a widened one; the window and
 * stall used are in *ret_stall_usec and *ret_window_usec (may be NULL).
 */
int zsw_psi_trigger_open_widen_at(int dir_fd, const char *name, bool full, uint64_t stall_usec,
                                  uint64_t window_usec, int *ret_fd, uint64_t *ret_stall_usec,
                                  uint64_t *ret_window_usec);

/* Stall time in TOTAL growth over the elapsed time, as permyriad (1/10000)
 * of it; 0 when no time elapsed or the counter went back. */
unsigned zsw_psi_stall_permyriad(uint64_t total_before, uint64_t total_after,
                                 uint64_t elapsed_usec);
