/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A target that can hold a reclaim up for as long as a test wants: after
 * filling its memory (then writing 'r' to stdout) it waits for a byte on
 * stdin and then vforks; the child waits for one more byte on stdin. While
 * it waits the parent is in uninterruptible sleep (D), which a ptrace stop,
 * and with it zswapd's reclaim of this process, waits for. Afterwards it
 * checks every byte of its memory, writes '1' (all there) or '0', and
 * exits at the end of stdin.
 *
 * Built without sanitizers: their runtime would add a thread that the
 * daemon could seize instead of the sleeping one.
 */
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (32u << 20)

static uint8_t value(size_t i) {
        size_t page = i / 4096;

        if (page % 16 == 5)
                return 0;
        return (i % 64 < 40) ? (uint8_t) "the quick brown fox jumps over a lazy dog"[i % 40]
                             : (uint8_t) ('a' + (page * 7 + i * 13) % 26);
}

/* A vfork child: on our memory, with a stack of its own; system calls only. */
static int child(void *arg) {
        char c;

        (void) arg;
        (void) syscall(SYS_read, STDIN_FILENO, &c, 1);
        syscall(SYS_exit, 0);
        return 0;
}

int main(void) {
        static _Alignas(16) uint8_t stack[64 * 1024];
        uint8_t *buf;
        bool ok = true;
        char c;
        pid_t p;

        buf = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
                return 1;
        for (size_t i = 0; i < SIZE; i++)
                buf[i] = value(i);
        if (write(STDOUT_FILENO, "r", 1) != 1 || read(STDIN_FILENO, &c, 1) != 1)
                return 1;

        p = clone(child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
        if (p < 0 || waitpid(p, NULL, 0) != p)
                return 1;

        for (size_t i = 0; i < SIZE; i++)
                if (buf[i] != value(i))
                        ok = false;
        if (write(STDOUT_FILENO, ok ? "1" : "0", 1) != 1)
                return 1;
        while (read(STDIN_FILENO, &c, 1) > 0)
                ;
        return 0;
}
