/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What ptrace injection (remote.c) shares between its files: the threads
 * of a target as /proc shows them (remote-proc.c), and the parts of a
 * handle that the fd and memory calls (remote-fd.c) need.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "remote.h"

#define PF_KTHREAD 0x00200000UL

const struct zsw_log *remote_log(const struct zsw_remote *r);
int remote_pidfd(const struct zsw_remote *r);

/* The threads of a process, as /proc/PID/task lists them, read with
 * getdents64() into the iterator itself: no memory is allocated, so a
 * tracer task that outlives the daemon can list them while a thread the
 * kill ended holds malloc's lock (see the top of remote.c). */
struct remote_tasks {
        int fd;
        size_t pos, len;
        char buf[4096] __attribute__((aligned(8)));
};
/* 0, or -ESRCH if the process is gone, another -errno if unreadable. */
int remote_tasks_open(struct remote_tasks *it, pid_t pid);
/* The next thread id; 0 at the end (or on a read error). */
pid_t remote_tasks_next(struct remote_tasks *it);
void remote_tasks_close(struct remote_tasks *it);
/* State letter and PF_* flags from a /proc/.../stat file; -ESRCH if gone. */
int remote_read_proc_stat(const char *path, char *ret_state, unsigned long *ret_flags);
/* A pid field ("\nTracerPid:", "\nPPid:") of a thread's status; 0 when
 * it cannot be read. */
pid_t remote_read_status_pid(pid_t pid, pid_t tid, const char *key);
pid_t remote_read_tracer(pid_t pid, pid_t tid);
bool remote_state_alive(char state);
/* Asleep in a userfault it took in kernel mode: must not be interrupted
 * (see the top of remote.c). */
bool remote_in_kernel_userfault(pid_t pid, pid_t tid);
/* "thread 123 of 120 is sleeping (S) in handle_userfault in read(2), a
 * userfault nobody serves". */
void remote_describe_thread(pid_t pid, pid_t tid, char *buf, size_t size);

/* What remote_pick_thread() found. */
enum {
        PICK_NOW,  /* a thread that can be stopped now */
        PICK_LATE, /* only threads in uninterruptible sleep: they stop when they wake */
        PICK_WAIT, /* only threads that must not be interrupted yet (remote_in_kernel_userfault()) */
};

/* A thread of pid to seize: PICK_NOW, PICK_LATE or PICK_WAIT and its tid,
 * or -ESRCH (exited), -EINVAL (a kernel thread). */
int remote_pick_thread(pid_t pid, const struct zsw_log *log, pid_t *ret_tid);
