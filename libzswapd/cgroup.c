/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Cgroup discovery and readers (see cgroup.h). The daemon rescans every
 * couple of seconds, so these stay cheap: one read of a small file each,
 * no walking of the hierarchy.
 */
#include <fcntl.h>
#include <libcgroup.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cgroup.h"

/* cgroup.procs of a big group (a desktop session) stays far below this. */
#define PROCS_FILE_MAX (1u << 20)
#define SMALL_FILE_MAX 4096

/* Reads a whole file under DIR_FD into a new NUL-terminated buffer. */
static int read_text_at(int dir_fd, const char *name, size_t max, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0, cap = 4096;

        fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t n;

                if (len + 1 >= cap) {
                        char *p;

                        if (cap >= max)
                                return -EFBIG;
                        cap *= 2;
                        p = realloc(buf, cap);
                        if (!p)
                                return -ENOMEM;
                        buf = p;
                }
                n = read(fd, buf + len, cap - len - 1);
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += n;
        }
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        if (ret_size)
                *ret_size = len;
        return 0;
}

/* ---- layout ---------------------------------------------------------------- */

void zsw_cgroup_layout_done(struct zsw_cgroup_layout *l) {
        free(l->v2_root);
        free(l->memory_root);
        free(l->systemd_root);
        *l = (struct zsw_cgroup_layout) {};
}

/* Whether the comma-separated OPTS (N bytes, not NUL-terminated) holds OPT. */
static bool has_option(const char *opts, size_t n, const char *opt) {
        size_t m = strlen(opt);

        for (const char *p = opts, *end = opts + n; p < end;) {
                const char *comma = memchr(p, ',', end - p);
                size_t k = comma ? (size_t) (comma - p) : (size_t) (end - p);

                if (k == m && memcmp(p, opt, m) == 0)
                        return true;
                p += k + 1;
        }
        return false;
}

/* The mount point and, after " - ", the type and super options of one
 * mountinfo line. */
static bool split_mountinfo(const char *line, size_t n, char mnt[static 256],
                            char fstype[static 32], const char **opts, size_t *opts_len) {
        const char *p = line, *end = line + n, *sep;
        int field = 0;

        while (field < 4 && p < end) {
                p = memchr(p, ' ', end - p);
                if (!p)
                        return false;
                p++;
                field++;
        }
        sep = memchr(p, ' ', end - p);
        if (!sep || sep - p >= 256)
                return false;
        memcpy(mnt, p, sep - p);
        mnt[sep - p] = 0;
        p = memmem(sep, end - sep, " - ", 3);
        if (!p)
                return false;
        p += 3;
        sep = memchr(p, ' ', end - p);
        if (!sep || sep - p >= 32)
                return false;
        memcpy(fstype, p, sep - p);
        fstype[sep - p] = 0;
        p = memchr(sep + 1, ' ', end - sep - 1); /* skip the source */
        if (!p)
                return false;
        *opts = p + 1;
        *opts_len = end - p - 1;
        return true;
}

int zsw_cgroup_layout_parse(const char *mountinfo, size_t size, struct zsw_cgroup_layout *ret) {
        struct zsw_cgroup_layout l = {};
        const char *p = mountinfo, *end = mountinfo + size;

        while (p < end) {
                const char *eol = memchr(p, '\n', end - p) ?: end, *opts;
                char mnt[256], fstype[32], **slot = NULL;
                size_t opts_len;

                if (split_mountinfo(p, eol - p, mnt, fstype, &opts, &opts_len)) {
                        /* The first mount of each kind wins: later ones are
                         * bind mounts into containers and the like. */
                        if (strcmp(fstype, "cgroup2") == 0)
                                slot = &l.v2_root;
                        else if (strcmp(fstype, "cgroup") == 0 &&
                                 has_option(opts, opts_len, "memory"))
                                slot = &l.memory_root;
                        else if (strcmp(fstype, "cgroup") == 0 &&
                                 has_option(opts, opts_len, "name=systemd"))
                                slot = &l.systemd_root;
                        if (slot && !*slot && !(*slot = strdup(mnt))) {
                                zsw_cgroup_layout_done(&l);
                                return -ENOMEM;
                        }
                }
                p = eol + 1;
        }
        if (!l.v2_root && !l.memory_root && !l.systemd_root)
                return -ENOMEDIUM;
        *ret = l;
        return 0;
}

int zsw_cgroup_layout_detect(struct zsw_cgroup_layout *ret) {
        struct zsw_cgroup_layout l;
        _cleanup_free_ char *text = NULL;
        char *mp = NULL;
        size_t size;
        int r;

        r = read_text_at(AT_FDCWD, "/proc/self/mountinfo", PROCS_FILE_MAX, &text, &size);
        if (r < 0)
                return r;
        r = zsw_cgroup_layout_parse(text, size, &l);
        if (r < 0)
                return r;

        /* libcgroup knows the v1 controllers; where it finds the memory
         * controller, that is the hierarchy limits and usage live in. (It
         * names the cgroup2 mount after a v1 controller on hybrid systems,
         * so the v2 root comes from mountinfo alone.) */
        if (cgroup_init() == 0 && cgroup_get_subsys_mount_point("memory", &mp) == 0 && mp &&
            (!l.memory_root || strcmp(mp, l.memory_root) != 0) &&
            (!l.v2_root || strcmp(mp, l.v2_root) != 0)) {
                free(l.memory_root);
                l.memory_root = mp;
                mp = NULL;
        }
        free(mp);
        *ret = l;
        return 0;
}

/* ---- a process's groups ------------------------------------------------------- */

void zsw_proc_cgroups_done(struct zsw_proc_cgroups *c) {
        free(c->v2);
        free(c->memory);
        free(c->systemd);
        *c = (struct zsw_proc_cgroups) {};
}

int zsw_proc_cgroups_parse(const char *text, size_t size, struct zsw_proc_cgroups *ret) {
        struct zsw_proc_cgroups c = {};
        const char *p = text, *end = text + size;

        while (p < end) {
                const char *eol = memchr(p, '\n', end - p) ?: end;
                const char *c1 = memchr(p, ':', eol - p), *c2;
                char **slot = NULL;

                if (eol == p) {
                        p = eol + 1;
                        continue;
                }
                c2 = c1 ? memchr(c1 + 1, ':', eol - c1 - 1) : NULL;
                if (!c2 || c2 + 1 >= eol || c2[1] != '/') {
                        zsw_proc_cgroups_done(&c);
                        return -EBADMSG;
                }
                if (c1 - p == 1 && p[0] == '0' && c2 == c1 + 1)
                        slot = &c.v2;
                else if (has_option(c1 + 1, c2 - c1 - 1, "memory"))
                        slot = &c.memory;
                else if (has_option(c1 + 1, c2 - c1 - 1, "name=systemd"))
                        slot = &c.systemd;
                if (slot && !*slot && !(*slot = strndup(c2 + 1, eol - c2 - 1))) {
                        zsw_proc_cgroups_done(&c);
                        return -ENOMEM;
                }
                p = eol + 1;
        }
        *ret = c;
        return 0;
}

int zsw_proc_cgroups_read(int pid_dir_fd, struct zsw_proc_cgroups *ret) {
        _cleanup_free_ char *text = NULL;
        size_t size;
        int r;

        r = read_text_at(pid_dir_fd, "cgroup", SMALL_FILE_MAX * 4, &text, &size);
        if (r < 0)
                return r;
        return zsw_proc_cgroups_parse(text, size, ret);
}

/* ---- a group's processes and memory --------------------------------------------- */

int zsw_cgroup_read_procs_at(int group_fd, pid_t **ret_pids) {
        _cleanup_free_ char *text = NULL;
        _cleanup_free_ pid_t *pids = NULL;
        size_t size, n = 0, cap = 0;
        char *p, *eol;
        int r;

        r = read_text_at(group_fd, "cgroup.procs", PROCS_FILE_MAX, &text, &size);
        if (r < 0)
                return r;
        for (p = text; *p; p = eol + 1) {
                char *endp;
                long v;

                eol = strchr(p, '\n');
                if (!eol)
                        eol = p + strlen(p) - 1;
                errno = 0;
                v = strtol(p, &endp, 10);
                if (errno != 0 || endp == p || (endp != eol + 1 && *endp != '\n') || v <= 0 ||
                    v > INT32_MAX)
                        return -EBADMSG;
                if (n == cap) {
                        pid_t *q;

                        cap = cap ? cap * 2 : 64;
                        q = realloc(pids, cap * sizeof(pid_t));
                        if (!q)
                                return -ENOMEM;
                        pids = q;
                }
                pids[n++] = (pid_t) v;
        }
        if (n > INT32_MAX)
                return -E2BIG;
        *ret_pids = TAKE_PTR(pids);
        return (int) n;
}

static int read_u64_at(int dir_fd, const char *name, uint64_t *ret) {
        _cleanup_free_ char *text = NULL;
        unsigned long long v;
        char *end;

        int r = read_text_at(dir_fd, name, SMALL_FILE_MAX, &text, NULL);
        if (r < 0)
                return r;
        errno = 0;
        v = strtoull(text, &end, 10);
        if (errno != 0 || end == text || (*end && strcmp(end, "\n") != 0) || text[0] == '-')
                return -EBADMSG;
        *ret = v;
        return 0;
}

int zsw_cgroup_read_memory_at(int group_fd, uint64_t *ret_bytes) {
        int r;

        r = read_u64_at(group_fd, "memory.current", ret_bytes);
        if (r != -ENOENT)
                return r;
        return read_u64_at(group_fd, "memory.usage_in_bytes", ret_bytes);
}
