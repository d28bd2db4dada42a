/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ptrace injection: system calls run by one thread of a target process.
 * (remote-proc.c reads the target's threads from /proc, remote-fd.c maps
 * scratch memory in it and moves descriptors in and out of it.)
 *
 * How a thread is borrowed. PTRACE_SEIZE (no options that outlive us: never
 * EXITKILL, the target must survive a daemon crash) and PTRACE_INTERRUPT
 * stop the thread inside get_signal(). If it was blocked in a system call,
 * that call has already returned a restart code (-ERESTARTSYS,
 * -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK, ...) in the saved registers and
 * the kernel has not yet acted on it.
 *
 * How a call runs. The registers are set to "syscall instruction in the
 * vDSO, number and arguments, orig_ax = -1" and the thread single-steps:
 * the kernel reports the step at syscall exit as a SIGTRAP, so every later
 * stop is again a signal-delivery stop inside get_signal(). That invariant
 * is what makes release transparent: once the saved registers are back and
 * the thread detached, get_signal() finds nothing to deliver and the arch
 * code applies the usual restart rules to the *original* registers, so a
 * read(2) restarts, a nanosleep(2) continues through restart_syscall with
 * its absolute expiry (restart_block is untouched: no injected call here
 * uses it). Stopping at a syscall-exit stop instead (PTRACE_SYSCALL) would
 * let -ERESTARTSYS leak to the target as a return value.
 *
 * Signals. A signal dequeued while we step is suppressed, its siginfo kept,
 * and queued again at release: one by detaching with it from the
 * signal-delivery stop (siginfo intact), the others from outside with
 * rt_tgsigqueueinfo() (intact for sigqueue()-style senders) or tgkill()
 * (kill()-style and kernel siginfo cannot be forged: the sender becomes us).
 * Queueing them from inside the target would not do: every later step
 * dequeues them again.
 *
 * Deadlines. Every wait for a stop has one (ZSW_REMOTE_STOP_TIMEOUT_MS,
 * ZSW_REMOTE_CALL_TIMEOUT_MS). waitpid() blocks, so a stop is taken as
 * soon as it comes, and a per-handle timer (ZSW_REMOTE_WAKE_SIGNAL to the
 * tracer thread alone, an empty handler) interrupts it at the deadline
 * and every millisecond after, since nothing else bounds a wait for a
 * tracee. A thread that did not stop in time cannot be detached
 * (PTRACE_DETACH wants a stopped tracee) and keeps our pending interrupt:
 * only the exit of its tracer unlinks it and clears that. So each handle
 * has a tracer of its own that makes every ptrace call and exits at
 * release: the threads it stopped are detached one by one, the ones that
 * never stopped are let go by the kernel, unchanged. Each call of the API
 * is one operation handed to the tracer (a seize, holding the others, one
 * injected call with all its steps): a stop costs a few cross-CPU
 * wakeups, not one per ptrace request.
 *
 * The daemon's death. A tracer that exits with a thread in the middle of
 * our steps leaves it on our registers with the trap flag set
 * (exit_ptrace() unlinks, it does not disable stepping as PTRACE_DETACH
 * does): the thread dies of SIGTRAP at its next instruction. So the
 * tracer is not a thread of the daemon but a task of its own, made with
 * clone(CLONE_VM | CLONE_FILES | CLONE_FS) and no CLONE_THREAD: a kill of
 * the daemon leaves it. It runs on the TLS of a thread of the daemon
 * that only waits for it (tracer_host()). Between operations it looks at
 * its parent: once the daemon has died or exec'd, it finishes what the
 * drop in flight left (finish_orphaned()), puts the thread's registers
 * back, lets every held thread go and exits, as release would have.
 * Operations are handed over through counters and futexes, with no lock
 * a dying thread could keep; and no operation allocates memory (threads
 * are listed with getdents64(), the hold's room is made beforehand, the
 * vDSO is read out of the tracer), since a kill can end a thread of the
 * daemon holding malloc's lock.
 *
 * The syscall instruction is looked up in the vDSO where the kernel put
 * it (AT_SYSINFO_EHDR, checked with one PROCMAP_QUERY), and in the whole
 * maps only if the target moved it.
 *
 * What the kernel cannot undo: a thread that waits in a userfault taken
 * in kernel mode (a read(2) into a missing page of a registered range)
 * and gets an interrupt leaves its wait and retries the fault, busy,
 * until somebody resolves it; a signal it does not handle in kernel mode
 * stays pending, tracer or not. So such a thread is never interrupted: we
 * wait until it leaves that wait (our own fault threads answer theirs at
 * once), and give up at the deadline if it does not.
 */
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/kcmp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#include "linux-compat.h"
#include "remote-arch.h"
#include "raw-syscall.h"
#include "remote-internal.h"
#include "uffd-compat.h"

/* Kernel-internal restart codes a stopped thread's syscall may hold. */
#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516

/* The tracer is a task of its own that outlives the daemon (see the top),
 * but under ThreadSanitizer a thread of the daemon. */
#define REMOTE_TRACER_TASK (!ZSW_THREAD_SANITIZER)
/* The tracer task's stack, on its host's stack (see tracer_host()). */
#define TRACER_STACK_SIZE (512u * 1024)
#define TRACER_HOST_STACK_SIZE (TRACER_STACK_SIZE + 256u * 1024)

#define VDSO_MAX_SIZE (64 * 1024)
#define DEFERRED_SIGNALS_MAX 64
#define IOV_MAX_PER_CALL 1024 /* UIO_MAXIOV */

struct zsw_remote {
        const struct zsw_log *log;
        pid_t pid;
        pid_t tid;
        int pidfd;
        uint64_t insn;       /* a syscall instruction in the target's vDSO */
        zsw_arch_regs saved; /* the thread's own registers */
        bool regs_dirty;     /* the thread runs on ours: restore at release */
        bool at_signal_stop; /* last stop was a signal-delivery stop */
        bool seized;         /* we are its tracer */
        bool gone;           /* exited or exec'd: nothing left to restore */
        bool abandoned;      /* left on our registers (finish_orphaned()) */
        bool our_child;      /* the leader of a child of ours: never reap its exit */
        int madvise_self;    /* process_madvise on itself: -1 unknown, 0 no, 1 yes */
        unsigned n_signals;
        siginfo_t signals[DEFERRED_SIGNALS_MAX];
        bool stopped;                            /* r->tid is in a ptrace stop of ours */
        struct __ptrace_rseq_configuration rseq; /* r->tid's, unless rseq_error */
        int rseq_error;
        struct held_thread *held; /* the other threads, stopped by zsw_remote_stop_others() */
        size_t n_held, held_size;

        /* The tracer that makes every ptrace call of this handle (see the
         * top of this file); callers post one operation at a time. It runs
         * on the TLS of thread `tracer` (its host, see tracer_start()). */
        pthread_t tracer;
        pid_t tracer_tid;
        bool tracer_started;
        pid_t daemon_pid; /* the tracer task's parent while the daemon lives */
        /* A thread was seized and never seen stopped: only the tracer's
         * exit lets it go (see zsw_remote_release()). */
        bool exit_lets_go;
        /* Operations are posted and answered by these counters and futex
         * waits, never under a lock: an orphaned tracer must go on though
         * the daemon's threads died holding whatever they held. An op of
         * NULL ends the tracer. */
        _Atomic uint32_t op_seq, done_seq;
        _Atomic bool tracer_exited;
        int (*op)(struct zsw_remote *r, void *arg);
        void *op_arg;
        int op_result;
        timer_t wake_timer; /* ends the tracer's waits at their deadlines */
        bool wake_timer_made;
        /* Guard markers installed and not yet removed: an orphaned tracer
         * removes them before it lets the thread go (finish_orphaned()). */
        struct iovec *guard_ranges;
        uint64_t guard_scratch;
        size_t guard_scratch_size;
        _Atomic size_t n_guard;
        /* A MADV_DONTNEED was injected: its REMOVE events cannot be told
         * from the target's by a zswapd that did not inject it. */
        _Atomic bool dontneed_injected;
        /* The first interrupt of a thread of the target, and when the
         * last one was let go (zsw_remote_release_held_ns()). */
        uint64_t interrupted_ns, let_go_ns;
};

/* Another thread of the target, held in a ptrace stop until release. */
struct held_thread {
        pid_t tid;
        int sig;        /* its signal-delivery stop's signal, delivered at release */
        bool our_child; /* the leader of a child of ours (see wait_task()) */
        bool stopped;
        bool gone;
};

pid_t zsw_remote_pid(const struct zsw_remote *r) {
        return r->pid;
}

pid_t zsw_remote_tid(const struct zsw_remote *r) {
        return r->tid;
}

const struct zsw_log *remote_log(const struct zsw_remote *r) {
        return r->log;
}

int remote_pidfd(const struct zsw_remote *r) {
        return r->pidfd;
}

/* Read at the seize: only the thread itself changes it, and it stays
 * stopped until release. */
int zsw_remote_rseq_area(struct zsw_remote *r, uint64_t *ret_addr, uint32_t *ret_len) {
        if (r->rseq_error < 0)
                return r->rseq_error;
        *ret_addr = r->rseq.rseq_abi_pointer;
        *ret_len = r->rseq.rseq_abi_size;
        return 0;
}

unsigned zsw_remote_deferred_signals(const struct zsw_remote *r) {
        return r->n_signals;
}

/* ---- ptrace primitives --------------------------------------------------- */

static int get_regs(struct zsw_remote *r, zsw_arch_regs *regs) {
        return zsw_arch_get_regs(r->tid, regs);
}

static int set_regs(struct zsw_remote *r, const zsw_arch_regs *regs) {
        return zsw_arch_set_regs(r->tid, regs);
}

/* Waits for the next stop of thread tid, a tracee of ours. -ESRCH once it
 * has exited.
 *
 * A tracer's wait reaps a tracee that exits. When the tracer's process is
 * also the target's parent (a program that runs the engine on its own
 * children, as the tests do, with the tracer a thread: under
 * ThreadSanitizer), that would take the exit status from the caller's
 * own waitpid(): so the leader's exit is only looked at (WNOWAIT) and
 * left to the parent (our_child). (Killed between that look and the
 * waitpid below, it is reaped after all; the kernel offers no way to
 * consume a stop alone.) A tracer task is nobody's parent: its wait
 * hands the exit on to the real parent. */
static int wait_task(struct zsw_remote *r, pid_t tid, bool our_child, uint64_t deadline_ns,
                     int *ret_status) {
        /* Our timer interrupts the wait at the deadline and every
         * millisecond after it: a tick that lands just before we block is
         * followed by another. */
        struct itimerspec when = {
                .it_value = { (time_t) (deadline_ns / 1000000000u),
                              (long) (deadline_ns % 1000000000u) },
                .it_interval = { 0, 1000000 },
        };
        int status = 0, k = 0;
        pid_t p;

        if (timer_settime(r->wake_timer, TIMER_ABSTIME, &when, NULL) < 0)
                return -errno;
        for (;;) {
                int nohang = zsw_now_ns() >= deadline_ns ? WNOHANG : 0;
                siginfo_t si = {};

                if (our_child) {
                        if (waitid(P_PID, (id_t) tid, &si,
                                   WEXITED | WSTOPPED | WNOWAIT | __WALL | nohang) < 0) {
                                if (errno == EINTR)
                                        continue;
                                k = -errno;
                                break;
                        }
                        if (si.si_pid == tid &&
                            (si.si_code == CLD_EXITED || si.si_code == CLD_KILLED ||
                             si.si_code == CLD_DUMPED)) {
                                k = -ESRCH;
                                break;
                        }
                }
                p = waitpid(tid, &status, __WALL | nohang);
                if (p < 0 && errno == EINTR)
                        continue;
                k = p < 0 ? -errno : p == 0 ? -ETIMEDOUT : 0;
                break;
        }
        (void) timer_settime(r->wake_timer, 0, &(struct itimerspec) {}, NULL);
        if (k < 0)
                return k;
        if (WIFEXITED(status) || WIFSIGNALED(status))
                return -ESRCH;
        *ret_status = status;
        return 0;
}

static uint64_t deadline_in(unsigned ms) {
        return zsw_now_ns() + (uint64_t) ms * 1000000u;
}

static int wait_stop(struct zsw_remote *r, uint64_t deadline_ns, int *ret_status) {
        int k = wait_task(r, r->tid, r->our_child, deadline_ns, ret_status);

        if (k == -ESRCH)
                r->gone = true;
        r->stopped = k >= 0;
        return k;
}

static int event_of(int status) {
        return (unsigned) status >> 16;
}

/* Another thread exec'd: our thread now runs a new program (or is gone).
 * The saved registers mean nothing there; let it go as it is. */
static int lost_to_exec(struct zsw_remote *r) {
        (void) ptrace(PTRACE_DETACH, r->tid, NULL, NULL);
        r->gone = true;
        r->stopped = false;
        return zsw_log_errno(r->log, LOG_DEBUG, ESRCH, "Process %d exec'd during injection",
                             r->pid);
}

/* A thread that did not stop in time: said once, at warning level, with
 * what it waits in; the caller gives up and the target is left as it was. */
static int stop_timed_out(struct zsw_remote *r, pid_t tid) {
        char why[256];

        remote_describe_thread(r->pid, tid, why, sizeof(why));
        return zsw_log_errno(r->log, LOG_WARNING, ETIMEDOUT,
                             "Process %d did not stop within %u ms, leaving it as it was: %s",
                             r->pid, ZSW_REMOTE_STOP_TIMEOUT_MS, why);
}

static int attach(struct zsw_remote *r, uint64_t deadline_ns) {
        int status, k;

        if (ptrace(PTRACE_SEIZE, r->tid, NULL, (void *) (long) PTRACE_O_TRACEEXEC) < 0) {
                k = -errno;
                if (k == -EPERM && remote_read_tracer(r->pid, r->tid) > 0)
                        return zsw_log_errno(r->log, LOG_DEBUG, EBUSY,
                                             "Process %d is traced by process %d already", r->pid,
                                             remote_read_tracer(r->pid, r->tid));
                return zsw_log_errno(r->log, LOG_DEBUG, k, "Failed to seize thread %d of %d: %m",
                                     r->tid, r->pid);
        }
        r->seized = true;
        r->interrupted_ns = zsw_now_ns();
        if (ptrace(PTRACE_INTERRUPT, r->tid, NULL, NULL) < 0)
                return zsw_log_errno(r->log, LOG_DEBUG, errno, "Failed to interrupt %d: %m",
                                     r->tid);

        /* Signals dequeued before our stop are the target's business: pass
         * them on unchanged. Any other trap (a signal-delivery stop, the
         * exec event of a target that was finishing execve) clears the
         * pending interrupt (kernel/signal.c ptrace_stop(): "any trap
         * clears pending STOP trap"), so ask again after each, or wait
         * forever. */
        for (;;) {
                k = wait_stop(r, deadline_ns, &status);
                if (k == -ETIMEDOUT)
                        return stop_timed_out(r, r->tid);
                if (k < 0)
                        return zsw_log_errno(r->log, LOG_DEBUG, k,
                                             "Thread %d exited while stopping", r->tid);
                if (event_of(status) == PTRACE_EVENT_STOP)
                        return 0;
                k = event_of(status) == 0 ? WSTOPSIG(status) : 0;
                if (ptrace(PTRACE_CONT, r->tid, NULL, (void *) (long) k) < 0)
                        return zsw_log_errno(r->log, LOG_DEBUG, errno, "Failed to resume %d: %m",
                                             r->tid);
                r->stopped = false;
                if (ptrace(PTRACE_INTERRUPT, r->tid, NULL, NULL) < 0)
                        return zsw_log_errno(r->log, LOG_DEBUG, errno, "Failed to interrupt %d: %m",
                                             r->tid);
        }
}

/* ---- vDSO ------------------------------------------------------------------ */

/* Where the kernel put the vDSO (AT_SYSINFO_EHDR in the auxiliary vector),
 * as long as the mapping there is still the executable [vdso] (no file or
 * named anonymous mapping is called that): one query instead of
 * formatting every mapping of the target. -ENOENT when the target moved
 * or unmapped it, -ENOTTY before PROCMAP_QUERY (Linux 6.11): then the
 * maps are read. */
static int vdso_from_auxv(struct zsw_remote *r, unsigned long *ret_start, unsigned long *ret_end) {
        _cleanup_close_ int fd = -EBADF;
        uint64_t auxv[128], base = 0;
        char path[64], name[16] = "";
        struct zsw_procmap_query q;
        ssize_t n;

        /* The leader's files are empty once it has exited: ask our thread. */
        snprintf(path, sizeof(path), "/proc/%d/task/%d/auxv", r->pid, r->tid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = read(fd, auxv, sizeof(auxv));
        if (n < 0)
                return -errno;
        for (size_t i = 0; i + 1 < (size_t) n / sizeof(auxv[0]) && auxv[i] != AT_NULL; i += 2)
                if (auxv[i] == AT_SYSINFO_EHDR)
                        base = auxv[i + 1];
        if (base == 0)
                return -ENOENT;

        fd = safe_close(fd);
        snprintf(path, sizeof(path), "/proc/%d/task/%d/maps", r->pid, r->tid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        q = (struct zsw_procmap_query) {
                .size = sizeof(q),
                .query_flags = ZSW_PROCMAP_QUERY_VMA_EXECUTABLE,
                .query_addr = base,
                .vma_name_size = sizeof(name),
                .vma_name_addr = (uint64_t) (uintptr_t) name,
        };
        if (ioctl(fd, ZSW_PROCMAP_QUERY, &q) < 0)
                return -errno;
        if (q.vma_start != base || strcmp(name, "[vdso]") != 0)
                return -ENOENT;
        *ret_start = q.vma_start;
        *ret_end = q.vma_end;
        return 0;
}

static int vdso_from_maps(struct zsw_remote *r, unsigned long *ret_start, unsigned long *ret_end) {
        _cleanup_free_ char *line = NULL;
        unsigned long start = 0, end = 0;
        size_t line_size = 0;
        bool found = false;
        char path[64];
        FILE *f;

        /* Match the name field exactly: a file may be called "x [vdso]". */
        snprintf(path, sizeof(path), "/proc/%d/task/%d/maps", r->pid, r->tid);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (!found && getline(&line, &line_size, f) > 0) {
                int name = 0;

                found = sscanf(line, "%lx-%lx %*s %*x %*x:%*x %*u %n", &start, &end, &name) == 2 &&
                        name > 0 && strcmp(line + name, "[vdso]\n") == 0;
        }
        fclose(f);
        if (!found || end <= start)
                return -ENOENT;
        *ret_start = start;
        *ret_end = end;
        return 0;
}

/* The vDSO is mapped by the kernel and never userfaultfd-registered, so
 * reading it through /proc/PID/mem cannot block on our own fault handling. */
static int find_syscall_insn(struct zsw_remote *r) {
        _cleanup_free_ uint8_t *text = NULL;
        _cleanup_close_ int mem = -EBADF;
        unsigned long start = 0, end = 0;
        char path[64];
        ssize_t n;
        int k;

        k = vdso_from_auxv(r, &start, &end);
        if (k < 0)
                k = vdso_from_maps(r, &start, &end);
        if (k < 0 && k != -ENOENT)
                return k;
        if (k < 0)
                return zsw_log_errno(r->log, LOG_ERR, EOPNOTSUPP,
                                     "Process %d has no vDSO to borrow a syscall instruction from",
                                     r->pid);
        end = MIN(end, start + VDSO_MAX_SIZE);

        text = malloc(end - start);
        if (!text)
                return -ENOMEM;
        snprintf(path, sizeof(path), "/proc/%d/task/%d/mem", r->pid, r->tid);
        mem = open(path, O_RDONLY | O_CLOEXEC);
        if (mem < 0)
                return zsw_log_errno(r->log, LOG_ERR, errno, "Failed to open %s: %m", path);
        n = pread(mem, text, end - start, (off_t) start);
        if (n < (ssize_t) zsw_arch_syscall_insn_len)
                return zsw_log_errno(r->log, LOG_ERR, n < 0 ? errno : EIO,
                                     "Failed to read the vDSO of %d: %m", r->pid);

        for (size_t off = 0; off + zsw_arch_syscall_insn_len <= (size_t) n;
             off += zsw_arch_syscall_insn_align)
                if (memcmp(text + off, zsw_arch_syscall_insn, zsw_arch_syscall_insn_len) == 0) {
                        r->insn = start + off;
                        return 0;
                }
        return zsw_log_errno(r->log, LOG_ERR, EOPNOTSUPP,
                             "No syscall instruction in the vDSO of %d", r->pid);
}

/* ---- the tracer ------------------------------------------------------------ */

static void *tracer_main(void *userdata);
static void release_on_tracer(struct zsw_remote *r);
static void finish_orphaned(struct zsw_remote *r);

static void futex_wait(_Atomic uint32_t *word, uint32_t val, unsigned timeout_ms) {
        struct timespec ts = { (time_t) (timeout_ms / 1000), (long) (timeout_ms % 1000) * 1000000 };

        (void) syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, timeout_ms > 0 ? &ts : NULL, NULL,
                       0);
}

static void futex_wake(_Atomic uint32_t *word) {
        (void) syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

static bool on_tracer_now(const struct zsw_remote *r) {
        return r->tracer_started && pthread_equal(pthread_self(), r->tracer);
}

/* Posts op (NULL: quit) to r's tracer. */
static uint32_t post(struct zsw_remote *r, int (*op)(struct zsw_remote *r, void *arg), void *arg) {
        uint32_t seq = atomic_load(&r->op_seq) + 1;

        r->op = op;
        r->op_arg = arg;
        atomic_store(&r->op_seq, seq);
        futex_wake(&r->op_seq);
        return seq;
}

/* Runs op(r, arg) on r's tracer and returns its result. */
static int on_tracer(struct zsw_remote *r, int (*op)(struct zsw_remote *r, void *arg), void *arg) {
        uint32_t seq;

        if (on_tracer_now(r))
                return op(r, arg);
        seq = post(r, op, arg);
        for (;;) {
                uint32_t done = atomic_load(&r->done_seq);

                if (done == seq)
                        return r->op_result;
                if (atomic_load(&r->tracer_exited))
                        return zsw_log_errno(r->log, LOG_ERR, ESRCH,
                                             "The tracer task of process %d is gone", r->pid);
                futex_wait(&r->done_seq, done, 0);
        }
}

/* The daemon that started the tracer task has died or exec'd: the task,
 * its child, has another parent now, or its parent another memory. (A
 * kcmp() refused, as a seccomp filter may, leaves the parent's pid.) */
static bool daemon_gone(const struct zsw_remote *r) {
        pid_t parent = getppid();

        return parent != r->daemon_pid || syscall(SYS_kcmp, getpid(), parent, KCMP_VM, 0, 0) > 0;
}

/* How often a tracer task waiting for an operation looks at its parent. */
#define ORPHAN_CHECK_MS 10u

static void *tracer_main(void *userdata) {
        struct zsw_remote *r = userdata;
        uint32_t handled = 0;

        r->tracer_tid = gettid();
        /* Its sleeps while a thread leaves a userfault are short. */
        (void) prctl(PR_SET_TIMERSLACK, 1000ul);
        for (;;) {
                uint32_t seq = atomic_load(&r->op_seq);

                if (seq != handled) {
                        handled = seq;
                        if (!r->op)
                                break;
                        r->op_result = r->op(r, r->op_arg);
                        atomic_store(&r->done_seq, seq);
                        futex_wake(&r->done_seq);
                        continue;
                }
                if (REMOTE_TRACER_TASK && daemon_gone(r)) {
                        finish_orphaned(r);
                        break;
                }
                futex_wait(&r->op_seq, seq, REMOTE_TRACER_TASK ? ORPHAN_CHECK_MS : 0);
        }
        /* Threads that never stopped are ours until we exit: the kernel
         * then detaches them and drops our interrupt (exit_ptrace()). */
        release_on_tracer(r);
        return NULL;
}

#if REMOTE_TRACER_TASK
static int tracer_task_main(void *userdata) {
        (void) prctl(PR_SET_NAME, "zswapd-tracer");
        (void) tracer_main(userdata);
        return 0; /* glibc's clone() ends the task with exit(2), not exit_group */
}

/* The pidfds of live tracer tasks (each stored plus one: 0 is a free
 * slot), for zsw_remote_wait_tracers(). A handle beyond them is only not
 * waited for. */
#define TRACERS_MAX 64
static _Atomic int tracer_pidfds[TRACERS_MAX];

static int tracers_add(int pidfd) {
        for (int i = 0; i < TRACERS_MAX; i++) {
                int free_slot = 0;

                if (atomic_compare_exchange_strong(&tracer_pidfds[i], &free_slot, pidfd + 1))
                        return i;
        }
        return -1;
}

/* The host of the tracer task: the task runs on its TLS (errno, malloc's
 * caches, the stack protector's canary) while it waits, in raw system
 * calls that touch none of it (the task may be writing errno meanwhile).
 * It returns once the task has exited, its tracees let go. */
static void *tracer_host(void *userdata) {
        /* The task's stack: the host's own, whose pages glibc's stack
         * cache keeps from one handle to the next. Should the daemon die,
         * nothing unmaps it: a dead thread's stack is only reused by a
         * thread created later. */
        _Alignas(64) char stack[TRACER_STACK_SIZE];
        struct zsw_remote *r = userdata;
        int pidfd = -1, slot;
        pid_t pid;

        pid = clone(tracer_task_main, stack + sizeof(stack),
                    CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SYSVSEM | CLONE_PIDFD, r, &pidfd);
        if (pid > 0) {
                struct pollfd p = { .fd = pidfd, .events = POLLIN };
                siginfo_t si;

                slot = tracers_add(pidfd);
                while (zsw_raw_syscall(SYS_ppoll, (long) &p, 1, 0, 0, 0) != 1)
                        ;
                (void) zsw_raw_syscall(SYS_waitid, P_PIDFD, pidfd, (long) &si, WEXITED | __WALL, 0);
                if (slot >= 0)
                        atomic_store(&tracer_pidfds[slot], 0);
                (void) zsw_raw_syscall(SYS_close, pidfd, 0, 0, 0, 0);
        }
        atomic_store(&r->tracer_exited, true);
        /* An op it did not answer (it was killed) fails. */
        if (atomic_load(&r->done_seq) != atomic_load(&r->op_seq)) {
                r->op_result = -ESRCH;
                atomic_store(&r->done_seq, atomic_load(&r->op_seq));
        }
        futex_wake(&r->done_seq);
        return NULL;
}
#endif

int zsw_remote_wait_tracers(unsigned timeout_ms) {
#if REMOTE_TRACER_TASK
        uint64_t deadline = deadline_in(timeout_ms);

        for (int i = 0; i < TRACERS_MAX; i++) {
                struct pollfd p = { .fd = atomic_load(&tracer_pidfds[i]) - 1, .events = POLLIN };

                while (p.fd >= 0) {
                        uint64_t now = zsw_now_ns();
                        int k;

                        if (now >= deadline)
                                return -ETIMEDOUT;
                        k = poll(&p, 1, (int) ((deadline - now) / 1000000u) + 1);
                        if (k == 1)
                                break; /* exited (or the fd closed: POLLNVAL) */
                        if (k < 0 && errno != EINTR)
                                return -errno;
                }
        }
#else
        (void) timeout_ms;
#endif
        return 0;
}

static void on_wake_signal(int sig) {
        (void) sig; /* only there to make a blocking wait return EINTR */
}

/* On the tracer: a timer whose signal interrupts its waits (wait_task()).
 * The signal gets an empty handler without SA_RESTART, unless the
 * program has a use of its own for it. */
static int make_wake_timer(struct zsw_remote *r) {
        struct sigaction sa = { .sa_handler = on_wake_signal }, old;
        struct sigevent ev = { .sigev_notify = SIGEV_THREAD_ID,
                               .sigev_signo = ZSW_REMOTE_WAKE_SIGNAL };
        sigset_t set;

        ev._sigev_un._tid = gettid(); /* sigev_notify_thread_id: not named by older glibc headers */
        if (sigaction(ZSW_REMOTE_WAKE_SIGNAL, NULL, &old) < 0)
                return -errno;
        if (old.sa_handler != on_wake_signal) {
                if (old.sa_handler != SIG_DFL)
                        return zsw_log_errno(r->log, LOG_ERR, EBUSY,
                                             "Signal %d has a handler of the program's: ptrace "
                                             "injection needs it for its deadlines",
                                             ZSW_REMOTE_WAKE_SIGNAL);
                sigfillset(&sa.sa_mask);
                if (sigaction(ZSW_REMOTE_WAKE_SIGNAL, &sa, NULL) < 0)
                        return -errno;
        }
        /* With SIGEV_THREAD_ID, glibc 2.34 and later allocate nothing here
         * nor in timer_delete() (this runs on the tracer: see the top). */
        if (timer_create(CLOCK_MONOTONIC, &ev, &r->wake_timer) < 0)
                return zsw_log_errno(r->log, LOG_ERR, errno, "Failed to create a timer: %m");
        r->wake_timer_made = true;
        sigemptyset(&set);
        sigaddset(&set, ZSW_REMOTE_WAKE_SIGNAL);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        return 0;
}

/* With every signal blocked: the tracer takes none of the process's (a
 * task, none of systemd's SIGTERM either). */
static int tracer_start(struct zsw_remote *r) {
        void *(*start)(void *) = tracer_main;
        pthread_attr_t attr;
        sigset_t all, old;
        int k;

        k = -pthread_attr_init(&attr);
        if (k < 0)
                return k;
#if REMOTE_TRACER_TASK
        r->daemon_pid = getpid();
        start = tracer_host;
        k = -pthread_attr_setstacksize(&attr, TRACER_HOST_STACK_SIZE);
#endif
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (k == 0)
                k = -pthread_create(&r->tracer, &attr, start, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        r->tracer_started = k == 0;
        return k;
}

/* ---- seize and release ----------------------------------------------------- */

static int open_pidfd(pid_t pid) {
        int fd = (int) syscall(__NR_pidfd_open, pid, 0);

        return fd < 0 ? -errno : fd;
}

static int seize_op(struct zsw_remote *r, void *arg) {
        uint64_t deadline = deadline_in(ZSW_REMOTE_STOP_TIMEOUT_MS);
        pid_t tid;
        int k;

        (void) arg;
        k = make_wake_timer(r);
        if (k < 0)
                return k;
        /* A thread whose interrupt would leave it busy in a kernel-mode
         * userfault is waited for, not interrupted (see the top). */
        for (;;) {
                k = remote_pick_thread(r->pid, r->log, &tid);
                if (k < 0)
                        return k;
                if (k != PICK_WAIT)
                        break;
                if (zsw_now_ns() >= deadline)
                        return stop_timed_out(r, tid);
                (void) nanosleep(&(struct timespec) { .tv_nsec = 1000000 }, NULL);
        }
        r->tid = tid;
        r->our_child = tid == r->pid && remote_read_status_pid(r->pid, tid, "\nPPid:") == getpid();

        k = attach(r, deadline);
        if (k < 0)
                return k;

        k = get_regs(r, &r->saved);
        if (k == -EOPNOTSUPP)
                return zsw_log_errno(r->log, LOG_ERR, k,
                                     "Process %d is not a native 64-bit process", r->pid);
        if (k < 0)
                return zsw_log_errno(r->log, LOG_ERR, k, "Failed to read registers of %d: %m", tid);
        if (ptrace(PTRACE_GET_RSEQ_CONFIGURATION, tid, sizeof(r->rseq), &r->rseq) < 0)
                r->rseq_error = -errno;
        return 0;
}

int zsw_remote_seize(pid_t pid, const struct zsw_log *log, struct zsw_remote **ret) {
        _cleanup_(zsw_remote_releasep) struct zsw_remote *r = NULL;
        int k;

        if (!ZSW_ARCH_REMOTE)
                return zsw_log_errno(log, LOG_ERR, EOPNOTSUPP,
                                     "ptrace injection is not implemented for this architecture");
        if (pid <= 0)
                return -EINVAL;
        if (pid == getpid())
                return zsw_log_errno(log, LOG_DEBUG, EINVAL, "Refusing to inject into ourselves");

        r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        *r = (struct zsw_remote) { .log = log, .pid = pid, .pidfd = -EBADF, .madvise_self = -1 };

        r->pidfd = open_pidfd(pid);
        if (r->pidfd < 0)
                /* EINVAL: pid names a thread, not a process. */
                return zsw_log_errno(log, LOG_DEBUG, r->pidfd == -EINVAL ? -ESRCH : r->pidfd,
                                     "Failed to open a pidfd for %d (not a process?): %m", pid);
        k = tracer_start(r);
        if (k < 0)
                return zsw_log_errno(log, LOG_ERR, k, "Failed to start a tracer thread: %m");

        k = on_tracer(r, seize_op, NULL);
        if (k < 0)
                return k;
        /* Here, not on the tracer: it allocates (see the top). */
        k = find_syscall_insn(r);
        if (k < 0)
                return k;
        zsw_log(log, LOG_DEBUG, "Seized thread %d of %d, syscall at 0x%llx", r->tid, pid,
                (unsigned long long) r->insn);
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- holding the other threads --------------------------------------------- */

static bool is_held(const struct zsw_remote *r, pid_t tid) {
        for (size_t i = 0; i < r->n_held; i++)
                if (r->held[i].tid == tid)
                        return true;
        return false;
}

/* Seizes and interrupts every live thread of the target not held yet
 * (and not ours), but a thread in a kernel-mode userfault (see the top),
 * which is left for later in *ret_waiting, as many as r->held has room
 * for (*ret_full once it is full: zsw_remote_stop_others() makes more
 * room, out of the tracer). Returns how many it added. */
static int hold_new_threads(struct zsw_remote *r, pid_t *ret_waiting, bool *ret_full) {
        _cleanup_(remote_tasks_close) struct remote_tasks it = { .fd = -EBADF };
        char path[64];
        int added = 0, k;
        pid_t tid;

        k = remote_tasks_open(&it, r->pid);
        if (k < 0)
                return k;
        while ((tid = remote_tasks_next(&it)) > 0) {
                unsigned long flags;
                char state;

                if (tid == r->tid || is_held(r, tid))
                        continue;
                /* A zombie leader runs nothing. Other threads are listed
                 * only until they exit (a zombie one that another tracer
                 * holds fails the seize below, as one that exited). */
                snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", r->pid, tid);
                if (tid == r->pid &&
                    (remote_read_proc_stat(path, &state, &flags) < 0 || !remote_state_alive(state)))
                        continue;
                if (remote_in_kernel_userfault(r->pid, tid)) {
                        *ret_waiting = tid;
                        continue;
                }
                if (r->n_held == r->held_size) {
                        *ret_full = true;
                        break;
                }
                /* TRACEEXEC: a thread that execs reports it, and the hold
                 * fails, instead of stopping in a new program. */
                if (ptrace(PTRACE_SEIZE, tid, NULL, (void *) (long) PTRACE_O_TRACEEXEC) < 0) {
                        k = -errno;
                        if (k == -ESRCH || (remote_read_proc_stat(path, &state, &flags) < 0 ||
                                            !remote_state_alive(state)))
                                continue; /* exited meanwhile */
                        if (k == -EPERM && remote_read_tracer(r->pid, tid) > 0)
                                return zsw_log_errno(
                                        r->log, LOG_DEBUG, EBUSY,
                                        "Thread %d of %d is traced by process %d already", tid,
                                        r->pid, remote_read_tracer(r->pid, tid));
                        return zsw_log_errno(r->log, LOG_DEBUG, k,
                                             "Failed to seize thread %d of %d: %m", tid, r->pid);
                }
                r->held[r->n_held++] = (struct held_thread) {
                        .tid = tid,
                        .our_child = tid == r->pid &&
                                     remote_read_status_pid(r->pid, tid, "\nPPid:") == getpid(),
                };
                if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 && errno != ESRCH)
                        return zsw_log_errno(r->log, LOG_DEBUG, errno, "Failed to interrupt %d: %m",
                                             tid);
                added++;
        }
        return added;
}

/* Waits for the stops of the threads held from index from on. */
static int wait_held(struct zsw_remote *r, size_t from, uint64_t deadline) {
        for (size_t i = from; i < r->n_held; i++) {
                struct held_thread *h = &r->held[i];
                int status, k;

                k = wait_task(r, h->tid, h->our_child, deadline, &status);
                if (k == -ESRCH || k == -ECHILD) {
                        h->gone = true;
                        continue;
                }
                if (k == -ETIMEDOUT)
                        return stop_timed_out(r, h->tid);
                if (k < 0)
                        return zsw_log_errno(r->log, LOG_ERR, k, "Failed to wait for thread %d: %m",
                                             h->tid);
                if (event_of(status) == PTRACE_EVENT_EXEC)
                        return zsw_log_errno(r->log, LOG_DEBUG, ESRCH,
                                             "Process %d exec'd while its threads were stopped",
                                             r->pid);
                h->stopped = true;
                /* A signal-delivery stop: the signal is delivered at
                 * release, with its siginfo (the detach does it). An
                 * interrupt or group-stop carries none. */
                h->sig = event_of(status) == 0 ? WSTOPSIG(status) : 0;
        }
        return 0;
}

/* arg: the deadline of the whole hold, which a repost for more room
 * (zsw_remote_stop_others()) does not extend. */
static int stop_others_op(struct zsw_remote *r, void *arg) {
        uint64_t deadline = *(const uint64_t *) arg;
        size_t from = r->n_held;

        if (r->gone)
                return -ESRCH;
        /* Threads are seized and interrupted all at once, then waited for:
         * their stops overlap. A thread may clone another before it stops,
         * so the list is read again until it has nothing new. One in a
         * kernel-mode userfault is left until its fault is answered (ours
         * are at once: no round is committed yet). */
        for (;;) {
                bool full = false;
                pid_t waiting = 0;
                int added = hold_new_threads(r, &waiting, &full), k;

                if (added < 0)
                        return added;
                k = wait_held(r, from, deadline);
                if (k < 0)
                        return k;
                from = r->n_held;
                if (full)
                        return -ENOBUFS;
                if (added == 0 && waiting == 0)
                        return 0;
                if (waiting > 0 && zsw_now_ns() >= deadline)
                        return stop_timed_out(r, waiting);
                if (added == 0)
                        (void) nanosleep(&(struct timespec) { .tv_nsec = 200000 }, NULL);
        }
}

/* Room in r->held for every thread the target has now and a few more, made
 * here and not on the tracer: a tracer task that outlives the daemon must
 * never wait on malloc's lock. */
static int held_reserve(struct zsw_remote *r) {
        size_t want = r->n_held +
                      (size_t) MAX(remote_read_status_pid(r->pid, r->pid, "\nThreads:"), 0) + 16;
        struct held_thread *h, *old;

        if (r->held_size >= want)
                return 0;
        want = MAX(want, r->held_size * 2);
        /* Not realloc(): the old array stays whole until the new one is
         * in place, for a tracer that lets the held threads go after a
         * kill in between. */
        h = calloc(want, sizeof(*h));
        if (!h)
                return -ENOMEM;
        if (r->n_held > 0)
                memcpy(h, r->held, r->n_held * sizeof(*h));
        old = r->held;
        __atomic_store_n(&r->held, h, __ATOMIC_SEQ_CST);
        atomic_signal_fence(memory_order_seq_cst);
        r->held_size = want;
        free(old);
        return 0;
}

int zsw_remote_stop_others(struct zsw_remote *r) {
        uint64_t deadline = deadline_in(ZSW_REMOTE_STOP_TIMEOUT_MS);

        for (;;) {
                int k = held_reserve(r);

                if (k < 0)
                        return k;
                /* Threads made faster than room for them: more room, and
                 * the hold goes on with those not held yet. */
                k = on_tracer(r, stop_others_op, &deadline);
                if (k != -ENOBUFS)
                        return k;
        }
}

static void release_held(struct zsw_remote *r) {
        for (size_t i = 0; i < r->n_held; i++) {
                struct held_thread *h = &r->held[i];
                int status;

                if (h->gone)
                        continue;
                /* Seized but never seen stopped (the hold failed first):
                 * its stop comes soon, or it is let go when the tracer
                 * thread exits. */
                if (!h->stopped &&
                    wait_task(r, h->tid, h->our_child, deadline_in(10), &status) < 0) {
                        r->exit_lets_go = true;
                        continue;
                }
                if (!h->stopped)
                        h->sig = event_of(status) == 0 ? WSTOPSIG(status) : 0;
                if (ptrace(PTRACE_DETACH, h->tid, NULL, (void *) (long) h->sig) < 0 &&
                    errno == ESRCH)
                        /* Killed while stopped: its exit is ours to reap. */
                        (void) waitpid(h->tid, &status, WNOHANG | __WALL);
        }
        r->n_held = 0;
}

/* ---- running a call -------------------------------------------------------- */

static bool is_restart_code(long v) {
        return v == -ERESTARTSYS || v == -ERESTARTNOINTR || v == -ERESTARTNOHAND ||
               v == -ERESTART_RESTARTBLOCK;
}

/* Keeps a signal we suppressed for release. Standard signals pending twice
 * are one signal to the kernel too, so they are kept once. */
static void defer_signal(struct zsw_remote *r) {
        siginfo_t si;

        if (ptrace(PTRACE_GETSIGINFO, r->tid, NULL, &si) < 0)
                return;
        if (si.si_signo < SIGRTMIN)
                for (unsigned i = 0; i < r->n_signals; i++)
                        if (r->signals[i].si_signo == si.si_signo)
                                return;
        if (r->n_signals >= DEFERRED_SIGNALS_MAX) {
                zsw_log(r->log, LOG_WARNING,
                        "Too many signals for %d during injection, dropping %d", r->tid,
                        si.si_signo);
                return;
        }
        zsw_log(r->log, LOG_DEBUG, "Deferring signal %d of %d until release", si.si_signo, r->tid);
        r->signals[r->n_signals++] = si;
}

/* Classifies a stop while stepping: 1 when the syscall instruction has
 * executed (its result in *regs), 0 to keep stepping. */
static int classify_stop(struct zsw_remote *r, int status, zsw_arch_regs *regs) {
        siginfo_t si;
        int k;

        r->at_signal_stop = false;
        if (event_of(status) == PTRACE_EVENT_EXEC)
                return lost_to_exec(r);
        if (event_of(status) != 0)
                return 0; /* a group-stop or interrupt: nothing to do with us */

        r->at_signal_stop = true;
        if (WSTOPSIG(status) == SIGTRAP && ptrace(PTRACE_GETSIGINFO, r->tid, NULL, &si) >= 0 &&
            si.si_code > 0) {
                /* Sent by the kernel (si_code > 0): our single-step report. */
                k = get_regs(r, regs);
                if (k < 0)
                        return k;
                if (zsw_arch_stepped_over(regs, r->insn))
                        return 1;
                if (zsw_arch_pc(regs) == r->insn)
                        return 0;
                return zsw_log_errno(r->log, LOG_ERR, EIO,
                                     "Thread %d stepped to 0x%llx, not over our syscall", r->tid,
                                     (unsigned long long) zsw_arch_pc(regs));
        }
        defer_signal(r);
        return 0;
}

/* Waits for the stop that ends a step of injected call nr. Past
 * ZSW_REMOTE_CALL_TIMEOUT_MS the call is interrupted (*cancelled); a thread
 * that does not stop even then is running our call on our registers, which
 * only its return gives back: we keep waiting, and say so. */
static int wait_step(struct zsw_remote *r, long nr, bool *cancelled, int *ret_status) {
        uint64_t deadline = deadline_in(ZSW_REMOTE_CALL_TIMEOUT_MS);
        char why[256];

        for (;;) {
                int k = wait_stop(r, deadline, ret_status);

                if (k != -ETIMEDOUT)
                        return k;
                remote_describe_thread(r->pid, r->tid, why, sizeof(why));
                if (!*cancelled) {
                        zsw_log(r->log, LOG_WARNING,
                                "Injected system call %ld in %d still runs "
                                "after %u ms, interrupting it: %s",
                                nr, r->pid, ZSW_REMOTE_CALL_TIMEOUT_MS, why);
                        if (ptrace(PTRACE_INTERRUPT, r->tid, NULL, NULL) < 0 && errno != ESRCH)
                                return -errno;
                        *cancelled = true;
                        deadline = deadline_in(ZSW_REMOTE_STOP_TIMEOUT_MS);
                        continue;
                }
                zsw_log(r->log, LOG_ERR,
                        "Thread %d of %d does not come back from injected system "
                        "call %ld: it runs on registers of ours until the call returns, waiting: "
                        "%s",
                        r->tid, r->pid, nr, why);
                deadline = deadline_in(ZSW_REMOTE_CALL_TIMEOUT_MS);
        }
}

struct syscall_args {
        long nr;
        const unsigned long *args;
        long result;
};

static int syscall_op(struct zsw_remote *r, void *arg) {
        struct syscall_args *a = arg;
        bool cancelled = false;
        zsw_arch_regs regs;
        int status, k;

        if (r->gone)
                return -ESRCH;

        regs = r->saved;
        zsw_arch_prepare_syscall(&regs, r->insn, a->nr, a->args);
        k = set_regs(r, &regs);
        if (k < 0)
                return zsw_log_errno(r->log, LOG_ERR, k, "Failed to set registers of %d: %m",
                                     r->tid);
        r->regs_dirty = true;

        for (;;) {
                long result;

                if (ptrace(PTRACE_SINGLESTEP, r->tid, NULL, NULL) < 0) {
                        k = -errno;
                        /* ESRCH: SIGKILLed, so no longer in a stop; reap the news. */
                        if (k == -ESRCH && wait_stop(r, deadline_in(ZSW_REMOTE_STOP_TIMEOUT_MS),
                                                     &status) == -ESRCH)
                                return -ESRCH;
                        return zsw_log_errno(r->log, LOG_ERR, k, "Failed to step %d: %m", r->tid);
                }
                r->stopped = false;
                k = wait_step(r, a->nr, &cancelled, &status);
                if (k < 0)
                        return zsw_log_errno(r->log, LOG_DEBUG, k,
                                             "Thread %d died during injection", r->tid);
                k = classify_stop(r, status, &regs);
                if (k < 0)
                        return k;
                if (k == 0)
                        continue;

                result = zsw_arch_syscall_result(&regs);
                if (!is_restart_code(result)) {
                        a->result = result;
                        return 0;
                }
                /* Our interrupt after the deadline: the call is given up
                 * (release puts the thread's own registers back). */
                if (cancelled)
                        return -ETIMEDOUT;
                /* A signal interrupted our call; we suppress signals, so
                 * restart it the way the kernel would have. */
                zsw_log(r->log, LOG_DEBUG, "Restarting injected syscall %ld in %d (%ld)", a->nr,
                        r->tid, result);
                zsw_arch_prepare_syscall(
                        &regs, r->insn,
                        result == -ERESTART_RESTARTBLOCK ? SYS_restart_syscall : a->nr, a->args);
                k = set_regs(r, &regs);
                if (k < 0)
                        return k;
        }
}

int zsw_remote_syscall(struct zsw_remote *r, long nr, const unsigned long args[6],
                       long *ret_result) {
        struct syscall_args a = { .nr = nr, .args = args };
        int k = on_tracer(r, syscall_op, &a);

        if (k < 0)
                return k;
        *ret_result = a.result;
        return 0;
}

long zsw_remote_call(struct zsw_remote *r, long nr, const unsigned long args[6]) {
        long result;
        int k;

        k = zsw_remote_syscall(r, nr, args, &result);
        if (k < 0)
                return k;
        return result;
}

/* ---- release ---------------------------------------------------------------- */

/* A siginfo only the kernel or the target itself may write (kill(),
 * tgkill(), kernel-generated): from outside we can only send the bare
 * signal, so these should ride on the detach. */
static bool siginfo_unforgeable(const siginfo_t *si) {
        return si->si_code >= 0 || si->si_code == SI_TKILL;
}

/* Queues every deferred signal but keep (the index the detach delivers, or
 * -1) from outside; they stay pending until the thread runs again. */
static void requeue_signals(struct zsw_remote *r, int keep) {
        for (unsigned i = 0; i < r->n_signals; i++) {
                siginfo_t *si = &r->signals[i];

                if ((int) i == keep)
                        continue;
                if (!siginfo_unforgeable(si) &&
                    syscall(SYS_rt_tgsigqueueinfo, r->pid, r->tid, si->si_signo, si) >= 0)
                        continue;
                zsw_log(r->log, LOG_DEBUG, "Re-sending signal %d to %d as our own", si->si_signo,
                        r->tid);
                if (syscall(SYS_tgkill, r->pid, r->tid, si->si_signo) < 0)
                        zsw_log(r->log, LOG_ERR, "Failed to re-send signal %d to %d: %m",
                                si->si_signo, r->tid);
        }
}

/* Which deferred signal the detach delivers, siginfo intact: possible only
 * from a signal-delivery stop; an unforgeable one if there is any. */
static int pick_detach_signal(struct zsw_remote *r) {
        if (!r->at_signal_stop || r->n_signals == 0)
                return -1;
        for (unsigned i = 0; i < r->n_signals; i++)
                if (siginfo_unforgeable(&r->signals[i]))
                        return (int) i;
        return 0;
}

static int madvise_ranges(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                          const struct iovec *ranges, size_t n, int advice, bool one_by_one);

/* On a tracer task whose daemon died between seize and release (every
 * thread of it gone, the handle as they left it): finishes what a drop
 * left half done, so that release lets the target go on its own
 * registers. Nothing is logged from here on: a dead thread may hold the
 * log's locks. The markers of a guard drop are removed, all of them (a
 * remove where none is changes nothing). A drop by MADV_DONTNEED is not
 * finished: the next zswapd would read its REMOVE events (or the rescue
 * save them) as the target's own and forget the pages dropped; that
 * thread is left with our registers and the trap flag of our steps, and
 * dies of SIGTRAP (only where the kernel has no guard markers). */
static void finish_orphaned(struct zsw_remote *r) {
        size_t n = atomic_load(&r->n_guard);

        r->log = NULL;
        if (atomic_load(&r->dontneed_injected)) {
                r->abandoned = true;
                return;
        }
        /* No room for the iovecs (the scratch cannot be written): one
         * madvise per range. */
        if (n > 0 && r->seized && r->stopped && !r->gone &&
            madvise_ranges(r, r->guard_scratch, r->guard_scratch_size, r->guard_ranges, n,
                           MADV_GUARD_REMOVE, true) < 0 &&
            !r->gone)
                (void) madvise_ranges(r, r->guard_scratch, 0, r->guard_ranges, n, MADV_GUARD_REMOVE,
                                      true);
}

/* On the tracer, as it ends. A thread of ours that never stopped is not
 * touched: the tracer's exit lets it go. */
static void release_on_tracer(struct zsw_remote *r) {
        int keep, sig = 0;

        if (r->seized && !r->gone && !r->stopped)
                r->exit_lets_go = true;
        if (r->seized && !r->gone && r->stopped && !r->abandoned) {
                if (r->regs_dirty && set_regs(r, &r->saved) < 0)
                        zsw_log(r->log, LOG_ERR, "Failed to restore registers of %d: %m", r->tid);
                keep = pick_detach_signal(r);
                if (keep >= 0 && ptrace(PTRACE_SETSIGINFO, r->tid, NULL, &r->signals[keep]) < 0)
                        keep = -1;
                requeue_signals(r, keep);
                if (keep >= 0)
                        sig = r->signals[keep].si_signo;
                /* From a stop inside get_signal(): it delivers sig, or finds
                 * nothing and restarts the thread's own system call. */
                if (ptrace(PTRACE_DETACH, r->tid, NULL, (void *) (long) sig) < 0)
                        zsw_log(r->log, LOG_ERR, "Failed to detach from %d: %m", r->tid);
        }
        release_held(r);
        r->let_go_ns = zsw_now_ns();
        /* The timer is the tracer's process's: a task's goes with it. */
        if (r->wake_timer_made)
                (void) timer_delete(r->wake_timer);
        r->wake_timer_made = false;
}

#if !REMOTE_TRACER_TASK
/* The kernel lets go of the threads a tracer never saw stopped as the
 * tracer exits (exit_ptrace()), after pthread_join() has returned: the
 * joiner is woken earlier in the exit, when the thread's memory goes.
 * Until then such a target still names us as its tracer (another seize
 * would get -EBUSY). The thread leaves the process's list right after,
 * so wait for that: microseconds. The deadline only guards against the
 * thread id being reused meanwhile, which would take a full cycle of the
 * pid space. (A tracer task's host joins after the task's exit.) */
static void wait_tracer_gone(struct zsw_remote *r) {
        uint64_t deadline = deadline_in(ZSW_REMOTE_STOP_TIMEOUT_MS);

        while (syscall(SYS_tgkill, getpid(), r->tracer_tid, 0) == 0 && zsw_now_ns() < deadline)
                (void) nanosleep(&(struct timespec) { .tv_nsec = 20000 }, NULL);
}
#endif

/* Ends the tracer, which lets the target go (release_on_tracer()). */
static void tracer_stop(struct zsw_remote *r) {
        if (!r->tracer_started)
                return;
        (void) post(r, NULL, NULL);
        pthread_join(r->tracer, NULL);
        r->tracer_started = false;
#if !REMOTE_TRACER_TASK
        if (r->exit_lets_go)
                wait_tracer_gone(r);
#endif
}

uint64_t zsw_remote_release_held_ns(struct zsw_remote *r) {
        uint64_t held;

        if (!r)
                return 0;
        tracer_stop(r);
        held = r->interrupted_ns > 0 && r->let_go_ns > r->interrupted_ns
                       ? r->let_go_ns - r->interrupted_ns
                       : 0;
        zsw_remote_release(r);
        return held;
}

struct zsw_remote *zsw_remote_release(struct zsw_remote *r) {
        if (!r)
                return NULL;
        tracer_stop(r);
        free(r->guard_ranges);
        safe_close(r->pidfd);
        free(r->held);
        free(r);
        return NULL;
}

/* ---- reading and writing its memory ------------------------------------------ */

static int transfer(struct zsw_remote *r, uint64_t addr, void *buf, size_t len, bool write) {
        while (len > 0) {
                struct iovec local = { .iov_base = buf, .iov_len = len };
                struct iovec remote = { .iov_base = (void *) (uintptr_t) addr, .iov_len = len };
                /* By tid: an exited leader has no memory left to name. */
                ssize_t n = write ? process_vm_writev(zsw_remote_tid(r), &local, 1, &remote, 1, 0)
                                  : process_vm_readv(zsw_remote_tid(r), &local, 1, &remote, 1, 0);

                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -EFAULT;
                buf = (uint8_t *) buf + n;
                addr += (uint64_t) n;
                len -= (size_t) n;
        }
        return 0;
}

int zsw_remote_write(struct zsw_remote *r, uint64_t addr, const void *buf, size_t len) {
        return transfer(r, addr, (void *) buf, len, true);
}

int zsw_remote_read(struct zsw_remote *r, uint64_t addr, void *buf, size_t len) {
        return transfer(r, addr, buf, len, false);
}

/* ---- dropping pages --------------------------------------------------------- */

/* One process_madvise() of the target on itself for up to n ranges.
 * Returns how many ranges are done, or -EOPNOTSUPP if the kernel refuses. */
/* Returns the number of leading ranges advised; when fewer than n, the
 * next one failed, with *ret_error when the kernel said why (-ENOMEM when
 * it did not: process_madvise reports only progress once it made some). */
static long madvise_self_batch(struct zsw_remote *r, uint64_t scratch, const struct iovec *ranges,
                               size_t n, int advice, int *ret_error) {
        size_t total = 0, done = 0;
        long k;

        k = zsw_remote_write(r, scratch, ranges, n * sizeof(struct iovec));
        if (k < 0)
                return k;
        k = zsw_remote_call(r, __NR_process_madvise,
                            (unsigned long[6]) { (unsigned long) PIDFD_SELF_THREAD, scratch, n,
                                                 (unsigned long) advice });
        if (r->madvise_self < 0) {
                /* EBADF: no PIDFD_SELF_THREAD (< 6.15); EINVAL: advice other than
                 * COLD/PAGEOUT/WILLNEED/COLLAPSE (< 6.13); ENOSYS: < 5.10. */
                r->madvise_self = !(k == -EBADF || k == -EINVAL || k == -ENOSYS || k == -EPERM);
                zsw_log(r->log, LOG_DEBUG, "process_madvise(PIDFD_SELF_THREAD, %d) in %d: %ld",
                        advice, r->pid, k);
                if (!r->madvise_self)
                        return -EOPNOTSUPP;
        }
        if (k < 0) {
                *ret_error = (int) k;
                return 0;
        }

        /* Partial: the kernel stops at the first range it could not advise. */
        for (size_t i = 0; i < n; i++)
                total += ranges[i].iov_len;
        if ((size_t) k == total)
                return (long) n;
        for (size_t left = (size_t) k; done < n && left >= ranges[done].iov_len; done++)
                left -= ranges[done].iov_len;
        *ret_error = -ENOMEM;
        return (long) done;
}

static int madvise_ranges(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                          const struct iovec *ranges, size_t n, int advice, bool one_by_one) {
        size_t per_call = MIN(scratch_size / sizeof(struct iovec), (size_t) IOV_MAX_PER_CALL);
        size_t i = 0;
        int first_error = 0;

        /* Every range is tried exactly once, also after a failure: a range
         * the target unmapped in part fails (ENOMEM) after its mapped part
         * was advised, and advising it again would raise a second
         * UFFD_EVENT_REMOVE for pages already dropped, which the engine
         * must take for the target's own. process_madvise stops at the
         * first range it could not advise without saying why: that range
         * counts as tried and failed, and the next call starts after it. */
        if (advice == MADV_GUARD_INSTALL) {
                /* A copy: the caller's may be gone when an orphaned
                 * tracer needs it. */
                struct iovec *copy = reallocarray(NULL, n, sizeof(*copy));

                if (!copy)
                        return -ENOMEM;
                memcpy(copy, ranges, n * sizeof(*copy));
                atomic_store(&r->n_guard, 0);
                free(r->guard_ranges);
                r->guard_ranges = copy;
                r->guard_scratch = scratch;
                r->guard_scratch_size = scratch_size;
                atomic_store(&r->n_guard, n);
        } else if (advice == MADV_DONTNEED)
                atomic_store(&r->dontneed_injected, true);
        while (i < n && per_call > 0 && r->madvise_self != 0) {
                size_t batch = MIN(per_call, n - i);
                int error = 0;
                long done = madvise_self_batch(r, scratch, ranges + i, batch, advice, &error);

                if (done == -EOPNOTSUPP)
                        break;
                if (done < 0)
                        return first_error ?: (int) done;
                i += (size_t) done;
                if ((size_t) done < batch) {
                        zsw_log(r->log, LOG_DEBUG, "process_madvise in %d stopped at %p+%zu",
                                r->pid, ranges[i].iov_base, ranges[i].iov_len);
                        if (!first_error)
                                first_error = error ?: -EIO;
                        i++;
                }
        }
        if (i < n && !one_by_one) {
                /* Refused at the first call (the kernel lacks it), or
                 * known refused: nothing was advised. */
                if (advice == MADV_GUARD_INSTALL)
                        atomic_store(&r->n_guard, 0);
                return -EOPNOTSUPP;
        }
        for (; i < n; i++) {
                long k = zsw_remote_call(r, SYS_madvise,
                                         (unsigned long[6]) { (unsigned long) ranges[i].iov_base,
                                                              ranges[i].iov_len,
                                                              (unsigned long) advice });

                if (k < 0) {
                        zsw_log_errno(r->log, LOG_DEBUG, k, "madvise(%p, %zu, %d) in %d failed: %m",
                                      ranges[i].iov_base, ranges[i].iov_len, advice, r->pid);
                        if (!first_error)
                                first_error = (int) k;
                        if (k == -ESRCH)
                                break;
                }
        }
        if (advice == MADV_GUARD_REMOVE)
                atomic_store(&r->n_guard, 0);
        return first_error;
}

int zsw_remote_madvise_ranges(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                              const struct iovec *ranges, size_t n, int advice) {
        return madvise_ranges(r, scratch, scratch_size, ranges, n, advice, true);
}

int zsw_remote_madvise_ranges_batched(struct zsw_remote *r, uint64_t scratch, size_t scratch_size,
                                      const struct iovec *ranges, size_t n, int advice) {
        return madvise_ranges(r, scratch, scratch_size, ranges, n, advice, false);
}
