/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The target's address space as the daemon sees it: which mappings may be
 * registered and evicted (from /proc/PID/smaps), which of their pages are
 * present right now (PAGEMAP_SCAN on /proc/PID/pagemap), and reading those
 * pages out (process_vm_readv, vectored).
 *
 * Every reader takes a directory fd and a name relative to it (AT_FDCWD and
 * a path for fixture files), so tests can feed it anything.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "uffd-compat.h"
#include "util.h"

/* VmFlags of smaps that decide eligibility (two-letter codes in comments). */
enum {
        ZSW_VMF_LOCKED = 1u << 0,   /* lo: mlocked, must stay resident */
        ZSW_VMF_HUGETLB = 1u << 1,  /* ht */
        ZSW_VMF_IO = 1u << 2,       /* io */
        ZSW_VMF_PFNMAP = 1u << 3,   /* pf */
        ZSW_VMF_MIXEDMAP = 1u << 4, /* mm */
        ZSW_VMF_DONTDUMP = 1u << 5, /* dd */
        ZSW_VMF_UFFD = 1u << 6,     /* um, uw, ui: registered with a uffd */
        ZSW_VMF_SHARED = 1u << 7,   /* sh */
};

struct zsw_vma {
        uint64_t start, end;
        bool readable, writable, executable, shared;
        uint64_t offset, inode;
        unsigned flags;   /* ZSW_VMF_*; only valid when has_vmflags */
        bool has_vmflags; /* false for /proc/PID/maps */
        uint64_t rss_kb;  /* smaps Rss, Anonymous, Swap (0 from maps) */
        uint64_t anon_kb;
        uint64_t swap_kb;
        char *name; /* path, [heap], [stack], [anon:x], or "" */
};

struct zsw_vma_list {
        struct zsw_vma *vmas;
        size_t n;
};

/* Parses dir_fd/name in /proc/PID/smaps (or maps) format into *ret.
 * -EBADMSG, logged with the line number, for a line that is neither a
 * mapping header nor a "Key: value" field; -ENOENT/-ESRCH for a vanished
 * process. Free with zsw_vma_list_free(). */
int zsw_vma_list_read(int dir_fd, const char *name, const struct zsw_log *log,
                      struct zsw_vma_list *ret);

/* Frees the list's contents and leaves it empty. */
void zsw_vma_list_free(struct zsw_vma_list *l);

/* Whether the daemon may register and evict this mapping: private,
 * anonymous ([heap], [stack], [anon:...] included), readable and writable,
 * and none of mlocked, hugetlb, IO/PFN/mixed maps, or dontdump (memory its
 * owner asked to keep out of dumps, e.g. keys: not for a swap file either).
 * A mapping whose VmFlags are unknown (maps format) is refused. Existing
 * uffd registration (ZSW_VMF_UFFD) is not judged here, since the daemon's
 * own ranges carry it too: the caller knows which are its own, and
 * registering over somebody else's fails with -EBUSY. */
bool zsw_vma_eligible(const struct zsw_vma *v);

struct zsw_range {
        uint64_t start, end;
};

/* Collects the eligible parts of l into a new array, leaving out
 * [exclude.start, exclude.end) (the daemon's own scratch mapping in the
 * target; an empty range excludes nothing). Returns the count. */
int zsw_vma_eligible_ranges(const struct zsw_vma_list *l, struct zsw_range exclude,
                            struct zsw_range **ret, size_t *ret_n);

/* One run of pages [start, end) with its PAGE_IS_* categories. Same
 * layout as the kernel's struct page_region. */
struct zsw_page_run {
        uint64_t start, end, categories;
};

/* Finds runs of pages within [start, end) having every category in `want`
 * (PAGE_IS_PRESENT: resident, safe to read) and none in `without`
 * (PAGE_IS_WRITTEN on a write-protected range: untouched since protected)
 * using PAGEMAP_SCAN on an open /proc/PID/pagemap. Fills up to max runs; runs are also split where
 * PAGE_IS_PFNZERO or PAGE_IS_HUGE changes, reported in categories. When
 * runs is full the walk stops early: *ret_next says where to resume
 * (== end when the range is done). Returns the number of runs. */
int zsw_vma_scan(int pagemap_fd, uint64_t start, uint64_t end, uint64_t want, uint64_t without,
                 struct zsw_page_run *runs, size_t max, uint64_t *ret_next);

/* Reads n pages of process pid at addrs[i] into bufs[i] with vectored
 * process_vm_readv, IOV_MAX pages per call. A page that cannot be read
 * (unmapped meanwhile) is skipped: ret_ok[i] (may be NULL) says which were
 * read. Returns how many were, or -ESRCH (gone), -EPERM.
 *
 * Never pass a page that may be missing in a uffd-registered range: the
 * read then waits for that fault to be served, and if the caller is the
 * one serving it, forever. Check presence first (zsw_vma_scan) while the
 * range is write-protected, and keep a fault-service thread running. */
int zsw_vma_read_pages(pid_t pid, const uint64_t *addrs, size_t n, void *const *bufs, bool *ret_ok);
