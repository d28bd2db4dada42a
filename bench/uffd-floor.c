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
 * zswapd's fault latency (docs/performance.md) and which the kernel's own
 * swap-in, done in the faulting thread, never pays.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "corpus.h"
#include "uffd-floor.h"
#include "uffd.h"
#include "util.h"

#define PAGE 4096u

/* Any CPU of the machine, whatever the caller's affinity (a workload
 * pinned with taskset passes its pin on to its children), or one. */
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

/* The handler process: the userfaultfd it inherited still belongs to the
 * measuring process's memory, as one taken with pidfd_getfd(2) does. A
 * blocking read(2) of one message, the least a handler can do. Runs until
 * killed. */
static _Noreturn void handler_main(int uffd, int cpu, const void *page) {
        struct uffd_msg m;

        handler_place(cpu);
        while (read(uffd, &m, sizeof(m)) == sizeof(m)) {
                uint64_t dst = m.arg.pagefault.address & ~(uint64_t) (PAGE - 1);

                if (m.event != UFFD_EVENT_PAGEFAULT)
                        continue;
                if (zsw_uffd_copy(uffd, dst, page, PAGE, 0) < 0)
                        (void) zsw_uffd_wake(uffd, dst, PAGE);
        }
        _exit(0);
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return (x > y) - (x < y);
}

int uffd_floor_measure(size_t pages, int handler_cpu, struct uffd_floor *ret) {
        size_t len = pages * PAGE;
        _cleanup_free_ uint64_t *lat = NULL;
        _cleanup_free_ uint32_t *order = NULL;
        _cleanup_free_ void *page = NULL;
        uint8_t *area = MAP_FAILED;
        pid_t handler = -1;
        int uffd, r;

        if (pages < 2)
                return -EINVAL;
        lat = calloc(pages, sizeof(*lat));
        order = calloc(pages, sizeof(*order));
        page = aligned_alloc(PAGE, PAGE);
        if (!lat || !order || !page)
                return -ENOMEM;
        memset(page, 0x5a, PAGE);
        corpus_shuffle(order, pages, 0x2545f4914f6cdd1dull);

        /* Blocking: the handler sleeps in read(2), nothing in between. */
        uffd = zsw_uffd_new(UFFD_USER_MODE_ONLY);
        if (uffd < 0)
                return uffd;
        r = fcntl(uffd, F_SETFL, 0) < 0 ? -errno : zsw_uffd_api(uffd, 0, NULL);
        if (r >= 0) {
                area = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                r = area == MAP_FAILED ? -errno
                                       : zsw_uffd_register(uffd, (uint64_t) (uintptr_t) area, len,
                                                           UFFDIO_REGISTER_MODE_MISSING, NULL);
        }
        if (r >= 0) {
                handler = fork();
                if (handler < 0)
                        r = -errno;
                else if (handler == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        handler_main(uffd, handler_cpu, page);
                }
        }
        for (size_t i = 0; r >= 0 && i < pages; i++) {
                const volatile uint8_t *p = area + (size_t) order[i] * PAGE;
                uint64_t t0 = zsw_now_ns();

                if (*p != 0x5a)
                        r = -EIO;
                lat[i] = zsw_now_ns() - t0;
        }
        if (handler > 0) {
                kill(handler, SIGKILL);
                waitpid(handler, NULL, 0);
        }
        if (area != MAP_FAILED)
                munmap(area, len);
        close(uffd);
        if (r < 0)
                return r;
        qsort(lat, pages, sizeof(*lat), cmp_u64);
        *ret = (struct uffd_floor) {
                .p50_ns = lat[pages / 2],
                .p99_ns = lat[pages * 99 / 100],
                .faults = pages,
        };
        return 0;
}
