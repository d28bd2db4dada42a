/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Which policy a process falls under: its cgroup path, found in
 * /proc/PID/cgroup on pure v2 and hybrid systems alike, and the names of its
 * executable (the file it runs, the path it was started as, its comm) are
 * compared with each policy's [Match] patterns, in file order.
 */
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

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

static const char *file_name(const char *path) {
        const char *slash = strrchr(path, '/');

        return slash ? slash + 1 : path;
}

const char *exe_form_to_string(enum zsw_exe_form f) {
        static const char *const names[_ZSW_EXE_FORM_MAX] = {
                [ZSW_EXE_PATH] = "exe",    [ZSW_EXE_PATH_NAME] = "exe-name",
                [ZSW_EXE_ARGV0] = "argv0", [ZSW_EXE_ARGV0_NAME] = "argv0-name",
                [ZSW_EXE_COMM] = "comm",
        };

        return (unsigned) f < _ZSW_EXE_FORM_MAX ? names[f] : NULL;
}

const char *proc_exe_name(const struct zsw_proc_exe *e, enum zsw_exe_form f) {
        switch (f) {
        case ZSW_EXE_PATH:
                return e->path;
        case ZSW_EXE_PATH_NAME:
                return e->path ? file_name(e->path) : NULL;
        case ZSW_EXE_ARGV0:
                return e->argv0;
        case ZSW_EXE_ARGV0_NAME:
                return e->argv0 ? file_name(e->argv0) : NULL;
        case ZSW_EXE_COMM:
                return e->comm;
        default:
                return NULL;
        }
}

void policy_match_format(char *buf, size_t size, const char *unit, const char *cgroup_path,
                         const char *executable, enum zsw_exe_form form) {
        FILE *f = fmemopen(buf, size, "w");

        if (!f) {
                snprintf(buf, size, "-");
                return;
        }
        if (unit)
                fprintf(f, "Unit=%s", unit);
        if (cgroup_path)
                fprintf(f, "%sCgroupPath=%s", unit ? " " : "", cgroup_path);
        if (executable)
                fprintf(f, "%sExecutable=%s (%s)", unit || cgroup_path ? " " : "", executable,
                        exe_form_to_string(form));
        if (!unit && !cgroup_path && !executable)
                fputc('-', f);
        fclose(f);
        buf[size - 1] = '\0'; /* fmemopen() adds none to a full buffer */
}

/* A path pattern is compared with the paths, a name with the names, in
 * the order of enum zsw_exe_form: the file the kernel runs first. */
static bool match_executable(const char *pattern, const struct zsw_proc_exe *e,
                             enum zsw_exe_form *ret_form) {
        bool path = pattern[0] == '/';

        for (enum zsw_exe_form f = 0; f < _ZSW_EXE_FORM_MAX; f++) {
                bool is_path = f == ZSW_EXE_PATH || f == ZSW_EXE_ARGV0;
                const char *name = proc_exe_name(e, f);

                if (is_path == path && name &&
                    fnmatch(pattern, name, path ? FNM_PATHNAME : 0) == 0) {
                        *ret_form = f;
                        return true;
                }
        }
        return false;
}

/* The first of PATTERNS that S matches, or NULL. */
static const char *match_any(char *const *patterns, const char *s,
                             bool (*match)(const char *, const char *)) {
        if (!s)
                return NULL;
        for (size_t i = 0; patterns[i]; i++)
                if (match(patterns[i], s))
                        return patterns[i];
        return NULL;
}

bool policy_matches(const struct zsw_policy *p, const char *cgroup_path,
                    const struct zsw_proc_exe *exe, struct zsw_match *ret_match) {
        struct zsw_match m = {};

        if (!p->units && !p->cgroup_paths && !p->executables)
                return false;
        if (p->units && !(m.unit = match_any(p->units, cgroup_path, match_unit)))
                return false;
        if (p->cgroup_paths &&
            !(m.cgroup_path = match_any(p->cgroup_paths, cgroup_path, match_cgroup_path)))
                return false;
        if (p->executables) {
                for (size_t i = 0; exe && p->executables[i] && !m.executable; i++)
                        if (match_executable(p->executables[i], exe, &m.executable_form))
                                m.executable = p->executables[i];
                if (!m.executable)
                        return false;
        }
        if (ret_match)
                *ret_match = m;
        return true;
}

const struct zsw_policy *config_match(const struct zsw_config *c, const char *cgroup_path,
                                      const struct zsw_proc_exe *exe, struct zsw_match *ret_match) {
        for (size_t i = 0; i < c->n_policies; i++)
                if (policy_matches(&c->policies[i], cgroup_path, exe, ret_match))
                        return &c->policies[i];
        return NULL;
}

/* ---- /proc/PID/exe, cmdline, comm ---------------------------------------------- */

/* Reads at most SIZE bytes of NAME under DIR_FD; returns how many, or -errno. */
static ssize_t read_at(int dir_fd, const char *name, char *buf, size_t size) {
        _cleanup_close_ int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        size_t got = 0;

        if (fd < 0)
                return -errno;
        while (got < size) {
                ssize_t n = read(fd, buf + got, size - got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t) n;
        }
        return (ssize_t) got;
}

static int readlink_at(int dir_fd, const char *name, char buf[static CONF_PATH_MAX]) {
        ssize_t n = readlinkat(dir_fd, name, buf, CONF_PATH_MAX);

        if (n < 0)
                return -errno;
        if (n >= CONF_PATH_MAX)
                return -ENAMETOOLONG;
        buf[n] = '\0';
        return 0;
}

/* Drops empty and "." components of the absolute path P in place, and
 * ".." with the component before it (by the text: only a path that was
 * resolved to the executable gets here, this is how it is shown). */
static void path_simplify(char *p) {
        char *w = p;

        for (const char *r = p;;) {
                size_t n;

                r += strspn(r, "/");
                if (!*r)
                        break;
                n = strcspn(r, "/");
                if (n == 2 && r[0] == '.' && r[1] == '.') {
                        while (w > p && *--w != '/')
                                ;
                } else if (n != 1 || r[0] != '.') {
                        *w++ = '/';
                        memmove(w, r, n);
                        w += n;
                }
                r += n;
        }
        if (w == p)
                *w++ = '/';
        *w = '\0';
}

/* Parts of argv[0] tried, at most: the whole, then before each space;
 * directories of a PATH searched, at most; the part of a process's
 * environment read for its PATH. */
#define ARGV0_TRIES 8
#define PATH_DIRS_MAX 32
#define ENVIRON_MAX (64 * 1024)
/* systemd's, which its units and most shells start with. */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Opens PATH as the process sees it: an absolute one in its root (symlinks
 * too, as a chroot or container has them), a relative one from its current
 * directory (where a ".." or an absolute symlink leaves it for the
 * daemon's root: the file found is compared with the executable anyway). */
static int open_as_process(int pid_dir_fd, const char *path) {
        bool abs = path[0] == '/';
        _cleanup_close_ int dir_fd =
                openat(pid_dir_fd, abs ? "root" : "cwd", O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct open_how how = {
                .flags = O_PATH | O_CLOEXEC,
                .resolve = RESOLVE_NO_MAGICLINKS | (abs ? RESOLVE_IN_ROOT : 0),
        };
        int fd;

        if (dir_fd < 0)
                return -errno;
        fd = (int) syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS) /* before Linux 5.6 */
                fd = openat(dir_fd, path + strspn(path, "/"), O_PATH | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* The file a process runs, as its names are checked against it, and the
 * config whose patterns they are for (NULL: any). */
struct exe_id {
        const struct stat *st; /* NULL if it cannot be stat()ed */
        const char *path;
        bool deleted;
        const struct zsw_config *config;
};

/* Whether C has Executable= patterns at all. */
static bool has_executables(const struct zsw_config *c) {
        for (size_t i = 0; c && i < c->n_policies; i++)
                if (c->policies[i].executables)
                        return true;
        return !c;
}

/* Whether a path whose file name is NAME could match an Executable=
 * pattern of C (any, for C NULL): a name pattern, or the last component of
 * a path pattern, matches NAME. Paths no pattern can match are not looked
 * up: most processes match no Executable= at all. */
static bool name_wanted(const struct zsw_config *c, const char *name) {
        for (size_t i = 0; c && i < c->n_policies; i++)
                for (char **e = c->policies[i].executables; e && *e; e++)
                        if (fnmatch(file_name(*e), name, 0) == 0)
                                return true;
        return !c;
}

/* Whether FD is the process's executable: the same file, or for one that
 * was replaced since (an upgrade), a file now at its path. */
static bool is_executable(int fd, const struct exe_id *id) {
        char link[64], now[CONF_PATH_MAX];
        struct stat st;

        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return false;
        if (id->st && st.st_dev == id->st->st_dev && st.st_ino == id->st->st_ino)
                return true;
        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        return id->deleted && readlink_at(AT_FDCWD, link, now) == 0 && strcmp(now, id->path) == 0;
}

/* The absolute path CANDIDATE names (a relative one from the process's
 * current directory), if it leads to the executable; NULL otherwise. */
static char *started_as(int pid_dir_fd, const char *candidate, const struct exe_id *id) {
        _cleanup_close_ int fd = -EBADF;
        char cwd[CONF_PATH_MAX] = "";
        char *s;

        if (!name_wanted(id->config, file_name(candidate)))
                return NULL;
        fd = open_as_process(pid_dir_fd, candidate);
        if (fd < 0 || !is_executable(fd, id))
                return NULL;
        if (candidate[0] != '/' && readlink_at(pid_dir_fd, "cwd", cwd) < 0)
                return NULL;
        if (asprintf(&s, "%s/%s", cwd, candidate) < 0)
                return NULL;
        path_simplify(s);
        return s;
}

/* Where a bare argv[0] was found: the first directory of the PATH in the
 * process's environment (which its starter, a shell, usually passed on)
 * that holds it; DEFAULT_PATH when its environment has none (a program
 * that wrote its title over it, as redis-server does). */
static char *path_search(int pid_dir_fd, const char *name, const struct exe_id *id) {
        _cleanup_free_ char *env = malloc(ENVIRON_MAX + 1);
        const char *path = NULL;
        char *s = NULL;
        ssize_t n;

        if (!env || strlen(name) > NAME_MAX || !name_wanted(id->config, name))
                return NULL;
        n = read_at(pid_dir_fd, "environ", env, ENVIRON_MAX);
        env[MAX(n, 0)] = '\0';
        for (const char *e = env; !path && e < env + MAX(n, 0); e += strlen(e) + 1)
                if (strncmp(e, "PATH=", 5) == 0)
                        path = e + 5;
        if (!path)
                path = DEFAULT_PATH;
        for (unsigned dirs = 0; path && !s && dirs < PATH_DIRS_MAX; dirs++) {
                size_t len = strcspn(path, ":"), name_len = strlen(name);
                char candidate[CONF_PATH_MAX], *w = candidate;

                /* An empty entry is the current directory. */
                if (len + name_len + 2 <= sizeof(candidate)) {
                        if (len > 0) {
                                w = mempcpy(w, path, len);
                                *w++ = '/';
                        }
                        memcpy(w, name, name_len + 1);
                        s = started_as(pid_dir_fd, candidate, id);
                }
                path = path[len] ? path + len + 1 : NULL;
        }
        return s;
}

/* The path argv[0] names, or the longest part of it before a space that
 * does: a title such as "/usr/bin/redis-server *:6379" or "redis-server
 * unixsocket:/run/r.sock" starts with it. A bare name is looked up in the
 * process's PATH. */
static char *argv0_path(int pid_dir_fd, const struct exe_id *id) {
        char cmdline[CONF_PATH_MAX], *end;
        ssize_t n = read_at(pid_dir_fd, "cmdline", cmdline, sizeof(cmdline) - 1);
        char *s = NULL;

        if (n <= 0)
                return NULL;
        cmdline[n] = '\0';
        end = cmdline + strlen(cmdline);
        for (unsigned tries = 0; !s && tries < ARGV0_TRIES && end > cmdline; tries++) {
                *end = '\0';
                s = strchr(cmdline, '/') ? started_as(pid_dir_fd, cmdline, id)
                                         : path_search(pid_dir_fd, cmdline, id);
                while (--end > cmdline && *end != ' ')
                        ;
        }
        return s;
}

int proc_exe_read(int pid_dir_fd, const struct zsw_config *config, struct zsw_proc_exe *ret) {
        static const char deleted_suffix[] = " (deleted)";
        _cleanup_free_ char *path = NULL, *comm = NULL;
        char buf[CONF_PATH_MAX], *argv0 = NULL;
        struct stat exe_st;
        bool deleted = false, have_st, names = has_executables(config);
        ssize_t n = 0;
        int r;

        r = readlink_at(pid_dir_fd, "exe", buf);
        if (r == 0) {
                deleted = has_suffix(buf, deleted_suffix);
                if (deleted)
                        buf[strlen(buf) - strlen(deleted_suffix)] = '\0';
                path = strdup(buf);
                if (!path)
                        return -ENOMEM;
        }
        if (names || !path)
                n = read_at(pid_dir_fd, "comm", buf, sizeof(buf) - 1);
        if (n > 0) {
                buf[n] = '\0';
                buf[strcspn(buf, "\n")] = '\0';
                comm = strdup(buf);
                if (!comm)
                        return -ENOMEM;
        } else if (!path)
                return r;
        have_st = path && names && fstatat(pid_dir_fd, "exe", &exe_st, 0) == 0;
        if (path && names)
                argv0 = argv0_path(pid_dir_fd, &(struct exe_id) { have_st ? &exe_st : NULL, path,
                                                                  deleted, config });
        *ret = (struct zsw_proc_exe) {
                .path = TAKE_PTR(path),
                .argv0 = argv0,
                .comm = TAKE_PTR(comm),
                .deleted = deleted,
        };
        return 0;
}

void proc_exe_done(struct zsw_proc_exe *e) {
        free(e->path);
        free(e->argv0);
        free(e->comm);
        *e = (struct zsw_proc_exe) {};
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
