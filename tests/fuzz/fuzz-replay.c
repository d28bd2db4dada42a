/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Feeds files, or every file in the directories named on the command line,
 * to a fuzz target's LLVMFuzzerTestOneInput, so that the corpus and the
 * crash reproducers run as an ordinary test in every build.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(int dir_fd, const char *name, const char *display) {
        int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
        uint8_t *buf;
        struct stat st;
        ssize_t n;

        if (fd < 0 || fstat(fd, &st) < 0) {
                fprintf(stderr, "%s: %s\n", display, strerror(errno));
                return -1;
        }
        buf = malloc((size_t) st.st_size + 1);
        if (!buf)
                abort();
        n = read(fd, buf, (size_t) st.st_size);
        close(fd);
        if (n != st.st_size) {
                fprintf(stderr, "%s: short read\n", display);
                free(buf);
                return -1;
        }
        fprintf(stderr, "%s\n", display);
        LLVMFuzzerTestOneInput(buf, (size_t) n);
        free(buf);
        return 0;
}

int main(int argc, char **argv) {
        unsigned files = 0, failed = 0;

        for (int i = 1; i < argc; i++) {
                DIR *d = opendir(argv[i]);
                struct dirent *de;

                if (!d) {
                        if (errno != ENOTDIR || replay_file(AT_FDCWD, argv[i], argv[i]) < 0)
                                failed++;
                        files++;
                        continue;
                }
                while ((de = readdir(d))) {
                        char display[4096];

                        if (de->d_name[0] == '.')
                                continue;
                        snprintf(display, sizeof(display), "%s/%s", argv[i], de->d_name);
                        if (replay_file(dirfd(d), de->d_name, display) < 0)
                                failed++;
                        files++;
                }
                closedir(d);
        }
        fprintf(stderr, "%u inputs replayed, %u unreadable\n", files, failed);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
