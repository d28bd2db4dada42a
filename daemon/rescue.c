/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-rescue (see rescue.h).
 *
 * The pages zswapd takes live only in its memory, and a process can die
 * at any instruction: SIGKILL, SIGSEGV, abort(), the watchdog. The rescue
 * task is made with clone(CLONE_VM | CLONE_FILES) and no CLONE_THREAD: a
 * process of its own, outside zswapd's thread group, so the signal that
 * kills zswapd does not kill it, yet sharing zswapd's memory and
 * descriptor table, which therefore outlive zswapd while it lives. It
 * sleeps on zswapd's pidfd; when zswapd is gone, every thread of it is
 * (a pidfd polls readable once the whole thread group has exited), and
 * the task is alone with the engine as the threads left it. If zswapd
 * had not disarmed it (a clean stop gives every page back first), it
 * writes the engine's state (zsw_engine_salvage(): no locks, which dead
 * threads may hold) to the state file, and exits. The next zswapd adopts
 * the file before it serves anything (rescue_adopt()).
 *
 * Until zswapd is gone the task shares zswapd's main thread's TLS (clone
 * without CLONE_SETTLS), so it must not touch it: errno, stdio, malloc,
 * sanitizer state. It runs raw system calls only (zsw_raw_syscall()), in
 * functions the sanitizers leave alone. Afterwards the TLS is the dead
 * main thread's, and libc is ours to use, except what a dead thread may
 * have left locked: the save takes no lock and allocates with mmap(2),
 * not malloc (a thread that died inside malloc keeps its arena locked for
 * good); should it wait for good anyway, it gives up after
 * RESCUE_TIMEOUT_SEC.
 *
 * A fork child not named yet has its uffd only in our table: the state
 * names it, and the task then keeps that uffd, and nothing else, until
 * the next zswapd has taken it (rescue_keep()); under a service manager,
 * which starts the next zswapd only once this task is gone, the uffd goes
 * to the manager's file descriptor store instead (rescue_store_uffds(),
 * rescue_take_stored()). What it cannot save: a target that closed its
 * own reference to its uffd. A target a round was injecting into when
 * zswapd died is let go by the round's tracer, a task of its own that
 * outlives zswapd too (libzswapd/remote.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "conf-values.h"
#include "log.h"
#include "raw-syscall.h"
#include "rescue.h"
#include "util.h"

#define RESCUE_STACK_SIZE (1u << 20)
#define RESCUE_TIMEOUT_SEC 600u
#define RESCUE_SLOTS 9

/* ThreadSanitizer cannot follow a task that shares memory without being
 * a thread: such a build has no rescue. */
#define RESCUE_UNSUPPORTED ZSW_THREAD_SANITIZER

#define NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread"), noinline, unused))

struct rescue {
        _Atomic bool armed;
        _Atomic int pending_fd; /* rescue_set_pending() */
        pid_t pid;              /* the rescue task */
        int daemon_pidfd;       /* zswapd's own */
        void *stack;
        struct zsw_engine *engine;
        char *path;
};

char *rescue_state_path(const char *socket_path) {
        size_t len = strlen(socket_path);
        char *s;

        if (len > 5 && strcmp(socket_path + len - 5, ".sock") == 0)
                len -= 5;
        if (asprintf(&s, "%.*s.state", (int) len, socket_path) < 0)
                return NULL;
        return s;
}

/* The name of the state of slot i: path, then path.1 to path.9. */
static int slot_name(char *buf, size_t size, const char *path, int i) {
        int n = i == 0 ? snprintf(buf, size, "%s", path) : snprintf(buf, size, "%s.%d", path, i);

        return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

/* Gives the state in tmp its name (in ret_name, of PATH_MAX bytes): path,
 * or, while a state not taken over yet has it, path.1 to path.9. Never
 * replaces one (link() fails on an existing name): a state kept because
 * no zswapd could read it, or that a zswapd died taking over, still holds
 * pages. */
static int publish(const char *tmp, const char *path, char *ret_name) {
        for (int i = 0; i <= RESCUE_SLOTS; i++) {
                char name[PATH_MAX];
                int r = slot_name(name, sizeof(name), path, i);

                if (r < 0)
                        return r;
                if (link(tmp, name) == 0) {
                        (void) unlink(tmp);
                        memcpy(ret_name, name, sizeof(name));
                        return 1;
                }
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

int rescue_keep_state(const char *path, int fd, char *ret_saved) {
        char tmp[PATH_MAX];
        struct stat st;
        off_t off = 0;
        int out, r = 0;

        if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int) sizeof(tmp))
                return -ENAMETOOLONG;
        if (fstat(fd, &st) < 0)
                return -errno;
        out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out < 0)
                return -errno;
        while (r == 0 && off < st.st_size) {
                ssize_t n = sendfile(out, fd, &off, (size_t) (st.st_size - off));

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        r = n < 0 ? -errno : -EIO;
        }
        if (r == 0 && fsync(out) < 0)
                r = -errno;
        close(out);
        if (r == 0)
                r = publish(tmp, path, ret_saved);
        if (r < 0)
                (void) unlink(tmp);
        return MIN(r, 0);
}

/* The state names fork children not named yet, whose uffds are only in
 * our descriptor table (res->kept_fds): kept open, and nothing else,
 * until the next zswapd has taken them from us (pidfd_getfd()) and kills
 * us. Never returns. */
_unused_ static _Noreturn void rescue_keep(const struct zsw_engine_salvage_result *res) {
        /* "zswapd-rescue", RESCUE_KEEP_ARG, each descriptor, NULL */
        char *argv[3 + ZSW_SALVAGE_KEPT_MAX + 1] = { "zswapd-rescue", RESCUE_KEEP_ARG };
        char numbers[ZSW_SALVAGE_KEPT_MAX][12];
        char *envp[] = { NULL };

        log_error("zswapd died serving %u fork children not named yet: this task (%d) keeps "
                  "their userfaultfds until the next zswapd takes them over. Start zswapd again.",
                  res->unnamed, (int) getpid());
        alarm(0);
        for (unsigned i = 0; i < res->unnamed; i++) {
                snprintf(numbers[i], sizeof(numbers[i]), "%d", res->kept_fds[i]);
                argv[2 + i] = numbers[i];
                (void) fcntl(res->kept_fds[i], F_SETFD, 0);
        }
        /* The dead zswapd's memory goes with the exec: the keeper holds
         * nothing but the descriptors (rescue_keeper_main()). */
        execve("/proc/self/exe", argv, envp);
        log_error("Cannot start the keeper of those userfaultfds (%m): this task keeps them, and "
                  "the dead zswapd's memory, itself.");
        rescue_keeper_main(2 + (int) res->unnamed, argv);
}

void rescue_keeper_main(int argc, char *argv[]) {
        unsigned from = 0;
        sigset_t all;

        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        (void) prctl(PR_SET_NAME, "zswapd-rescue", 0, 0, 0);
        /* The descriptors named, ascending; none other. */
        for (int i = 2; i < argc; i++) {
                unsigned fd = (unsigned) atoi(argv[i]);

                if (fd > from)
                        (void) syscall(SYS_close_range, from, fd - 1, 0);
                from = fd + 1;
        }
        (void) syscall(SYS_close_range, from, ~0u, 0);
        for (;;)
                pause();
}

/* The same under a service manager, which starts the next zswapd only
 * once this task is gone too: each uffd goes to its file descriptor store
 * (sd_notify(3)'s FDSTORE=1, written out here: a dead thread may hold
 * malloc's locks), named uffd-KEEPER-NUMBER for the next zswapd
 * (rescue_take_stored()). Returns how many were sent (the manager may
 * still refuse them: the next zswapd logs those it does not get). */
_unused_ static unsigned rescue_store_uffds(const char *notify_socket,
                                            const struct zsw_engine_salvage_result *res) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len = strlen(notify_socket);
        unsigned stored = 0;
        int sock;

        if ((notify_socket[0] != '/' && notify_socket[0] != '@') || len >= sizeof(sa.sun_path))
                return 0;
        memcpy(sa.sun_path, notify_socket, len);
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = 0;
        sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (sock < 0)
                return 0;
        for (unsigned i = 0; i < res->unnamed; i++) {
                char text[96], control[CMSG_SPACE(sizeof(int))] = {};
                struct iovec iov = { text, 0 };
                struct msghdr mh = {
                        .msg_name = &sa,
                        .msg_namelen = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len),
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = control,
                        .msg_controllen = sizeof(control),
                };
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

                /* Not polled: a uffd is never hung up on. */
                iov.iov_len = (size_t) snprintf(text, sizeof(text),
                                                "FDSTORE=1\nFDPOLL=0\nFDNAME=uffd-%d-%d", getpid(),
                                                res->kept_fds[i]);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &res->kept_fds[i], sizeof(int));
                stored += sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t) iov.iov_len;
        }
        close(sock);
        return stored;
}

/* zswapd is gone without disarming us: its engine's state to r->path. */
_unused_ static int rescue_save(struct rescue *r) {
        const char *notify = getenv("NOTIFY_SOCKET");
        struct zsw_engine_salvage_result res;
        struct zsw_engine_error err = {};
        char tmp[PATH_MAX], saved[PATH_MAX];
        sigset_t alarm_only;
        int fd, n, pending;

        /* Nothing here takes a lock a dead thread may hold (no malloc: the
         * save maps its buffers), but should it wait for good anyway, it
         * gives up. */
        signal(SIGALRM, SIG_DFL);
        sigemptyset(&alarm_only);
        sigaddset(&alarm_only, SIGALRM);
        sigprocmask(SIG_UNBLOCK, &alarm_only, NULL);
        alarm(RESCUE_TIMEOUT_SEC);

        /* First: the engine's state is the newer for a process in both
         * (taken in half way), and adoption takes the newest first. */
        pending = atomic_load(&r->pending_fd);
        if (pending >= 0) {
                n = rescue_keep_state(r->path, pending, saved);
                if (n < 0)
                        log_error_errno(n,
                                        "zswapd died holding the state a re-exec handed over, "
                                        "not taken in, and it cannot be kept in %s: %m. Its "
                                        "processes wait on their faults for good.",
                                        r->path);
                else
                        log_error("zswapd died holding the state a re-exec handed over, not "
                                  "taken in; it is kept in %s for the next zswapd.",
                                  saved);
        }

        /* A tracer that was injecting finishes first: what it completes
         * (a fork child given its uffd) is then in the state. */
        if (zsw_engine_wait_tracers() < 0)
                log_warning("A tracer of zswapd's is still holding a process; saving without "
                            "waiting for it.");

        if (snprintf(tmp, sizeof(tmp), "%s.tmp", r->path) >= (int) sizeof(tmp))
                return log_error_errno(ENAMETOOLONG, "State file name too long: %s", r->path);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return log_error_errno(errno,
                                       "zswapd died holding its targets' pages, and their state "
                                       "cannot be written to %s: %m. Those processes wait on their "
                                       "faults for good.",
                                       tmp);
        n = zsw_engine_salvage(r->engine, fd, &res, &err);
        if (n >= 0 && fsync(fd) < 0)
                n = -errno;
        close(fd);
        if (n > 0) {
                int k = publish(tmp, r->path, saved);

                if (k < 0)
                        n = k;
        }
        if (n <= 0)
                (void) unlink(tmp);
        if (n < 0)
                return log_error_errno(n,
                                       "zswapd died holding its targets' pages, and their state "
                                       "cannot be written to %s: %s. Those processes wait on their "
                                       "faults for good.",
                                       r->path, err.message[0] ? err.message : strerror(-n));
        if (n > 0)
                log_error("zswapd died; the pages it held for %d processes (%" PRIu64
                          " entries, %.1f MiB of state) are saved in %s. Start zswapd again: it "
                          "takes them over, and those processes' faults wait until then.",
                          n, res.entries, res.bytes / (1024.0 * 1024.0), saved);
        if (n > 0 && res.lost > 0)
                log_error("%" PRIu64 " of those pages were in the swapfile, which could not be "
                          "read: they are saved as lost, and a process that touches one gets "
                          "SIGBUS.",
                          res.lost);
        if (n > 0 && res.unnamed > 0 && notify) {
                /* The service manager starts the next zswapd only once
                 * this task is gone too: it keeps them instead. */
                unsigned stored = rescue_store_uffds(notify, &res);

                if (stored < res.unnamed)
                        log_error("zswapd died serving %u fork children not named yet, whose "
                                  "userfaultfds only this task held; %u of them could not be "
                                  "handed to the service manager's file descriptor store "
                                  "(FileDescriptorStoreMax= of the unit): their missing pages "
                                  "read as zeros now.",
                                  res.unnamed, res.unnamed - stored);
                if (stored > 0)
                        log_error("zswapd died serving %u fork children not named yet: their "
                                  "userfaultfds are handed to the service manager's file "
                                  "descriptor store for the next zswapd.",
                                  stored);
                res.unnamed = 0;
        }
        if (res.unheld + res.unnamed_lost > 0)
                log_error("zswapd died serving %u processes whose pages could not be saved (%u "
                          "closed their own reference to their userfaultfd, %u fork children "
                          "were not named yet): their missing pages read as zeros now.",
                          res.unheld + res.unnamed_lost, res.unheld, res.unnamed_lost);
        if (n > 0 && res.unnamed > 0)
                rescue_keep(&res);
        return n;
}

/* The rescue task. Raw system calls only until zswapd is gone. */
NO_SANITIZE static int rescue_main(void *userdata) {
        struct rescue *r = userdata;
        struct pollfd p = { .fd = r->daemon_pidfd, .events = POLLIN };
        uint64_t all = ~UINT64_C(0);
        long k;

        /* Only SIGKILL ends us: systemd's SIGTERM to the unit's processes
         * after zswapd's death must not cut the save short. */
        zsw_raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, (long) &all, 0, sizeof(all), 0);
        zsw_raw_syscall(SYS_prctl, PR_SET_NAME, (long) "zswapd-rescue", 0, 0, 0);
        do /* no timeout, no mask: 1 once zswapd's thread group is gone */
                k = zsw_raw_syscall(SYS_ppoll, (long) &p, 1, 0, 0, 0);
        while (k == -EINTR || k == 0);
        if (k < 0 || !atomic_load_explicit(&r->armed, memory_order_acquire))
                return 0;
        return rescue_save(r) < 0 ? 1 : 0;
}

int rescue_start(struct zsw_engine *engine, const char *state_path, struct rescue **ret) {
        _cleanup_(rescue_stopp) struct rescue *r = NULL;
        int k;

#if RESCUE_UNSUPPORTED
        (void) engine;
        (void) state_path;
        (void) k;
        *ret = NULL;
        log_warning("No rescue task in a ThreadSanitizer build: if zswapd dies, its targets' "
                    "pages are lost.");
        return 0;
#else
        r = calloc(1, sizeof(*r));
        if (!r)
                return log_oom();
        *r = (struct rescue) { .engine = engine, .daemon_pidfd = -EBADF };
        atomic_init(&r->armed, true);
        atomic_init(&r->pending_fd, -1);
        r->path = strdup(state_path);
        if (!r->path)
                return log_oom();
        r->daemon_pidfd = (int) syscall(SYS_pidfd_open, getpid(), 0);
        if (r->daemon_pidfd < 0)
                return log_error_errno(errno, "Failed to open zswapd's own pidfd: %m");
        r->stack = mmap(NULL, RESCUE_STACK_SIZE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (r->stack == MAP_FAILED) {
                r->stack = NULL;
                return log_error_errno(errno, "Failed to map the rescue task's stack: %m");
        }
        /* No exit signal: zswapd reaps it with __WALL (rescue_stop()). */
        k = clone(rescue_main, (char *) r->stack + RESCUE_STACK_SIZE,
                  CLONE_VM | CLONE_FILES | CLONE_FS, r);
        if (k < 0)
                return log_error_errno(errno, "Failed to start the rescue task: %m");
        r->pid = k;
        log_debug("Rescue task %d keeps the targets' pages if zswapd dies; state file %s.", r->pid,
                  state_path);
        *ret = TAKE_PTR(r);
        return 0;
#endif
}

void rescue_set_pending(struct rescue *r, int fd) {
        if (r)
                atomic_store(&r->pending_fd, fd < 0 ? -1 : fd);
}

struct rescue *rescue_stop(struct rescue *r) {
        if (!r)
                return NULL;
        atomic_store_explicit(&r->armed, false, memory_order_release);
        /* Also what rescue_start() made before it failed. */
        if (r->pid > 0) {
                (void) kill(r->pid, SIGKILL);
                while (waitpid(r->pid, NULL, __WALL) < 0 && errno == EINTR)
                        ;
        }
        if (r->stack)
                munmap(r->stack, RESCUE_STACK_SIZE);
        safe_close(r->daemon_pidfd);
        free(r->path);
        free(r);
        return NULL;
}

/* Takes over the state at path, if any; removes it once taken over. */
static int adopt_one(struct zsw_engine *engine, const char *path, zsw_engine_adopted_fn adopted,
                     void *userdata) {
        struct zsw_engine_error err = {};
        _cleanup_close_ int fd = -EBADF;
        int r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT)
                return 0;
        if (fd < 0)
                return log_error_errno(errno, "Failed to open the state a dead zswapd left, %s: %m",
                                       path);
        log_notice("Taking over the processes a dead zswapd served, from %s.", path);
        r = zsw_engine_adopt(engine, fd, adopted, userdata, &err);
        if (r < 0)
                return log_error_errno(r,
                                       "Cannot take over the state a dead zswapd left in %s: %s. "
                                       "Its processes wait on their faults; the file is kept: "
                                       "start a zswapd that reads it.",
                                       path, err.message);
        if (unlink(path) < 0)
                log_warning_errno(errno, "Failed to remove %s, ignoring: %m", path);
        log_notice("Took over %d processes a dead zswapd served.", r);
        return r;
}

/* The uffds a dead zswapd's rescue task handed to the service manager
 * (rescue_store_uffds()), which passes its store to each start: to the
 * engine for the adoption (rescue_drop_stored() after it). Anything else
 * in the store goes. */
static void rescue_take_stored(struct zsw_engine *engine) {
        char **names = NULL;
        int n = sd_listen_fds_with_names(true, &names);

        for (int i = 0; i < n; i++) {
                int fd = SD_LISTEN_FDS_START + i, keeper, number, end = 0;
                const char *name = names ? names[i] : NULL;

                if (name && sscanf(name, "uffd-%d-%d%n", &keeper, &number, &end) == 2 &&
                    name[end] == 0 && zsw_engine_add_kept_uffd(engine, keeper, number, fd) >= 0)
                        continue;
                log_warning("Closing descriptor %d (%s) from the service manager: not a "
                            "userfaultfd a dead zswapd's rescue task kept.",
                            fd, name ?: "unnamed");
                close(fd);
                if (name)
                        (void) sd_notifyf(false, "FDSTOREREMOVE=1\nFDNAME=%s", name);
        }
        strv_free(names);
}

/* After the adoption: what it took leaves the store (a start without it
 * would get it again), and what it did not too if every state was taken
 * (no state names it); else that stays in the store for a zswapd that
 * reads the state left. */
static void rescue_drop_stored(void *userdata, pid_t keeper, int number, bool taken) {
        const bool *all_adopted = userdata;

        if (taken || *all_adopted)
                (void) sd_notifyf(false, "FDSTOREREMOVE=1\nFDNAME=uffd-%d-%d", (int) keeper,
                                  number);
}

int rescue_adopt(struct zsw_engine *engine, const char *path, zsw_engine_adopted_fn adopted,
                 void *userdata) {
        int r, total = 0, first_error = 0;
        bool all_adopted;
        unsigned left;

        rescue_take_stored(engine);

        /* Newest first: a process in two states (a zswapd died taking one
         * over) is taken from the newer, which knows what happened since. */
        for (int i = RESCUE_SLOTS; i >= 0; i--) {
                char name[PATH_MAX];

                r = slot_name(name, sizeof(name), path, i);
                if (r < 0)
                        return log_error_errno(r, "State file name too long: %s", path);
                r = adopt_one(engine, name, adopted, userdata);
                if (r < 0 && first_error == 0)
                        first_error = r;
                total += MAX(r, 0);
        }
        all_adopted = first_error == 0;
        left = zsw_engine_drop_kept_uffds(engine, rescue_drop_stored, &all_adopted);
        if (left > 0 && all_adopted)
                log_error("%u userfaultfds of fork children that a dead zswapd had not named, "
                          "kept by the service manager, belong to no state taken over: closed, "
                          "and those children's missing pages read as zeros now.",
                          left);
        else if (left > 0)
                log_warning("%u userfaultfds of fork children that a dead zswapd had not named "
                            "stay in the service manager's store, with the state left for a "
                            "zswapd that reads it.",
                            left);
        return first_error < 0 ? first_error : total;
}
