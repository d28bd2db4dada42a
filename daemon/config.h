/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The daemon's configuration: the global settings of zswapd.conf and one
 * policy per file in policy.d/, parsed from the INI dialect of systemd unit
 * files (see zswapd.conf(5) for the syntax and every key).
 *
 * Loading is all or nothing: every problem is reported through the log
 * callback, each naming its file and line, and on any error no config object
 * is returned, so a daemon that reloads keeps running on its old one.
 * A loaded config is immutable and fully resolved: absent keys hold their
 * defaults and policies hold what they inherit from the global settings.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "compress.h"
#include "util.h"

/* The build sets it from meson's sysconfdir. */
#ifndef ZSW_CONFIG_DIR
#define ZSW_CONFIG_DIR "/etc/zswapd"
#endif
#define ZSW_CONFIG_FILE "zswapd.conf"
#define ZSW_POLICY_DIR "policy.d"

/* Files bigger than this are refused: a config is a few hundred bytes, and
 * the daemon must not be made to read a huge file while memory is short. */
#define ZSW_CONFIG_FILE_MAX (1024u * 1024u)

/* Time spans are kept in microseconds, the unit of PSI triggers. */
#define ZSW_USEC_PER_SEC UINT64_C(1000000)
#define ZSW_USEC_PER_MSEC UINT64_C(1000)

/* Fractions are kept in permyriad (1/10000), so "12.5%" is 1250. */
#define ZSW_PERMYRIAD_MAX 10000u


/* What the store does with a page that does not compress: keep it as is
 * (it still leaves the target's resident set) or leave it in the target. */
enum zsw_incompressible {
        ZSW_INCOMPRESSIBLE_REJECT,
        ZSW_INCOMPRESSIBLE_KEEP,
        _ZSW_INCOMPRESSIBLE_MAX,
};

/*
 * A limit given either as an absolute amount (bytes, bytes/s or events/s,
 * depending on the key) or as a fraction of a reference the key names (RAM,
 * the group's memory use, ...), or not given at all (no limit).
 */
enum zsw_limit_kind {
        ZSW_LIMIT_NONE,
        ZSW_LIMIT_ABSOLUTE,
        ZSW_LIMIT_RELATIVE,
};

struct zsw_limit {
        enum zsw_limit_kind kind;
        uint64_t value; /* ABSOLUTE: the amount; RELATIVE: permyriad */
};

/*
 * A PSI trigger as the kernel takes it ("some 150000 1000000" written to a
 * pressure file): wake up when tasks stalled for stall_usec within any
 * window_usec. "10%" in a config is 100ms per 1s window.
 */
struct zsw_pressure {
        bool full;            /* the "full" line instead of "some" */
        uint64_t stall_usec;  /* > 0, <= window_usec */
        uint64_t window_usec; /* 500ms ... 10s, the kernel's bounds */
};

struct zsw_policy {
        char *name; /* the file name without .conf */
        char *path; /* the file it came from, for messages */

        /* [Match]: each list holds patterns, NULL-terminated, may be NULL.
         * A process matches when every non-empty list has a pattern that
         * matches it. */
        char **units;
        char **cgroup_paths;
        char **executables;

        /* [Policy] */
        bool enabled;
        enum zsw_compressor compressor;
        int compression_level;          /* lz4 1..12, zstd 1..19 (compress.h) */
        struct zsw_limit memory_budget; /* bytes or of the group's use */
        struct zsw_pressure pressure;
        uint64_t min_cold_age_usec;
        uint64_t max_reclaim_rate;      /* bytes per second, UINT64_MAX: no cap */
        bool writeback;                 /* allowed, if [Writeback] Enabled= too */
        struct zsw_limit pool_limit;    /* bytes or of the global pool limit */
        unsigned prefetch_window;       /* pages, 0 ... ZSW_PREFETCH_MAX */
        unsigned zero_window;           /* pages, 0 ... ZSW_ZERO_WINDOW_MAX */
        struct zsw_limit refault_limit; /* refaults/s or of pages reclaimed */
};

#define ZSW_PREFETCH_MAX 64u
#define ZSW_LEVEL_MIN 1
/* The compressor of a policy without MemoryBudget= when neither it nor
 * [Store] names one or a level: its pages go by age at a capped rate and few come
 * back, so there is time to compress harder; a budget's faults may wait
 * for the room a reclaim makes, and every fault decompresses. */
#define ZSW_COMPRESSOR_BY_AGE ZSW_COMPRESSOR_ZSTD
/* A policy that names no compressor inherits the global one. */
#define ZSW_COMPRESSOR_INHERIT ((enum zsw_compressor) - 1)

struct zsw_config {
        /* [Daemon] */
        char *socket_path;
        int log_level; /* LOG_ERR ... LOG_DEBUG */

        /* [Store] */
        enum zsw_compressor compressor;
        bool compressor_set;        /* Compressor= given: policies inherit it */
        int compression_level;      /* lz4 1..12, zstd 1..19 (compress.h) */
        bool compression_level_set; /* CompressionLevel= given: policies inherit it */
        enum zsw_incompressible incompressible;
        bool dictionaries; /* a compression dictionary per process */

        /* [Pool] */
        struct zsw_limit pool_limit; /* bytes or of RAM; never NONE */
        unsigned accept_threshold;   /* percent of the limit, 1..100 */

        /* [Writeback] */
        bool writeback;
        char *swapfile;
        uint64_t swapfile_size;

        /* [Pressure] */
        struct zsw_pressure pressure; /* on /proc/pressure/memory, and the
                                       * default of policies */

        /* policies in lexical order of their file names */
        struct zsw_policy *policies;
        size_t n_policies;
};

/* One file's text handed to config_load_sources(). */
struct zsw_config_source {
        const char *path; /* named in messages; a policy is named after it */
        const char *text; /* need not be NUL-terminated */
        size_t size;
};

/*
 * Loads DIR/zswapd.conf and every DIR/policy.d/NAME.conf (dir NULL means
 * ZSW_CONFIG_DIR). A missing file or directory means built-in defaults and
 * no policies; policy files are taken in strcmp() order of their names,
 * skipping names that start with a dot or do not end in ".conf". Returns 0
 * and a new config in *ret_config, or a negative errno after logging every
 * problem at LOG_ERR: -EINVAL for a config with errors, the errno of the
 * first file that could not be read, -ENOMEM. *ret_config is then
 * untouched.
 */
int config_load(const char *dir, const struct zsw_log *log, struct zsw_config **ret_config);

/*
 * What zswapd -c PATH loads: a directory as config_load() does, or a
 * file as the global settings (it must exist) with the policy.d/ directory
 * next to it.
 */
int config_load_path(const char *path, const struct zsw_log *log, struct zsw_config **ret_config);

/* The same, with the configuration directory given as an open fd; DIR_PATH
 * (may be NULL) is how messages name it. */
int config_load_at(int dir_fd, const char *dir_path, const struct zsw_log *log,
                   struct zsw_config **ret_config);

/*
 * Parses configs held in memory: global may be NULL (defaults), each policy
 * is named after its path's file name without ".conf" and they are taken in
 * the order given. Used by the loaders above, tests and the fuzzer.
 */
int config_load_sources(const struct zsw_config_source *global,
                        const struct zsw_config_source *policies, size_t n_policies,
                        const struct zsw_log *log, struct zsw_config **ret_config);

/* Frees a config; accepts NULL, returns NULL. */
struct zsw_config *config_free(struct zsw_config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_config *, config_free);

/*
 * Writes the effective settings, every key with its value, in the config
 * syntax: the output of config_dump_global() parses back into the same
 * global settings, and that of policy_dump() into the same policy.
 * config_dump() writes both, each policy headed by a comment naming
 * its file. Return 0 or -errno from the stream.
 */
int config_dump_global(const struct zsw_config *c, FILE *f);
int policy_dump(const struct zsw_policy *p, FILE *f);
int config_dump(const struct zsw_config *c, FILE *f);

/*
 * The names a process's executable goes by, which Executable= patterns are
 * compared with; proc_exe_read() fills them in from /proc/PID.
 */
struct zsw_proc_exe {
        char *path;   /* "exe": the file the kernel runs, symlinks resolved and
                       * " (deleted)" removed; NULL if unreadable (kernel threads) */
        char *argv0;  /* the absolute path it was started as (argv[0]), only
                       * when that path leads to the same file; else NULL */
        char *comm;   /* the kernel's name of it (the file name of the path given
                       * to execve(), at most 15 bytes), or NULL */
        bool deleted; /* the file was replaced or removed since it started */
};

/* Which of those names an Executable= pattern matched. */
enum zsw_exe_form {
        ZSW_EXE_PATH,       /* path */
        ZSW_EXE_PATH_NAME,  /* the file name of path */
        ZSW_EXE_ARGV0,      /* argv0 */
        ZSW_EXE_ARGV0_NAME, /* the file name of argv0 */
        ZSW_EXE_COMM,       /* comm */
        _ZSW_EXE_FORM_MAX,
};

/* "exe", "exe-name", "argv0", "argv0-name", "comm"; NULL if out of range. */
const char *exe_form_to_string(enum zsw_exe_form f);

/* The name of E in form F (the file name for the *_NAME forms), or NULL. */
const char *proc_exe_name(const struct zsw_proc_exe *e, enum zsw_exe_form f);

/* Why a policy matched: for each [Match] key the policy sets, the pattern
 * that matched; NULL for keys it does not set. Points into the config. */
struct zsw_match {
        const char *unit;
        const char *cgroup_path;
        const char *executable;
        enum zsw_exe_form executable_form; /* when executable is set */
};

/* Writes why a target matched, e.g. "Unit=a.service Executable=redis-server
 * (argv0-name)", from the pattern of each key (NULL: not set), or "-". */
void policy_match_format(char *buf, size_t size, const char *unit, const char *cgroup_path,
                         const char *executable, enum zsw_exe_form form);

/*
 * Returns the first policy, in file order, that matches a process in cgroup
 * CGROUP_PATH (as in /proc/PID/cgroup, e.g. "/system.slice/nginx.service")
 * whose executable goes by the names in EXE, or NULL. Either may be NULL
 * when unknown, as may any name in EXE; conditions on them then do not
 * match. An Executable= path matches EXE's path or argv0, a name the file
 * name of either or its comm, tried in that order. A disabled policy is
 * returned too: it tells the caller to leave the process alone. With a
 * match, *RET_MATCH (may be NULL) says why.
 */
const struct zsw_policy *config_match(const struct zsw_config *c, const char *cgroup_path,
                                      const struct zsw_proc_exe *exe, struct zsw_match *ret_match);

/* Whether policy P matches, by the rules of config_match(); *ret_match
 * (may be NULL) is set only when it does. */
bool policy_matches(const struct zsw_policy *p, const char *cgroup_path,
                    const struct zsw_proc_exe *exe, struct zsw_match *ret_match);

/*
 * Reads the names of the executable of the process whose /proc/PID is open
 * as PID_DIR_FD: "exe", "comm" and the first string of "cmdline". argv[0]
 * counts as the path the process was started as only if, resolved in the
 * process's root (a relative one against its current directory, a bare
 * name in the directories of the PATH in its "environ", or systemd's
 * default PATH when that has none, the first that has it), it leads to
 * the file "exe" names, or, once that was replaced,
 * to a file at its path. A program that rewrote its command line as a
 * title ("/usr/bin/redis-server *:6379") is tried at each space as well.
 * With CONFIG, only what its Executable= patterns could match is read:
 * without any, neither comm (unless exe cannot be read) nor argv0; with
 * some, argv0 only when its file name matches a name pattern or the last
 * component of a path pattern (most processes are not looked up at all).
 * CONFIG NULL reads everything. Returns 0, or a negative errno when
 * neither "exe" nor "comm" can be read (-ENOENT, -ESRCH: the process is
 * gone); *ret is then untouched.
 */
int proc_exe_read(int pid_dir_fd, const struct zsw_config *config, struct zsw_proc_exe *ret);

/* Frees the names; the struct may be reused. */
void proc_exe_done(struct zsw_proc_exe *e);

/*
 * Finds the cgroup path that names a process's systemd unit in the text of
 * /proc/PID/cgroup: the cgroup v2 line ("0::/path"), or on a hybrid or
 * legacy system where that line says "/" the "name=systemd" line. Returns 0
 * and a new string, -ENODATA if no line gives one, -EBADMSG if the text is
 * malformed.
 */
int proc_cgroup_parse(const char *text, size_t size, char **ret_path);

/* The same, reading "cgroup" under PID_DIR_FD (an open /proc/PID). */
int proc_cgroup_read(int pid_dir_fd, char **ret_path);

/* Resolves a limit against its reference; NONE gives UINT64_MAX. */
uint64_t limit_resolve(const struct zsw_limit *l, uint64_t reference);
