/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-bench-age: what page-age tracking costs (age.c).
 *
 * A child fills N MiB with corpus pages; the bench attaches the engine
 * in-process (age scans only when asked) and measures:
 *   - an age scan: its duration per GiB resident and the age table's size
 *     per resident page, at the first scan (every page protected) and at
 *     the second (the pages written in between are left unprotected: hot);
 *   - the target's side: the child writes one byte of every page, timed
 *     by itself, with its pages unprotected and then right after a scan
 *     protected them all: the difference per page is one write-protect
 *     fault served by the engine's fault threads.
 *
 *   zswapd-bench-age [--mib N] [--json]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "engine.h"

#define PAGE ZSW_PAGE_SIZE

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* The child: 'W' writes a byte of every page (the same value back) and
 * answers the nanoseconds it took; 'q' quits. */
static void child_main(size_t npages, int cmd, int reply) {
        uint8_t *buf = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint64_t answer = 0;
        char c;

        if (buf == MAP_FAILED || corpus_fill(buf, npages, 0, 3) < 0)
                _exit(3);
        if (write(reply, &answer, sizeof(answer)) != sizeof(answer))
                _exit(2);
        while (read(cmd, &c, 1) == 1 && c == 'W') {
                uint64_t t0 = now_ns();

                for (size_t i = 0; i < npages; i++)
                        ((volatile uint8_t *) buf)[i * PAGE] = buf[i * PAGE];
                answer = now_ns() - t0;
                if (write(reply, &answer, sizeof(answer)) != sizeof(answer))
                        _exit(2);
        }
        _exit(0);
}

static uint64_t ask(int cmd, int reply, char c) {
        uint64_t answer = 0;

        if (write(cmd, &c, 1) != 1 || read(reply, &answer, sizeof(answer)) != sizeof(answer)) {
                fprintf(stderr, "zswapd-bench-age: the child died\n");
                exit(EXIT_FAILURE);
        }
        return answer;
}

int main(int argc, char *argv[]) {
        static const struct option options[] = { { "mib", required_argument, NULL, 'm' },
                                                 { "json", no_argument, NULL, 'j' },
                                                 {} };
        struct zsw_engine_config cfg = { .age_interval_ms = UINT32_MAX };
        struct zsw_target_stats s1, s2, s3;
        struct zsw_engine *e;
        uint64_t before, plain, protected_, hot, ready;
        size_t mib = 256, npages;
        int to[2], from[2], c, r, json = 0;
        pid_t pid;

        while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0)
                if (c == 'm')
                        mib = strtoul(optarg, NULL, 10);
                else if (c == 'j')
                        json = 1;
                else
                        return EXIT_FAILURE;
        npages = mib * 256;
        if (npages == 0 || pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
                return EXIT_FAILURE;
        /* The child first: forking after the engine's threads started is
         * not safe. */
        pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(to[1]);
                close(from[0]);
                child_main(npages, to[0], from[1]);
        }
        close(to[0]);
        close(from[1]);
        if (pid < 0 || read(from[0], &ready, sizeof(ready)) != sizeof(ready))
                return EXIT_FAILURE;
        before = ask(to[1], from[0], 'W');
        r = zsw_engine_new(&cfg, &e);
        if (r >= 0)
                r = zsw_engine_attach(e, pid, NULL);
        if (r < 0) {
                fprintf(stderr, "zswapd-bench-age: cannot attach: %s (root?)\n", strerror(-r));
                return EXIT_FAILURE;
        }

        plain = ask(to[1], from[0], 'W');
        if (zsw_engine_age_scan(e, pid, NULL) < 0 || zsw_engine_get_target_stats(e, pid, &s1) < 0)
                return EXIT_FAILURE;
        protected_ = ask(to[1], from[0], 'W');
        if (zsw_engine_age_scan(e, pid, NULL) < 0 || zsw_engine_get_target_stats(e, pid, &s2) < 0)
                return EXIT_FAILURE;
        hot = ask(to[1], from[0], 'W');
        (void) zsw_engine_get_target_stats(e, pid, &s3);

        if (json)
                printf("{\"mib\":%zu,\"scan1_ns\":%" PRIu64 ",\"scan1_protected\":%" PRIu64
                       ",\"scan2_ns\":%" PRIu64 ",\"scan2_protected\":%" PRIu64
                       ",\"table_bytes\":%" PRIu64 ",\"write_before_ns\":%" PRIu64
                       ",\"write_plain_ns\":%" PRIu64 ",\"write_protected_ns\":%" PRIu64
                       ",\"write_hot_ns\":%" PRIu64 ",\"wp_faults\":%" PRIu64 "}\n",
                       mib, s1.age_scan_ns_last, s1.age_protected_pages, s2.age_scan_ns_last,
                       s2.age_protected_pages, s2.age_table_bytes, before, plain, protected_, hot,
                       s3.wp_faults);
        else {
                double gib = (double) s1.age_present_pages * PAGE / (1u << 30);

                printf("%zu MiB, %" PRIu64 " pages resident\n", mib, s1.age_present_pages);
                printf("age scan, all protected:   %8.2f ms (%.1f ms/GiB), %" PRIu64 " protected\n",
                       s1.age_scan_ns_last / 1e6, s1.age_scan_ns_last / 1e6 / gib,
                       s1.age_protected_pages);
                printf("age scan, written again:   %8.2f ms (%.1f ms/GiB), %" PRIu64 " protected\n",
                       s2.age_scan_ns_last / 1e6, s2.age_scan_ns_last / 1e6 / gib,
                       s2.age_protected_pages);
                printf("age table:                 %8.1f KiB (%.2f bytes per resident page)\n",
                       s2.age_table_bytes / 1024.0,
                       (double) s2.age_table_bytes / (double) s1.age_present_pages);
                printf("child writes every page:   %8.2f ms before attach, %.2f ms unprotected, "
                       "%.2f ms protected (%.1f us per write-protect fault, %" PRIu64
                       " faults), %.2f ms hot\n",
                       before / 1e6, plain / 1e6, protected_ / 1e6,
                       ((double) protected_ - (double) plain) / 1e3 / (double) npages, s3.wp_faults,
                       hot / 1e6);
        }
        close(to[1]);
        waitpid(pid, NULL, 0);
        zsw_engine_free(e);
        return EXIT_SUCCESS;
}
