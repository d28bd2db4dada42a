/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Which policy a process falls under: its cgroup path, found in
 * /proc/PID/cgroup on pure v2 and hybrid systems alike, and its executable
 * are compared with each policy's [Match] patterns, in file order.
 */
#include <fcntl.h>
#include <fnmatch.h>
#include <string.h>

#include "conf-values.h"
#include "config.h"

/* Copies the path component at *p into buf and advances; false at the end
 * or for a component longer than any name can be. */
static bool next_component(const char **p, char buf[static 256]) {
        const char *s = *p + strspn(*p, "/");
        size_t n = strcspn(s, "/");

        if (n == 0 || n > 255)
                return false;
        memcpy(buf, s, n);
        buf[n] = '\0';
        *p = s + n;
        return true;
}

/* Some component of the cgroup path is the unit. */
static bool match_unit(const char *pattern, const char *cgroup) {
        char comp[256];

        while (next_component(&cgroup, comp))
                if (fnmatch(pattern, comp, 0) == 0)
                        return true;
        return false;
}

/* The group is PATTERN's or below it, comparing one component at a time. */
static bool match_cgroup_path(const char *pattern, const char *cgroup) {
        char pc[256], cc[256];

        while (next_component(&pattern, pc))
                if (!next_component(&cgroup, cc) || fnmatch(pc, cc, 0) != 0)
                        return false;
        return true;
}

static bool match_executable(const char *pattern, const char *exe) {
        /* /proc/PID/exe of a binary replaced by an upgrade. */
        static const char deleted[] = " (deleted)";
        char buf[CONF_PATH_MAX];
        size_t n = strlen(exe);

        if (n >= sizeof(buf))
                return false;
        memcpy(buf, exe, n + 1);
        if (has_suffix(buf, deleted))
                buf[n - strlen(deleted)] = '\0';
        if (pattern[0] == '/')
                return fnmatch(pattern, buf, FNM_PATHNAME) == 0;
        return fnmatch(pattern, strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf, 0) == 0;
}

static bool match_any(char *const *patterns, const char *s, bool (*match)(const char *, const char *)) {
        if (!s)
                return false;
        for (size_t i = 0; patterns[i]; i++)
                if (match(patterns[i], s))
                        return true;
        return false;
}

bool policy_matches(const struct zsw_policy *p, const char *cgroup_path,
                    const char *executable) {
        if (!p->units && !p->cgroup_paths && !p->executables)
                return false;
        if (p->units && !match_any(p->units, cgroup_path, match_unit))
                return false;
        if (p->cgroup_paths && !match_any(p->cgroup_paths, cgroup_path, match_cgroup_path))
                return false;
        if (p->executables && !match_any(p->executables, executable, match_executable))
                return false;
        return true;
}

const struct zsw_policy *config_match(const struct zsw_config *c, const char *cgroup_path,
                                      const char *executable) {
        for (size_t i = 0; i < c->n_policies; i++)
                if (policy_matches(&c->policies[i], cgroup_path, executable))
                        return &c->policies[i];
        return NULL;
}

/* ---- /proc/PID/cgroup -------------------------------------------------------- */

static bool has_controller(const char *list, size_t n, const char *name) {
        size_t m = strlen(name);

        for (const char *p = list, *end = list + n; p < end;) {
                const char *comma = memchr(p, ',', (size_t) (end - p));
                size_t len = comma ? (size_t) (comma - p) : (size_t) (end - p);

                if (len == m && memcmp(p, name, m) == 0)
                        return true;
                p += len + 1;
        }
        return false;
}

int proc_cgroup_parse(const char *text, size_t size, char **ret_path) {
        const char *v2 = NULL, *systemd = NULL, *end = text + size;
        size_t v2_len = 0, systemd_len = 0;
        char *path;

        if (memchr(text, '\0', size))
                return -EBADMSG;
        for (const char *l = text; l < end;) {
                const char *nl = memchr(l, '\n', (size_t) (end - l)), *le = nl ?: end;
                const char *c1 = memchr(l, ':', (size_t) (le - l)), *c2;

                if (le == l) { /* blank line */
                        l = le + 1;
                        continue;
                }
                c2 = c1 ? memchr(c1 + 1, ':', (size_t) (le - c1 - 1)) : NULL;
                if (!c2 || c1 == l || c2 + 1 >= le || c2[1] != '/')
                        return -EBADMSG;
                for (const char *d = l; d < c1; d++)
                        if (*d < '0' || *d > '9')
                                return -EBADMSG;
                if (c1 - l == 1 && l[0] == '0' && c2 == c1 + 1) {
                        v2 = c2 + 1;
                        v2_len = (size_t) (le - v2);
                } else if (has_controller(c1 + 1, (size_t) (c2 - c1 - 1), "name=systemd")) {
                        systemd = c2 + 1;
                        systemd_len = (size_t) (le - systemd);
                }
                l = le + 1;
        }
        /* On a hybrid system both name the unit's group; on a legacy one
         * (or one whose v2 tree systemd does not use) the v2 line says "/". */
        if (!v2 || (v2_len == 1 && systemd)) {
                v2 = systemd;
                v2_len = systemd_len;
        }
        if (!v2)
                return -ENODATA;
        path = strndup(v2, v2_len);
        if (!path)
                return -ENOMEM;
        *ret_path = path;
        return 0;
}

int proc_cgroup_read(int pid_dir_fd, char **ret_path) {
        _cleanup_close_ int fd = -EBADF;
        char buf[8192];
        size_t got = 0;

        fd = openat(pid_dir_fd, "cgroup", O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        for (;;) {
                ssize_t n = read(fd, buf + got, sizeof(buf) - got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t) n;
                if (got == sizeof(buf))
                        return -EFBIG;
        }
        return proc_cgroup_parse(buf, got, ret_path);
}

uint64_t limit_resolve(const struct zsw_limit *l, uint64_t reference) {
        switch (l->kind) {
        case ZSW_LIMIT_ABSOLUTE:
                return l->value;
        case ZSW_LIMIT_RELATIVE:
                return (uint64_t) ((unsigned __int128) reference * l->value / ZSW_PERMYRIAD_MAX);
        case ZSW_LIMIT_NONE:
        default:
                return UINT64_MAX;
        }
}
