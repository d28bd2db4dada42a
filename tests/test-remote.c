/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * ptrace injection on real child processes: blocked in read(2), nanosleep(2)
 * and futex(2), busy in several threads, receiving signals while we hold
 * them, unprivileged, the ones we must refuse, and the ones that do not
 * stop in time (which must be left exactly as they were).
 */
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <linux/userfaultfd.h>

#include "linux-compat.h"
#include "remote.h"
#include "test.h"
#include "uffd-compat.h"

#define PAGE 4096

static void log_stderr(void *userdata, int priority, const char *file, int line, const char *func,
                       const char *format, va_list ap) {
        fprintf(stderr, "<%d> %s: ", priority, func);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
}

static const struct zsw_log test_log = { .fn = log_stderr, .max_priority = LOG_DEBUG };
static const unsigned long no_args[6];

static void *map_shared(size_t len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        ASSERT_TRUE(p != MAP_FAILED);
        return p;
}

/* Polls /proc/PID/task/TID/syscall until the thread sleeps in one of nrs,
 * with fd as its first argument unless fd < 0. */
static void wait_in_syscall_on(pid_t pid, pid_t tid, const long *nrs, size_t n, int fd) {
        char path[96], buf[256] = "";

        snprintf(path, sizeof(path), "/proc/%d/task/%d/syscall", pid, tid);
        for (unsigned tries = 0; tries < 20000; tries++) {
                FILE *f = fopen(path, "re");
                unsigned long arg0 = 0;
                long nr;

                ASSERT_TRUE(f);
                if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%ld %lx", &nr, &arg0) >= 1 &&
                    (fd < 0 || arg0 == (unsigned long) fd))
                        for (size_t i = 0; i < n; i++)
                                if (nr == nrs[i]) {
                                        fclose(f);
                                        return;
                                }
                fclose(f);
                usleep(1000);
        }
        TEST_FAIL("thread %d never blocked in the expected syscall (last: %s)", tid, buf);
}

static void wait_in_syscall(pid_t pid, pid_t tid, const long *nrs, size_t n) {
        wait_in_syscall_on(pid, tid, nrs, n, -1);
}

/* A child that does not outlive a failed (aborted) test. */
static pid_t fork_child(void) {
        pid_t parent = getpid(), pid = fork();

        ASSERT_GE(pid, 0);
        if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent))
                _exit(99);
        return pid;
}

static int wait_exit_code(pid_t pid) {
        int status;

        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status))
                TEST_FAIL("child %d killed by signal %d", pid, WTERMSIG(status));
        return WEXITSTATUS(status);
}

static long remote(struct zsw_remote *r, long nr, const unsigned long args[6]) {
        long result;

        ASSERT_OK(zsw_remote_syscall(r, nr, args, &result));
        return result;
}

/* ---- a thread blocked in read(2) -------------------------------------------- */

TEST(blocked_read_resumes_after_madvise) {
        const size_t len = 1 << 20;
        uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        _cleanup_free_ uint8_t *back = malloc(len);
        uint8_t pattern[256], check[256];
        uint64_t scratch;
        int p[2];
        pid_t pid;

        ASSERT_TRUE(buf != MAP_FAILED && back);
        memset(buf, 0xab, len);
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                char c = 0;
                ssize_t n = read(p[0], &c, 1);

                if (n != 1)
                        _exit(n < 0 && errno == EINTR ? 10 : 11);
                if (c != 'x')
                        _exit(12);
                for (size_t i = 0; i < len; i++)
                        if (buf[i] != 0)
                                _exit(13);
                _exit(0);
        }
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);

        {
                _cleanup_remote_ struct zsw_remote *r = NULL;
                struct iovec ranges[] = {
                        { buf, len / 4 },
                        { buf + len / 4, len / 4 },
                        { buf + len / 2, len / 2 },
                };

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_EQ(zsw_remote_tid(r), pid);
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                ASSERT_EQ(remote(r, SYS_close, (unsigned long[6]) { 999 }), -EBADF);

                ASSERT_OK(zsw_remote_map_scratch(r, PAGE, &scratch));
                for (unsigned i = 0; i < sizeof(pattern); i++)
                        pattern[i] = (uint8_t) (i * 7 + 1);
                ASSERT_OK(zsw_remote_write(r, scratch + 100, pattern, sizeof(pattern)));
                ASSERT_OK(zsw_remote_read(r, scratch + 100, check, sizeof(check)));
                ASSERT_MEMEQ(pattern, check, sizeof(pattern));

                /* One range the per-range way (no room for iovecs), two batched. */
                ASSERT_OK(zsw_remote_madvise_ranges(r, scratch, 0, ranges, 1, MADV_DONTNEED));
                ASSERT_OK(
                        zsw_remote_madvise_ranges(r, scratch, PAGE, ranges + 1, 2, MADV_DONTNEED));
                ASSERT_OK(zsw_remote_read(r, (uint64_t) (uintptr_t) buf, back, len));
                for (size_t i = 0; i < len; i++)
                        ASSERT_EQ(back[i], 0);
                /* An invalid range is reported, not ignored. */
                ASSERT_ERRNO(zsw_remote_madvise_ranges(r, scratch, PAGE,
                                                       &(struct iovec) { buf + 1, PAGE }, 1,
                                                       MADV_DONTNEED),
                             EINVAL);
                ASSERT_OK(zsw_remote_unmap(r, scratch, PAGE));
        }
        ASSERT_EQ(buf[0], 0xab); /* ours untouched */
        ASSERT_EQ(write(p[1], "x", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(p[0]);
        close(p[1]);
        munmap(buf, len);
}

/* ---- nanosleep and futex waits restart ----------------------------------- */

static int64_t mono_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

TEST(nanosleep_continues) {
        const int64_t sleep_ns = 500 * 1000000LL;
        pid_t pid = fork_child();

        ASSERT_GE(pid, 0);
        if (pid == 0) {
                struct timespec ts = { 0, sleep_ns }, rem;
                int64_t t0 = mono_ns();
                long k = syscall(SYS_nanosleep, &ts, &rem);

                if (k != 0)
                        _exit(errno == EINTR ? 10 : 11);
                /* nanosleep never returns 0 early: no time lost to us. */
                _exit(mono_ns() - t0 >= sleep_ns ? 0 : 12);
        }
        for (int round = 0; round < 3; round++) {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                /* After the first round it sleeps on in restart_syscall. */
                wait_in_syscall(
                        pid, pid,
                        (const long[]) { SYS_nanosleep, SYS_clock_nanosleep, SYS_restart_syscall },
                        3);
                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                for (int i = 0; i < 10; i++)
                        ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
        }
        ASSERT_EQ(wait_exit_code(pid), 0);
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts) {
        return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

TEST(futex_wait_continues) {
        _Atomic uint32_t *words = map_shared(PAGE);
        pid_t pid = fork_child();

        ASSERT_GE(pid, 0);
        if (pid == 0) {
                struct timespec ts = { 60, 0 };

                /* Woken only by the parent: anything but 0 is a visible glitch. */
                while (atomic_load(&words[0]) == 0)
                        if (futex(&words[0], FUTEX_WAIT, 0, NULL) != 0 && errno != EAGAIN)
                                _exit(10);
                atomic_store(&words[2], 1);
                if (futex(&words[1], FUTEX_WAIT, 0, &ts) != 0) /* restarts via restart_block */
                        _exit(errno == EINTR ? 11 : 12);
                _exit(0);
        }
        for (int w = 0; w < 2; w++) {
                while (w == 1 && atomic_load(&words[2]) == 0)
                        usleep(1000);
                {
                        _cleanup_remote_ struct zsw_remote *r = NULL;

                        wait_in_syscall(pid, pid, (const long[]) { SYS_futex, SYS_restart_syscall },
                                        2);
                        ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                        ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                }
                /* Give it the chance to return wrongly before it is woken. */
                wait_in_syscall(pid, pid, (const long[]) { SYS_futex, SYS_restart_syscall }, 2);
                usleep(20000);
                atomic_store(&words[w], 1);
                futex(&words[w], FUTEX_WAKE, 1, NULL);
        }
        ASSERT_EQ(wait_exit_code(pid), 0);
        munmap(words, PAGE);
}

/* ---- busy threads keep running ------------------------------------------- */

#define BUSY_THREADS 4

struct busy {
        _Atomic uint64_t counters[BUSY_THREADS];
        _Atomic uint64_t errors;
        _Atomic int stop;
};

/* Registers that the injection borrows and gives back must come back
 * intact: a running sum checked against its closed form on every turn. */
static void busy_loop(struct busy *b, unsigned i) {
        uint64_t acc = 0;

        for (uint64_t k = 1; !atomic_load_explicit(&b->stop, memory_order_relaxed); k++) {
                acc += k;
                if (acc != k * (k + 1) / 2)
                        atomic_fetch_add(&b->errors, 1);
                atomic_store_explicit(&b->counters[i], k, memory_order_relaxed);
        }
}

static void *busy_thread(void *arg) {
        struct busy *b = (struct busy *) ((uintptr_t) arg & ~(uintptr_t) 0xff);

        busy_loop(b, (unsigned) ((uintptr_t) arg & 0xff));
        return NULL;
}

static void wait_counter_beyond(struct busy *b, unsigned i, uint64_t v) {
        for (unsigned tries = 0; tries < 100000; tries++) {
                if (atomic_load(&b->counters[i]) > v)
                        return;
                usleep(100);
        }
        TEST_FAIL("thread %u made no progress", i);
}

TEST(busy_threads_keep_running) {
        struct busy *b = map_shared(PAGE);
        uint64_t before[BUSY_THREADS];
        pid_t pid = fork_child();

        ASSERT_GE(pid, 0);
        if (pid == 0) {
                pthread_t t[BUSY_THREADS];

                for (unsigned i = 1; i < BUSY_THREADS; i++)
                        if (pthread_create(&t[i], NULL, busy_thread,
                                           (void *) ((uintptr_t) b | i)) != 0)
                                _exit(20);
                busy_loop(b, 0);
                for (unsigned i = 1; i < BUSY_THREADS; i++)
                        pthread_join(t[i], NULL);
                _exit(atomic_load(&b->errors) == 0 ? 0 : 21);
        }
        for (unsigned i = 0; i < BUSY_THREADS; i++)
                wait_counter_beyond(b, i, 0);

        for (int round = 0; round < 20; round++) {
                _cleanup_remote_ struct zsw_remote *r = NULL;
                uint64_t scratch, leader;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_EQ(zsw_remote_tid(r), pid);
                leader = atomic_load(&b->counters[0]);
                for (unsigned i = 0; i < BUSY_THREADS; i++)
                        before[i] = atomic_load(&b->counters[i]);
                for (int i = 0; i < 50; i++)
                        ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                ASSERT_OK(zsw_remote_map_scratch(r, PAGE, &scratch));
                ASSERT_OK(zsw_remote_unmap(r, scratch, PAGE));
                /* The others run on while we hold the leader, which does not. */
                for (unsigned i = 1; i < BUSY_THREADS; i++)
                        wait_counter_beyond(b, i, before[i]);
                ASSERT_EQ_U(atomic_load(&b->counters[0]), leader);
        }
        wait_counter_beyond(b, 0, before[0]);
        ASSERT_EQ_U(atomic_load(&b->errors), 0);
        atomic_store(&b->stop, 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        munmap(b, PAGE);
}

/* ---- every thread held ------------------------------------------------------- */

static _Atomic uint64_t *spawned; /* threads the spawner made, in shared memory */

static void *short_lived(void *arg) {
        (void) arg;
        return NULL;
}

/* Makes threads that exit at once, all the time: the hold must also stop
 * threads born while it stops the others. */
static void *spawner(void *arg) {
        struct busy *b = arg;

        while (!atomic_load(&b->stop)) {
                pthread_t t;

                if (pthread_create(&t, NULL, short_lived, NULL) == 0) {
                        pthread_join(t, NULL);
                        atomic_fetch_add(spawned, 1);
                }
        }
        return NULL;
}

static _Atomic unsigned usr1_seen;

/* Blocked in read(2) through every hold: it must restart unseen. */
static void *reader_thread_checked(void *arg) {
        char c;

        if (read((int) (intptr_t) arg, &c, 1) != 1 || c != 'y')
                _exit(24);
        return NULL;
}

static void count_usr1(int sig) {
        (void) sig;
        atomic_fetch_add(&usr1_seen, 1);
}

TEST(stop_others_holds_every_thread) {
        struct busy *b = map_shared(PAGE);
        uint64_t before[BUSY_THREADS], made;
        int p[2];
        pid_t pid;

        spawned = (_Atomic uint64_t *) &b[1];
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                pthread_t t[BUSY_THREADS + 2];

                signal(SIGUSR1, count_usr1);
                for (unsigned i = 1; i < BUSY_THREADS; i++)
                        if (pthread_create(&t[i], NULL, busy_thread,
                                           (void *) ((uintptr_t) b | i)) != 0)
                                _exit(20);
                if (pthread_create(&t[0], NULL, spawner, b) != 0 ||
                    pthread_create(&t[BUSY_THREADS], NULL, reader_thread_checked,
                                   (void *) (intptr_t) p[0]) != 0)
                        _exit(22);
                busy_loop(b, 0);
                for (unsigned i = 1; i < BUSY_THREADS; i++)
                        pthread_join(t[i], NULL);
                pthread_join(t[0], NULL);
                /* The reader got its byte after all the holds, and every
                 * SIGUSR1 sent while the threads were held arrived. */
                pthread_join(t[BUSY_THREADS], NULL);
                if (atomic_load(&usr1_seen) == 0)
                        _exit(23);
                _exit(atomic_load(&b->errors) == 0 ? 0 : 21);
        }
        for (unsigned i = 0; i < BUSY_THREADS; i++)
                wait_counter_beyond(b, i, 0);

        for (int round = 0; round < 20; round++) {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_OK(zsw_remote_stop_others(r));
                for (unsigned i = 0; i < BUSY_THREADS; i++)
                        before[i] = atomic_load(&b->counters[i]);
                made = atomic_load(spawned);
                if (round == 10)
                        ASSERT_OK(kill(pid, SIGUSR1));
                for (int i = 0; i < 20; i++)
                        ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                usleep(2000);
                /* Nothing of the target ran meanwhile. */
                for (unsigned i = 0; i < BUSY_THREADS; i++)
                        ASSERT_EQ_U(atomic_load(&b->counters[i]), before[i]);
                ASSERT_EQ_U(atomic_load(spawned), made);
                r = zsw_remote_release(r);
                for (unsigned i = 0; i < BUSY_THREADS; i++)
                        wait_counter_beyond(b, i, before[i]);
        }
        ASSERT_EQ(write(p[1], "y", 1), 1);
        atomic_store(&b->stop, 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        ASSERT_EQ_U(atomic_load(&b->errors), 0);
        close(p[0]);
        close(p[1]);
        munmap(b, PAGE);
}

static void *reader_thread(void *arg) {
        int fd = (int) (intptr_t) arg;
        char c;

        _exit(read(fd, &c, 1) == 1 && c == 'y' ? 0 : 30);
}

/* A target that moved its vDSO (as a restored checkpoint does): the address
 * the kernel gave it at exec is stale, and the syscall instruction is
 * found where the vDSO is now. The child uses raw system calls only: its
 * vDSO functions no longer reach their data. */
TEST(moved_vdso_is_found) {
        _cleanup_remote_ struct zsw_remote *r = NULL;
        int ready[2], go[2];
        char c;
        pid_t pid;

        ASSERT_OK(pipe2(ready, O_CLOEXEC));
        ASSERT_OK(pipe2(go, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                unsigned long start = 0, end = 0, base = getauxval(AT_SYSINFO_EHDR);
                char line[512];
                FILE *f = fopen("/proc/self/maps", "re");
                void *to;

                while (f && fgets(line, sizeof(line), f))
                        if (strstr(line, "[vdso]") && sscanf(line, "%lx-%lx", &start, &end) == 2)
                                break;
                if (!f || start != base || end <= start)
                        _exit(2);
                fclose(f);
                to = mmap(NULL, end - start, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (to == MAP_FAILED || syscall(SYS_mremap, start, end - start, end - start,
                                                MREMAP_MAYMOVE | MREMAP_FIXED, to) != (long) to)
                        _exit(3);
                if (syscall(SYS_write, ready[1], "m", 1) != 1 ||
                    syscall(SYS_read, go[0], &c, 1) != 1)
                        _exit(4);
                _exit(0);
        }
        ASSERT_EQ(read(ready[0], &c, 1), 1);
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);
        ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
        for (int i = 0; i < 3; i++)
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
        r = zsw_remote_release(r);
        ASSERT_EQ(write(go[1], "g", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(ready[0]);
        close(ready[1]);
        close(go[0]);
        close(go[1]);
}

TEST(leader_gone_uses_another_thread) {
        int p[2];
        pid_t pid;

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                pthread_t t;

                if (pthread_create(&t, NULL, reader_thread, (void *) (intptr_t) p[0]) != 0)
                        _exit(31);
                pthread_exit(NULL);
        }
        {
                _cleanup_remote_ struct zsw_remote *r = NULL;
                char state = 0, path[64], buf[512];
                FILE *f;

                /* Wait for the leader to become a zombie with its thread alive. */
                snprintf(path, sizeof(path), "/proc/%d/stat", pid);
                for (unsigned tries = 0; tries < 10000 && state != 'Z'; tries++) {
                        f = fopen(path, "re");
                        ASSERT_TRUE(f);
                        if (fgets(buf, sizeof(buf), f))
                                sscanf(strrchr(buf, ')') + 1, " %c", &state);
                        fclose(f);
                        usleep(1000);
                }
                ASSERT_EQ(state, 'Z');
                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_NE(zsw_remote_tid(r), pid);
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                ASSERT_EQ(remote(r, SYS_gettid, no_args), zsw_remote_tid(r));
        }
        ASSERT_EQ(write(p[1], "y", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(p[0]);
        close(p[1]);
}

static char proc_state(pid_t pid) {
        char path[64], buf[512], state = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        if (fgets(buf, sizeof(buf), f))
                sscanf(strrchr(buf, ')') + 1, " %c", &state);
        fclose(f);
        return state;
}

/* A process stopped by SIGSTOP is served and stays stopped. */
TEST(stopped_process_stays_stopped) {
        int p[2];
        pid_t pid;

        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                char c = 0;

                _exit(read(p[0], &c, 1) == 1 && c == 's' ? 0 : 80);
        }
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);
        ASSERT_OK(kill(pid, SIGSTOP));
        for (unsigned tries = 0; tries < 10000 && proc_state(pid) != 'T'; tries++)
                usleep(1000);
        ASSERT_EQ(proc_state(pid), 'T');
        {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
        }
        usleep(50000);
        ASSERT_EQ(proc_state(pid), 'T');
        ASSERT_OK(kill(pid, SIGCONT));
        ASSERT_EQ(write(p[1], "s", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(p[0]);
        close(p[1]);
}

static void *blocked_reader(void *arg) {
        int fd = (int) (intptr_t) arg;
        char c;

        (void) read(fd, &c, 1);
        return NULL;
}

/* A leader in uninterruptible sleep (a vfork() parent) would hold up
 * PTRACE_INTERRUPT until it wakes: another thread is borrowed instead. */
TEST(uninterruptible_leader_is_passed_over) {
        int vp[2], tp[2];
        pid_t pid;

        ASSERT_OK(pipe2(vp, O_CLOEXEC));
        ASSERT_OK(pipe2(tp, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                pthread_t t;
                char c;

                if (pthread_create(&t, NULL, blocked_reader, (void *) (intptr_t) tp[0]) != 0)
                        _exit(90);
                if (vfork() == 0)
                        _exit(read(vp[0], &c, 1) == 1 ? 0 : 1);
                pthread_join(t, NULL);
                _exit(0);
        }
        for (unsigned tries = 0; tries < 10000 && proc_state(pid) != 'D'; tries++)
                usleep(1000);
        ASSERT_EQ(proc_state(pid), 'D');
        {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_NE(zsw_remote_tid(r), pid);
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
        }
        ASSERT_EQ(write(vp[1], "v", 1), 1);
        ASSERT_EQ(write(tp[1], "t", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(vp[0]);
        close(vp[1]);
        close(tp[0]);
        close(tp[1]);
}

/* ---- signals during injection ------------------------------------------------ */

struct sigrecord {
        _Atomic int count[2];
        _Atomic pid_t sender[2];
        _Atomic int value[2];
};

static struct sigrecord *sigrec;

/* The count last: once the test sees it, the rest is there too. */
static void record_signal(int sig, siginfo_t *si, void *uc) {
        int i = sig == SIGUSR1 ? 0 : 1;

        atomic_store(&sigrec->sender[i], si->si_pid);
        atomic_store(&sigrec->value[i], si->si_code == SI_QUEUE ? si->si_value.sival_int : -1);
        atomic_fetch_add(&sigrec->count[i], 1);
}

static void signals_arrive_after_release(int nsignals) {
        int p[2];
        pid_t pid;

        sigrec = map_shared(PAGE);
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                struct sigaction sa = { .sa_sigaction = record_signal,
                                        .sa_flags = SA_SIGINFO | SA_RESTART };
                char c = 0;
                ssize_t n;

                sigaction(SIGUSR1, &sa, NULL);
                sigaction(SIGUSR2, &sa, NULL);
                atomic_store(&sigrec->count[0], -1);
                n = read(p[0], &c, 1);
                if (n != 1 || c != 'x')
                        _exit(n < 0 && errno == EINTR ? 40 : 41);
                _exit(0);
        }
        while (atomic_load(&sigrec->count[0]) != -1)
                usleep(1000);
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);
        atomic_store(&sigrec->count[0], 0);
        {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                ASSERT_OK(kill(pid, SIGUSR1));
                if (nsignals > 1)
                        ASSERT_OK(sigqueue(pid, SIGUSR2, (union sigval) { .sival_int = 4242 }));
                for (int i = 0; i < 5; i++)
                        ASSERT_EQ(remote(r, SYS_getpid, no_args), pid);
                ASSERT_EQ(zsw_remote_deferred_signals(r), (unsigned) nsignals);
                ASSERT_EQ(atomic_load(&sigrec->count[0]), 0); /* not while we hold it */
        }
        /* Delivered once each, siginfo as sent, and read(2) restarted.
         * Waited for each: both are pending when the thread runs again,
         * and the kernel stacks one handler's frame on the other's, so
         * SIGUSR2's handler may run (and count) before SIGUSR1's. */
        for (unsigned tries = 0; tries < 10000 && (atomic_load(&sigrec->count[0]) == 0 ||
                                                   atomic_load(&sigrec->count[nsignals - 1]) == 0);
             tries++)
                usleep(1000);
        ASSERT_EQ(atomic_load(&sigrec->count[0]), 1);
        ASSERT_EQ(atomic_load(&sigrec->sender[0]), getpid());
        if (nsignals > 1) {
                ASSERT_EQ(atomic_load(&sigrec->count[1]), 1);
                ASSERT_EQ(atomic_load(&sigrec->sender[1]), getpid());
                ASSERT_EQ(atomic_load(&sigrec->value[1]), 4242);
        }
        ASSERT_EQ(atomic_load(&sigrec->value[0]), -1);
        ASSERT_EQ(write(p[1], "x", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(p[0]);
        close(p[1]);
        munmap(sigrec, PAGE);
}

TEST(signal_during_injection_delivered_after_release) {
        signals_arrive_after_release(1);
}

TEST(two_signals_during_injection_delivered_after_release) {
        signals_arrive_after_release(2);
}

/* Our own injected call, blocked and hit by a signal, restarts instead of
 * returning -ERESTARTSYS or -EINTR; the signal waits for release. */
TEST(injected_call_restarts_after_signal) {
        int hold[2], inj[2];
        uint64_t scratch;
        pid_t pid, helper;
        char c = 0;

        ASSERT_OK(pipe2(hold, O_CLOEXEC));
        ASSERT_OK(pipe2(inj, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                signal(SIGUSR1, SIG_IGN); /* the restart must not depend on a handler */
                signal(SIGUSR2, SIG_DFL);
                _exit(read(hold[0], &c, 1) == 1 ? 0 : 70);
        }
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);

        _cleanup_remote_ struct zsw_remote *r = NULL;
        ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
        ASSERT_OK(zsw_remote_map_scratch(r, PAGE, &scratch));

        helper = fork_child();
        ASSERT_GE(helper, 0);
        if (helper == 0) {
                char path[64], buf[256];

                /* Once the injected read(inj[0]) sleeps: a signal, then data. */
                snprintf(path, sizeof(path), "/proc/%d/syscall", pid);
                for (unsigned tries = 0; tries < 20000; tries++) {
                        FILE *f = fopen(path, "re");
                        long nr = -1, fd = -1;

                        if (f && fgets(buf, sizeof(buf), f) &&
                            sscanf(buf, "%ld 0x%lx", &nr, &fd) == 2 && nr == SYS_read &&
                            fd == inj[0]) {
                                fclose(f);
                                kill(pid, SIGUSR2);
                                usleep(50000);
                                _exit(write(inj[1], "z", 1) == 1 ? 0 : 71);
                        }
                        if (f)
                                fclose(f);
                        usleep(1000);
                }
                _exit(72);
        }
        ASSERT_EQ(remote(r, SYS_read, (unsigned long[6]) { (unsigned long) inj[0], scratch, 1 }),
                  1);
        ASSERT_EQ(wait_exit_code(helper), 0);
        ASSERT_OK(zsw_remote_read(r, scratch, &c, 1));
        ASSERT_EQ(c, 'z');
        ASSERT_EQ(zsw_remote_deferred_signals(r), 1u);
        ASSERT_OK(zsw_remote_unmap(r, scratch, PAGE));
        r = zsw_remote_release(r);

        /* SIGUSR2's default action ends the child once it runs again. */
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR2);
        close(hold[0]);
        close(hold[1]);
        close(inj[0]);
        close(inj[1]);
}

/* ---- userfaultfd --------------------------------------------------------- */

static unsigned count_fds(pid_t pid) {
        char path[64];
        unsigned n = 0;
        DIR *d;

        snprintf(path, sizeof(path), "/proc/%d/fd", pid);
        d = opendir(path);
        ASSERT_TRUE(d);
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

static void fill(uint8_t *page, uint8_t seed) {
        for (unsigned i = 0; i < PAGE; i++)
                page[i] = (uint8_t) (seed + i * 13);
}

static const char uffd_data[16] = "kernel-mode read";

/* Waits for ctl, then reads into a page that is missing until served. */
static void uffd_child(bool unprivileged, uint8_t *region, int ctl, int dp) {
        uint8_t page[PAGE];
        char c;

        if (unprivileged &&
            (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0))
                _exit(50);
        if (read(ctl, &c, 1) != 1)
                _exit(51);
        if (read(dp, region + PAGE, sizeof(uffd_data)) != (ssize_t) sizeof(uffd_data))
                _exit(errno == EFAULT ? 52 : 53);
        fill(page, 1);
        if (memcmp(region, page, PAGE) != 0)
                _exit(54);
        fill(page, 2);
        memcpy(page, uffd_data, sizeof(uffd_data));
        _exit(memcmp(region + PAGE, page, PAGE) == 0 ? 0 : 55);
}

/*
 * The child reads from a pipe into a registered page that is missing: the
 * fault is taken by the kernel's copy_to_user(), which only a full
 * userfaultfd serves (a user-mode-only one would make read(2) fail EFAULT).
 */
static void uffd_serves_child(bool unprivileged) {
        uint8_t *region =
                mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint8_t page[PAGE], back[PAGE];
        int ctl[2], dp[2], tfd = -1, lfd = -1;
        unsigned fds_before;
        char link[64], path[64];
        pid_t pid;

        ASSERT_TRUE(region != MAP_FAILED);
        ASSERT_OK(pipe2(ctl, O_CLOEXEC));
        ASSERT_OK(pipe2(dp, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0)
                uffd_child(unprivileged, region, ctl[0], dp[0]);
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);
        fds_before = count_fds(pid);
        {
                _cleanup_remote_ struct zsw_remote *r = NULL;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                ASSERT_ERRNO(zsw_remote_open_uffd(r, UFFD_USER_MODE_ONLY, &tfd, &lfd), EINVAL);
                ASSERT_OK(zsw_remote_open_uffd(r, O_CLOEXEC | O_NONBLOCK, &tfd, &lfd));
        }
        /* The target holds exactly one new descriptor: its userfaultfd. */
        ASSERT_EQ(count_fds(pid), fds_before + 1);
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, tfd);
        ASSERT_GT(readlink(path, link, sizeof(link) - 1), 0);
        ASSERT_TRUE(strstr(link, "userfaultfd"));
        ASSERT_GE(fcntl(lfd, F_GETFD) & FD_CLOEXEC, 1);

        struct uffdio_api api = { .api = UFFD_API };
        struct uffdio_register reg = { .range = { (uintptr_t) region, 2 * PAGE },
                                       .mode = UFFDIO_REGISTER_MODE_MISSING };
        ASSERT_OK(ioctl(lfd, UFFDIO_API, &api));
        ASSERT_OK(ioctl(lfd, UFFDIO_REGISTER, &reg));

        /* Resolve page 0 ahead of any fault; the target's memory shows it. */
        fill(page, 1);
        struct uffdio_copy copy = { .dst = (uintptr_t) region,
                                    .src = (uintptr_t) page,
                                    .len = PAGE };
        ASSERT_OK(ioctl(lfd, UFFDIO_COPY, &copy));
        struct iovec liov = { back, PAGE }, riov = { region, PAGE };
        ASSERT_EQ(process_vm_readv(pid, &liov, 1, &riov, 1, 0), PAGE);
        ASSERT_MEMEQ(back, page, PAGE);

        /* Page 1: the child's read(2) faults on it in kernel mode. */
        ASSERT_EQ(write(dp[1], uffd_data, sizeof(uffd_data)), (ssize_t) sizeof(uffd_data));
        ASSERT_EQ(write(ctl[1], "g", 1), 1);
        struct pollfd pfd = { .fd = lfd, .events = POLLIN };
        ASSERT_EQ(poll(&pfd, 1, 30000), 1);
        struct uffd_msg msg;
        ASSERT_EQ(read(lfd, &msg, sizeof(msg)), (ssize_t) sizeof(msg));
        ASSERT_EQ(msg.event, UFFD_EVENT_PAGEFAULT);
        ASSERT_EQ_U(msg.arg.pagefault.address & ~(uint64_t) (PAGE - 1), (uintptr_t) region + PAGE);
        fill(page, 2);
        copy = (struct uffdio_copy) { .dst = (uintptr_t) region + PAGE,
                                      .src = (uintptr_t) page,
                                      .len = PAGE };
        ASSERT_OK(ioctl(lfd, UFFDIO_COPY, &copy));
        ASSERT_EQ(wait_exit_code(pid), 0);

        close(lfd);
        close(ctl[0]);
        close(ctl[1]);
        close(dp[0]);
        close(dp[1]);
        munmap(region, 2 * PAGE);
}

TEST(uffd_for_root_child) {
        uffd_serves_child(false);
}

TEST(uffd_for_unprivileged_child) {
        uffd_serves_child(true);
}

/* ---- what we refuse ------------------------------------------------------ */

TEST(refuses_what_it_cannot_borrow) {
        _cleanup_remote_ struct zsw_remote *r = NULL;
        siginfo_t si;
        pid_t pid, tracer;
        int go[2];

        ASSERT_ERRNO(zsw_remote_seize(getpid(), &test_log, &r), EINVAL);
        ASSERT_ERRNO(zsw_remote_seize(2, &test_log, &r), EINVAL); /* kthreadd */

        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0)
                _exit(0);
        /* A zombie: exited, not reaped. */
        ASSERT_OK(waitid(P_PID, pid, &si, WEXITED | WNOWAIT));
        ASSERT_ERRNO(zsw_remote_seize(pid, &test_log, &r), ESRCH);
        ASSERT_EQ(wait_exit_code(pid), 0);
        /* Gone entirely (the pid is free until something reuses it). */
        ASSERT_ERRNO(zsw_remote_seize(pid, &test_log, &r), ESRCH);

        /* Traced by someone else already. */
        ASSERT_OK(pipe2(go, O_CLOEXEC));
        pid = fork_child();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                pause();
                _exit(0);
        }
        tracer = fork_child();
        ASSERT_GE(tracer, 0);
        if (tracer == 0) {
                if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) < 0)
                        _exit(60);
                (void) write(go[1], "t", 1);
                pause();
                _exit(0);
        }
        char c;
        ASSERT_EQ(read(go[0], &c, 1), 1);
        ASSERT_ERRNO(zsw_remote_seize(pid, &test_log, &r), EBUSY);
        ASSERT_TRUE(r == NULL);
        kill(tracer, SIGKILL);
        ASSERT_EQ(waitpid(tracer, NULL, 0), tracer);
        /* Free again: now it works. */
        ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
        r = zsw_remote_release(r);
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
        close(go[0]);
        close(go[1]);
}

/* ---- threads that do not stop -------------------------------------------------- */

static pid_t tracer_of(pid_t pid) {
        char path[64], line[256];
        pid_t tracer = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "TracerPid: %d", &tracer) == 1)
                        break;
        fclose(f);
        return tracer;
}

static bool thread_in(pid_t pid, pid_t tid, const char *wchan) {
        char path[96], buf[64] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/task/%d/wchan", pid, tid);
        f = fopen(path, "re");
        if (!f)
                return false;
        if (!fgets(buf, sizeof(buf), f))
                buf[0] = 0;
        fclose(f);
        return strcmp(buf, wchan) == 0;
}

struct frozen_child {
        pid_t pid, frozen_tid;
        int uffd;      /* its number in the child */
        uint8_t *page; /* the same address in the child */
        int ctl[2];    /* a byte on ctl ends the child (threaded) */
        int *shared;   /* [0] = uffd, [1] = frozen tid */
};

static void *frozen_reader(void *arg) {
        struct frozen_child *f = arg;
        int p[2];

        if (pipe(p) < 0 || write(p[1], "thawed", 6) != 6)
                _exit(81);
        f->shared[1] = (int) gettid();
        /* The copy into the page faults in kernel mode on a userfaultfd
         * nobody reads: this read(2) sleeps until the test resolves it. */
        if (read(p[0], f->page, 6) != 6 || memcmp(f->page, "thawed", 6) != 0)
                _exit(82);
        return NULL;
}

/* A child whose thread (its only one, or with threaded a second one while
 * the first blocks in read(2) of ctl) waits in a kernel-mode userfault. */
static void frozen_child_start(struct frozen_child *f, bool threaded) {
        ASSERT_OK(pipe2(f->ctl, O_CLOEXEC));
        f->shared = map_shared(PAGE);
        f->page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_TRUE(f->page != MAP_FAILED);
        f->pid = fork_child();
        if (f->pid == 0) {
                struct uffdio_api api = { .api = UFFD_API };
                struct uffdio_register reg = {
                        .range = { .start = (uintptr_t) f->page, .len = PAGE },
                        .mode = UFFDIO_REGISTER_MODE_MISSING,
                };
                int uffd = (int) syscall(SYS_userfaultfd, O_CLOEXEC);
                pthread_t t;
                char c;

                if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) < 0 ||
                    ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
                        _exit(80);
                f->shared[0] = uffd;
                if (!threaded) {
                        frozen_reader(f);
                        _exit(0);
                }
                if (pthread_create(&t, NULL, frozen_reader, f) != 0 || read(f->ctl[0], &c, 1) != 1)
                        _exit(83);
                pthread_join(t, NULL);
                _exit(0);
        }
        for (unsigned tries = 0; tries < 20000; tries++) {
                f->frozen_tid = f->shared[1];
                if (f->frozen_tid > 0 && thread_in(f->pid, f->frozen_tid, "handle_userfault"))
                        break;
                usleep(1000);
        }
        ASSERT_TRUE(thread_in(f->pid, f->frozen_tid, "handle_userfault"));
        f->uffd = f->shared[0];
}

/* Resolves the page as its handler would: the read(2) then completes. */
static void frozen_child_thaw_and_wait(struct frozen_child *f) {
        static uint8_t src[PAGE] __attribute__((aligned(PAGE))) = "thawed";
        struct uffdio_copy copy = { .dst = (uintptr_t) f->page,
                                    .src = (uintptr_t) src,
                                    .len = PAGE };
        int pidfd = (int) syscall(SYS_pidfd_open, f->pid, 0), uffd;

        ASSERT_GE(pidfd, 0);
        uffd = (int) syscall(SYS_pidfd_getfd, pidfd, f->uffd, 0);
        ASSERT_GE(uffd, 0);
        ASSERT_OK(ioctl(uffd, UFFDIO_COPY, &copy));
        ASSERT_EQ(write(f->ctl[1], "x", 1), 1);
        ASSERT_EQ(wait_exit_code(f->pid), 0);
        close(uffd);
        close(pidfd);
        close(f->ctl[0]);
        close(f->ctl[1]);
        munmap(f->shared, PAGE);
        munmap(f->page, PAGE);
}

/* Its only thread waits in a kernel-mode userfault: an interrupt would
 * leave it retrying the fault, busy, for good. It is never interrupted:
 * the seize gives up at the deadline and says why. */
TEST(thread_in_a_kernel_userfault_is_never_interrupted) {
        struct zsw_remote *r = NULL;
        struct frozen_child f;
        char why[256];

        frozen_child_start(&f, false);
        ASSERT_ERRNO(zsw_remote_seize(f.pid, &test_log, &r), ETIMEDOUT);
        ASSERT_TRUE(r == NULL);
        ASSERT_EQ(tracer_of(f.pid), 0);
        ASSERT_EQ(proc_state(f.pid), 'S');
        ASSERT_TRUE(thread_in(f.pid, f.pid, "handle_userfault"));
        ASSERT_OK(zsw_remote_describe_stuck(f.pid, why, sizeof(why)));
        fprintf(stderr, "%s\n", why);
        ASSERT_TRUE(strstr(why, "handle_userfault in read(2)"));
        frozen_child_thaw_and_wait(&f);
}

/* With another thread to borrow, the seize works; holding every thread
 * does not, and everything is let go. */
TEST(stop_others_gives_up_on_a_thread_in_a_kernel_userfault) {
        _cleanup_remote_ struct zsw_remote *r = NULL;
        struct frozen_child f;

        frozen_child_start(&f, true);
        ASSERT_OK(zsw_remote_seize(f.pid, &test_log, &r));
        ASSERT_EQ(zsw_remote_tid(r), f.pid);
        ASSERT_ERRNO(zsw_remote_stop_others(r), ETIMEDOUT);
        ASSERT_EQ(remote(r, SYS_getpid, no_args), f.pid);
        r = zsw_remote_release(r);
        ASSERT_EQ(tracer_of(f.pid), 0);
        ASSERT_TRUE(thread_in(f.pid, f.frozen_tid, "handle_userfault"));
        frozen_child_thaw_and_wait(&f);
}

/* A lone vfork() parent sleeps uninterruptibly: the interrupt cannot
 * stop it before its child exits. The seize gives up at the deadline,
 * and once its tracer thread is gone nothing of ours is pending on it: it
 * goes on when its child exits, instead of stopping for a tracer that
 * waits no more. */
TEST(uninterruptible_sleep_past_the_deadline_is_let_go) {
        struct zsw_remote *r = NULL;
        char why[256];
        int vp[2];
        pid_t pid;

        ASSERT_OK(pipe2(vp, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                char c;

                if (vfork() == 0)
                        _exit(read(vp[0], &c, 1) == 1 ? 0 : 1);
                _exit(0);
        }
        for (unsigned tries = 0; tries < 10000 && proc_state(pid) != 'D'; tries++)
                usleep(1000);
        ASSERT_EQ(proc_state(pid), 'D');
        ASSERT_ERRNO(zsw_remote_seize(pid, &test_log, &r), ETIMEDOUT);
        ASSERT_EQ(tracer_of(pid), 0);
        ASSERT_OK(zsw_remote_describe_stuck(pid, why, sizeof(why)));
        ASSERT_TRUE(strstr(why, "uninterruptible sleep (D)"));
        ASSERT_EQ(write(vp[1], "v", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(vp[0]);
        close(vp[1]);
}

struct vforker {
        int ready, release;
};

static void *vfork_and_wait(void *userdata) {
        struct vforker *v = userdata;
        pid_t tid = gettid();
        char c;

        if (write(v->ready, &tid, sizeof(tid)) != sizeof(tid))
                _exit(6);
        if (vfork() == 0)
                _exit(read(v->release, &c, 1) == 1 ? 0 : 1);
        return NULL;
}

/* The same for another thread: its interrupt never stops it, and the
 * wait for its stop ends at the deadline (the tracer's timer), not
 * with its child. Once the handle is released nothing of ours is left on
 * it or on the leader, which goes on with its read(2). */
TEST(stop_others_gives_up_on_a_thread_that_never_stops) {
        struct zsw_remote *r = NULL;
        int vp[2], tp[2], go[2];
        pid_t pid, tid = 0;

        ASSERT_OK(pipe2(vp, O_CLOEXEC));
        ASSERT_OK(pipe2(tp, O_CLOEXEC));
        ASSERT_OK(pipe2(go, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                struct vforker v = { .ready = tp[1], .release = vp[0] };
                pthread_t t;
                char c;

                if (pthread_create(&t, NULL, vfork_and_wait, &v) != 0)
                        _exit(2);
                if (read(go[0], &c, 1) != 1 || c != 'g')
                        _exit(3);
                pthread_join(t, NULL);
                _exit(0);
        }
        ASSERT_EQ(read(tp[0], &tid, sizeof(tid)), (ssize_t) sizeof(tid));
        for (unsigned tries = 0; tries < 10000 && proc_state(tid) != 'D'; tries++)
                usleep(1000);
        ASSERT_EQ(proc_state(tid), 'D');
        wait_in_syscall(pid, pid, (const long[]) { SYS_read }, 1);
        ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
        ASSERT_ERRNO(zsw_remote_stop_others(r), ETIMEDOUT);
        r = zsw_remote_release(r);
        ASSERT_EQ(tracer_of(tid), 0);
        ASSERT_EQ(tracer_of(pid), 0);
        ASSERT_EQ(write(vp[1], "v", 1), 1);
        ASSERT_EQ(write(go[1], "g", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        close(vp[0]);
        close(vp[1]);
        close(tp[0]);
        close(tp[1]);
        close(go[0]);
        close(go[1]);
}

/* ---- the injecting process dies -------------------------------------------- */

/* Under ThreadSanitizer the tracer is a thread (libzswapd/remote.c), which
 * dies with its process. */
#if !ZSW_THREAD_SANITIZER
static void *count_forever(void *arg) {
        _Atomic uint64_t *n = arg;

        for (;;)
                atomic_fetch_add(n, 1);
        return NULL;
}

enum injector_step { INJECTOR_GUARDED, INJECTOR_IN_CALL };

/* The injecting process: seizes target, holds its other threads, and
 * either installs guard markers over [buf, buf + len) or runs a read(2)
 * of the target's fd call_fd that blocks; says so on status and waits to
 * be killed. */
static _Noreturn void injector(pid_t target, enum injector_step step, uint8_t *buf, size_t len,
                               int call_fd, int status) {
        struct zsw_remote *r = NULL;
        uint64_t scratch;
        char c = step == INJECTOR_GUARDED ? 'g' : 'c';

        if (zsw_remote_seize(target, &test_log, &r) < 0 || zsw_remote_stop_others(r) < 0 ||
            zsw_remote_map_scratch(r, PAGE, &scratch) < 0)
                _exit(2);
        if (step == INJECTOR_GUARDED) {
                if (zsw_remote_madvise_ranges_batched(r, scratch, PAGE,
                                                      &(struct iovec) { buf, len }, 1,
                                                      MADV_GUARD_INSTALL) < 0)
                        _exit(3);
                if (write(status, &c, 1) != 1)
                        _exit(4);
        } else {
                if (write(status, &c, 1) != 1)
                        _exit(4);
                (void) zsw_remote_call(r, SYS_read,
                                       (unsigned long[6]) { (unsigned long) call_fd, scratch, 1 });
        }
        for (;;)
                pause();
}

/* A process that injected into a target dies with it seized: the target
 * goes on on its own registers, its markers removed, its other thread
 * running, its own read(2) restarted. */
static void injector_dies(enum injector_step step) {
        const size_t len = 64 * PAGE;
        uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        _Atomic uint64_t *counter = map_shared(PAGE);
        int p[2], q[2], s[2];
        pid_t pid, inj;
        uint64_t before;
        char c;

        ASSERT_TRUE(buf != MAP_FAILED);
        memset(buf, 0xab, len);
        ASSERT_OK(pipe2(p, O_CLOEXEC));
        ASSERT_OK(pipe2(q, O_CLOEXEC));
        ASSERT_OK(pipe2(s, O_CLOEXEC));
        pid = fork_child();
        if (pid == 0) {
                pthread_t t;

                if (pthread_create(&t, NULL, count_forever, counter) != 0)
                        _exit(2);
                if (read(p[0], &c, 1) != 1)
                        _exit(errno == EINTR ? 10 : 11);
                if (c != 'x')
                        _exit(12);
                /* Guarded, the first touch would be SIGSEGV. */
                for (size_t i = 0; i < len; i++)
                        if (buf[i] != (step == INJECTOR_GUARDED ? 0 : 0xab))
                                _exit(13);
                _exit(0);
        }
        wait_in_syscall_on(pid, pid, (const long[]) { SYS_read }, 1, p[0]);
        inj = fork_child();
        if (inj == 0)
                injector(pid, step, buf, len, q[0], s[1]);
        ASSERT_EQ(read(s[0], &c, 1), 1);
        if (step == INJECTOR_IN_CALL)
                wait_in_syscall_on(pid, pid, (const long[]) { SYS_read }, 1, q[0]);
        ASSERT_OK(kill(inj, SIGKILL));
        ASSERT_EQ(waitpid(inj, NULL, 0), inj);
        /* The injected read(2) returns now, with its injector dead. */
        if (step == INJECTOR_IN_CALL)
                ASSERT_EQ(write(q[1], "q", 1), 1);
        /* Let go: the counting thread counts again (or the target died). */
        before = atomic_load(counter);
        while (atomic_load(counter) == before) {
                int status;

                if (waitpid(pid, &status, WNOHANG) == pid)
                        TEST_FAIL("target died (%s %d)",
                                  WIFSIGNALED(status) ? "signal" : "exit status",
                                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
                usleep(1000);
        }
        ASSERT_EQ(write(p[1], "x", 1), 1);
        ASSERT_EQ(wait_exit_code(pid), 0);
        for (int i = 0; i < 2; i++) {
                close(p[i]);
                close(q[i]);
                close(s[i]);
        }
        munmap(buf, len);
        munmap((void *) counter, PAGE);
}

#endif

TEST(injector_dead_after_a_guard_install) {
#if !ZSW_THREAD_SANITIZER
        injector_dies(INJECTOR_GUARDED);
#endif
}

TEST(injector_dead_during_an_injected_call) {
#if !ZSW_THREAD_SANITIZER
        injector_dies(INJECTOR_IN_CALL);
#endif
}
