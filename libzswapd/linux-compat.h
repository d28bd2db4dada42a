/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Kernel interfaces newer than the installed headers (linux-libc-dev 6.1)
 * that ptrace injection relies on. Each is guarded so that newer headers win.
 */
#pragma once

#include <linux/userfaultfd.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_process_madvise
#define __NR_process_madvise 440
#endif

/* Only on /dev/userfaultfd: makes a userfaultfd owned by the caller's mm
 * without the CAP_SYS_PTRACE that userfaultfd(2) wants (Linux 6.1). */
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* pidfd "value" naming the calling thread (Linux 6.15); for madvise any
 * thread of a process names its memory. */
#ifndef PIDFD_SELF_THREAD
#define PIDFD_SELF_THREAD (-10000)
#endif

/* PROCMAP_QUERY on /proc/PID/maps (Linux 6.11): the mapping at one
 * address, its flags and name, without formatting the whole list. Named
 * apart from uapi/linux/fs.h's struct procmap_query, same layout. */
struct zsw_procmap_query {
        uint64_t size;
        uint64_t query_flags;
        uint64_t query_addr;
        uint64_t vma_start;
        uint64_t vma_end;
        uint64_t vma_flags;
        uint64_t vma_page_size;
        uint64_t vma_offset;
        uint64_t inode;
        uint32_t dev_major;
        uint32_t dev_minor;
        uint32_t vma_name_size;
        uint32_t build_id_size;
        uint64_t vma_name_addr;
        uint64_t build_id_addr;
};
#define ZSW_PROCMAP_QUERY _IOWR('f', 17, struct zsw_procmap_query)
#define ZSW_PROCMAP_QUERY_VMA_EXECUTABLE 0x04
