/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd: loads the configuration, owns one engine and the policy manager
 * that drives it, and serves the control socket, all from a single epoll
 * loop next to a signalfd (SIGTERM/SIGINT stop, SIGHUP reload) and a timer
 * that pings the systemd watchdog and refreshes the STATUS= line. Faults
 * never pass through this loop (the engine's own threads serve them), nor
 * do reclaims (the reclaim worker runs them and posts the results back).
 */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>

#include "config.h"
#include "control.h"
#include "engine.h"
#include "log.h"
#include "policy.h"
#include "cgroup.h"
#include "reclaim.h"
#include "rescue.h"

/* How often STATUS= is refreshed when no watchdog asks for more. */
#define STATUS_INTERVAL_USEC (10 * 1000000ull)

static const char *arg_socket = NULL;
static const char *arg_config = NULL;

/* Re-exec: the binary we were started from (resolved at start, so that an
 * upgraded package's new file is what runs) and our arguments. */
static char *exe_path = NULL;
static char **exe_argv = NULL;

#define ENV_STATE "ZSWAPD_REEXEC_STATE"
#define ENV_LISTEN "ZSWAPD_REEXEC_LISTEN"
#define ENV_CLIENT "ZSWAPD_REEXEC_CLIENT"

/* What the control socket's hooks work on. */
struct reexec_ctx {
        struct zsw_engine *engine;
        struct policy_manager *policies;
        struct control *control;
        /* A state that the binary executed last could not load: kept, with
         * the userfaultfds it names, for the next try. */
        int pending_state_fd;
        /* Stopped across the exec: it would keep the old memory, and
         * save its stale engine if the new process died. */
        struct rescue *rescue;
        const char *rescue_path;
        struct zsw_engine **enginep; /* run()'s, which reexec_ctx_done() may keep */
};

static void help(void) {
        printf("%s [OPTIONS...]\n\n"
               "Compressed memory for processes, in user space. Runs in the foreground\n"
               "and takes requests from zswapctl(8) on its control socket.\n\n"
               "  -s --socket=PATH   Control socket (default $ZSWAPD_SOCKET or %s)\n"
               "  -c --config=PATH   Configuration file, or directory holding zswapd.conf\n"
               "                     and policy.d/ (default %s)\n"
               "  -h --help          Show this help\n"
               "     --version       Show the version\n",
               program_invocation_short_name, CONTROL_SOCKET_DEFAULT, ZSW_CONFIG_DIR);
}

static int parse_argv(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = { { "socket", required_argument, NULL, 's' },
                                                 { "config", required_argument, NULL, 'c' },
                                                 { "help", no_argument, NULL, 'h' },
                                                 { "version", no_argument, NULL, ARG_VERSION },
                                                 {} };
        int c;

        /* The config's Socket= comes after -s and $ZSWAPD_SOCKET. */
        arg_socket = getenv("ZSWAPD_SOCKET");

        while ((c = getopt_long(argc, argv, "s:c:h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (optarg[0] != '/')
                                return log_error_errno(EINVAL,
                                                       "--socket needs an absolute path, "
                                                       "got '%s'.",
                                                       optarg);
                        arg_socket = optarg;
                        break;
                case 'c':
                        arg_config = optarg;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("zswapd %s\n", ZSWAPD_VERSION);
                        return 0;
                case '?':
                        return -EINVAL;
                default:
                        return log_error_errno(EINVAL, "Unknown option code %c.", c);
                }

        if (optind < argc)
                return log_error_errno(EINVAL, "%s takes no arguments (got '%s'); see --help.",
                                       program_invocation_short_name, argv[optind]);
        return 1;
}

/* The one-line summary systemd shows in `systemctl status`. */
static void notify_status(struct zsw_engine *engine, struct policy_manager *policies) {
        struct zsw_engine_stats s;

        if (zsw_engine_get_stats(engine, &s) < 0)
                return;
        sd_notifyf(false,
                   "STATUS=Serving %u targets: %.1f MiB stored in %.1f MiB (ratio %.2f), "
                   "%zu policies",
                   s.targets, s.stored_pages * (double) ZSW_PAGE_SIZE / (1024.0 * 1024.0),
                   s.pool_bytes / (1024.0 * 1024.0),
                   s.pool_bytes ? s.stored_pages * (double) ZSW_PAGE_SIZE / s.pool_bytes : 0.0,
                   policy_manager_get_config(policies)->n_policies);
}

/* A logger that passes everything on to the daemon's and keeps the first
 * error, so that `zswapctl reload` can tell the user what is wrong. */
struct first_error {
        struct zsw_log log;
        char message[200];
};

static void log_keep_first_error(void *userdata, int priority, const char *file, int line,
                                 const char *func, const char *format, va_list ap) {
        struct first_error *fe = userdata;
        const struct zsw_log *daemon_log = log_get();
        int saved = errno;
        va_list aq;

        va_copy(aq, ap);
        if (priority <= LOG_ERR && !fe->message[0])
                vsnprintf(fe->message, sizeof(fe->message), format, aq);
        va_end(aq);
        errno = saved;
        if (priority <= daemon_log->max_priority)
                daemon_log->fn(daemon_log->userdata, priority, file, line, func, format, ap);
}

static int load_config(const struct zsw_log *log, struct zsw_config **ret) {
        if (arg_config)
                return config_load_path(arg_config, log, ret);
        return config_load(NULL, log, ret);
}

/* Loads the configuration again; on any error the running one stays. */
static int reload(void *userdata, struct zsw_engine_error *err) {
        struct policy_manager *policies = ((struct reexec_ctx *) userdata)->policies;
        struct first_error fe = {
                .log = { .fn = log_keep_first_error, .max_priority = LOG_DEBUG },
        };
        struct zsw_config *config = NULL;
        int r;

        fe.log.userdata = &fe;
        sd_notify(false, "RELOADING=1");
        r = load_config(&fe.log, &config);
        if (r < 0) {
                log_error_errno(r, "Keeping the running configuration: the new one has errors.");
                if (err)
                        snprintf(err->message, sizeof(err->message),
                                 "%s; kept the running configuration",
                                 fe.message[0] ? fe.message : "the configuration has errors");
        } else {
                log_info("Configuration reloaded: %zu policies.", config->n_policies);
                policy_manager_set_config(policies, config);
        }
        sd_notify(false, "READY=1");
        return r;
}

static void detached(void *userdata, pid_t pid) {
        policy_manager_forget(((struct reexec_ctx *) userdata)->policies, pid);
}

static int dump(void *userdata, enum control_verb verb, FILE *f, bool json) {
        struct policy_manager *policies = ((struct reexec_ctx *) userdata)->policies;

        switch (verb) {
        case CONTROL_POLICIES:
                return policy_manager_dump_policies(policies, f, json);
        case CONTROL_TARGETS:
                return policy_manager_dump_targets(policies, f, json);
        case CONTROL_STATUS:
                return policy_manager_dump_status(policies, f, json);
        default:
                return -EINVAL;
        }
}

/* Returns > 0 to keep running, 0 to stop. */
static int process_signal(int sfd, struct policy_manager *policies) {
        struct signalfd_siginfo si;
        ssize_t n;

        n = read(sfd, &si, sizeof(si));
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 1 : -errno;
        if (n != sizeof(si))
                return -EIO;
        if (si.ssi_signo == SIGHUP) {
                log_notice("Received SIGHUP, reloading the configuration.");
                (void) reload(&(struct reexec_ctx) { .policies = policies }, NULL);
                return 1;
        }
        log_info("Received SIG%s, detaching every target.", sigabbrev_np(si.ssi_signo) ?: "?");
        return 0;
}

static int setup_timer(uint64_t usec, int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct itimerspec its = {
                .it_interval = { .tv_sec = usec / 1000000, .tv_nsec = (usec % 1000000) * 1000 },
        };

        its.it_value = its.it_interval;
        fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (timerfd_settime(fd, 0, &its, NULL) < 0)
                return -errno;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

static int watch(int epfd, int fd) {
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

        return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int process_timer(int tfd, struct zsw_engine *engine, struct policy_manager *policies,
                         bool watchdog) {
        uint64_t ticks;

        if (read(tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                return log_error_errno(errno, "Failed to read the timer: %m");
        if (watchdog)
                sd_notify(false, "WATCHDOG=1");
        notify_status(engine, policies);
        return 1;
}

static int process_control(struct control *control, struct zsw_engine *engine,
                           struct policy_manager *policies) {
        int r;

        r = control_process(control);
        if (r < 0)
                return log_error_errno(r, "Failed to serve the control socket: %m");
        /* Attach and detach change the summary at once. */
        notify_status(engine, policies);
        return 1;
}

/* Runs until a stop signal (returns 0) or a failure of the loop itself. */
static int loop(struct zsw_engine *engine, struct policy_manager *policies, struct control *control,
                struct reclaimer *reclaimer, int sfd, int tfd, bool watchdog) {
        _cleanup_close_ int epfd = -EBADF;
        int r, pfd = policy_manager_get_fd(policies), rfd = reclaimer_get_fd(reclaimer);

        epfd = epoll_create1(EPOLL_CLOEXEC);
        if (epfd < 0)
                return log_error_errno(errno, "Failed to create an epoll instance: %m");
        if ((r = watch(epfd, sfd)) < 0 || (r = watch(epfd, tfd)) < 0 ||
            (r = watch(epfd, pfd)) < 0 || (r = watch(epfd, rfd)) < 0 ||
            (r = watch(epfd, control_get_fd(control))) < 0 ||
            (r = policy_manager_set_loop(policies, epfd)) < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");

        for (;;) {
                struct epoll_event ev[5];
                int n;

                n = epoll_wait(epfd, ev, ARRAY_SIZE(ev), -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return log_error_errno(errno, "Failed to wait for events: %m");
                }
                for (int i = 0; i < n; i++) {
                        if (ev[i].data.fd == sfd) {
                                r = process_signal(sfd, policies);
                                if (r < 0)
                                        return log_error_errno(r, "Failed to read a signal: %m");
                        } else if (ev[i].data.fd == tfd)
                                r = process_timer(tfd, engine, policies, watchdog);
                        else if (ev[i].data.fd == rfd) {
                                /* Replies to clients, results to groups. */
                                reclaimer_process(reclaimer);
                                notify_status(engine, policies);
                                r = 1;
                        } else if (ev[i].data.fd == pfd) {
                                r = policy_manager_process(policies);
                                if (r < 0)
                                        return log_error_errno(r, "Failed to run the policies: %m");
                                r = 1;
                        } else if (policy_manager_trigger(policies, ev[i].data.fd))
                                r = 1;
                        else
                                r = process_control(control, engine, policies);
                        if (r <= 0)
                                return r;
                }
        }
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_engine *, zsw_engine_free);

/* ---- stopping ---------------------------------------------------------------- */

/* How often a stopping daemon tries again to give pages back, and how
 * often it says at error level what keeps it (in between: debug). */
#define GIVE_BACK_RETRY_USEC (5 * 1000000ull)
#define GIVE_BACK_LOG_EVERY 12

/* The group whose limits decide whether pid can take pages back: its v1
 * memory group, else its v2 group. */
static char *target_cgroup(pid_t pid) {
        struct zsw_proc_cgroups cg = {};
        _cleanup_close_ int fd = -EBADF;
        char path[32], *s = NULL;

        snprintf(path, sizeof(path), "/proc/%d", pid);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && zsw_proc_cgroups_read(fd, &cg) >= 0) {
                if (cg.memory && asprintf(&s, "%s (memory controller, v1)", cg.memory) < 0)
                        s = NULL;
                else if (!cg.memory && cg.v2)
                        s = strdup(cg.v2);
        }
        zsw_proc_cgroups_done(&cg);
        return s;
}

/* Detaches every target it can; returns how many still hold pages, each
 * said at priority (what keeps it, and what to do). */
static unsigned give_back(struct zsw_engine *engine, int priority, uint64_t *ret_pages) {
        _cleanup_free_ pid_t *pids = NULL;
        size_t n = zsw_engine_list_targets(engine, NULL, 0);
        unsigned held = 0;

        *ret_pages = 0;
        pids = calloc(MAX(n, 1u), sizeof(pid_t));
        if (!pids)
                return log_oom(), (unsigned) n;
        n = MIN(n, zsw_engine_list_targets(engine, pids, n));
        for (size_t i = 0; i < n; i++) {
                struct zsw_engine_error err = {};
                struct zsw_target_stats ts = {};
                _cleanup_free_ char *cg = NULL;
                int r;
                LOG_FIELDS(.target_pid = pids[i]);

                r = zsw_engine_detach(engine, pids[i], &err);
                if (r >= 0 || r == -ENOENT)
                        continue;
                held++;
                (void) zsw_engine_get_target_stats(engine, pids[i], &ts);
                *ret_pages += ts.stored_pages;
                cg = target_cgroup(pids[i]);
                log_full(priority,
                         "Cannot give process %d (cgroup %s) its %" PRIu64 " pages "
                         "(%.1f MiB) back, zswapd holds their only copy: %s. %s; zswapd keeps "
                         "them, serves the process, and tries again every %llu s.",
                         pids[i], cg ?: "unknown", ts.stored_pages,
                         ts.stored_pages * (double) ZSW_PAGE_SIZE / (1024.0 * 1024.0),
                         err.message[0] ? err.message : strerror(-r),
                         r == -ENOMEM ? "Raise that cgroup's memory limit (memory.limit_in_bytes, "
                                        "memory.max) or kill the process"
                                      : "Kill the process to let zswapd go",
                         GIVE_BACK_RETRY_USEC / 1000000ull);
        }
        return held;
}

/* Stopping: every page goes back before we exit. A target that cannot
 * take its pages back keeps zswapd running (its faults served, the control
 * socket answering stats and detach) until it can, or until it exits;
 * systemd's stop timeout is extended meanwhile. Only SIGKILL ends this
 * early; the rescue task then saves those pages for the next zswapd. */
static int stop(struct zsw_engine *engine, struct control *control, int sfd, bool watchdog) {
        _cleanup_close_ int epfd = -EBADF, tfd = -EBADF;
        unsigned tries = 0;
        int r;

        for (;;) {
                uint64_t pages;
                unsigned held = give_back(
                        engine, tries % GIVE_BACK_LOG_EVERY == 0 ? LOG_ERR : LOG_DEBUG, &pages);
                struct epoll_event ev;

                if (held == 0)
                        return 0;
                sd_notifyf(false,
                           "STATUS=Stopping: %u processes cannot take %" PRIu64 " pages back "
                           "yet; see the log\nEXTEND_TIMEOUT_USEC=%llu",
                           held, pages, 3 * GIVE_BACK_RETRY_USEC);
                if (epfd < 0) {
                        epfd = epoll_create1(EPOLL_CLOEXEC);
                        if (epfd < 0)
                                return log_error_errno(errno,
                                                       "Failed to create an epoll instance: %m");
                        /* Each second: the watchdog, and the retry's count. */
                        r = setup_timer(1000000ull, &tfd);
                        if (r < 0 || (r = watch(epfd, tfd)) < 0 || (r = watch(epfd, sfd)) < 0 ||
                            (r = watch(epfd, control_get_fd(control))) < 0)
                                return log_error_errno(r, "Failed to set up the stopping loop: %m");
                }
                for (uint64_t seconds = 0; seconds < GIVE_BACK_RETRY_USEC / 1000000ull;) {
                        if (epoll_wait(epfd, &ev, 1, -1) <= 0)
                                continue;
                        if (ev.data.fd == tfd) {
                                uint64_t ticks = 0;

                                if (read(tfd, &ticks, sizeof(ticks)) < 0)
                                        ticks = 0;
                                if (watchdog)
                                        sd_notify(false, "WATCHDOG=1");
                                seconds += ticks;
                        } else if (ev.data.fd == sfd) {
                                struct signalfd_siginfo si;

                                if (read(sfd, &si, sizeof(si)) == sizeof(si))
                                        log_error("Received SIG%s while %u processes hold %" PRIu64
                                                  " pages only zswapd has: not exiting until they "
                                                  "are given back (after SIGKILL the next zswapd "
                                                  "takes them over).",
                                                  sigabbrev_np(si.ssi_signo) ?: "?", held, pages);
                        } else if (control_process(control) < 0)
                                log_warning("Failed to serve the control socket, ignoring.");
                }
                tries++;
        }
}

/* Gives this thread, and every thread it makes from now on (the engine's),
 * the shortest scheduler slice: an application sharing a CPU with our
 * compression or scans then waits for slices of 0.1 ms, not the default
 * (1.4 ms with 2 CPUs, more with more), which shows in its tail latency,
 * and a woken fault thread gets the CPU sooner. CPU shares are unchanged.
 * A unit's CPUSchedulingPolicy= other than "other" is kept. */
static void set_sched_slice(void) {
        int r;

        if (sched_getscheduler(0) != SCHED_OTHER)
                return;
        r = zsw_sched_set_slice(ZSW_SCHED_SLICE_MIN_NS);
        if (r < 0)
                log_debug_errno(r, "Failed to set a scheduler slice of %llu us, ignoring: %m",
                                ZSW_SCHED_SLICE_MIN_NS / 1000);
}

/* Blocks the signals the loop handles and returns a signalfd for them.
 * Called before the engine starts its threads, so that they inherit the
 * mask and every signal arrives at the signalfd. */
static int setup_signals(int *ret_fd) {
        sigset_t mask;
        int fd;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGPIPE);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        sigdelset(&mask, SIGPIPE);
        fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create a signalfd: %m");
        *ret_fd = fd;
        return 0;
}

/* ---- re-exec ------------------------------------------------------------------ */

static int keep_fd(int fd, bool keep) {
        int flags = fcntl(fd, F_GETFD);

        if (flags < 0)
                return -errno;
        return fcntl(fd, F_SETFD, keep ? flags & ~FD_CLOEXEC : flags | FD_CLOEXEC) < 0 ? -errno : 0;
}

static int set_env_fd(const char *name, int fd) {
        char buf[16];

        snprintf(buf, sizeof(buf), "%d", fd);
        return setenv(name, buf, 1) < 0 ? -errno : 0;
}

/* Runs exe_path in place of this process with the state in state_fd;
 * returns only on failure, with the descriptors as they were. */
static int exec_with_state(struct reexec_ctx *x, int state_fd, int client_fd) {
        int listen_fd = control_get_listen_fd(x->control), r;

        if ((r = keep_fd(state_fd, true)) < 0 || (r = keep_fd(listen_fd, true)) < 0 ||
            (r = keep_fd(client_fd, true)) < 0 || (r = set_env_fd(ENV_STATE, state_fd)) < 0 ||
            (r = set_env_fd(ENV_LISTEN, listen_fd)) < 0 ||
            (r = set_env_fd(ENV_CLIENT, client_fd)) < 0)
                goto fail;
        if (lseek(state_fd, 0, SEEK_SET) < 0) {
                r = -errno;
                goto fail;
        }
        log_notice("Re-executing %s with the engine's state.", exe_path);
        sd_notify(false, "RELOADING=1\nSTATUS=Re-executing");
        x->rescue = rescue_stop(x->rescue);
        execv(exe_path, exe_argv);
        r = -errno;
        (void) rescue_start(x->engine, x->rescue_path, &x->rescue);
        rescue_set_pending(x->rescue, x->pending_state_fd);
fail:
        (void) keep_fd(state_fd, false);
        (void) keep_fd(listen_fd, false);
        (void) keep_fd(client_fd, false);
        unsetenv(ENV_STATE);
        unsetenv(ENV_LISTEN);
        unsetenv(ENV_CLIENT);
        sd_notify(false, "READY=1");
        return r;
}

/* Whether the configuration loads, as the new process will load it. */
static int check_config(struct zsw_engine_error *err) {
        struct first_error fe = {
                .log = { .fn = log_keep_first_error, .max_priority = LOG_DEBUG },
        };
        struct zsw_config *config = NULL;
        int r;

        fe.log.userdata = &fe;
        r = load_config(&fe.log, &config);
        if (r < 0) {
                /* fe.message is at most 199 bytes: the reason first. */
                snprintf(err->message, sizeof(err->message),
                         "fix the configuration first, the "
                         "new process would refuse it: %.160s",
                         fe.message[0] ? fe.message : "see the log");
                return r;
        }
        config_free(config);
        return 0;
}

static int reexec(void *userdata, int client_fd, struct zsw_engine_error *err) {
        struct reexec_ctx *x = userdata;
        _cleanup_close_ int fd = -EBADF;
        struct zsw_engine_stats st;
        int r;

        if (!exe_path) {
                snprintf(err->message, sizeof(err->message),
                         "the path of the running binary is "
                         "unknown (see the log at start-up); restart zswapd instead");
                return -ENOENT;
        }

        if (x->pending_state_fd >= 0) {
                size_t n = zsw_engine_list_targets(x->engine, NULL, 0);

                /* Only the state not taken in crosses such an exec: the
                 * pages of processes served since would stay behind. */
                if (n > 0) {
                        snprintf(err->message, sizeof(err->message),
                                 "zswapd holds a state it could not load and serves %zu "
                                 "processes besides, whose pages would not cross: detach them "
                                 "(zswapctl detach) first",
                                 n);
                        return -EBUSY;
                }
                r = exec_with_state(x, x->pending_state_fd, client_fd);
                snprintf(err->message, sizeof(err->message), "cannot execute %s: %s", exe_path,
                         strerror(-r));
                return r;
        }
        /* The new process reads the configuration again and refuses to
         * start with a bad one, which would leave the targets waiting for
         * good: check it before there is no way back. */
        r = check_config(err);
        if (r < 0)
                return r;
        fd = memfd_create("zswapd-state", MFD_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "Failed to create the state's memfd: %m");
        /* Its memory taken now, while faults are still served: a fresh page
         * of it costs more than the copy into it. Room for every payload
         * and 64 bytes of record per page; the rest, if any, comes later. */
        if (zsw_engine_get_stats(x->engine, &st) >= 0 &&
            fallocate(fd, 0, 0, (off_t) (st.payload_bytes + st.stored_pages * 64 + (1u << 20))) < 0)
                log_debug_errno(errno, "Failed to reserve the state's memory, ignoring: %m");
        r = zsw_engine_freeze(x->engine, err);
        if (r < 0)
                return r;
        r = zsw_engine_save(x->engine, fd, err);
        /* The state ends where the save stopped writing, not where the
         * reservation did. */
        if (r >= 0 && ftruncate(fd, lseek(fd, 0, SEEK_CUR)) < 0)
                r = log_error_errno(errno, "Failed to trim the state: %m");
        if (r >= 0) {
                r = exec_with_state(x, fd, client_fd);
                snprintf(err->message, sizeof(err->message),
                         "cannot execute %s: %s; zswapd runs on "
                         "as it was",
                         exe_path, strerror(-r));
        }
        zsw_engine_thaw(x->engine);
        return r;
}

/* An fd number from the environment a re-exec left, or -EBADF. */
static int env_fd(const char *name) {
        const char *v = getenv(name);
        char *end;
        long fd;

        if (!v)
                return -EBADF;
        fd = strtol(v, &end, 10);
        unsetenv(name);
        return *end || fd < 0 || fd > INT32_MAX ? -EBADF : (int) fd;
}

struct adopted_list {
        pid_t *pids;
        char (*labels)[64];
        size_t n;
};

static void note_adopted(void *userdata, pid_t pid, const char *label) {
        struct adopted_list *l = userdata;
        pid_t *p = realloc(l->pids, (l->n + 1) * sizeof(*p));
        char(*v)[64];

        if (p)
                l->pids = p;
        v = realloc(l->labels, (l->n + 1) * sizeof(*v));
        if (v)
                l->labels = v;
        if (!p || !v)
                return (void) log_oom();
        l->pids[l->n] = pid;
        snprintf(l->labels[l->n++], sizeof(*v), "%s", label);
}

/* Answers the client that asked for the re-exec, and closes it. */
static void reply_client(int fd, int r, const struct zsw_engine_error *err) {
        char buf[512];
        int n;

        if (fd < 0)
                return;
        if (r >= 0)
                n = snprintf(buf, sizeof(buf),
                             "ok\nre-executed %s (pid %d): %d targets taken "
                             "over\n",
                             exe_path, getpid(), r);
        else
                n = snprintf(buf, sizeof(buf),
                             "error %s\ncannot re-execute zswapd: the new binary "
                             "cannot load the state: %s; every page stays held, the targets wait; "
                             "install a zswapd that reads it and run 'zswapctl reexec' again\n",
                             strerrorname_np(-r) ?: "EIO", err->message);
        if (send(fd, buf, MIN((size_t) n, sizeof(buf) - 1), MSG_NOSIGNAL) < 0)
                log_debug_errno(errno, "Failed to answer the re-exec's client, ignoring: %m");
        safe_close(fd);
}

/* [Pool] and [Writeback] as the engine takes them. A reload does not
 * change them (the engine is not rebuilt). */
static void engine_config_pool(const struct zsw_config *c, struct zsw_engine_config *ec) {
        struct sysinfo si;
        uint64_t ram = sysinfo(&si) == 0 ? (uint64_t) si.totalram * si.mem_unit : 0, limit;

        limit = limit_resolve(&c->pool_limit, ram);
        ec->pool_limit_bytes = limit == UINT64_MAX ? 0 : limit;
        ec->accept_threshold_percent = c->accept_threshold;
        ec->writeback = c->writeback;
        ec->swapfile = c->swapfile;
        ec->swapfile_max_bytes = c->swapfile_size;
}

/* How often the engine age-scans its targets: a quarter of the shortest
 * MinColdAge, so ages have that resolution, but often enough that the
 * longest fits in the scans an age counts (ZSW_AGE_MAX, 63; twice the
 * age for a page that refaulted, up to 50 scans for the age itself), and
 * between 1 s and 1 min. Set at start; a reload does not change it. */
static uint32_t age_interval_ms(const struct zsw_config *c) {
        uint64_t shortest = UINT64_MAX, longest = 0, ms;

        for (size_t i = 0; i < c->n_policies; i++) {
                uint64_t age = c->policies[i].min_cold_age_usec / 1000;

                if (!c->policies[i].enabled || age == 0)
                        continue;
                shortest = MIN(shortest, age);
                longest = MAX(longest, age);
        }
        if (longest == 0)
                return 0; /* the engine's default */
        ms = MAX(shortest / 4, DIV_ROUND_UP(longest, 25));
        return (uint32_t) MIN(MAX(ms, 1000u), 60000u);
}

/* Stopping with a state a re-exec handed over that this binary could not
 * read: its processes' pages are in it alone. It goes where a dead
 * zswapd's state goes, for a zswapd that reads it to take over at its
 * start. -EUCLEAN once kept (zswapd exits with an error: it did not give
 * those pages back); on failure the rescue stays armed to try again. */
static int keep_pending_state(struct reexec_ctx *x) {
        char saved[PATH_MAX];
        int r;

        r = rescue_keep_state(x->rescue_path, x->pending_state_fd, saved);
        if (r < 0)
                return log_error_errno(r,
                                       "The state the previous zswapd handed over, which this "
                                       "zswapd cannot read, cannot be kept in %s: %m. Its "
                                       "processes wait on their faults.",
                                       x->rescue_path);
        rescue_set_pending(x->rescue, -EBADF);
        x->pending_state_fd = safe_close(x->pending_state_fd);
        log_error("Exiting with the state the previous zswapd handed over, which this zswapd "
                  "cannot read: it is kept in %s, and its processes wait on their faults until "
                  "a zswapd that reads it starts.",
                  saved);
        return -EUCLEAN;
}

/* Before the engine goes: the rescue task must never save a freed one. */
static void reexec_ctx_done(struct reexec_ctx *x) {
        /* Leaving with pages still held (an error after the state was
         * taken over, a stop that could not give them back, a state
         * handed over and not taken in): the engine stays as it is, never
         * freed, for the rescue to save once we are gone. */
        if (x->rescue && x->enginep && *x->enginep &&
            (x->pending_state_fd >= 0 || zsw_engine_list_targets(*x->enginep, NULL, 0) > 0)) {
                *x->enginep = NULL;
                x->rescue = NULL;
                return;
        }
        x->rescue = rescue_stop(x->rescue);
}

static int run(int argc, char *argv[]) {
        _cleanup_(zsw_engine_freep) struct zsw_engine *engine = NULL;
        _cleanup_(policy_manager_freep) struct policy_manager *policies = NULL;
        _cleanup_(control_freep) struct control *control = NULL;
        _cleanup_(config_freep) struct zsw_config *config = NULL;
        /* Declared last, so freed first: its last callbacks use control
         * and policies. */
        _cleanup_(reclaimer_freep) struct reclaimer *reclaimer = NULL;
        _cleanup_close_ int sfd = -EBADF, tfd = -EBADF;
        uint64_t watchdog_usec = 0, interval = STATUS_INTERVAL_USEC;
        struct control_hooks hooks = {
                .reload = reload, .dump = dump, .detached = detached, .reexec = reexec
        };
        _cleanup_(reexec_ctx_done) struct reexec_ctx rx = { .pending_state_fd = -EBADF };
        _cleanup_free_ char *rescue_path = NULL;
        struct adopted_list adopted = {};
        struct zsw_engine_error load_err = {};
        int r, k, state_fd, listen_fd, client_fd, loaded = 0;
        struct zsw_engine_config ec;

        log_setup(LOG_INFO);
        state_fd = env_fd(ENV_STATE);
        listen_fd = env_fd(ENV_LISTEN);
        client_fd = env_fd(ENV_CLIENT);

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        exe_path = realpath("/proc/self/exe", NULL);
        exe_argv = argv;
        if (!exe_path)
                log_warning_errno(errno, "Failed to resolve /proc/self/exe, 'zswapctl reexec' will "
                                         "be refused: %m");

        if (geteuid() != 0)
                return log_error_errno(EPERM, "zswapd must run as root: it ptraces the processes "
                                              "it serves.");
        /* Every error was logged with its file and line. */
        r = load_config(log_get(), &config);
        if (r < 0)
                return log_error_errno(r, "Refusing to start with a bad configuration%s%s.",
                                       arg_config ? " in " : "", arg_config ?: "");
        /* Set once, before any engine thread logs; a reload does not change
         * it (the engine's threads read the level without a lock). */
        log_setup(config->log_level);
        if (!arg_socket)
                arg_socket = config->socket_path ?: CONTROL_SOCKET_DEFAULT;

        r = setup_signals(&sfd);
        if (r < 0)
                return r;
        set_sched_slice(); /* before the engine makes its threads */

        ec = (struct zsw_engine_config) {
                .compressor = zsw_compressor_to_string(config->compressor),
                .compression_level = config->compression_level,
                .reject_incompressible = config->incompressible == ZSW_INCOMPRESSIBLE_REJECT,
                .no_dictionaries = !config->dictionaries,
                .age_interval_ms = age_interval_ms(config),
                .log = log_get(),
        };
        engine_config_pool(config, &ec);
        r = zsw_engine_new(&ec, &engine);
        if (r < 0 && ec.writeback) {
                log_warning_errno(r, "Failed to set up writeback to %s, running without it: %m",
                                  ec.swapfile);
                ec.writeback = false;
                r = zsw_engine_new(&ec, &engine);
        }
        if (r < 0)
                return log_error_errno(r, "Failed to start the engine: %m");

        /* From here on, a death of ours leaves the targets' pages in the
         * state file for the next zswapd (rescue.h). */
        rescue_path = rescue_state_path(arg_socket);
        if (!rescue_path)
                return log_oom();
        rx.engine = engine;
        rx.enginep = &engine;
        rx.rescue_path = rescue_path;
        if (rescue_start(engine, rescue_path, &rx.rescue) < 0)
                log_warning("Running without a rescue task (see above): if zswapd dies, its "
                            "targets' pages are lost.");

        /* Taken over from the process we replace, or from one that died,
         * before anything is served: their targets' faults wait meanwhile.
         * A dead zswapd's state is taken by the one zswapd that owns the
         * control socket: its own, made first. */
        if (listen_fd < 0) {
                r = control_new(arg_socket, engine, &control);
                if (r < 0)
                        return r; /* logged with the reason and what to do */
        }
        if (state_fd < 0)
                (void) rescue_adopt(engine, rescue_path, note_adopted, &adopted);
        if (state_fd >= 0) {
                rescue_set_pending(rx.rescue, state_fd);
                loaded = zsw_engine_load(engine, state_fd, note_adopted, &adopted, &load_err);
                if (loaded < 0) {
                        log_error(
                                "Cannot load the state the previous zswapd left: %s. Its targets' "
                                "pages stay held in it and those processes wait on their faults; "
                                "install a zswapd that reads this state and run 'zswapctl reexec'.",
                                load_err.message);
                        rx.pending_state_fd = state_fd;
                        state_fd = -EBADF;
                } else {
                        rescue_set_pending(rx.rescue, -EBADF);
                        state_fd = safe_close(state_fd);
                }
        }

        if (listen_fd >= 0) {
                r = control_new_from_fd(arg_socket, listen_fd, engine, &control);
                if (r < 0)
                        return r;
        }

        r = policy_manager_new(engine, TAKE_PTR(config), &policies);
        if (r < 0)
                return r;
        for (size_t i = 0; i < adopted.n; i++)
                if (policy_manager_adopt(policies, adopted.pids[i], adopted.labels[i]) < 0)
                        log_oom();
        free(adopted.pids);
        free(adopted.labels);
        hooks.userdata = &rx;
        rx.policies = policies;
        rx.control = control;
        control_set_hooks(control, &hooks);

        r = reclaimer_new(engine, &reclaimer);
        if (r < 0)
                return r;
        control_set_reclaimer(control, reclaimer);
        policy_manager_set_reclaimer(policies, reclaimer);

        /* Pinging at half the watchdog period leaves a whole half for a
         * slow request (reclaims run on the reclaim worker, not here). */
        if (sd_watchdog_enabled(false, &watchdog_usec) > 0)
                interval = MAX(MIN(interval, watchdog_usec / 2), 1000u);
        r = setup_timer(interval, &tfd);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the status timer: %m");

        log_info("zswapd %s listening on %s, %zu policies.", ZSWAPD_VERSION, arg_socket,
                 policy_manager_get_config(policies)->n_policies);
        sd_notify(false, "READY=1");
        notify_status(engine, policies);
        if (client_fd >= 0)
                reply_client(client_fd, loaded, &load_err);

        r = loop(engine, policies, control, reclaimer, sfd, tfd, watchdog_usec > 0);

        sd_notify(false, "STOPPING=1\nSTATUS=Detaching every target");
        /* The reclaim in progress ends; queued ones are answered as
         * cancelled. */
        reclaimer = reclaimer_free(reclaimer);
        control_set_reclaimer(control, NULL);
        control_set_stopping(control);
        /* Puts every stored page back into its process before returning. */
        k = stop(engine, control, sfd, watchdog_usec > 0);
        if (k < 0) {
                /* Pages are still held (logged): the rescue task saves
                 * them once we are gone, from the engine as it is, and
                 * holds the socket until then (reexec_ctx_done()). */
                TAKE_PTR(control);
                return k;
        }
        /* Every page is back; a state not taken in goes to a file before
         * the rescue, which would keep it otherwise, stops. */
        if (rx.pending_state_fd >= 0) {
                r = keep_pending_state(&rx);
                if (r < 0 && r != -EUCLEAN) {
                        TAKE_PTR(control);
                        return r; /* the rescue keeps it, or says why not */
                }
        }
        rx.rescue = rescue_stop(rx.rescue);
        control = control_free(control);
        policies = policy_manager_free(policies);
        engine = zsw_engine_free(engine);
        if (k < 0)
                return k;
        if (r >= 0)
                log_info("Every target detached, exiting.");
        return r;
}

int main(int argc, char *argv[]) {
        int r;

        if (argc >= 2 && strcmp(argv[1], RESCUE_KEEP_ARG) == 0)
                rescue_keeper_main(argc, argv);
        r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
