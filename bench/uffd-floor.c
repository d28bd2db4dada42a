/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The userfaultfd round trip alone: what any fault service built on it
 * pays before doing any work of its own.
 *
 * The calling thread touches the pages of a fresh registered mapping in
 * random order; a handler in another process, as zswapd is, blocked in
 * read(2) on the (blocking) userfaultfd, answers each fault with
 * UFFDIO_COPY of a page it has ready. No lookup, no decompression, no
 * lock: the two wakeups, the switches between the two address spaces and
 * the page installation are all that is left, which is the floor under
 * zswapd's fault latency (docs/bench-fault.md) and which the kernel's own
 * swap-in, done in the faulting thread, never pays.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <linux/userfaultfd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "uffd-floor.h"

#define PAGE 4096u

struct handler {
        int uffd;
        int cpu;
        void *page;
};

static uint64_t floor_now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* Any CPU of the machine, whatever the caller's affinity (a workload
 * pinned with taskset passes its pin on to its threads), or one. */
static void handler_place(int cpu) {
        cpu_set_t set;
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        CPU_ZERO(&set);
        if (cpu >= 0)
                CPU_SET(cpu, &set);
        else
                for (long c = 0; c < n && c < CPU_SETSIZE; c++)
                        CPU_SET(c, &set);
        (void) sched_setaffinity(0, sizeof(set), &set);
}

/* The handler process: the userfaultfd it inherited still belongs to
 * the measuring process's memory, as one taken with pidfd_getfd(2) does.
 * Runs until killed. */
static _Noreturn void handler_main(struct handler *h) {
        struct uffd_msg m;

        handler_place(h->cpu);
        while (read(h->uffd, &m, sizeof(m)) == sizeof(m)) {
                struct uffdio_copy copy = {
                        .dst = m.arg.pagefault.address & ~(uint64_t) (PAGE - 1),
                        .src = (uint64_t) (uintptr_t) h->page,
                        .len = PAGE,
                };

                if (m.event != UFFD_EVENT_PAGEFAULT)
                        continue;
                if (ioctl(h->uffd, UFFDIO_COPY, &copy) < 0 && errno != EEXIST) {
                        struct uffdio_range wake = { copy.dst, PAGE };

                        (void) ioctl(h->uffd, UFFDIO_WAKE, &wake);
                }
        }
        _exit(0);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return (x > y) - (x < y);
}

int uffd_floor_measure(size_t pages, int handler_cpu, struct uffd_floor *ret) {
        struct uffdio_api api = { .api = UFFD_API };
        struct handler h = { .uffd = -1, .cpu = handler_cpu };
        struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
        uint64_t *lat = NULL, seed = 0x2545f4914f6cdd1dull;
        uint32_t *order = NULL;
        uint8_t *area = MAP_FAILED;
        pid_t handler = -1;
        int r = 0;

        if (pages < 2)
                return -EINVAL;
        lat = calloc(pages, sizeof(*lat));
        order = calloc(pages, sizeof(*order));
        h.page = aligned_alloc(PAGE, PAGE);
        if (!lat || !order || !h.page) {
                r = -ENOMEM;
                goto out;
        }
        memset(h.page, 0x5a, PAGE);
        h.uffd = (int) syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
        if (h.uffd < 0 || ioctl(h.uffd, UFFDIO_API, &api) < 0) {
                r = -errno;
                goto out;
        }
        area = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (area == MAP_FAILED) {
                r = -errno;
                goto out;
        }
        reg.range.start = (uint64_t) (uintptr_t) area;
        reg.range.len = pages * PAGE;
        if (ioctl(h.uffd, UFFDIO_REGISTER, &reg) < 0) {
                r = -errno;
                goto out;
        }
        handler = fork();
        if (handler < 0) {
                r = -errno;
                goto out;
        }
        if (handler == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                handler_main(&h);
        }

        /* A random order (xorshift), as the re-read's random pass. */
        for (size_t i = 0; i < pages; i++)
                order[i] = (uint32_t) i;
        for (size_t i = pages - 1; i > 0; i--) {
                size_t j;
                uint32_t tmp;

                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                j = seed % (i + 1);
                tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
        }
        for (size_t i = 0; i < pages; i++) {
                const volatile uint8_t *p = area + (size_t) order[i] * PAGE;
                uint64_t t0 = floor_now_ns();

                if (*p != 0x5a) {
                        r = -EIO;
                        goto out;
                }
                lat[i] = floor_now_ns() - t0;
        }
        qsort(lat, pages, sizeof(*lat), cmp_u64);
        *ret = (struct uffd_floor) {
                .p50_ns = lat[pages / 2],
                .p99_ns = lat[pages * 99 / 100],
                .faults = pages,
        };
out:
        if (handler > 0) {
                kill(handler, SIGKILL);
                waitpid(handler, NULL, 0);
        }
        if (area != MAP_FAILED)
                munmap(area, pages * PAGE);
        if (h.uffd >= 0)
                close(h.uffd);
        free(h.page);
        free(order);
        free(lat);
        return r;
}
