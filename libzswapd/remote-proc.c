/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The threads of a target as /proc shows them, for ptrace injection
 * (remote.c): which can be stopped now, which only later, which must not
 * be interrupted, and, when one does not stop, what it waits in.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "remote-internal.h"

int remote_tasks_open(struct remote_tasks *it, pid_t pid) {
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/task", pid);
        it->pos = it->len = 0;
        it->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (it->fd < 0)
                return errno == ENOENT ? -ESRCH : -errno;
        return 0;
}

pid_t remote_tasks_next(struct remote_tasks *it) {
        for (;;) {
                const struct dirent64 *de;

                if (it->pos >= it->len) {
                        long n = syscall(SYS_getdents64, it->fd, it->buf, sizeof(it->buf));

                        if (n <= 0)
                                return 0;
                        it->pos = 0;
                        it->len = (size_t) n;
                }
                de = (const struct dirent64 *) (it->buf + it->pos);
                it->pos += de->d_reclen;
                if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
                        return (pid_t) strtol(de->d_name, NULL, 10);
        }
}

void remote_tasks_close(struct remote_tasks *it) {
        if (it->fd >= 0)
                close(it->fd);
        it->fd = -EBADF;
}

/* State letter and PF_* flags from a /proc/.../stat file. */
int remote_read_proc_stat(const char *path, char *ret_state, unsigned long *ret_flags) {
        char buf[1024], state;
        unsigned long flags;
        const char *p;
        int r;

        r = zsw_read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r == -ENOENT ? -ESRCH : r;
        /* comm may hold spaces and parentheses: fields resume after the last ')'. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
                return -EIO;
        *ret_state = state;
        *ret_flags = flags;
        return 0;
}

/* A pid field ("\nTracerPid:", "\nPPid:") of a thread's status; 0 when
 * it cannot be read. */
pid_t remote_read_status_pid(pid_t pid, pid_t tid, const char *key) {
        char path[64], buf[4096];
        const char *p;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
        if (zsw_read_small_file(path, buf, sizeof(buf)) < 0)
                return 0;
        p = strstr(buf, key);
        return p ? (pid_t) strtol(p + strlen(key), NULL, 10) : 0;
}

pid_t remote_read_tracer(pid_t pid, pid_t tid) {
        return remote_read_status_pid(pid, tid, "\nTracerPid:");
}

bool remote_state_alive(char state) {
        return state != 'Z' && state != 'X' && state != 'x';
}

/* A thread in uninterruptible sleep (D: vfork() parent, I/O) takes
 * PTRACE_INTERRUPT only when it wakes up, which may be much later. */
static bool state_interruptible(char state) {
        return remote_state_alive(state) && state != 'D';
}

/* A thread sleeping in a userfault it took in kernel mode (wchan
 * handle_userfault while in a system call): an interrupt would leave it
 * retrying that fault, busy, until somebody resolves it (see the top of
 * this file). A userfault taken in user mode is not one: the interrupt
 * sends that thread back to user space, and it faults again after us. */
bool remote_in_kernel_userfault(pid_t pid, pid_t tid) {
        char path[64], buf[64] = "";

        snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, tid);
        if (zsw_read_small_file(path, buf, sizeof(buf)) < 0 || strcmp(buf, "handle_userfault") != 0)
                return false;
        /* "-1 ..." outside a system call, "running" if it woke up since. */
        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
        return zsw_read_small_file(path, buf, sizeof(buf)) >= 0 && buf[0] >= '0' && buf[0] <= '9';
}

static const char *state_name(char state) {
        switch (state) {
        case 'R':
                return "running";
        case 'S':
                return "sleeping";
        case 'D':
                return "in uninterruptible sleep";
        case 'T':
                return "stopped";
        case 't':
                return "stopped by a tracer";
        default:
                return "exiting";
        }
}

static const char *syscall_name(long nr) {
        switch (nr) {
        case SYS_read:
                return "read(2)";
        case SYS_write:
                return "write(2)";
        case SYS_pread64:
                return "pread(2)";
        case SYS_pwrite64:
                return "pwrite(2)";
        case SYS_readv:
                return "readv(2)";
        case SYS_writev:
                return "writev(2)";
        case SYS_recvfrom:
                return "recvfrom(2)";
        case SYS_recvmsg:
                return "recvmsg(2)";
        case SYS_sendto:
                return "sendto(2)";
        case SYS_sendmsg:
                return "sendmsg(2)";
        case SYS_ioctl:
                return "ioctl(2)";
        case SYS_futex:
                return "futex(2)";
        case SYS_vfork:
                return "vfork(2)";
        case SYS_clone:
                return "clone(2)";
        case SYS_clone3:
                return "clone3(2)";
        case SYS_wait4:
                return "wait4(2)";
        default:
                return NULL;
        }
}

/* "thread 123 of 120 is sleeping (S) in handle_userfault in read(2), a
 * userfault nobody serves". */
void remote_describe_thread(pid_t pid, pid_t tid, char *buf, size_t size) {
        char path[64], state = '?', wchan[64] = "", sc[64] = "";
        unsigned long flags;
        const char *name;
        long nr = -1;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
        (void) remote_read_proc_stat(path, &state, &flags);
        snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, tid);
        if (zsw_read_small_file(path, wchan, sizeof(wchan)) < 0 || strcmp(wchan, "0") == 0)
                wchan[0] = 0;
        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
        if (zsw_read_small_file(path, sc, sizeof(sc)) >= 0 && sc[0] >= '0' && sc[0] <= '9')
                nr = strtol(sc, NULL, 10);
        name = nr >= 0 ? syscall_name(nr) : NULL;
        snprintf(buf, size, "thread %d of %d is %s (%c)%s%s", tid, pid, state_name(state), state,
                 wchan[0] ? " in " : "", wchan);
        if (nr >= 0 && name)
                snprintf(buf + strlen(buf), size - strlen(buf), " in %s", name);
        else if (nr >= 0)
                snprintf(buf + strlen(buf), size - strlen(buf), " in system call %ld", nr);
        if (strcmp(wchan, "handle_userfault") == 0 && nr >= 0)
                snprintf(buf + strlen(buf), size - strlen(buf), ", a userfault nobody serves");
}

int zsw_remote_describe_stuck(pid_t pid, char *buf, size_t size) {
        _cleanup_(remote_tasks_close) struct remote_tasks it = { .fd = -EBADF };
        char path[64], state;
        unsigned long flags;
        pid_t tid, late = 0;

        if (remote_tasks_open(&it, pid) < 0)
                return -ESRCH;
        while ((tid = remote_tasks_next(&it)) > 0) {
                if (remote_in_kernel_userfault(pid, tid)) {
                        remote_describe_thread(pid, tid, buf, size);
                        return 0;
                }
                snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
                if (late == 0 && remote_read_proc_stat(path, &state, &flags) >= 0 && state == 'D')
                        late = tid;
        }
        if (late == 0)
                return -ENOENT;
        remote_describe_thread(pid, late, buf, size);
        return 0;
}


/* How thread tid would take an interrupt now: PICK_*, or -1 if it is
 * gone or a zombie. */
static int thread_class(pid_t pid, pid_t tid) {
        char path[64], state;
        unsigned long flags;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
        if (remote_read_proc_stat(path, &state, &flags) < 0 || !remote_state_alive(state))
                return -1;
        if (remote_in_kernel_userfault(pid, tid))
                return PICK_WAIT;
        return state_interruptible(state) ? PICK_NOW : PICK_LATE;
}

/* The leader if it can be stopped now, else another thread that can, else
 * a live thread that may stop later (PICK_LATE before PICK_WAIT). */
int remote_pick_thread(pid_t pid, const struct zsw_log *log, pid_t *ret_tid) {
        _cleanup_(remote_tasks_close) struct remote_tasks it = { .fd = -EBADF };
        char path[64], state;
        unsigned long flags;
        pid_t found[3] = {}, tid;
        int r;

        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        r = remote_read_proc_stat(path, &state, &flags);
        if (r == -ESRCH)
                return zsw_log_errno(log, LOG_DEBUG, r, "No process %d", pid);
        if (r < 0)
                return zsw_log_errno(log, LOG_ERR, r, "Failed to read %s: %m", path);
        if (flags & PF_KTHREAD)
                return zsw_log_errno(log, LOG_DEBUG, EINVAL,
                                     "Process %d is a kernel thread: it has no user memory", pid);

        r = thread_class(pid, pid);
        if (r == PICK_NOW) {
                *ret_tid = pid;
                return PICK_NOW;
        }
        if (r >= 0)
                found[r] = pid;
        (void) remote_tasks_open(&it, pid);
        while ((tid = remote_tasks_next(&it)) > 0) {
                if (tid == pid || (r = thread_class(pid, tid)) < 0)
                        continue;
                if (r == PICK_NOW) {
                        *ret_tid = tid;
                        return PICK_NOW;
                }
                found[r] = found[r] ?: tid;
        }
        for (r = PICK_LATE; r <= PICK_WAIT; r++)
                if (found[r] > 0) {
                        *ret_tid = found[r];
                        return r;
                }
        return zsw_log_errno(log, LOG_DEBUG, ESRCH, "Process %d has exited (zombie)", pid);
}
