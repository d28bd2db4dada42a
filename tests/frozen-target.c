/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-test-frozen: a process that cannot be stopped for ptrace. It
 * makes a userfaultfd of its own, registers one page with it, and reads a
 * pipe into that page: the kernel's copy faults, in kernel mode, on a
 * userfaultfd that nobody reads, and the read(2) sleeps in
 * handle_userfault until somebody resolves that page.
 *
 *   zswapd-test-frozen [--thread]
 *
 * Alone, its only thread waits so. With --thread a second thread waits,
 * and the main thread answers commands on stdin: "verify" (its 8 MiB of
 * known content: "ok verified" or "error N pages differ") and "exit".
 * It prints "ok ready pid=PID uffd=FD page=ADDR" first. A test resolves
 * the page itself (pidfd_getfd() of FD, UFFDIO_COPY of a page starting
 * with "thawed"); the reader then prints "ok read thawed" (or what it
 * read) and, alone, goes on to answer commands.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

#define PAGE 4096ul
#define BUF_PAGES 2048ul

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static char *page, *buf;
static int pipe_fds[2];

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
        va_list ap;

        pthread_mutex_lock(&out_lock);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
        pthread_mutex_unlock(&out_lock);
}

static uint8_t byte_of(size_t p, size_t i) {
        return (uint8_t) (p * 131 + i * 7 + (i >> 5));
}

static size_t pages_wrong(void) {
        size_t wrong = 0;

        for (size_t p = 0; p < BUF_PAGES; p++)
                for (size_t i = 0; i < PAGE; i++)
                        if ((uint8_t) buf[p * PAGE + i] != byte_of(p, i)) {
                                wrong++;
                                break;
                        }
        return wrong;
}

/* Waits in the kernel until the test resolves the page. */
static void *frozen_read(void *arg) {
        char got[16] = "";
        ssize_t n;

        (void) arg;
        n = read(pipe_fds[0], page, 6);
        if (n < 0)
                say("error read: %s", strerror(errno));
        else {
                memcpy(got, page, 6);
                say("ok read %s", got);
        }
        return NULL;
}

static int commands(void) {
        char line[64];

        while (fgets(line, sizeof(line), stdin)) {
                if (strcmp(line, "verify\n") == 0) {
                        size_t wrong = pages_wrong();

                        if (wrong)
                                say("error %zu pages differ", wrong);
                        else
                                say("ok verified");
                } else if (strcmp(line, "exit\n") == 0)
                        return 0;
                else
                        say("error unknown command");
        }
        return 0;
}

int main(int argc, char *argv[]) {
        bool thread = argc > 1 && strcmp(argv[1], "--thread") == 0;
        struct uffdio_api api = { .api = UFFD_API };
        struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
        pthread_t t;
        int uffd;

        buf = mmap(NULL, BUF_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                   0);
        page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED || page == MAP_FAILED)
                return 1;
        for (size_t p = 0; p < BUF_PAGES; p++)
                for (size_t i = 0; i < PAGE; i++)
                        buf[p * PAGE + i] = (char) byte_of(p, i);

        uffd = (int) syscall(SYS_userfaultfd, O_CLOEXEC);
        if (uffd < 0) {
                say("error userfaultfd: %s", strerror(errno));
                return 77;
        }
        reg.range = (struct uffdio_range) { .start = (uintptr_t) page, .len = PAGE };
        if (ioctl(uffd, UFFDIO_API, &api) < 0 || ioctl(uffd, UFFDIO_REGISTER, &reg) < 0 ||
            pipe2(pipe_fds, O_CLOEXEC) < 0 || write(pipe_fds[1], "thawed", 6) != 6)
                return 1;

        say("ok ready pid=%d uffd=%d page=%#lx", getpid(), uffd, (unsigned long) (uintptr_t) page);
        if (!thread) {
                frozen_read(NULL);
                return commands();
        }
        if (pthread_create(&t, NULL, frozen_read, NULL) != 0)
                return 1;
        return commands();
}
