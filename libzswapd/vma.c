/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Target address space: smaps parsing and the eligibility rules, present
 * page runs from PAGEMAP_SCAN, and vectored reads of the target's pages.
 * The attach code uses the first to decide what to register; the eviction
 * pipeline uses the other two, in that order, on write-protected runs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#include "page.h"
#include "vma.h"

_Static_assert(sizeof(struct zsw_page_run) == sizeof(struct page_region),
               "zsw_page_run must match the kernel's page_region");

static void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}

void zsw_vma_list_free(struct zsw_vma_list *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->vmas[i].name);
        free(l->vmas);
        *l = (struct zsw_vma_list) {};
}

static unsigned parse_vmflags(const char *s) {
        static const struct {
                char code[3];
                unsigned flag;
        } table[] = {
                { "lo", ZSW_VMF_LOCKED }, { "ht", ZSW_VMF_HUGETLB },  { "io", ZSW_VMF_IO },
                { "pf", ZSW_VMF_PFNMAP }, { "mm", ZSW_VMF_MIXEDMAP }, { "dd", ZSW_VMF_DONTDUMP },
                { "um", ZSW_VMF_UFFD },   { "uw", ZSW_VMF_UFFD },     { "ui", ZSW_VMF_UFFD },
                { "sh", ZSW_VMF_SHARED },
        };
        unsigned flags = 0;

        for (const char *p = s; *p;) {
                size_t l;

                p += strspn(p, " \t\n");
                l = strcspn(p, " \t\n");
                for (size_t i = 0; l == 2 && i < ARRAY_SIZE(table); i++)
                        if (memcmp(p, table[i].code, 2) == 0)
                                flags |= table[i].flag;
                p += l;
        }
        return flags;
}

/* "start-end perms offset dev inode [name]": 0 and a filled *v, or
 * -EBADMSG. The name may contain spaces; only the newline goes. */
static int parse_header(const char *line, struct zsw_vma *v) {
        unsigned long long start, end, offset, inode;
        unsigned major, minor;
        char perms[5];
        int name_at = -1;

        if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu %n", &start, &end, perms, &offset, &major,
                   &minor, &inode, &name_at) < 7 ||
            name_at < 0)
                return -EBADMSG;
        if (start >= end || strlen(perms) != 4 || !strchr("ps", perms[3]))
                return -EBADMSG;

        *v = (struct zsw_vma) {
                .start = start,
                .end = end,
                .readable = perms[0] == 'r',
                .writable = perms[1] == 'w',
                .executable = perms[2] == 'x',
                .shared = perms[3] == 's',
                .offset = offset,
                .inode = inode,
                .name = strndup(line + name_at, strcspn(line + name_at, "\n")),
        };
        return v->name ? 0 : -ENOMEM;
}

/* "Key: value ..." lines of the mapping v. Unknown keys are fine. */
static int parse_field(const char *line, struct zsw_vma *v) {
        size_t klen = strspn(line, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_");
        const char *val = line + klen + 1;

        if (klen == 0 || line[klen] != ':')
                return -EBADMSG;
        if (klen == 7 && memcmp(line, "VmFlags", 7) == 0) {
                v->flags = parse_vmflags(val);
                v->has_vmflags = true;
        } else if (klen == 3 && memcmp(line, "Rss", 3) == 0)
                v->rss_kb = strtoull(val, NULL, 10);
        else if (klen == 9 && memcmp(line, "Anonymous", 9) == 0)
                v->anon_kb = strtoull(val, NULL, 10);
        else if (klen == 4 && memcmp(line, "Swap", 4) == 0)
                v->swap_kb = strtoull(val, NULL, 10);
        return 0;
}

static int list_push(struct zsw_vma_list *l, size_t *cap, const struct zsw_vma *v) {
        if (l->n == *cap) {
                size_t ncap = *cap ? *cap * 2 : 64;
                struct zsw_vma *n = realloc(l->vmas, ncap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                l->vmas = n;
                *cap = ncap;
        }
        l->vmas[l->n++] = *v;
        return 0;
}

int zsw_vma_list_read(int dir_fd, const char *name, const struct zsw_log *log,
                      struct zsw_vma_list *ret) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list l = {};
        _cleanup_(fclosep) FILE *f = NULL;
        _cleanup_free_ char *line = NULL;
        size_t cap = 0, linecap = 0;
        unsigned lineno = 0;
        int fd, r;

        fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return zsw_log_errno(log, LOG_DEBUG, errno, "Failed to open %s: %m", name);
        f = fdopen(fd, "re");
        if (!f) {
                safe_close(fd);
                return -ENOMEM;
        }

        for (;;) {
                struct zsw_vma v;

                errno = 0;
                if (getline(&line, &linecap, f) < 0) {
                        if (errno != 0)
                                return zsw_log_errno(log, LOG_DEBUG, errno, "Failed to read %s: %m",
                                                     name);
                        break;
                }
                lineno++;
                r = parse_header(line, &v);
                if (r == -ENOMEM)
                        return r;
                if (r >= 0) {
                        r = list_push(&l, &cap, &v);
                        if (r < 0) {
                                free(v.name);
                                return r;
                        }
                        continue;
                }
                r = l.n > 0 ? parse_field(line, &l.vmas[l.n - 1]) : -EBADMSG;
                if (r < 0)
                        return zsw_log_errno(log, LOG_ERR, r, "%s:%u: malformed line: %.64s", name,
                                             lineno, line);
        }

        *ret = l;
        l = (struct zsw_vma_list) {};
        return 0;
}

bool zsw_vma_eligible(const struct zsw_vma *v) {
        const unsigned refused = ZSW_VMF_LOCKED | ZSW_VMF_HUGETLB | ZSW_VMF_IO | ZSW_VMF_PFNMAP |
                                 ZSW_VMF_MIXEDMAP | ZSW_VMF_DONTDUMP | ZSW_VMF_SHARED;

        if (!v->has_vmflags || (v->flags & refused))
                return false;
        if (v->shared || !v->readable || !v->writable || v->inode != 0)
                return false;
        /* Anonymous memory is unnamed, or named by the kernel for the heap
         * and stack, or by the program with PR_SET_VMA_ANON_NAME. Every
         * other bracketed name is a special mapping ([vvar], [vdso],
         * [vsyscall], [uprobes], ...). */
        return v->name[0] == '\0' || strcmp(v->name, "[heap]") == 0 ||
               strcmp(v->name, "[stack]") == 0 || strncmp(v->name, "[anon:", 6) == 0;
}

int zsw_vma_eligible_ranges(const struct zsw_vma_list *l, struct zsw_range exclude,
                            struct zsw_range **ret, size_t *ret_n) {
        _cleanup_free_ struct zsw_range *out = NULL;
        size_t n = 0;

        /* Each mapping minus one range leaves at most two pieces. */
        out = calloc(2 * l->n + 1, sizeof(*out));
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < l->n; i++) {
                const struct zsw_vma *v = &l->vmas[i];

                if (!zsw_vma_eligible(v))
                        continue;
                if (exclude.start >= exclude.end || exclude.end <= v->start ||
                    exclude.start >= v->end) {
                        out[n++] = (struct zsw_range) { v->start, v->end };
                        continue;
                }
                if (exclude.start > v->start)
                        out[n++] = (struct zsw_range) { v->start, exclude.start };
                if (exclude.end < v->end)
                        out[n++] = (struct zsw_range) { exclude.end, v->end };
        }
        *ret = TAKE_PTR(out);
        *ret_n = n;
        return (int) n;
}

int zsw_vma_scan(int pagemap_fd, uint64_t start, uint64_t end, uint64_t want, uint64_t without,
                 struct zsw_page_run *runs, size_t max, uint64_t *ret_next) {
        uint64_t pos = start;
        size_t n = 0;

        while (n < max && pos < end) {
                struct pm_scan_arg arg = {
                        .size = sizeof(arg),
                        .start = pos,
                        .end = end,
                        .vec = (uint64_t) (uintptr_t) (runs + n),
                        .vec_len = max - n,
                        .category_mask = want | without,
                        .category_inverted = without,
                        .return_mask = want | PAGE_IS_PFNZERO | PAGE_IS_HUGE,
                };
                int r = ioctl(pagemap_fd, PAGEMAP_SCAN, &arg);

                if (r < 0)
                        return -errno;
                /* A walk that filled the vector stops inside or right after
                 * its last run; the next call may start with the rest of
                 * that run, which we join back. */
                if (r > 0 && n > 0 && runs[n - 1].end == runs[n].start &&
                    runs[n - 1].categories == runs[n].categories) {
                        runs[n - 1].end = runs[n].end;
                        memmove(runs + n, runs + n + 1, (size_t) (r - 1) * sizeof(*runs));
                        r--;
                }
                n += (size_t) r;
                if (arg.walk_end <= pos)
                        return -EIO; /* no progress: never loop forever */
                pos = arg.walk_end;
        }
        *ret_next = pos;
        return (int) n;
}

int zsw_vma_read_pages(pid_t pid, const uint64_t *addrs, size_t n, void *const *bufs,
                       bool *ret_ok) {
        const size_t page = ZSW_PAGE_SIZE;
        struct iovec local[IOV_MAX], remote[IOV_MAX];
        size_t i = 0, done = 0;

        while (i < n) {
                size_t k = MIN(n - i, (size_t) IOV_MAX), got;
                ssize_t r;

                for (size_t j = 0; j < k; j++) {
                        local[j] = (struct iovec) { bufs[i + j], page };
                        remote[j] = (struct iovec) { (void *) (uintptr_t) addrs[i + j], page };
                }
                r = process_vm_readv(pid, local, k, remote, k, 0);
                if (r < 0 && errno != EFAULT)
                        return -errno;
                /* The kernel stops at the first page it cannot reach and
                 * reports what it read before: whole pages, since every
                 * remote iovec is one aligned page. Skip the failing page. */
                got = r < 0 ? 0 : (size_t) r / page;
                for (size_t j = 0; j < got; j++)
                        if (ret_ok)
                                ret_ok[i + j] = true;
                done += got;
                i += got;
                if (got < k) {
                        if (ret_ok)
                                ret_ok[i] = false;
                        i++;
                }
        }
        return (int) done;
}
