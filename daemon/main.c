/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd: owns one engine and serves the control socket from a single
 * epoll loop, next to a signalfd (SIGTERM/SIGINT stop, SIGHUP reload) and a
 * timer that pings the systemd watchdog and refreshes the STATUS= line.
 * Faults never pass through this loop: the engine's own threads serve them.
 */
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <sys/timerfd.h>
#include <systemd/sd-daemon.h>

#include "config.h"
#include "control.h"
#include "engine.h"
#include "log.h"

/* How often STATUS= is refreshed when no watchdog asks for more. */
#define STATUS_INTERVAL_USEC (10 * 1000000ull)

static const char *arg_socket = NULL;
static const char *arg_config = NULL;

static void help(void) {
        printf("%s [OPTIONS...]\n\n"
               "Compressed memory for processes, in user space. Runs in the foreground\n"
               "and takes requests from zswapctl(8) on its control socket.\n\n"
               "  -s --socket=PATH   Control socket (default $ZSWAPD_SOCKET or %s)\n"
               "  -c --config=FILE   Configuration file\n"
               "  -h --help          Show this help\n"
               "     --version       Show the version\n",
               program_invocation_short_name, CONTROL_SOCKET_DEFAULT);
}

static int parse_argv(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "config", required_argument, NULL, 'c' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {}
        };
        int c;

        arg_socket = getenv("ZSWAPD_SOCKET") ?: CONTROL_SOCKET_DEFAULT;

        while ((c = getopt_long(argc, argv, "s:c:h", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        if (optarg[0] != '/')
                                return log_error_errno(EINVAL, "--socket needs an absolute path, "
                                                               "got '%s'.", optarg);
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
static void notify_status(struct zsw_engine *engine) {
        struct zsw_engine_stats s;

        if (zsw_engine_get_stats(engine, &s) < 0)
                return;
        sd_notifyf(false, "STATUS=Serving %u targets: %.1f MiB stored in %.1f MiB (ratio %.2f)",
                   s.targets, s.stored_pages * (double) getpagesize() / (1024.0 * 1024.0),
                   s.pool_bytes / (1024.0 * 1024.0),
                   s.pool_bytes ? s.stored_pages * (double) getpagesize() / s.pool_bytes : 0.0);
}

static void reload(void) {
        if (!arg_config) {
                log_info("Received SIGHUP, but no configuration file was given (--config); "
                         "nothing to reload.");
                return;
        }
        sd_notify(false, "RELOADING=1");
        if (access(arg_config, R_OK) < 0)
                log_warning_errno(errno, "Cannot read %s, keeping the running configuration: %m",
                                  arg_config);
        else
                log_notice("Received SIGHUP: this version reads no settings from %s yet; "
                           "nothing changed.",
                           arg_config);
        sd_notify(false, "READY=1");
}

/* Returns > 0 to keep running, 0 to stop. */
static int process_signal(int sfd) {
        struct signalfd_siginfo si;
        ssize_t n;

        n = read(sfd, &si, sizeof(si));
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 1 : -errno;
        if (n != sizeof(si))
                return -EIO;
        if (si.ssi_signo == SIGHUP) {
                reload();
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

static int process_timer(int tfd, struct zsw_engine *engine, bool watchdog) {
        uint64_t ticks;

        if (read(tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                return log_error_errno(errno, "Failed to read the timer: %m");
        if (watchdog)
                sd_notify(false, "WATCHDOG=1");
        notify_status(engine);
        return 1;
}

static int process_control(struct control *control, struct zsw_engine *engine) {
        int r;

        r = control_process(control);
        if (r < 0)
                return log_error_errno(r, "Failed to serve the control socket: %m");
        /* Attach and detach change the summary at once. */
        notify_status(engine);
        return 1;
}

/* Runs until a stop signal (returns 0) or a failure of the loop itself. */
static int loop(struct zsw_engine *engine, struct control *control, int sfd, int tfd,
                bool watchdog) {
        _cleanup_close_ int epfd = -EBADF;
        int r;

        epfd = epoll_create1(EPOLL_CLOEXEC);
        if (epfd < 0)
                return log_error_errno(errno, "Failed to create an epoll instance: %m");
        if ((r = watch(epfd, sfd)) < 0 || (r = watch(epfd, tfd)) < 0 ||
            (r = watch(epfd, control_get_fd(control))) < 0)
                return log_error_errno(r, "Failed to set up the event loop: %m");

        for (;;) {
                struct epoll_event ev[4];
                int n;

                n = epoll_wait(epfd, ev, ARRAY_SIZE(ev), -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return log_error_errno(errno, "Failed to wait for events: %m");
                }
                for (int i = 0; i < n; i++) {
                        if (ev[i].data.fd == sfd) {
                                r = process_signal(sfd);
                                if (r < 0)
                                        return log_error_errno(r, "Failed to read a signal: %m");
                        } else if (ev[i].data.fd == tfd)
                                r = process_timer(tfd, engine, watchdog);
                        else
                                r = process_control(control, engine);
                        if (r <= 0)
                                return r;
                }
        }
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_engine *, zsw_engine_free);

/* The settings of --config (the built-in defaults without it). */
static int load_config(struct zsw_config **ret) {
        struct zsw_config_source src = { .path = arg_config };
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int fd = -EBADF;
        ssize_t n;

        if (!arg_config)
                return zsw_config_load_sources(NULL, NULL, 0, log_get(), ret);
        fd = open(arg_config, O_RDONLY | O_CLOEXEC);
        text = malloc(ZSW_CONFIG_FILE_MAX + 1);
        if (fd < 0 || !text)
                return log_error_errno(fd < 0 ? errno : ENOMEM,
                                       "Cannot read the configuration file %s: %m", arg_config);
        do {
                n = read(fd, text + src.size, ZSW_CONFIG_FILE_MAX + 1 - src.size);
                if (n < 0 && errno != EINTR)
                        return log_error_errno(errno, "Cannot read the configuration file %s: %m",
                                               arg_config);
                src.size += n > 0 ? (size_t) n : 0;
        } while (n != 0 && src.size <= ZSW_CONFIG_FILE_MAX);
        if (src.size > ZSW_CONFIG_FILE_MAX)
                return log_error_errno(EFBIG, "Configuration file %s is too big.", arg_config);
        src.text = text;
        return zsw_config_load_sources(&src, NULL, 0, log_get(), ret);
}

/* [Pool] and [Writeback] as the engine takes them. */
static void engine_config_pool(const struct zsw_config *c, struct zsw_engine_config *ec) {
        struct sysinfo si;
        uint64_t ram = sysinfo(&si) == 0 ? (uint64_t) si.totalram * si.mem_unit : 0, limit;

        limit = zsw_limit_resolve(&c->pool_limit, ram);
        ec->pool_limit_bytes = limit == UINT64_MAX ? 0 : limit;
        ec->accept_threshold_percent = c->accept_threshold;
        ec->writeback = c->writeback;
        ec->swapfile = c->swapfile;
        ec->swapfile_max_bytes = c->swapfile_size;
}

static int run(int argc, char *argv[]) {
        _cleanup_(zsw_config_freep) struct zsw_config *config = NULL;
        _cleanup_(zsw_engine_freep) struct zsw_engine *engine = NULL;
        _cleanup_(control_freep) struct control *control = NULL;
        struct zsw_engine_config ec = {};
        _cleanup_close_ int sfd = -EBADF, tfd = -EBADF;
        uint64_t watchdog_usec = 0, interval = STATUS_INTERVAL_USEC;
        sigset_t mask;
        int r;

        log_setup(LOG_INFO);

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;

        if (geteuid() != 0)
                return log_error_errno(EPERM, "zswapd must run as root: it ptraces the processes "
                                              "it serves.");
        if (arg_config && access(arg_config, R_OK) < 0)
                return log_error_errno(errno, "Cannot read the configuration file %s: %m",
                                       arg_config);

        /* Blocked before the engine starts its threads, so that they inherit
         * the mask and every signal arrives at the signalfd. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGPIPE);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        sigdelset(&mask, SIGPIPE);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        if (sfd < 0)
                return log_error_errno(errno, "Failed to create a signalfd: %m");

        r = load_config(&config);
        if (r < 0)
                return r; /* every problem logged */
        ec.log = log_get();
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

        r = control_new(arg_socket, engine, &control);
        if (r < 0)
                return r; /* logged with the reason and what to do */

        /* Pinging at half the watchdog period leaves a whole half for a
         * slow request (a long reclaim runs on this loop). */
        if (sd_watchdog_enabled(false, &watchdog_usec) > 0)
                interval = MAX(MIN(interval, watchdog_usec / 2), 1000u);
        r = setup_timer(interval, &tfd);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the status timer: %m");

        log_info("zswapd %s listening on %s.", ZSWAPD_VERSION, arg_socket);
        sd_notify(false, "READY=1");
        notify_status(engine);

        r = loop(engine, control, sfd, tfd, watchdog_usec > 0);

        sd_notify(false, "STOPPING=1\nSTATUS=Detaching every target");
        control = control_free(control);
        /* Puts every stored page back into its process before returning. */
        engine = zsw_engine_free(engine);
        if (r >= 0)
                log_info("Every target detached, exiting.");
        return r;
}

int main(int argc, char *argv[]) {
        int r;

        r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
