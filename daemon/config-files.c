/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Finding and reading the config files: zswapd.conf and policy.d/NAME.conf
 * under one directory, taken by fd so that tests point it at fixtures. Every
 * file is read whole into memory (they are small, and a size cap keeps it
 * so) and handed to config_load_sources(); missing files are defaults,
 * unreadable ones are errors that are reported along with the parse errors
 * of all the others.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "conf-values.h"
#include "config.h"

/* Reads a whole config file; it is small, or refused. */
static int read_file_at(int dir_fd, const char *name, const char *display,
                        const struct zsw_log *log, char **ret, size_t *ret_size) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t got = 0;

        /* O_NONBLOCK: a FIFO named like a config must not hang the daemon. */
        fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return errno == ENOENT
                               ? -ENOENT
                               : zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", display);
        if (fstat(fd, &st) < 0)
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot stat: %m", display);
        if (!S_ISREG(st.st_mode))
                return zsw_log_errno(log, LOG_ERR, EINVAL, "%s: not a regular file", display);
        if (st.st_size > ZSW_CONFIG_FILE_MAX)
                return zsw_log_errno(log, LOG_ERR, EFBIG, "%s: larger than %u bytes", display,
                                     ZSW_CONFIG_FILE_MAX);
        buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                return -ENOMEM;
        /* Read to EOF, but no further than the size fstat gave: a file that
         * grows meanwhile is taken as it was. */
        while (got < (size_t) st.st_size) {
                ssize_t n = read(fd, buf + got, (size_t) st.st_size - got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot read: %m", display);
                if (n == 0)
                        break;
                got += (size_t) n;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = got;
        return 0;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The sorted names of policy.d's *.conf files, skipping hidden ones. */
static int list_policy_files(int dir_fd, const char *display, const struct zsw_log *log,
                             char ***ret, size_t *ret_n) {
        char **names = NULL;
        size_t n = 0;
        struct dirent *de;
        DIR *d;
        int fd, r = 0;

        fd = openat(dir_fd, ZSW_POLICY_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT
                               ? 0
                               : zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", display);
        d = fdopendir(fd);
        if (!d) {
                safe_close(fd);
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", display);
        }
        while ((errno = 0, de = readdir(d))) {
                if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".conf"))
                        continue;
                char *name = strdup(de->d_name);

                if (!name || strv_push(&names, name) < 0) {
                        free(name);
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        if (r == 0 && errno != 0)
                r = zsw_log_errno(log, LOG_ERR, errno, "%s: cannot read directory: %m", display);
        closedir(d);
        if (r < 0) {
                strv_free(names);
                return r;
        }
        if (n > 0)
                qsort(names, n, sizeof(char *), cmp_names);
        *ret = names;
        *ret_n = n;
        return 0;
}

struct loaded_file {
        char *path;
        char *text;
        size_t size;
};

static void loaded_files_free(struct loaded_file *f, size_t n) {
        for (size_t i = 0; f && i < n; i++) {
                free(f[i].path);
                free(f[i].text);
        }
        free(f);
}

/* Reads policy.d's files into FILES, *ret_n of them; a file removed since
 * the listing is just gone. Returns <0 if one could not be read, after
 * reading all others so that every problem shows. */
static int read_policy_files(int dir_fd, const char *policy_dir, char **names, size_t n,
                             const struct zsw_log *log, struct loaded_file *files, size_t *ret_n) {
        _cleanup_close_ int fd = -EBADF;
        size_t k = 0;
        int ret = 0;

        *ret_n = 0;
        if (n == 0)
                return 0;
        fd = openat(dir_fd, ZSW_POLICY_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", policy_dir);
        for (size_t i = 0; i < n; i++) {
                struct loaded_file *f = &files[k];
                int r;

                if (asprintf(&f->path, "%s/%s", policy_dir, names[i]) < 0) {
                        f->path = NULL;
                        return -ENOMEM;
                }
                r = read_file_at(fd, names[i], f->path, log, &f->text, &f->size);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        f->path = mfree(f->path);
                        if (r != -ENOENT)
                                ret = ret ?: r; /* logged; keep the first */
                        continue;
                }
                *ret_n = ++k;
        }
        return ret;
}

/* Loads GLOBAL_NAME (a missing one means defaults unless MUST_EXIST) and
 * policy.d/ under DIR_FD. */
static int load_at(int dir_fd, const char *dir_path, const char *global_name, bool must_exist,
                   const struct zsw_log *log, struct zsw_config **ret_config) {
        struct loaded_file global = {}, *files = NULL;
        struct zsw_config_source gsrc, *srcs = NULL;
        _cleanup_free_ char *policy_dir = NULL;
        struct zsw_config *c = NULL;
        char **names = NULL;
        size_t n = 0, n_read = 0;
        int r, r_read;

        if (!dir_path)
                dir_path = ".";
        if (asprintf(&global.path, "%s/%s", dir_path, global_name) < 0 ||
            asprintf(&policy_dir, "%s/%s", dir_path, ZSW_POLICY_DIR) < 0) {
                free(global.path);
                return -ENOMEM;
        }
        r_read = read_file_at(dir_fd, global_name, global.path, log, &global.text, &global.size);
        if (r_read == -ENOENT && must_exist)
                r_read = zsw_log_errno(log, LOG_ERR, ENOENT, "%s: cannot open: %m", global.path);
        else if (r_read == -ENOENT)
                r_read = 0;
        gsrc = (struct zsw_config_source) { global.path, global.text, global.size };

        r = list_policy_files(dir_fd, policy_dir, log, &names, &n);
        if (r < 0)
                goto out;
        files = calloc(n ?: 1, sizeof(*files));
        srcs = calloc(n ?: 1, sizeof(*srcs));
        if (!files || !srcs) {
                r = -ENOMEM;
                goto out;
        }
        r = read_policy_files(dir_fd, policy_dir, names, n, log, files, &n_read);
        if (r == -ENOMEM)
                goto out;
        if (r < 0 && r_read >= 0)
                r_read = r;
        for (size_t i = 0; i < n_read; i++)
                srcs[i] =
                        (struct zsw_config_source) { files[i].path, files[i].text, files[i].size };

        /* Even with an unreadable file, parse the rest to report its errors. */
        r = config_load_sources(global.text ? &gsrc : NULL, srcs, n_read, log, &c);
        if (r >= 0 && r_read < 0) {
                c = config_free(c);
                r = r_read;
        }
        if (r >= 0)
                *ret_config = c;
out:
        loaded_files_free(files, strv_length(names));
        free(srcs);
        strv_free(names);
        free(global.path);
        free(global.text);
        return r;
}

int config_load_at(int dir_fd, const char *dir_path, const struct zsw_log *log,
                   struct zsw_config **ret_config) {
        return load_at(dir_fd, dir_path, ZSW_CONFIG_FILE, false, log, ret_config);
}

int config_load_path(const char *path, const struct zsw_log *log, struct zsw_config **ret_config) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *slash, *name;
        struct stat st;

        if (stat(path, &st) < 0)
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot read: %m", path);
        if (S_ISDIR(st.st_mode))
                return config_load(path, log, ret_config);
        slash = strrchr(path, '/');
        dir = slash ? strndup(path, slash == path ? 1 : (size_t) (slash - path)) : strdup(".");
        if (!dir)
                return -ENOMEM;
        name = slash ? slash + 1 : path;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", dir);
        return load_at(fd, strcmp(dir, "/") == 0 ? "" : dir, name, true, log, ret_config);
}

int config_load(const char *dir, const struct zsw_log *log, struct zsw_config **ret_config) {
        _cleanup_close_ int fd = -EBADF;

        if (!dir)
                dir = ZSW_CONFIG_DIR;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
                return config_load_sources(NULL, NULL, 0, log, ret_config);
        if (fd < 0)
                return zsw_log_errno(log, LOG_ERR, errno, "%s: cannot open: %m", dir);
        return config_load_at(fd, dir, log, ret_config);
}
