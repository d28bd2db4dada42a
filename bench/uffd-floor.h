/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct uffd_floor {
        uint64_t p50_ns, p99_ns;
        size_t faults;
};

/* Times `pages` faults of the calling thread answered by a bare handler
 * process (see uffd-floor.c): on handler_cpu, or on any CPU when it is
 * negative. Returns 0 or a negative errno. */
int uffd_floor_measure(size_t pages, int handler_cpu, struct uffd_floor *ret);
