/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The tracer of a ptrace handle allocates no memory in any operation: the
 * seize, the hold of every other thread, an injected call, the release.
 * A tracer task outlives a killed daemon to let the target's threads go,
 * and a kill can end a thread of the daemon holding malloc's lock: a
 * tracer that allocated then would wait for good, and so would the
 * threads it holds (libzswapd/remote.c). This program replaces malloc and
 * its kin (glibc calls them through the PLT, its own opendir() and fopen()
 * included) to count the calls made by a task named zswapd-tracer, on a
 * target with more threads than one getdents64() buffer lists, some of
 * them made as it is held (how many before the hold's listing reaches
 * them, and so whether the hold runs out of room and is posted again,
 * depends on the scheduler: the verdict does not).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "remote.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_OWNS_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZER_OWNS_MALLOC 1
#endif
#endif
#ifndef SANITIZER_OWNS_MALLOC
#define SANITIZER_OWNS_MALLOC 0
#endif

#define THREADS 300 /* ~170 entries fill one 4 KiB getdents64() buffer */
#define LATE_THREADS 60

static _Atomic unsigned long allocs_total, allocs_by_tracer;

#if !SANITIZER_OWNS_MALLOC
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);
void *memalign(size_t align, size_t size);

static void count(void) {
        char name[16] = "";

        atomic_fetch_add(&allocs_total, 1);
        if (prctl(PR_GET_NAME, name) == 0 && strcmp(name, "zswapd-tracer") == 0)
                atomic_fetch_add(&allocs_by_tracer, 1);
}

void *malloc(size_t size) {
        count();
        return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
        count();
        return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
        count();
        return __libc_realloc(p, size);
}

void *reallocarray(void *p, size_t n, size_t size) {
        if (size && n > SIZE_MAX / size) {
                errno = ENOMEM;
                return NULL;
        }
        return realloc(p, n * size);
}

int posix_memalign(void **ret, size_t align, size_t size) {
        void *p;

        count();
        p = __libc_memalign(align, size);
        if (!p)
                return ENOMEM;
        *ret = p;
        return 0;
}

void *aligned_alloc(size_t align, size_t size) {
        count();
        return __libc_memalign(align, size);
}

void *memalign(size_t align, size_t size) {
        count();
        return __libc_memalign(align, size);
}

/* free() takes malloc's locks too. */
void free(void *p) {
        if (p)
                count();
        __libc_free(p);
}
#endif

/* Called through a volatile pointer: a compiler may drop a malloc() whose
 * block is only freed. */
static void *(*volatile malloc_not_elided)(size_t) = malloc;

static void log_stderr(void *userdata, int priority, const char *file, int line, const char *func,
                       const char *format, va_list ap) {
        fprintf(stderr, "<%d> %s: ", priority, func);
        vfprintf(stderr, format, ap);
        fputc('\n', stderr);
}

static const struct zsw_log test_log = { .fn = log_stderr, .max_priority = LOG_INFO };

static void *sleeper(void *arg) {
        (void) arg;
        for (;;)
                pause();
        return NULL;
}

/* Makes LATE_THREADS more threads, one at a time, once told to. */
static void *spawner(void *arg) {
        _Atomic int *go = arg;
        pthread_t t;

        while (!atomic_load(go))
                usleep(100);
        for (int i = 0; i < LATE_THREADS; i++)
                if (pthread_create(&t, NULL, sleeper, NULL) != 0)
                        _exit(21);
        return NULL;
}

static pid_t start_target(_Atomic int *go) {
        pid_t parent = getpid(), pid = fork();

        ASSERT_GE(pid, 0);
        if (pid == 0) {
                pthread_attr_t attr;
                pthread_t t;

                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(99);
                pthread_attr_init(&attr);
                pthread_attr_setstacksize(&attr, 64 * 1024);
                for (int i = 0; i < THREADS; i++)
                        if (pthread_create(&t, &attr, sleeper, NULL) != 0)
                                _exit(20);
                if (pthread_create(&t, &attr, spawner, (void *) go) != 0)
                        _exit(20);
                for (;;)
                        pause();
        }
        return pid;
}

static unsigned threads_of(pid_t pid) {
        char path[64], buf[4096];
        const char *p;
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        f = fopen(path, "re");
        ASSERT_TRUE(f);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        p = strstr(buf, "\nThreads:");
        ASSERT_TRUE(p);
        return (unsigned) strtoul(p + strlen("\nThreads:"), NULL, 10);
}

TEST(tracer_operations_allocate_nothing) {
        static const unsigned long no_args[6];
        _Atomic int *go =
                mmap(NULL, sizeof(*go), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        unsigned long before, by_tracer;
        pid_t pid;

        if (SANITIZER_OWNS_MALLOC)
                TEST_SKIP("the sanitizer's runtime replaces malloc itself");
        ASSERT_TRUE(go != MAP_FAILED);
        /* The counting replacement is the one in use. */
        before = atomic_load(&allocs_total);
        free(malloc_not_elided(24));
        ASSERT_GT(atomic_load(&allocs_total), before);

        pid = start_target(go);
        while (threads_of(pid) < THREADS + 2)
                usleep(1000);
        for (int round = 0; round < 3; round++) {
                _cleanup_remote_ struct zsw_remote *r = NULL;
                long result = 0;

                ASSERT_OK(zsw_remote_seize(pid, &test_log, &r));
                /* Threads made while the others are held: in the second
                 * round, as the hold reads the list. */
                if (round == 1)
                        atomic_store(go, 1);
                ASSERT_OK(zsw_remote_stop_others(r));
                ASSERT_OK(zsw_remote_syscall(r, SYS_getpid, no_args, &result));
                ASSERT_EQ(result, pid);
                r = zsw_remote_release(r);
        }
        /* Every late thread was made (and held, in the rounds after);
         * the spawner then ends. */
        while (threads_of(pid) < THREADS + 1 + LATE_THREADS)
                usleep(1000);
        by_tracer = atomic_load(&allocs_by_tracer);
        ASSERT_EQ_U(by_tracer, 0);
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, NULL, 0), pid);
}
