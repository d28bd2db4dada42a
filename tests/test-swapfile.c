/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The swapfile on real files and a real io_uring: byte-exact round trips of
 * lz4-compressed corpus pages, merging into few write requests, sector reuse
 * and fragmentation, a full filesystem (a tmpfs of 256 KiB of our own), short
 * writes (RLIMIT_FSIZE cuts a write in the middle), short reads (the file
 * truncated under the reader) and real I/O errors (an ext4 on a loop device,
 * shut down with EXT4_IOC_SHUTDOWN: from then on the kernel fails every read
 * and write with EIO).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <lz4.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/loop.h>

#include "corpus.h"
#include "swapfile.h"
#include "test.h"
#include "test-disk.h"

#define PAGE ZSW_PAGE_SIZE
#define BATCH ZSW_SWAPFILE_BATCH_MAX

/* Compressed corpus pages: the payloads a shrinker would hand over. */
struct payloads {
        size_t n;
        uint8_t *pages; /* the original pages */
        uint8_t **data; /* compressed, or the raw page if lz4 does not shrink it */
        uint32_t *lens;
        uint64_t *slots;
        bool cut; /* lens were cut short: compare bytes only */
};

static void payloads_make(struct payloads *p, size_t n, uint64_t seed) {
        *p = (struct payloads) { .n = n };
        p->pages = malloc((size_t) n * PAGE);
        p->data = calloc(n, sizeof(*p->data));
        p->lens = calloc(n, sizeof(*p->lens));
        p->slots = calloc(n, sizeof(*p->slots));
        ASSERT_TRUE(p->pages && p->data && p->lens && p->slots);
        if (corpus_fill(p->pages, n, 10, seed) < 0)
                TEST_SKIP("too few readable files for the page corpus");
        for (size_t i = 0; i < n; i++) {
                char tmp[LZ4_COMPRESSBOUND(PAGE)];
                int len = LZ4_compress_default((const char *) p->pages + i * PAGE, tmp, PAGE,
                                               sizeof(tmp));

                ASSERT_GT(len, 0);
                if ((unsigned) len >= PAGE) {
                        len = PAGE;
                        memcpy(tmp, p->pages + i * PAGE, PAGE);
                }
                p->lens[i] = (uint32_t) len;
                p->data[i] = malloc((size_t) len);
                ASSERT_TRUE(p->data[i]);
                memcpy(p->data[i], tmp, (size_t) len);
                p->slots[i] = ZSW_SWAPFILE_NO_SLOT;
        }
}

static void payloads_done(struct payloads *p) {
        for (size_t i = 0; i < p->n; i++)
                free(p->data[i]);
        free(p->data);
        free(p->lens);
        free(p->slots);
        free(p->pages);
}

/* Entry i read back from disk must decompress to exactly page i. */
static void check_entry(const struct payloads *p, size_t i, const uint8_t *got) {
        uint8_t page[PAGE];

        ASSERT_MEMEQ(got, p->data[i], p->lens[i]);
        if (p->cut)
                return;
        if (p->lens[i] == PAGE)
                memcpy(page, got, PAGE);
        else
                ASSERT_EQ(LZ4_decompress_safe((const char *) got, (char *) page, (int) p->lens[i],
                                              PAGE),
                          (int) PAGE);
        ASSERT_MEMEQ(page, p->pages + i * PAGE, PAGE);
}

static void read_check(struct zsw_swapfile *sf, const struct payloads *p, size_t i) {
        uint8_t buf[PAGE];

        ASSERT_OK(zsw_swapfile_read(sf, p->slots[i], p->lens[i], buf));
        check_entry(p, i, buf);
}

/* Writes entries [from, from + n) as one batch; returns how many were written. */
static int write_range(struct zsw_swapfile *sf, struct payloads *p, size_t from, size_t n,
                       int *errors) {
        return zsw_swapfile_write_batch(sf, (const void *const *) p->data + from, p->lens + from, n,
                                        p->slots + from, errors);
}

/* Counts warnings and worse: failures are logged once per burst. */
static void count_log(void *userdata, int priority, const char *file, int line, const char *func,
                      const char *format, va_list ap) {
        if (priority <= LOG_WARNING)
                (*(unsigned *) userdata)++;
}

static size_t dir_entries(const char *path) {
        DIR *d = opendir(path);
        struct dirent *de;
        size_t n = 0;

        ASSERT_TRUE(d);
        while ((de = readdir(d)))
                n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        closedir(d);
        return n;
}

/* The swapfile's descriptor, found through /proc: the file has no name. */
static int find_fd(const char *dir) {
        for (int fd = 3; fd < 1024; fd++) {
                char link[64], target[PATH_MAX];
                ssize_t l;

                snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
                l = readlink(link, target, sizeof(target) - 1);
                if (l < 0)
                        continue;
                target[l] = 0;
                if (strncmp(target, dir, strlen(dir)) == 0 && target[strlen(dir)] == '/')
                        return fd;
        }
        return -1;
}

TEST(tmpfile_is_private_and_vanishes) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct stat st;
        int fd;

        ASSERT_OK(zsw_swapfile_open(dir, 1 << 20, NULL, &sf));
        ASSERT_EQ(dir_entries(dir), 0);
        fd = find_fd(dir);
        ASSERT_GE(fd, 0);
        ASSERT_OK(fstat(fd, &st));
        ASSERT_EQ(st.st_mode & 07777, 0600);
        ASSERT_EQ(st.st_nlink, 0);
        sf = zsw_swapfile_close(sf);
        ASSERT_LT(find_fd(dir), 0);
        ASSERT_OK(rmdir(dir));
}

TEST(named_file_is_private_and_removed) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/swap", dir);
        ASSERT_OK(zsw_swapfile_open(path, 1 << 20, NULL, &sf));
        ASSERT_OK(stat(path, &st));
        ASSERT_EQ(st.st_mode & 07777, 0600);
        /* An existing file is never taken over. */
        {
                struct zsw_swapfile *other = NULL;
                ASSERT_ERRNO(zsw_swapfile_open(path, 1 << 20, NULL, &other), EEXIST);
                ASSERT_TRUE(other == NULL);
        }
        sf = zsw_swapfile_close(sf);
        ASSERT_LT(stat(path, &st), 0);
        ASSERT_OK(rmdir(dir));
}

TEST(round_trip_many_batches) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct payloads p;
        const size_t n = 64 * BATCH;
        uint64_t padded = 0, payload = 0;

        payloads_make(&p, n, 1);
        ASSERT_OK(zsw_swapfile_open(dir, 64 << 20, NULL, &sf));
        for (size_t b = 0; b < n; b += BATCH) {
                int errors[BATCH];

                ASSERT_EQ(write_range(sf, &p, b, BATCH, errors), BATCH);
                for (size_t i = b; i < b + BATCH; i++) {
                        ASSERT_EQ(errors[i - b], 0);
                        ASSERT_NE(p.slots[i], ZSW_SWAPFILE_NO_SLOT);
                        padded += zsw_swapfile_entry_bytes(sf, p.lens[i]);
                        payload += p.lens[i];
                }
        }
        zsw_swapfile_get_stats(sf, &st);
        /* Fresh batches on an empty file: one request each. */
        ASSERT_EQ(st.write_requests, n / BATCH);
        ASSERT_GE(st.pages_written / st.write_requests, 16);
        ASSERT_EQ(st.pages_written, n);
        ASSERT_EQ(st.bytes_written, padded);
        ASSERT_EQ(st.payload_bytes, payload);
        ASSERT_EQ(st.disk_bytes_in_use, padded);
        ASSERT_GE(st.file_bytes_reserved, padded);
        ASSERT_EQ(st.err_nospace + st.err_write_io + st.err_short_write, 0);

        /* Every entry, one by one in reverse, then batch by batch. */
        for (size_t i = n; i-- > 0;)
                read_check(sf, &p, i);
        for (size_t b = 0; b < n; b += BATCH) {
                uint8_t *bufs[BATCH];
                uint64_t before;

                for (size_t i = 0; i < BATCH; i++)
                        ASSERT_TRUE(bufs[i] = malloc(PAGE));
                zsw_swapfile_get_stats(sf, &st);
                before = st.read_requests;
                ASSERT_OK(zsw_swapfile_read_batch(sf, p.slots + b, p.lens + b, BATCH,
                                                  (void *const *) bufs));
                zsw_swapfile_get_stats(sf, &st);
                ASSERT_EQ(st.read_requests - before, 1);
                for (size_t i = 0; i < BATCH; i++) {
                        check_entry(&p, b + i, bufs[i]);
                        free(bufs[i]);
                }
        }
        for (size_t i = 0; i < n; i++)
                ASSERT_OK(zsw_swapfile_free(sf, p.slots[i], p.lens[i]));
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.disk_bytes_in_use, 0);
        ASSERT_EQ(st.reads, 2 * n);
        /* A double free is refused. */
        ASSERT_ERRNO(zsw_swapfile_free(sf, p.slots[0], p.lens[0]), EINVAL);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

TEST(unmerged_batches_for_comparison) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct payloads p;

        payloads_make(&p, 4 * BATCH, 9);
        ASSERT_OK(zsw_swapfile_open(dir, 16 << 20, NULL, &sf));
        zsw_swapfile_set_merge(sf, false);
        ASSERT_EQ(write_range(sf, &p, 0, 2 * BATCH, NULL), 2 * BATCH);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.write_requests, 2 * BATCH);
        zsw_swapfile_set_merge(sf, true);
        ASSERT_EQ(write_range(sf, &p, 2 * BATCH, 2 * BATCH, NULL), 2 * BATCH);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.write_requests, 2 * BATCH + 2);
        for (size_t i = 0; i < p.n; i++)
                read_check(sf, &p, i);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

/* The allocation block of swapfiles in dir: 512 bytes, or the device's
 * direct-I/O unit when that is larger. */
static uint32_t block_size(const char *dir) {
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;

        ASSERT_OK(zsw_swapfile_open(dir, 1 << 20, NULL, &sf));
        return (uint32_t) zsw_swapfile_entry_bytes(sf, 1);
}

TEST(free_reuse_and_fragmentation) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct payloads p;
        const uint32_t bs = block_size(dir), spb = bs / ZSW_SWAPFILE_SECTOR;
        const size_t cap = 256, n = cap + 2 * BATCH;
        int errors[BATCH];
        size_t filled = 0;
        uint64_t requests;

        /* Entries of one block each, so the layout is known exactly. */
        payloads_make(&p, n, 2);
        for (size_t i = 0; i < n; i++)
                p.lens[i] = MIN(p.lens[i], bs);
        p.cut = true;
        ASSERT_OK(zsw_swapfile_open(dir, cap * bs, NULL, &sf));

        /* Fill the whole cap; one more entry does not fit. */
        for (; filled < cap; filled += BATCH)
                ASSERT_EQ(write_range(sf, &p, filled, BATCH, NULL), BATCH);
        ASSERT_EQ(write_range(sf, &p, filled, 1, errors), 0);
        ASSERT_EQ(errors[0], -ENOSPC);
        ASSERT_EQ(p.slots[filled], ZSW_SWAPFILE_NO_SLOT);

        /* Free every other block: 128 holes, no two adjacent. */
        for (size_t i = 0; i < cap; i += 2)
                ASSERT_OK(zsw_swapfile_free(sf, p.slots[i], p.lens[i]));
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.disk_bytes_in_use, cap / 2 * bs);
        requests = st.write_requests;

        /* A batch of 32 cannot have one run: it scatters into the holes. */
        ASSERT_EQ(write_range(sf, &p, cap, BATCH, errors), BATCH);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.write_requests - requests, BATCH);
        for (size_t i = cap; i < cap + BATCH; i++) {
                ASSERT_EQ(errors[i - cap], 0);
                ASSERT_EQ(p.slots[i] % (2 * spb), 0);
        }
        for (size_t i = 1; i < cap + BATCH; i += i < cap ? 2 : 1)
                read_check(sf, &p, i);

        /* Two-block entries fit nowhere: refused, nothing held. */
        if (2 * bs - 24 <= ZSW_SWAPFILE_ENTRY_MAX) {
                static uint8_t big[ZSW_SWAPFILE_ENTRY_MAX];
                const void *pl[2] = { big, big };
                const uint32_t lens[2] = { bs + 1, 2 * bs - 24 };
                uint64_t slots[2];
                uint64_t in_use = st.disk_bytes_in_use;

                ASSERT_EQ(zsw_swapfile_write_batch(sf, pl, lens, 2, slots, errors), 0);
                ASSERT_EQ(errors[0], -ENOSPC);
                ASSERT_EQ(errors[1], -ENOSPC);
                ASSERT_EQ(slots[1], ZSW_SWAPFILE_NO_SLOT);
                zsw_swapfile_get_stats(sf, &st);
                ASSERT_EQ(st.disk_bytes_in_use, in_use);
                ASSERT_EQ(st.err_nospace, 3);
        }

        /* Freeing a neighbour pair makes room for a run again. */
        ASSERT_OK(zsw_swapfile_free(sf, p.slots[1], p.lens[1]));
        ASSERT_OK(zsw_swapfile_free(sf, p.slots[cap], p.lens[cap]));
        requests = st.write_requests;
        ASSERT_EQ(write_range(sf, &p, cap + BATCH, 2, NULL), 2);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.write_requests - requests, 1);
        ASSERT_EQ(p.slots[cap + BATCH + 1], p.slots[cap + BATCH] + spb);
        read_check(sf, &p, cap + BATCH);
        read_check(sf, &p, cap + BATCH + 1);
        /* A hole the scatter did not reach is free already: refused. */
        ASSERT_ERRNO(zsw_swapfile_free(sf, p.slots[200], p.lens[200]), EINVAL);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.disk_bytes_in_use, (cap / 2 + BATCH) * bs);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

TEST(disk_full_on_small_tmpfs) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct payloads p;
        const size_t n = 32 * BATCH;
        size_t written = 0, failed = 0;
        unsigned warnings = 0;
        struct zsw_log log = { .fn = count_log, .userdata = &warnings, .max_priority = LOG_DEBUG };

        test_private_mounts();
        if (mount("tmpfs", dir, "tmpfs", 0, "size=256k,mode=0700") < 0)
                TEST_SKIP("cannot mount a tmpfs: %m");
        payloads_make(&p, n, 3);
        /* The cap is far above what the filesystem has. */
        ASSERT_OK(zsw_swapfile_open(dir, 64 << 20, &log, &sf));
        for (size_t b = 0; b < n; b += BATCH) {
                int errors[BATCH];
                int r = write_range(sf, &p, b, BATCH, errors);

                ASSERT_GE(r, 0);
                for (size_t i = b; i < b + BATCH; i++)
                        if (errors[i - b] == 0) {
                                ASSERT_NE(p.slots[i], ZSW_SWAPFILE_NO_SLOT);
                                written++;
                        } else {
                                ASSERT_EQ(errors[i - b], -ENOSPC);
                                ASSERT_EQ(p.slots[i], ZSW_SWAPFILE_NO_SLOT);
                                failed++;
                        }
        }
        ASSERT_GT(written, 0);
        ASSERT_GT(failed, 0);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.pages_written, written);
        ASSERT_EQ(st.err_nospace, failed);
        ASSERT_EQ(st.err_write_io, 0);
        ASSERT_LE(st.file_bytes_reserved, 256 << 10);
        /* One burst of failing batches, one warning. */
        ASSERT_EQ(warnings, 1);
        for (size_t i = 0; i < n; i++)
                if (p.slots[i] != ZSW_SWAPFILE_NO_SLOT)
                        read_check(sf, &p, i);

        /* Space given back is used again: the same payloads fit exactly
         * in the run they left (any others may need more blocks than were
         * freed, and the filesystem has none to add). */
        for (size_t i = 0; i < BATCH; i++)
                ASSERT_OK(zsw_swapfile_free(sf, p.slots[i], p.lens[i]));
        ASSERT_EQ(write_range(sf, &p, 0, BATCH, NULL), BATCH);
        for (size_t i = 0; i < BATCH; i++)
                read_check(sf, &p, i);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(umount(dir));
        ASSERT_OK(rmdir(dir));
}

TEST(short_write_resubmitted_then_failed) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct rlimit old, lim;
        struct payloads p;
        int errors[BATCH];
        uint64_t limit;
        size_t ok = 0;

        payloads_make(&p, 2 * BATCH, 4);
        ASSERT_OK(zsw_swapfile_open(dir, 64 << 20, NULL, &sf));
        ASSERT_EQ(write_range(sf, &p, 0, BATCH, NULL), BATCH);

        /* The file size limit falls inside the second batch, on a 4 KiB
         * boundary: the kernel writes up to it (a short write), and the
         * resubmitted rest fails with EFBIG. */
        limit = (p.slots[BATCH - 1] * ZSW_SWAPFILE_SECTOR + 8192) / 4096 * 4096 + 4096;
        ASSERT_OK(getrlimit(RLIMIT_FSIZE, &old));
        lim = (struct rlimit) { .rlim_cur = limit, .rlim_max = old.rlim_max };
        signal(SIGXFSZ, SIG_IGN);
        ASSERT_OK(setrlimit(RLIMIT_FSIZE, &lim));
        write_range(sf, &p, BATCH, BATCH, errors);
        ASSERT_OK(setrlimit(RLIMIT_FSIZE, &old));

        for (size_t i = BATCH; i < 2 * BATCH; i++) {
                bool below = p.slots[i] != ZSW_SWAPFILE_NO_SLOT;

                if (below) {
                        ASSERT_EQ(errors[i - BATCH], 0);
                        ASSERT_LE(p.slots[i] * ZSW_SWAPFILE_SECTOR +
                                          zsw_swapfile_entry_bytes(sf, p.lens[i]),
                                  limit);
                        read_check(sf, &p, i);
                        ok++;
                } else
                        ASSERT_EQ(errors[i - BATCH], -EFBIG);
        }
        ASSERT_GT(ok, 0);
        ASSERT_LT(ok, BATCH);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_GE(st.err_short_write, 1);
        ASSERT_EQ(st.err_write_io, BATCH - ok);
        ASSERT_EQ(st.pages_written, BATCH + ok);
        for (size_t i = 0; i < BATCH; i++)
                read_check(sf, &p, i);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

TEST(short_read_is_an_error) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        char path[PATH_MAX];
        struct payloads p;
        uint8_t buf[PAGE], *bufs[2] = { buf, buf + PAGE / 2 };

        payloads_make(&p, BATCH, 5);
        snprintf(path, sizeof(path), "%s/swap", dir);
        ASSERT_OK(zsw_swapfile_open(path, 64 << 20, NULL, &sf));
        ASSERT_EQ(write_range(sf, &p, 0, BATCH, NULL), BATCH);
        /* Somebody cuts the file behind the first entry's first sector. */
        ASSERT_OK(truncate(path, (off_t) (p.slots[0] * ZSW_SWAPFILE_SECTOR + ZSW_SWAPFILE_SECTOR)));
        ASSERT_ERRNO(zsw_swapfile_read(sf, p.slots[BATCH - 1], p.lens[BATCH - 1], buf), EIO);
        memset(buf, 0xaa, sizeof(buf));
        for (size_t i = 0; i < 2; i++)
                p.lens[i] = MIN(p.lens[i], PAGE / 2);
        p.cut = true;
        ASSERT_ERRNO(zsw_swapfile_read_batch(sf, p.slots, p.lens, 2, (void *const *) bufs), EIO);
        for (size_t i = 0; i < sizeof(buf); i++)
                ASSERT_EQ(buf[i], 0xaa);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.err_short_read, 2);
        ASSERT_EQ(st.err_read_io, 0);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

TEST(io_errors_fail_cleanly) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *fresh = NULL;
        struct zsw_swapfile_stats st, before;
        struct payloads p;
        uint8_t buf[PAGE], *bufs[BATCH];
        int errors[BATCH], fd;

        test_private_mounts();
        if (!test_ext4_on_loop(dir))
                TEST_SKIP("no loop device with ext4 here");
        payloads_make(&p, 3 * BATCH, 6);
        ASSERT_OK(zsw_swapfile_open(dir, 32 << 20, NULL, &sf));
        ASSERT_EQ(write_range(sf, &p, 0, BATCH, NULL), BATCH);
        read_check(sf, &p, 0);
        /* A second one that has reserved nothing yet. */
        ASSERT_OK(zsw_swapfile_open(dir, 32 << 20, NULL, &fresh));

        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        test_ext4_shutdown(fd);
        close(fd);

        zsw_swapfile_get_stats(sf, &before);
        /* Writes: every entry refused with EIO, no sector kept. */
        ASSERT_EQ(write_range(sf, &p, BATCH, BATCH, errors), 0);
        for (size_t i = 0; i < BATCH; i++) {
                ASSERT_EQ(errors[i], -EIO);
                ASSERT_EQ(p.slots[BATCH + i], ZSW_SWAPFILE_NO_SLOT);
        }
        /* Reads: an error, and read_batch leaves the buffers alone. */
        ASSERT_ERRNO(zsw_swapfile_read(sf, p.slots[1], p.lens[1], buf), EIO);
        for (size_t i = 0; i < BATCH; i++) {
                ASSERT_TRUE(bufs[i] = malloc(PAGE));
                memset(bufs[i], 0x5a, PAGE);
        }
        ASSERT_ERRNO(zsw_swapfile_read_batch(sf, p.slots, p.lens, BATCH, (void *const *) bufs),
                     EIO);
        for (size_t i = 0; i < BATCH; i++) {
                for (size_t j = 0; j < PAGE; j++)
                        ASSERT_EQ(bufs[i][j], 0x5a);
                free(bufs[i]);
        }
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.err_write_io - before.err_write_io, BATCH);
        ASSERT_EQ(st.err_read_io - before.err_read_io, 2);
        ASSERT_EQ(st.pages_written, before.pages_written);
        ASSERT_EQ(st.disk_bytes_in_use, before.disk_bytes_in_use);

        /* fallocate fails with EIO too: an I/O error, not "disk full". */
        ASSERT_EQ(write_range(fresh, &p, 2 * BATCH, BATCH, errors), 0);
        for (size_t i = 0; i < BATCH; i++)
                ASSERT_EQ(errors[i], -EIO);
        zsw_swapfile_get_stats(fresh, &st);
        ASSERT_EQ(st.err_write_io, BATCH);
        ASSERT_EQ(st.err_nospace, 0);
        ASSERT_EQ(st.file_bytes_reserved, 0);
        fresh = zsw_swapfile_close(fresh);

        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(umount(dir));
        ASSERT_OK(rmdir(dir));
}

/* One writer and two fault threads at once. Readers only touch entries
 * whose batch the writer has published: one reads even entries at random,
 * the other loads odd entries in order and frees them (the allocator is then
 * shared by the writer and a freeing thread). */
struct concurrent {
        struct zsw_swapfile *sf;
        struct payloads *p;
        size_t published; /* entries written, release/acquire */
        bool done;
        uint64_t reads;
};

static size_t wait_published(struct concurrent *c, size_t min) {
        size_t n;

        while ((n = __atomic_load_n(&c->published, __ATOMIC_ACQUIRE)) < min)
                sched_yield();
        return n;
}

static void *random_reader(void *arg) {
        struct concurrent *c = arg;
        uint64_t rng = 12345, reads = 0;

        while (!__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) || reads < 1000) {
                size_t n = wait_published(c, BATCH);

                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                read_check(c->sf, c->p, (rng >> 33) % n & ~(size_t) 1);
                reads++;
        }
        __atomic_fetch_add(&c->reads, reads, __ATOMIC_RELAXED);
        return NULL;
}

static void *loading_reader(void *arg) {
        struct concurrent *c = arg;
        uint64_t reads = 0;

        for (size_t i = 1; i < c->p->n; i += 2) {
                wait_published(c, i + 1);
                read_check(c->sf, c->p, i);
                ASSERT_OK(zsw_swapfile_free(c->sf, c->p->slots[i], c->p->lens[i]));
                reads++;
        }
        __atomic_fetch_add(&c->reads, reads, __ATOMIC_RELAXED);
        return NULL;
}

TEST(concurrent_writer_and_readers) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        struct payloads p;
        struct concurrent c = { .p = &p };
        pthread_t readers[2];
        const size_t n = 64 * BATCH;

        payloads_make(&p, n, 7);
        ASSERT_OK(zsw_swapfile_open(dir, 64 << 20, NULL, &sf));
        c.sf = sf;
        ASSERT_EQ(pthread_create(&readers[0], NULL, random_reader, &c), 0);
        ASSERT_EQ(pthread_create(&readers[1], NULL, loading_reader, &c), 0);
        for (size_t b = 0; b < n; b += BATCH) {
                ASSERT_EQ(write_range(sf, &p, b, BATCH, NULL), BATCH);
                __atomic_store_n(&c.published, b + BATCH, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&c.done, true, __ATOMIC_RELEASE);
        for (size_t i = 0; i < ARRAY_SIZE(readers); i++)
                ASSERT_EQ(pthread_join(readers[i], NULL), 0);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.reads, c.reads);
        ASSERT_EQ(st.pages_written, n);
        for (size_t i = 0; i < n; i += 2)
                ASSERT_OK(zsw_swapfile_free(sf, p.slots[i], p.lens[i]));
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.disk_bytes_in_use, 0);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(rmdir(dir));
}

TEST(no_direct_io_is_refused_cleanly) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        struct zsw_swapfile *sf = NULL;
        char path[PATH_MAX];

        test_private_mounts();
        /* ramfs has no O_DIRECT: entries would only move from memory to memory. */
        if (mount("ramfs", dir, "ramfs", 0, "mode=0700") < 0)
                TEST_SKIP("cannot mount a ramfs: %m");
        ASSERT_ERRNO(zsw_swapfile_open(dir, 1 << 20, NULL, &sf), EOPNOTSUPP);
        snprintf(path, sizeof(path), "%s/swap", dir);
        ASSERT_ERRNO(zsw_swapfile_open(path, 1 << 20, NULL, &sf), EOPNOTSUPP);
        ASSERT_TRUE(sf == NULL);
        ASSERT_EQ(dir_entries(dir), 0);
        ASSERT_OK(umount(dir));
        ASSERT_OK(rmdir(dir));
}

/* With mem_limit reached, zram fails every write that needs new memory with
 * BLK_STS_IOERR: a real device error below ext4, per bio. Runs in a child
 * (own mount namespace) so that the parent removes the device even when the
 * test aborts. */
static void zram_eio_body(int id, const char *dir) {
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        struct zsw_swapfile_stats st;
        char path[128], value[64];
        uint64_t in_use = 0;
        size_t written = 0, failed = 0;
        struct payloads p;
        FILE *f;

        test_private_mounts();
        test_zram_ext4(id, "64M", dir);

        payloads_make(&p, 16 * BATCH, 8);
        ASSERT_OK(zsw_swapfile_open(dir, 32 << 20, NULL, &sf));
        /* zram is a 4Kn device: entries cannot share its blocks. */
        ASSERT_EQ(zsw_swapfile_entry_bytes(sf, 1), 4096);
        for (size_t b = 0; b < 4 * BATCH; b += BATCH)
                ASSERT_EQ(write_range(sf, &p, b, BATCH, NULL), BATCH);

        /* No memory for anything new. */
        snprintf(path, sizeof(path), "/sys/block/zram%d/mm_stat", id);
        f = fopen(path, "re");
        ASSERT_TRUE(f && fscanf(f, "%*s %*s %63s", value) == 1);
        fclose(f);
        test_zram_limit(id, value);

        for (size_t b = 4 * BATCH; b < 16 * BATCH; b += BATCH) {
                int errors[BATCH];

                ASSERT_GE(write_range(sf, &p, b, BATCH, errors), 0);
                for (size_t i = b; i < b + BATCH; i++)
                        if (errors[i - b] == 0)
                                written++;
                        else {
                                ASSERT_EQ(errors[i - b], -EIO);
                                ASSERT_EQ(p.slots[i], ZSW_SWAPFILE_NO_SLOT);
                                failed++;
                        }
        }
        ASSERT_GT(failed, 0);
        zsw_swapfile_get_stats(sf, &st);
        ASSERT_EQ(st.err_write_io, failed);
        ASSERT_EQ(st.pages_written, 4 * BATCH + written);
        /* What was reported written is on the disk, byte for byte. */
        for (size_t i = 0; i < p.n; i++)
                if (p.slots[i] != ZSW_SWAPFILE_NO_SLOT) {
                        read_check(sf, &p, i);
                        in_use += zsw_swapfile_entry_bytes(sf, p.lens[i]);
                }
        ASSERT_EQ(st.disk_bytes_in_use, in_use);
        payloads_done(&p);
        sf = zsw_swapfile_close(sf);
        ASSERT_OK(umount(dir));
}

TEST(device_write_errors_lose_nothing) {
        _cleanup_free_ char *dir = test_make_dir("test-swapfile");
        int id = test_zram_add(), status;

        status = test_in_child(zram_eio_body, id, dir);
        test_zram_remove(id);
        ASSERT_OK(rmdir(dir));
        ASSERT_EQ(status, EXIT_SUCCESS);
}
