/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target for the readers of kernel text the policy manager
 * parses every period. The first byte picks what the rest is: ('0') a PSI
 * pressure file, ('1') /proc/self/mountinfo, ('2') /proc/PID/cgroup.
 *
 * Beyond "does not crash": a pressure file that parses, written back in
 * the kernel's format, parses to the same values.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cgroup.h"
#include "psi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int format_line(char *buf, size_t n, const char *name, const struct zsw_psi_line *l) {
        return snprintf(buf, n, "%s avg10=%u.%02u avg60=%u.%02u avg300=%u.%02u total=%" PRIu64 "\n",
                        name, l->avg10 / 100, l->avg10 % 100, l->avg60 / 100, l->avg60 % 100,
                        l->avg300 / 100, l->avg300 % 100, l->total_usec);
}

static void psi_round_trip(const char *text, size_t size) {
        struct zsw_psi a, b;
        char buf[512];
        int n;

        if (zsw_psi_parse(text, size, &a) < 0)
                return;
        n = format_line(buf, sizeof(buf), "some", &a.some);
        if (a.has_full)
                n += format_line(buf + n, sizeof(buf) - n, "full", &a.full);
        if (zsw_psi_parse(buf, n, &b) < 0 || memcmp(&a.some, &b.some, sizeof(a.some)) != 0 ||
            a.has_full != b.has_full || (a.has_full && memcmp(&a.full, &b.full, sizeof(a.full))))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *text = (const char *) data + 1;
        struct zsw_cgroup_layout l;
        struct zsw_proc_cgroups c;

        if (size < 1)
                return 0;
        size--;
        switch (data[0]) {
        case '0':
                psi_round_trip(text, size);
                break;
        case '1':
                if (zsw_cgroup_layout_parse(text, size, &l) >= 0)
                        zsw_cgroup_layout_done(&l);
                break;
        case '2':
                if (zsw_proc_cgroups_parse(text, size, &c) >= 0)
                        zsw_proc_cgroups_done(&c);
                break;
        }
        return 0;
}
