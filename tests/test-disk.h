/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Real disks that fail for tests of writeback: an ext4 on a loop device
 * (which EXT4_IOC_SHUTDOWN turns into a disk failing every I/O with EIO),
 * and zram devices (whose mem_limit turns writes needing new memory into
 * device errors below ext4). Everything is made so that a test that aborts
 * leaves nothing behind: mounts live in a mount namespace of the test's
 * own (call test_private_mounts() first, in a child), loop devices clear
 * themselves when unmounted and their images are unlinked at once.
 *
 * Include after test.h.
 */
#pragma once

#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <sched.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

/* ext4's "going down" ioctl (fstests' shutdown): afterwards the filesystem
 * fails every read, write and fallocate with EIO, as a dead disk would. */
#ifndef EXT4_IOC_SHUTDOWN
#define EXT4_IOC_SHUTDOWN _IOR('X', 125, uint32_t)
#endif
#define EXT4_GOING_FLAGS_NOLOGFLUSH 0x2

/* Runs a shell command; its exit status, or -1 if it did not exit. */
static inline int test_run(const char *cmd) {
        int status = system(cmd);

        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static inline int test_write_sysfs(const char *path, const char *value) {
        int fd = open(path, O_WRONLY | O_CLOEXEC), r = 0;

        if (fd < 0)
                return -errno;
        if (write(fd, value, strlen(value)) < 0)
                r = -errno;
        close(fd);
        return r;
}

/* A private mount namespace, so our mounts vanish with the process. */
static inline void test_private_mounts(void) {
        if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                TEST_SKIP("cannot make a private mount namespace: %m");
}

/* A fresh directory "/var/tmp/<prefix>-XXXXXX" (on a real disk: tmpfs has
 * no O_DIRECT). */
static inline char *test_make_dir(const char *prefix) {
        char *d = NULL;

        ASSERT_TRUE(asprintf(&d, "/var/tmp/%s-XXXXXX", prefix) > 0);
        ASSERT_TRUE(mkdtemp(d));
        return d;
}

/* An ext4 of 64 MiB on a loop device, mounted on dir, in the caller's
 * (private) mount namespace. False if losetup, mkfs.ext4 or the mount
 * failed. */
static inline bool test_ext4_on_loop(const char *dir) {
        char cmd[PATH_MAX + 128], image[PATH_MAX], dev[64] = "";
        struct loop_info64 info;
        bool ok = false;
        FILE *f;
        int fd;

        snprintf(image, sizeof(image), "%s.img", dir);
        fd = open(image, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(ftruncate(fd, 64 << 20) == 0);
        close(fd);
        snprintf(cmd, sizeof(cmd), "losetup --find --show %s 2>/dev/null", image);
        f = popen(cmd, "r");
        if (f && fgets(dev, sizeof(dev), f) && dev[0] == '/') {
                dev[strcspn(dev, "\n")] = 0;
                snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F %s >/dev/null 2>&1", dev);
                ok = test_run(cmd) == 0 && mount(dev, dir, "ext4", 0, NULL) >= 0;
                /* The device goes away with its last mount. */
                fd = open(dev, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_TRUE(ioctl(fd, LOOP_GET_STATUS64, &info) == 0);
                info.lo_flags |= LO_FLAGS_AUTOCLEAR;
                ASSERT_TRUE(ioctl(fd, LOOP_SET_STATUS64, &info) == 0);
                close(fd);
        }
        if (f)
                pclose(f);
        unlink(image);
        return ok;
}

/* Makes the filesystem holding fd fail every I/O from now on. */
static inline void test_ext4_shutdown(int fd) {
        uint32_t how = EXT4_GOING_FLAGS_NOLOGFLUSH;

        ASSERT_TRUE(ioctl(fd, EXT4_IOC_SHUTDOWN, &how) == 0);
}

/* A new zram device; its number. Skips the test where zram cannot be
 * added. Remove it with test_zram_remove() from the process that made it,
 * after any child using it has exited. */
static inline int test_zram_add(void) {
        char buf[16] = "";
        ssize_t l;
        int fd;

        fd = open("/sys/class/zram-control/hot_add", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                TEST_SKIP("no zram hot_add here: %m");
        l = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (l <= 0)
                TEST_SKIP("cannot add a zram device");
        return atoi(buf);
}

static inline void test_zram_remove(int id) {
        char buf[16];

        snprintf(buf, sizeof(buf), "%d", id);
        ASSERT_TRUE(test_write_sysfs("/sys/class/zram-control/hot_remove", buf) == 0);
}

/* Formats zram device id (size as zram's disksize takes it, e.g. "64M")
 * with ext4 and mounts it on dir, in the caller's private mount namespace. */
static inline void test_zram_ext4(int id, const char *size, const char *dir) {
        char path[128], cmd[128];

        snprintf(path, sizeof(path), "/sys/block/zram%d/disksize", id);
        ASSERT_TRUE(test_write_sysfs(path, size) == 0);
        snprintf(cmd, sizeof(cmd), "mkfs.ext4 -q -F /dev/zram%d >/dev/null 2>&1", id);
        ASSERT_TRUE(test_run(cmd) == 0);
        snprintf(path, sizeof(path), "/dev/zram%d", id);
        ASSERT_TRUE(mount(path, dir, "ext4", 0, NULL) == 0);
}

/* Sets zram device id's mem_limit: past it, writes needing new memory fail
 * with a device error. */
static inline void test_zram_limit(int id, const char *limit) {
        char path[128];

        snprintf(path, sizeof(path), "/sys/block/zram%d/mem_limit", id);
        ASSERT_TRUE(test_write_sysfs(path, limit) == 0);
}

/* Forks; the child runs body(id, dir) and exits 0 when it returns; the
 * parent waits and returns the child's exit status (EXIT_TEST_SKIP passes
 * through). */
static inline int test_in_child(void (*body)(int id, const char *dir), int id, const char *dir) {
        int status;
        pid_t pid;

        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                body(id, dir);
                _exit(EXIT_SUCCESS);
        }
        ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
        ASSERT_TRUE(WIFEXITED(status));
        return WEXITSTATUS(status);
}
