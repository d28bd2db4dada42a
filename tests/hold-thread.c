/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-test-hold: holds one thread of a process stopped, for a test
 * that needs it not to run while something else happens (zswapd's
 * reaper, which names fork children, across a fork and zswapd's death).
 *
 *   zswapd-test-hold PID COMM
 *
 * Seizes the thread of PID whose name is COMM with ptrace and interrupts
 * it where it waits in epoll_wait(2), holding no lock of its process (a
 * stop elsewhere is let go and tried again); once it is stopped so,
 * prints "held TID" and keeps it so until it exits (its process killed),
 * then exits 0. Exits 1 if there is no such thread or it cannot be held.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t find_thread(const char *pid, const char *comm) {
        char path[300], name[64];
        struct dirent *de;
        pid_t found = 0;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%s/task", pid);
        dir = opendir(path);
        while (dir && !found && (de = readdir(dir))) {
                FILE *f;

                snprintf(path, sizeof(path), "/proc/%s/task/%s/comm", pid, de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                if (fgets(name, sizeof(name), f)) {
                        name[strcspn(name, "\n")] = 0;
                        if (strcmp(name, comm) == 0)
                                found = (pid_t) atoi(de->d_name);
                }
                fclose(f);
        }
        if (dir)
                closedir(dir);
        return found;
}

int main(int argc, char **argv) {
        pid_t tid;
        int status, sig;

        if (argc != 3) {
                fprintf(stderr, "usage: %s PID COMM\n", argv[0]);
                return 1;
        }
        tid = find_thread(argv[1], argv[2]);
        if (tid <= 0) {
                fprintf(stderr, "no thread named %s in process %s\n", argv[2], argv[1]);
                return 1;
        }
        if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0) {
                fprintf(stderr, "cannot seize thread %d: %s\n", tid, strerror(errno));
                return 1;
        }
        for (int tries = 0;; tries++) {
                struct user_regs_struct regs;

                if (ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 ||
                    waitpid(tid, &status, __WALL) != tid || !WIFSTOPPED(status) ||
                    ptrace(PTRACE_GETREGS, tid, NULL, &regs) < 0) {
                        fprintf(stderr, "cannot hold thread %d: %s\n", tid, strerror(errno));
                        return 1;
                }
                /* Stopped inside its wait: the call restarts when it
                 * runs again. */
                if (regs.orig_rax == SYS_epoll_wait || regs.orig_rax == SYS_epoll_pwait ||
                    regs.orig_rax == SYS_epoll_pwait2)
                        break;
                /* A signal it was about to take goes on to it. */
                sig = (status >> 16) == 0 && WSTOPSIG(status) != SIGTRAP ? WSTOPSIG(status) : 0;
                if (tries == 100000 || ptrace(PTRACE_CONT, tid, NULL, (void *) (long) sig) < 0) {
                        fprintf(stderr, "thread %d never stopped in epoll_wait\n", tid);
                        return 1;
                }
                usleep(1000);
        }
        printf("held %d\n", tid);
        fflush(stdout);
        /* Stopped it stays: nothing here resumes it. Its death (a SIGKILL
         * of its process) ends the wait. */
        while (waitpid(tid, &status, __WALL) == tid && !WIFEXITED(status) && !WIFSIGNALED(status))
                ;
        return 0;
}
