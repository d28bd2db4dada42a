/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-test-hold: holds one thread of a process stopped, for a test
 * that needs it not to run while something else happens (zswapd's
 * reaper, which names fork children, across a fork and zswapd's death).
 *
 *   zswapd-test-hold PID COMM
 *
 * Seizes the thread of PID whose name is COMM with ptrace and interrupts
 * it; once it is stopped, prints "held TID" and keeps it so until it
 * exits (its process killed), then exits 0. Exits 1 if there is no such
 * thread or it cannot be held.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
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
        int status;

        if (argc != 3) {
                fprintf(stderr, "usage: %s PID COMM\n", argv[0]);
                return 1;
        }
        tid = find_thread(argv[1], argv[2]);
        if (tid <= 0) {
                fprintf(stderr, "no thread named %s in process %s\n", argv[2], argv[1]);
                return 1;
        }
        if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) < 0 ||
            ptrace(PTRACE_INTERRUPT, tid, NULL, NULL) < 0 || waitpid(tid, &status, __WALL) != tid ||
            !WIFSTOPPED(status)) {
                fprintf(stderr, "cannot hold thread %d: %s\n", tid, strerror(errno));
                return 1;
        }
        printf("held %d\n", tid);
        fflush(stdout);
        /* Stopped it stays: nothing here resumes it. Its death (a SIGKILL
         * of its process) ends the wait. */
        while (waitpid(tid, &status, __WALL) == tid && !WIFEXITED(status) && !WIFSIGNALED(status))
                ;
        return 0;
}
