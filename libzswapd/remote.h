/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Running system calls inside another process (the target) with ptrace.
 *
 * zswapd needs a few things only the target itself may do: create the
 * userfaultfd that serves its faults, and drop its pages (MADV_DONTNEED is
 * refused from outside). zsw_remote_seize() stops one thread of the target
 * inside the kernel's signal path, zsw_remote_syscall() makes that thread
 * execute a `syscall` instruction that already exists in its vDSO (the
 * target's code is never written: its other threads keep running it), and
 * zsw_remote_release() puts the registers back and detaches. The thread's
 * interrupted system call, if any, then restarts exactly as after a signal
 * that was ignored; signals that arrived meanwhile are queued again.
 *
 * ptrace is held only between seize and release: do one batch of calls per
 * seize. Every ptrace call of a handle runs on a tracer the handle starts
 * (ptrace ties the tracee to the tracing task, and only that task's exit
 * lets go of a thread that never stopped); any one thread at a time may
 * use the handle. The tracer is a task outside the daemon's thread group
 * (a thread of it under ThreadSanitizer): if the daemon dies between
 * seize and release, the tracer removes the guard markers a drop left,
 * puts the thread's registers back and lets the target go (remote.c).
 * Nothing else in the process may wait for the traced threads
 * (waitpid(-1, ..., __WALL) would steal their stops).
 *
 * No stop is waited for without end: a thread that does not stop within
 * ZSW_REMOTE_STOP_TIMEOUT_MS fails the call with -ETIMEDOUT and the target
 * is left as it was (every thread detached, running on its own
 * registers); the log says which thread and what it waits in.
 */
#pragma once

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "util.h"

struct zsw_remote;

/* How long a thread may take to stop for us, from the interrupt (or from
 * the seize, for a thread we must not interrupt yet). A stop costs 1-5 ms
 * here; much longer means a thread asleep in the kernel for something
 * that does not come: a vfork() parent, a fault on a userfaultfd nobody
 * reads, a dead NFS server. */
#define ZSW_REMOTE_STOP_TIMEOUT_MS 2000u
/* How long an injected call may run before it is interrupted and given up
 * (the calls we inject do not block). */
#define ZSW_REMOTE_CALL_TIMEOUT_MS 10000u
/* The signal that ends a tracer thread's wait at its deadline: a handle's
 * timer sends it to that thread alone. The library installs an empty
 * handler for it; a program with a handler of its own for it cannot seize
 * (-EBUSY). */
#define ZSW_REMOTE_WAKE_SIGNAL (SIGRTMAX - 1)

/*
 * Stops one live thread of process pid (its leader unless that has exited)
 * for injection. Errors:
 *   -ESRCH       no such process, or it has exited (zombie)
 *   -EINVAL      a kernel thread (nothing to inject into), or ourselves
 *   -EBUSY       traced already by someone else (a debugger, another zswapd)
 *   -EPERM       not permitted to ptrace it
 *   -EOPNOTSUPP  no injection on this CPU architecture, or a 32-bit target
 *   -ETIMEDOUT   no thread could be stopped in time (see above)
 * The log says which, and why.
 */
int zsw_remote_seize(pid_t pid, const struct zsw_log *log, struct zsw_remote **ret);

/* Restores the thread and detaches; returns once no thread of the
 * target is traced by us any more (one that never stopped included).
 * Accepts NULL, returns NULL. */
struct zsw_remote *zsw_remote_release(struct zsw_remote *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_remote *, zsw_remote_release);

/* Releases r as zsw_remote_release() does and returns how long the
 * target was held: from the first interrupt of one of its threads to the
 * last one let go (0 if none was interrupted). Finding the thread, the
 * tracer thread's start and its exit are not part of it: the target runs
 * meanwhile. */
uint64_t zsw_remote_release_held_ns(struct zsw_remote *r);
#define _cleanup_remote_ _cleanup_(zsw_remote_releasep)

/* Stops every other thread of the target too, and holds them (in a ptrace
 * stop, outside any system call) until release; threads created meanwhile
 * are stopped as well. A thread in uninterruptible sleep is waited for
 * (a vfork() parent until its child execs or exits); a thread that waits
 * on a userfaultfd must have its fault served meanwhile. While held, no
 * thread of the target can change its mappings or page tables, and every
 * system call they were in has finished or will restart at release, as
 * after an ignored signal. A thread asleep in a userfault it took in
 * kernel mode is not interrupted but waited for until its fault is
 * answered (an interrupt would leave it busy retrying that fault).
 * Errors: -ESRCH (the process exited or exec'd), -EBUSY (a thread is
 * traced by someone else), -EPERM, -ETIMEDOUT (a thread did not stop within
 * ZSW_REMOTE_STOP_TIMEOUT_MS; every thread is let go at release). */
int zsw_remote_stop_others(struct zsw_remote *r);

/* Waits, at most timeout_ms, for the tracers of this process's handles
 * to exit: after the daemon's death, each finishes the injection it was
 * in and lets its target go (remote.c). For zswapd-rescue, before it
 * saves: a fork child's naming may be completed meanwhile. -ETIMEDOUT
 * if one is still there. */
int zsw_remote_wait_tracers(unsigned timeout_ms);

/* Describes a thread of pid that may keep it from stopping: one asleep in
 * a userfault taken in kernel mode, else one in uninterruptible sleep
 * ("thread 12 of 10 is sleeping (S) in handle_userfault in read(2), ...").
 * -ENOENT when no thread looks so, -ESRCH when pid is gone. */
int zsw_remote_describe_stuck(pid_t pid, char *buf, size_t size);

pid_t zsw_remote_pid(const struct zsw_remote *r);
/* The thread that runs the injected calls. */
pid_t zsw_remote_tid(const struct zsw_remote *r);
/* Signals that arrived during injection and will be queued again at release. */
/* The seized thread's rseq area (address 0 when it has none). The kernel
 * writes it on every return to user space, injected calls included: a
 * page of it that is write-protected and waiting to be dropped would stop
 * the thread in a fault before it ever reaches our next ptrace stop. */
int zsw_remote_rseq_area(struct zsw_remote *r, uint64_t *ret_addr, uint32_t *ret_len);

unsigned zsw_remote_deferred_signals(const struct zsw_remote *r);

/*
 * Runs system call nr with args inside the target and stores its raw result
 * in *ret_result (-errno on failure, as the kernel returns it). Returns 0 if
 * the call ran, or a negative errno if it could not be run: -ESRCH when the
 * target died or exec'd meanwhile (every further call then fails the same
 * way and release only detaches), -ETIMEDOUT when it still ran after
 * ZSW_REMOTE_CALL_TIMEOUT_MS and an interrupt ended it (it may have done
 * part of its work). A call that ignores the interrupt too is waited for:
 * the thread runs it on our registers, which only its return gives back.
 */
int zsw_remote_syscall(struct zsw_remote *r, long nr, const unsigned long args[6],
                       long *ret_result);

/* The same for callers that only need success or -errno: the call's own
 * error and a failure to run it are folded into one negative errno. */
long zsw_remote_call(struct zsw_remote *r, long nr, const unsigned long args[6]);

/*
 * A private anonymous read-write mapping of size bytes in the target, for
 * arguments the injected calls take by pointer. The daemon fills and reads
 * it with zsw_remote_write()/zsw_remote_read(). The caller must not
 * userfaultfd-register it, and should unmap it before release.
 */
int zsw_remote_map_scratch(struct zsw_remote *r, size_t size, uint64_t *ret_addr);
int zsw_remote_unmap(struct zsw_remote *r, uint64_t addr, size_t size);
int zsw_remote_write(struct zsw_remote *r, uint64_t addr, const void *buf, size_t len);
int zsw_remote_read(struct zsw_remote *r, uint64_t addr, void *buf, size_t len);

int zsw_remote_close(struct zsw_remote *r, int target_fd);

/* Gives the target a descriptor of the same file as our fd and returns its
 * number in the target, O_CLOEXEC: the target makes a socket pair, we
 * take one end (pidfd_getfd()) and send fd over it with SCM_RIGHTS, the
 * target receives it on the other. No address is involved, so network
 * namespaces (a unit's PrivateNetwork=) do not matter. */
int zsw_remote_install_fd(struct zsw_remote *r, int fd, int *ret_target_fd);

/*
 * Creates a userfaultfd inside the target that handles faults taken in
 * kernel mode too (never UFFD_USER_MODE_ONLY; flags: O_CLOEXEC, O_NONBLOCK),
 * and a descriptor of the same file in this process. The target keeps its
 * own (*ret_target_fd), so that if the daemon dies its faults wait for a
 * new daemon instead of reading zeros. A target that may not call
 * userfaultfd(2) (no CAP_SYS_PTRACE) gets /dev/userfaultfd from us as
 * zsw_remote_install_fd() gives a descriptor, and calls
 * USERFAULTFD_IOC_NEW on it. Nothing else is left in its fd table.
 */
int zsw_remote_open_uffd(struct zsw_remote *r, int flags, int *ret_target_fd, int *ret_local_fd);

/*
 * Applies madvise(advice) to n ranges of the target's memory, in a single
 * injected process_madvise(PIDFD_SELF_THREAD) per up to 1024 ranges
 * when the kernel lets a process do that to itself with this advice
 * (Linux >= 6.15; this 6.18 accepts every advice so), else one madvise per range; all within
 * the current stop. scratch (scratch_size bytes, from
 * zsw_remote_map_scratch()) carries the iovec array. Returns 0 when every
 * range was advised, else the first failure. Every range is tried exactly
 * once, also after a failure: a range the target unmapped in part fails
 * (-ENOMEM) after its mapped part was advised, and advising it again would
 * raise a second UFFD_EVENT_REMOVE for pages already dropped.
 */
int zsw_remote_madvise_ranges(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                              const struct iovec *ranges, size_t n, int advice);

/* The same, never one madvise per range: -EOPNOTSUPP, with nothing
 * advised, where the kernel takes no process_madvise of the target on
 * itself with this advice (or refused the first call with EINVAL: the
 * first range's mapping may refuse it, as an mlocked one does). */
int zsw_remote_madvise_ranges_batched(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                                      const struct iovec *ranges, size_t n, int advice);
