/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Kernel interfaces newer than the installed headers. The build machines
 * carry linux-libc-dev 6.1 while the kernels we run on are 6.18; everything
 * below is copied by value from the kernel's uapi (include/uapi/linux/
 * userfaultfd.h and fs.h) and only defined when the system headers lack it,
 * so newer headers take over silently. Include this instead of
 * <linux/userfaultfd.h> and <linux/fs.h>.
 */
#pragma once

#include <linux/fs.h>
#include <linux/ioctl.h>
#include <linux/types.h>
#include <linux/userfaultfd.h>

/* ---- userfaultfd features (uapi/linux/userfaultfd.h, 6.4 .. 6.8) ---- */

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef _UFFDIO_POISON
#define _UFFDIO_POISON (0x08)
struct uffdio_poison {
        struct uffdio_range range;
#define UFFDIO_POISON_MODE_DONTWAKE ((__u64) 1 << 0)
        __u64 mode;
        __s64 updated;
};
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#endif

#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

/* /dev/userfaultfd: a full (kernel-mode faults too) uffd for whoever holds
 * an open descriptor of the device, privileged or not. */
#ifndef USERFAULTFD_IOC
#define USERFAULTFD_IOC 0xAA
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif

/* UFFDIO_MOVE (6.8): remaps pages between two ranges of the same mm. It
 * only works from inside the target (EINVAL on another process's uffd), which is why the
 * daemon does not build on it; kept for agents running in the target. */
#ifndef _UFFDIO_MOVE
#define _UFFDIO_MOVE (0x05)
struct uffdio_move {
        __u64 dst;
        __u64 src;
        __u64 len;
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64) 1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64) 1 << 1)
        __u64 mode;
        /* Out: bytes moved, or a negative errno. */
        __s64 move;
};
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#endif

/* ---- PAGEMAP_SCAN on /proc/PID/pagemap (uapi/linux/fs.h, 6.7) ---- */

#ifndef PAGEMAP_SCAN
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PAGE_IS_PFNZERO (1 << 5)
#define PAGE_IS_HUGE (1 << 6)
#define PAGE_IS_SOFT_DIRTY (1 << 7)

/* One run of pages [start, end) sharing the categories asked for. */
struct page_region {
        __u64 start;
        __u64 end;
        __u64 categories;
};

#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)

struct pm_scan_arg {
        __u64 size;
        __u64 flags;
        __u64 start;
        __u64 end;
        /* Out: where the walk stopped; equals end when it completed. */
        __u64 walk_end;
        __u64 vec;
        __u64 vec_len;
        __u64 max_pages;
        __u64 category_inverted;
        __u64 category_mask;
        __u64 category_anyof_mask;
        __u64 return_mask;
};

#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif

/* Guard regions (MADV_GUARD_INSTALL, 6.14) report their own category. */
#ifndef PAGE_IS_GUARD
#define PAGE_IS_GUARD (1 << 8)
#endif

/* ---- guard regions (uapi/asm-generic/mman-common.h, 6.13) ---- */

/* MADV_GUARD_INSTALL zaps a range and leaves a marker in each PTE (a
 * touch is SIGSEGV); MADV_GUARD_REMOVE clears the markers, leaving the
 * PTEs empty. Neither raises UFFD_EVENT_REMOVE. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
