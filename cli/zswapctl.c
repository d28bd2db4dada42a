/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapctl: turns a command line into one request on zswapd's control
 * socket and prints the reply (protocol: common/control-protocol.h,
 * daemon/control.c, zswapctl(8)).
 * It holds no state and knows nothing of the engine: every check that
 * matters is the daemon's, so the socket is the one interface to test.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "control-protocol.h"
#include "timespan.h"
#include "util.h"

static const char *arg_socket = NULL;
static bool arg_json = false;
static bool arg_all = false;
static uint64_t arg_bytes = 0;
static uint64_t arg_min_age_usec = 0;
static unsigned arg_iterations = 0; /* top: 0 = until interrupted */
static unsigned arg_interval_ms = 1000;
static char **arg_words = NULL;
static int arg_n_words = 0;

_printf_(2, 3) static int fail(int error, const char *fmt, ...) {
        va_list ap;

        fputs("zswapctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return error < 0 ? error : -error;
}

static void help(void) {
        printf("%s [OPTIONS...] COMMAND ...\n\n"
               "Control zswapd, the compressed memory daemon.\n\n"
               "Commands:\n"
               "  attach PID                  Start serving a process\n"
               "  reclaim PID [--all|--bytes N] [--min-age TIME]\n"
               "                              Compress and take away its pages (default all;\n"
               "                              N takes K, M, G suffixes; only pages unused for\n"
               "                              TIME, e.g. 30s or 2min, with --min-age)\n"
               "  detach PID                  Give every page back and let it go\n"
               "  stats [PID] [--json]        Show memory saved and fault latency\n"
               "  status [--json]             One screen: store, pressure, policies, targets\n"
               "  policies [--json]           Policies, their groups and control decisions\n"
               "  targets [--json]            Attached processes, the policy of each and why\n"
               "  top [-n N] [-d SECONDS]     status, refreshed every second (N times)\n"
               "  reload                      Re-read the configuration (as SIGHUP does)\n"
               "  reexec                      Replace the running zswapd by its binary on disk,\n"
               "                              keeping every page and every target\n\n"
               "Options:\n"
               "  -s --socket=PATH            Daemon socket (default $ZSWAPD_SOCKET or %s)\n"
               "     --json                   Print one JSON object\n"
               "  -n --iterations=N           top: refresh N times, then exit\n"
               "  -d --delay=SECONDS          top: time between refreshes (default 1)\n"
               "  -h --help                   Show this help\n"
               "     --version                Show the version\n",
               program_invocation_short_name, CONTROL_SOCKET_DEFAULT);
}

/* A size in bytes with an optional binary suffix: 4096, 64K, 100M, 2G. */
static int parse_size(const char *s, uint64_t *ret) {
        static const char suffixes[] = "KMGT";
        uint64_t v = 0, mult = 1;
        const char *p = s;

        for (; *p >= '0' && *p <= '9'; p++) {
                if (v > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
                        return -ERANGE;
                v = v * 10 + (uint64_t) (*p - '0');
        }
        if (p == s)
                return -EINVAL;
        if (*p) {
                const char *x = strchr(suffixes, *p);

                if (!x || (p[1] && strcmp(p + 1, "iB") != 0))
                        return -EINVAL;
                mult = 1ull << (10 * (x - suffixes + 1));
        }
        if (v == 0)
                return -EINVAL;
        if (v > UINT64_MAX / mult)
                return -ERANGE;
        *ret = v * mult;
        return 0;
}

static int parse_argv(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_JSON, ARG_ALL, ARG_BYTES, ARG_MIN_AGE };
        static const struct option options[] = { { "socket", required_argument, NULL, 's' },
                                                 { "json", no_argument, NULL, ARG_JSON },
                                                 { "all", no_argument, NULL, ARG_ALL },
                                                 { "bytes", required_argument, NULL, ARG_BYTES },
                                                 { "min-age", required_argument, NULL,
                                                   ARG_MIN_AGE },
                                                 { "iterations", required_argument, NULL, 'n' },
                                                 { "delay", required_argument, NULL, 'd' },
                                                 { "help", no_argument, NULL, 'h' },
                                                 { "version", no_argument, NULL, ARG_VERSION },
                                                 {} };
        int c, r;
        char *end;
        double d;

        arg_socket = getenv("ZSWAPD_SOCKET") ?: CONTROL_SOCKET_DEFAULT;

        /* One line per error, in zswapctl's words, not getopt's. */
        opterr = 0;
        while ((c = getopt_long(argc, argv, ":s:hn:d:", options, NULL)) >= 0)
                switch (c) {
                case 's':
                        arg_socket = optarg;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_ALL:
                        arg_all = true;
                        break;
                case ARG_BYTES:
                        r = parse_size(optarg, &arg_bytes);
                        if (r < 0)
                                return fail(r,
                                            "invalid size '%s': give a number of bytes > 0, "
                                            "optionally with K, M or G (e.g. 64M)",
                                            optarg);
                        break;
                case ARG_MIN_AGE: {
                        /* The config's time spans: "30s", "2min", "1h 30min". */
                        char why[TIMESPAN_REASON_MAX];

                        if (timespan_parse(optarg, &arg_min_age_usec, why) < 0)
                                return fail(EINVAL, "invalid age '%s': %s", optarg, why);
                        if (arg_min_age_usec == 0)
                                return fail(EINVAL,
                                            "invalid age '%s': give a time span > 0, "
                                            "e.g. 30s, 2min, 500ms",
                                            optarg);
                        break;
                }
                case 'n':
                        errno = 0;
                        arg_iterations = (unsigned) strtoul(optarg, &end, 10);
                        if (errno || *end || arg_iterations == 0 || optarg[0] == '-')
                                return fail(EINVAL, "invalid count '%s': give a number > 0",
                                            optarg);
                        break;
                case 'd':
                        errno = 0;
                        d = strtod(optarg, &end);
                        if (errno || *end || !(d >= 0.1 && d <= 3600))
                                return fail(EINVAL,
                                            "invalid delay '%s': give seconds, 0.1 to "
                                            "3600",
                                            optarg);
                        arg_interval_ms = (unsigned) (d * 1000);
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("zswapctl %s\n", ZSWAPD_VERSION);
                        return 0;
                case ':':
                        return fail(EINVAL, "option '%s' needs a value; see 'zswapctl --help'",
                                    argv[optind - 1]);
                case '?':
                        if (optopt)
                                return fail(EINVAL, "unknown option '-%c'; see 'zswapctl --help'",
                                            optopt);
                        return fail(EINVAL, "unknown option '%s'; see 'zswapctl --help'",
                                    argv[optind - 1]);
                default:
                        return fail(EINVAL, "unknown option code %c", c);
                }

        arg_words = argv + optind;
        arg_n_words = argc - optind;
        if (arg_n_words == 0)
                return fail(EINVAL, "no command given; see 'zswapctl --help'");
        return 1;
}

static int parse_pid_arg(const char *verb, const char *s) {
        char *end;
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno != 0 || end == s || *end || v <= 0 || v > INT32_MAX)
                return fail(EINVAL, "%s: '%s' is not a process ID", verb, s);
        return (int) v;
}

static bool is_listing(const char *verb) {
        return !strcmp(verb, "status") || !strcmp(verb, "policies") || !strcmp(verb, "targets") ||
               !strcmp(verb, "top") || !strcmp(verb, "reload") || !strcmp(verb, "reexec");
}

/* The request for the command line, in the words of the protocol. */
static int build_request(char *buf, size_t size) {
        const char *verb = arg_words[0];
        bool want_pid = !!strcmp(verb, "stats");
        int pid = 0, n;

        if (is_listing(verb)) {
                if (arg_n_words != 1)
                        return fail(EINVAL, "usage: zswapctl %s", verb);
                if (arg_all || arg_bytes || arg_min_age_usec)
                        return fail(EINVAL,
                                    "--all, --bytes and --min-age are options of 'reclaim'");
                if (arg_iterations && strcmp(verb, "top"))
                        return fail(EINVAL, "--iterations is an option of 'top'");
                /* top shows what status says, again and again. */
                return snprintf(buf, size, "%s%s", strcmp(verb, "top") ? verb : "status",
                                arg_json ? " json" : "");
        }
        if (strcmp(verb, "attach") && strcmp(verb, "detach") && strcmp(verb, "reclaim") &&
            strcmp(verb, "stats"))
                return fail(EINVAL, "unknown command '%s'; see 'zswapctl --help'", verb);
        if (arg_n_words > 2 || (want_pid && arg_n_words != 2))
                return fail(EINVAL, "usage: zswapctl %s %s", verb, want_pid ? "PID" : "[PID]");
        if (arg_n_words == 2) {
                pid = parse_pid_arg(verb, arg_words[1]);
                if (pid < 0)
                        return pid;
        }
        if ((arg_all || arg_bytes || arg_min_age_usec) && strcmp(verb, "reclaim"))
                return fail(EINVAL, "--all, --bytes and --min-age are options of 'reclaim'");
        if (arg_all && arg_bytes)
                return fail(EINVAL, "reclaim: give either --all or --bytes, not both");
        if (arg_iterations)
                return fail(EINVAL, "--iterations is an option of 'top'");

        if (!strcmp(verb, "reclaim") && arg_bytes)
                n = snprintf(buf, size, "reclaim %d bytes %" PRIu64, pid, arg_bytes);
        else if (!strcmp(verb, "reclaim"))
                n = snprintf(buf, size, "reclaim %d all", pid);
        else if (pid > 0)
                n = snprintf(buf, size, "%s %d", verb, pid);
        else
                n = snprintf(buf, size, "%s", verb);
        if (arg_min_age_usec)
                n += snprintf(buf + n, size - n, " min-age %" PRIu64,
                              DIV_ROUND_UP(arg_min_age_usec, 1000));
        if (arg_json)
                n += snprintf(buf + n, size - n, " json");
        return n;
}

static int connect_daemon(int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };

        if (strlen(arg_socket) >= sizeof(sa.sun_path))
                return fail(ENAMETOOLONG, "socket path %s is too long", arg_socket);
        strcpy(sa.sun_path, arg_socket);

        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return fail(errno, "cannot create a socket: %m");
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                if (errno == ENOENT || errno == ECONNREFUSED)
                        return fail(errno,
                                    "cannot connect to %s: %m (is zswapd running? start it "
                                    "with 'systemctl start zswapd' or run 'zswapd')",
                                    arg_socket);
                if (errno == EACCES || errno == EPERM)
                        return fail(errno,
                                    "cannot connect to %s: %m (zswapd takes requests from "
                                    "root only: run zswapctl as root)",
                                    arg_socket);
                return fail(errno, "cannot connect to %s: %m", arg_socket);
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Receives the one reply message, whatever its size. */
static int receive_reply(int fd, char **ret) {
        _cleanup_free_ char *buf = NULL;
        ssize_t len, n;

        len = recv(fd, NULL, 0, MSG_PEEK | MSG_TRUNC);
        /* A daemon that closed with our request unread resets the
         * connection; its reply, queued before, comes after the error. */
        if (len < 0 && errno == ECONNRESET)
                len = recv(fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
        if (len < 0)
                return fail(errno, "cannot read the reply of zswapd: %m");
        if (len == 0)
                return fail(ECONNRESET, "zswapd closed the connection without replying (did it "
                                        "stop? see 'journalctl -u zswapd')");
        buf = malloc(len + 1);
        if (!buf)
                return fail(ENOMEM, "out of memory");
        n = recv(fd, buf, len, 0);
        if (n < 0)
                return fail(errno, "cannot read the reply of zswapd: %m");
        buf[n] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* One request, one reply: the body printed, or the daemon's error. */
static int request(const char *req, size_t n, bool clear) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *reply = NULL;
        const char *body;
        int r;

        r = connect_daemon(&fd);
        if (r < 0)
                return r;
        /* A daemon that refuses the connection (too many clients) replies
         * and closes at once: its reply is still there to read. */
        if (send(fd, req, n, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET)
                return fail(errno, "cannot send the request to zswapd: %m");
        r = receive_reply(fd, &reply);
        if (r < 0)
                return r;

        body = strchr(reply, '\n');
        body = body ? body + 1 : "";
        if (strncmp(reply, "ok\n", 3) == 0 || strcmp(reply, "ok") == 0) {
                if (clear)
                        fputs("\033[H\033[2J", stdout);
                fputs(body, stdout);
                return fflush(stdout) == 0 ? 0 : fail(errno, "cannot write the output: %m");
        }
        if (strncmp(reply, "error ", 6) != 0)
                return fail(EPROTO, "zswapd sent a reply this zswapctl does not understand; are "
                                    "both the same version?");
        /* The daemon words its errors for a person already. */
        return fail(EIO, "%.*s", (int) strcspn(body, "\n"), *body ? body : reply + 6);
}

/* `top`: status again and again; on a terminal each screen replaces the
 * last, otherwise screens follow each other, separated by a blank line. */
static int top(const char *req, size_t n) {
        bool tty = isatty(STDOUT_FILENO);

        for (unsigned i = 0; arg_iterations == 0 || i < arg_iterations; i++) {
                struct timespec ts = { arg_interval_ms / 1000, arg_interval_ms % 1000 * 1000000L };
                int r;

                if (i > 0) {
                        nanosleep(&ts, NULL);
                        if (!tty)
                                fputc('\n', stdout);
                }
                r = request(req, n, tty);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int run(int argc, char *argv[]) {
        char req[CONTROL_REQUEST_MAX + 1];
        int r, n;

        r = parse_argv(argc, argv);
        if (r <= 0)
                return r;
        n = build_request(req, sizeof(req));
        if (n < 0)
                return n;
        if (strcmp(arg_words[0], "top") == 0)
                return top(req, n);
        return request(req, n, false);
}

int main(int argc, char *argv[]) {
        int r;

        r = run(argc, argv);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
