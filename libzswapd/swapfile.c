/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Writeback I/O: the backing file, its block allocator and the batched
 * io_uring writes (see swapfile.h for the contract).
 *
 * The allocation block is the smallest direct-I/O unit of the file (statx
 * STATX_DIOALIGN): 512 bytes on most disks, 4 KiB on 4Kn devices such as
 * zram, where entries then cannot share blocks (no read-modify-write: a
 * failed write must never take a neighbour entry with it). Slots in the API
 * count 512-byte sectors either way.
 *
 * Allocation is a bitmap of blocks with a next-fit cursor: fresh
 * batches land right after the previous one, so the file fills front to back
 * and a batch almost always finds one run for all of its entries. Only when
 * no run fits anywhere does a batch fall back to a run per group of entries.
 * The bitmap covers the whole cap; the part searched is the reserved prefix,
 * grown by fallocate in chunks when a batch does not fit in it.
 *
 * Writes use O_DIRECT, whose buffers and lengths must be block aligned
 * (512 bytes here on ext4/virtio) while pool payloads sit at arbitrary addresses
 * with arbitrary lengths. So a batch is copied into one registered, aligned
 * staging buffer laid out exactly like its disk runs (zero padding included),
 * and each run is one IORING_OP_WRITE_FIXED. The copy (<= 128 KiB) costs a
 * few microseconds against the disk; in exchange the payload memory is free
 * as soon as the copy is done, and no page is pinned per request.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "lockdep.h"
#include "swapfile.h"

#define BITS_PER_WORD 64u
/* Reservation grows by this much at a time: large enough that fallocate is
 * rare, small enough that an idle daemon does not hold much disk. */
#define RESERVE_CHUNK (8ull << 20)
#define STAGING_BYTES (ZSW_SWAPFILE_BATCH_MAX * ZSW_SWAPFILE_ENTRY_MAX)
#define STAGING_ALIGN ZSW_PAGE_SIZE
#define ZERO_BYTES (256u << 10)

struct zsw_swapfile {
        int fd;
        char *unlink_path; /* named file to remove on close; NULL for O_TMPFILE */
        const struct zsw_log *log;

        uint32_t block;         /* allocation and I/O unit, bytes */
        uint32_t block_sectors; /* 512-byte slot units per block */

        pthread_mutex_t alloc_lock; /* bitmap, cursor, reservation */
        uint64_t *bitmap;           /* one bit per block of the cap, 1 = in use */
        uint64_t max_blocks;
        uint64_t reserved_blocks; /* prefix of the file reserved with fallocate */
        uint64_t cursor;          /* next-fit start */
        uint64_t used_blocks;
        uint64_t grow_failed; /* least growth refused in this batch: no retry per entry */
        int grow_err;         /* why: -ENOSPC (cap or disk), or fallocate's error */

        pthread_mutex_t write_lock; /* one write round at a time */
        struct io_uring wring;
        uint8_t *wstaging;
        bool failing;          /* a write failed since the last success: log once */
        bool no_merge;         /* one request per entry, for comparisons */
        bool wbroken, rbroken; /* see ring_broken() */
        uint8_t *zeros;        /* ZERO_BYTES of zeros for new reservations */

        pthread_mutex_t read_lock; /* read_batch's ring and staging */
        struct io_uring rring;
        uint8_t *rstaging;

        struct zsw_swapfile_stats stats; /* updated with atomics */
};

#define STAT_ADD(sf, field, v) __atomic_fetch_add(&(sf)->stats.field, (v), __ATOMIC_RELAXED)

static uint32_t blocks_of(const struct zsw_swapfile *sf, uint32_t len) {
        return DIV_ROUND_UP(len, sf->block);
}

static uint32_t entry_bytes(const struct zsw_swapfile *sf, uint32_t len) {
        return blocks_of(sf, len) * sf->block;
}

uint64_t zsw_swapfile_entry_bytes(const struct zsw_swapfile *sf, uint32_t len) {
        return entry_bytes(sf, len);
}

/* Slots count 512-byte sectors; blocks may be larger. */
static uint64_t slot_of(const struct zsw_swapfile *sf, uint64_t block) {
        return block == ZSW_SWAPFILE_NO_SLOT ? block : block * sf->block_sectors;
}

static int block_of(const struct zsw_swapfile *sf, uint64_t slot, uint64_t *ret) {
        if (slot % sf->block_sectors != 0)
                return -EINVAL;
        *ret = slot / sf->block_sectors;
        return 0;
}

/* ---- ring plumbing ------------------------------------------------------ */

/* A ring whose submission or wait failed for good may still hold SQEs that
 * the next io_uring_enter would send: stale writes from a staging buffer
 * reused meanwhile. Such a ring is never entered again. */
static bool *ring_broken(struct zsw_swapfile *sf, struct io_uring *ring) {
        return ring == &sf->wring ? &sf->wbroken : &sf->rbroken;
}

static int ring_fail(struct zsw_swapfile *sf, struct io_uring *ring, int r) {
        *ring_broken(sf, ring) = true;
        return zsw_log_errno(sf->log, LOG_ERR, r, "Swapfile %s io_uring failed, disabling it: %m",
                             ring == &sf->wring ? "write" : "read");
}

/* Submits everything queued. The kernel may consume fewer SQEs than queued
 * (short of memory for a moment); the rest must go too, or their
 * completions would be waited for forever. */
static int ring_submit(struct zsw_swapfile *sf, struct io_uring *ring) {
        unsigned tries = 0;

        while (io_uring_sq_ready(ring) > 0) {
                int r = io_uring_submit(ring);

                if (r > 0)
                        continue;
                if ((r == 0 || r == -EINTR || r == -EAGAIN || r == -EBUSY) && tries++ < 1000) {
                        sched_yield();
                        continue;
                }
                return ring_fail(sf, ring, r < 0 ? r : -EAGAIN);
        }
        return 0;
}

static int ring_wait(struct zsw_swapfile *sf, struct io_uring *ring, struct io_uring_cqe **ret) {
        int r;

        do
                r = io_uring_wait_cqe(ring, ret);
        while (r == -EINTR);
        return r < 0 ? ring_fail(sf, ring, r) : 0;
}

/* Reaps n completions; returns the first error among them, or 0. */
static int ring_reap(struct zsw_swapfile *sf, struct io_uring *ring, unsigned n) {
        int err = 0;

        for (unsigned i = 0; i < n; i++) {
                struct io_uring_cqe *cqe;
                int r = ring_wait(sf, ring, &cqe);

                if (r < 0)
                        return r;
                if (cqe->res < 0 && err == 0)
                        err = cqe->res;
                io_uring_cqe_seen(ring, cqe);
        }
        return err;
}

/* ---- block bitmap (callers hold alloc_lock) ---------------------------- */

static bool bit_test(const uint64_t *map, uint64_t i) {
        return map[i / BITS_PER_WORD] & (1ull << (i % BITS_PER_WORD));
}

static void bits_assign(uint64_t *map, uint64_t start, uint64_t count, bool set) {
        for (uint64_t i = start; i < start + count; i++) {
                uint64_t mask = 1ull << (i % BITS_PER_WORD);

                if (set)
                        map[i / BITS_PER_WORD] |= mask;
                else
                        map[i / BITS_PER_WORD] &= ~mask;
        }
}

/* First block in [from, end) whose bit equals want, or end. Skips whole
 * words, so scanning a full or an empty region costs a word per 64 blocks. */
static uint64_t bit_find(const uint64_t *map, uint64_t from, uint64_t end, bool want) {
        uint64_t i = from;

        while (i < end) {
                uint64_t w = map[i / BITS_PER_WORD];

                if (!want)
                        w = ~w;
                w &= ~0ull << (i % BITS_PER_WORD);
                if (w)
                        return MIN(end, i / BITS_PER_WORD * BITS_PER_WORD + __builtin_ctzll(w));
                i = (i / BITS_PER_WORD + 1) * BITS_PER_WORD;
        }
        return end;
}

/* First free run of need blocks inside [from, end), or UINT64_MAX. */
static uint64_t run_find(const uint64_t *map, uint64_t from, uint64_t end, uint64_t need) {
        while (from + need <= end) {
                uint64_t start = bit_find(map, from, end, false);

                if (start + need > end)
                        break;
                uint64_t stop = bit_find(map, start, start + need, true);
                if (stop == start + need)
                        return start;
                from = stop;
        }
        return UINT64_MAX;
}

/* Zeroes freshly reserved space. fallocate leaves unwritten extents: each
 * direct write into one must convert it (a journalled metadata update), and
 * ext4 serialises sub-block direct writes that are not plain overwrites, which
 * entries at 512-byte granularity always are. Zeros written once make every
 * later entry write a plain overwrite (measured: 2-3x the write rate, and far
 * lower read tails). Best effort: the space is usable either way. */
static int reserve_zero(struct zsw_swapfile *sf, uint64_t start, uint64_t count) {
        uint64_t off = start * sf->block, end = (start + count) * sf->block;

        if (sf->wbroken)
                return -EIO;
        while (off < end) {
                unsigned n = 0;
                int r;

                for (; off < end && n < ZSW_SWAPFILE_BATCH_MAX; n++) {
                        struct io_uring_sqe *sqe = io_uring_get_sqe(&sf->wring);
                        uint32_t len = (uint32_t) MIN((uint64_t) ZERO_BYTES, end - off);

                        io_uring_prep_write(sqe, sf->fd, sf->zeros, len, off);
                        off += len;
                }
                r = ring_submit(sf, &sf->wring);
                if (r < 0)
                        return r;
                r = ring_reap(sf, &sf->wring, n);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Grows the reservation by at least need blocks: a whole chunk if the disk
 * has it, else just what is needed. Only the writer calls this, without
 * alloc_lock: the new blocks are invisible to everybody else until
 * reserved_blocks moves. */
static int reserve_more(struct zsw_swapfile *sf, uint64_t need) {
        uint64_t start = sf->reserved_blocks;
        uint64_t room = sf->max_blocks - start;
        uint64_t chunk = MIN(room, RESERVE_CHUNK / sf->block);
        uint64_t per_page = ZSW_PAGE_SIZE / sf->block;
        uint64_t exact = DIV_ROUND_UP(need, per_page) * per_page; /* whole pages */
        uint64_t grow = MAX(chunk, exact);
        int r;

        if (need > room)
                return -ENOSPC;
        while (fallocate(sf->fd, 0, (off_t) (start * sf->block), (off_t) (grow * sf->block)) < 0) {
                if (errno != ENOSPC || grow == exact)
                        return -errno;
                grow = exact;
        }
        r = reserve_zero(sf, start, grow);
        if (r < 0)
                zsw_log_errno(sf->log, LOG_DEBUG, r, "Failed to zero reserved space, ignoring: %m");
        zsw_mutex_lock(&sf->alloc_lock, ZSW_LOCK_SWAPFILE_ALLOC);
        sf->reserved_blocks += grow;
        zsw_mutex_unlock(&sf->alloc_lock);
        STAT_ADD(sf, file_bytes_reserved, grow * sf->block);
        return 0;
}

static void run_take(struct zsw_swapfile *sf, uint64_t start, uint64_t count) {
        bits_assign(sf->bitmap, start, count, true);
        sf->used_blocks += count;
        sf->cursor = start + count;
}

/* Finds and takes one free run of need blocks, next-fit. */
static uint64_t run_find_take(struct zsw_swapfile *sf, uint64_t need) {
        uint64_t s = run_find(sf->bitmap, sf->cursor, sf->reserved_blocks, need);

        if (s == UINT64_MAX)
                s = run_find(sf->bitmap, 0, MIN(sf->cursor + need, sf->reserved_blocks), need);
        if (s != UINT64_MAX)
                run_take(sf, s, need);
        return s;
}

/* One run of need blocks, growing the reservation when none is free.
 * Called by the writer with alloc_lock held, which it drops while the file
 * grows so that fault threads freeing entries do not wait for the disk. */
static uint64_t run_alloc(struct zsw_swapfile *sf, uint64_t need) {
        uint64_t s = run_find_take(sf, need), tail = sf->reserved_blocks, more;
        int r;

        if (s != UINT64_MAX)
                return s;
        /* A free tail of the reservation joins the new space. */
        while (tail > 0 && sf->reserved_blocks - tail < need && !bit_test(sf->bitmap, tail - 1))
                tail--;
        more = need - (sf->reserved_blocks - tail);
        if (more >= sf->grow_failed)
                return UINT64_MAX;
        zsw_mutex_unlock(&sf->alloc_lock);
        r = reserve_more(sf, more);
        zsw_mutex_lock(&sf->alloc_lock, ZSW_LOCK_SWAPFILE_ALLOC);
        if (r < 0) {
                sf->grow_failed = more;
                sf->grow_err = r;
                return UINT64_MAX;
        }
        return run_find_take(sf, need);
}

/* Slots for a batch: one run for all if possible, else greedy runs that
 * extend the previous entry's run when its next blocks are free. Entries
 * that fit nowhere get ZSW_SWAPFILE_NO_SLOT. Returns the entries placed. */
static size_t batch_alloc(struct zsw_swapfile *sf, const uint32_t *lens, size_t n,
                          uint64_t *slots) {
        uint64_t total = 0;
        size_t placed = 0;

        for (size_t i = 0; i < n; i++)
                total += blocks_of(sf, lens[i]);

        zsw_mutex_lock(&sf->alloc_lock, ZSW_LOCK_SWAPFILE_ALLOC);
        sf->grow_failed = UINT64_MAX;
        sf->grow_err = -ENOSPC;
        uint64_t s = run_alloc(sf, total);
        if (s != UINT64_MAX) {
                for (size_t i = 0; i < n; i++) {
                        slots[i] = s;
                        s += blocks_of(sf, lens[i]);
                }
                placed = n;
        } else
                for (size_t i = 0; i < n; i++) {
                        uint64_t need = blocks_of(sf, lens[i]), next = sf->cursor;

                        if (next + need <= sf->reserved_blocks &&
                            bit_find(sf->bitmap, next, next + need, true) == next + need) {
                                run_take(sf, next, need);
                                slots[i] = next;
                        } else
                                slots[i] = run_alloc(sf, need);
                        placed += slots[i] != ZSW_SWAPFILE_NO_SLOT;
                }
        __atomic_store_n(&sf->stats.disk_bytes_in_use, sf->used_blocks * sf->block,
                         __ATOMIC_RELAXED);
        zsw_mutex_unlock(&sf->alloc_lock);
        return placed;
}

static int blocks_free(struct zsw_swapfile *sf, uint64_t block, uint32_t len) {
        uint64_t count = blocks_of(sf, len);
        int r = 0;

        zsw_mutex_lock(&sf->alloc_lock, ZSW_LOCK_SWAPFILE_ALLOC);
        if (block >= sf->reserved_blocks || count > sf->reserved_blocks - block ||
            bit_find(sf->bitmap, block, block + count, false) != block + count)
                r = -EINVAL;
        else {
                bits_assign(sf->bitmap, block, count, false);
                sf->used_blocks -= count;
                __atomic_store_n(&sf->stats.disk_bytes_in_use, sf->used_blocks * sf->block,
                                 __ATOMIC_RELAXED);
        }
        zsw_mutex_unlock(&sf->alloc_lock);
        return r;
}

int zsw_swapfile_free(struct zsw_swapfile *sf, uint64_t slot, uint32_t len) {
        uint64_t block;

        if (!sf || len == 0 || len > ZSW_SWAPFILE_ENTRY_MAX || block_of(sf, slot, &block) < 0)
                return -EINVAL;
        return blocks_free(sf, block, len);
}

/* ---- open / close ------------------------------------------------------- */

/* O_DIRECT is required: through the page cache, a written-back entry would
 * stay in memory until the kernel flushed it, and a write error would
 * surface later at fsync, detached from the entries it lost. */
static int file_open(const char *path, char **ret_unlink) {
        struct stat st;
        int flags = O_RDWR | O_CLOEXEC | O_DIRECT, fd;
        bool tmp = stat(path, &st) >= 0 && S_ISDIR(st.st_mode);

        if (tmp)
                /* O_EXCL: the unnamed file can never be linked into the tree. */
                flags |= O_TMPFILE | O_EXCL;
        else
                flags |= O_CREAT | O_EXCL | O_NOFOLLOW;

        fd = open(path, flags, 0600);
        if (fd < 0 && errno == EINVAL) {
                /* No O_DIRECT here. The kernel refuses it only after creating
                 * the file, which O_EXCL says is ours to remove. */
                if (!tmp)
                        unlink(path);
                return -EOPNOTSUPP;
        }
        if (fd < 0)
                return -errno;
        if (!tmp) {
                *ret_unlink = strdup(path);
                if (!*ret_unlink) {
                        unlink(path);
                        close(fd);
                        return -ENOMEM;
                }
        }
        return fd;
}

/* The direct-I/O unit of the file: offsets and lengths must be multiples
 * of it. Filesystems that do not report one (tmpfs) take any 512 multiple. */
static int dio_block(int fd) {
        struct statx stx;
        uint32_t block = ZSW_SWAPFILE_SECTOR;

        if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) < 0)
                return -errno;
        if ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > block)
                block = stx.stx_dio_offset_align;
        /* An entry must fit one staging slot, and blocks are powers of two. */
        if (block > ZSW_SWAPFILE_ENTRY_MAX || (block & (block - 1)) != 0 ||
            ((stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_mem_align > STAGING_ALIGN))
                return -EOPNOTSUPP;
        return (int) block;
}

static int ring_setup(struct io_uring *ring, unsigned entries, void *buf, size_t size) {
        struct iovec iov = { .iov_base = buf, .iov_len = size };
        int r;

        /* COOP_TASKRUN: completions are only ever reaped by the submitter,
         * which waits for them anyway; no need for an IPI to run them. */
        r = io_uring_queue_init(entries, ring, IORING_SETUP_COOP_TASKRUN);
        if (r == -EINVAL)
                r = io_uring_queue_init(entries, ring, 0);
        if (r < 0)
                return r;
        r = io_uring_register_buffers(ring, &iov, 1);
        if (r < 0) {
                io_uring_queue_exit(ring);
                return r;
        }
        return 0;
}

struct zsw_swapfile *zsw_swapfile_close(struct zsw_swapfile *sf) {
        if (!sf)
                return NULL;
        if (sf->wstaging)
                io_uring_queue_exit(&sf->wring);
        if (sf->rstaging)
                io_uring_queue_exit(&sf->rring);
        safe_close(sf->fd);
        if (sf->unlink_path)
                unlink(sf->unlink_path);
        free(sf->unlink_path);
        free(sf->wstaging);
        free(sf->rstaging);
        free(sf->zeros);
        free(sf->bitmap);
        pthread_mutex_destroy(&sf->alloc_lock);
        pthread_mutex_destroy(&sf->write_lock);
        pthread_mutex_destroy(&sf->read_lock);
        free(sf);
        return NULL;
}

int zsw_swapfile_open(const char *path, uint64_t max_bytes, const struct zsw_log *log,
                      struct zsw_swapfile **ret) {
        _cleanup_(zsw_swapfile_closep) struct zsw_swapfile *sf = NULL;
        int r;

        if (!path || !ret || max_bytes < ZSW_PAGE_SIZE)
                return -EINVAL;
        sf = calloc(1, sizeof(*sf));
        if (!sf)
                return -ENOMEM;
        sf->fd = -EBADF;
        sf->log = log;
        pthread_mutex_init(&sf->alloc_lock, NULL);
        pthread_mutex_init(&sf->write_lock, NULL);
        pthread_mutex_init(&sf->read_lock, NULL);

        sf->fd = file_open(path, &sf->unlink_path);
        if (sf->fd < 0)
                return zsw_log_errno(log, LOG_ERR, sf->fd, "Failed to create swapfile in %s: %m",
                                     path);
        r = dio_block(sf->fd);
        if (r < 0)
                return zsw_log_errno(log, LOG_ERR, r, "Unsupported direct I/O alignment in %s: %m",
                                     path);
        sf->block = (uint32_t) r;
        sf->block_sectors = sf->block / ZSW_SWAPFILE_SECTOR;

        sf->max_blocks = max_bytes / ZSW_PAGE_SIZE * (ZSW_PAGE_SIZE / sf->block);
        sf->stats.file_bytes_max = sf->max_blocks * sf->block;
        sf->bitmap = calloc(DIV_ROUND_UP(sf->max_blocks, BITS_PER_WORD), sizeof(uint64_t));
        if (!sf->bitmap)
                return -ENOMEM;

        if (posix_memalign((void **) &sf->wstaging, STAGING_ALIGN, STAGING_BYTES) != 0 ||
            posix_memalign((void **) &sf->rstaging, STAGING_ALIGN, STAGING_BYTES) != 0 ||
            posix_memalign((void **) &sf->zeros, STAGING_ALIGN, ZERO_BYTES) != 0)
                return -ENOMEM;
        memset(sf->zeros, 0, ZERO_BYTES);
        r = ring_setup(&sf->wring, 2 * ZSW_SWAPFILE_BATCH_MAX, sf->wstaging, STAGING_BYTES);
        if (r < 0) {
                free(TAKE_PTR(sf->wstaging));
                return zsw_log_errno(log, LOG_ERR, r, "Failed to set up the write io_uring: %m");
        }
        r = ring_setup(&sf->rring, ZSW_SWAPFILE_BATCH_MAX, sf->rstaging, STAGING_BYTES);
        if (r < 0) {
                free(TAKE_PTR(sf->rstaging));
                return zsw_log_errno(log, LOG_ERR, r, "Failed to set up the read io_uring: %m");
        }
        zsw_log(log, LOG_DEBUG, "Swapfile in %s: cap %" PRIu64 " bytes", path,
                sf->stats.file_bytes_max);
        *ret = TAKE_PTR(sf);
        return 0;
}

void zsw_swapfile_set_merge(struct zsw_swapfile *sf, bool merge) {
        zsw_mutex_lock(&sf->write_lock, ZSW_LOCK_SWAPFILE_WRITE);
        sf->no_merge = !merge;
        zsw_mutex_unlock(&sf->write_lock);
}

int zsw_swapfile_drop_cache(struct zsw_swapfile *sf) {
        int r;

        if (fdatasync(sf->fd) < 0)
                return -errno;
        r = posix_fadvise(sf->fd, 0, 0, POSIX_FADV_DONTNEED);
        return -r;
}

void zsw_swapfile_get_stats(struct zsw_swapfile *sf, struct zsw_swapfile_stats *ret) {
        const uint64_t *src = (const uint64_t *) &sf->stats;
        uint64_t *dst = (uint64_t *) ret;

        for (size_t i = 0; i < sizeof(*ret) / sizeof(uint64_t); i++)
                dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/* ---- batched writes ----------------------------------------------------- */

/* One request: a range of consecutive blocks, staged contiguously. */
struct run {
        uint64_t off;    /* file offset */
        uint32_t staged; /* offset in the staging buffer */
        uint32_t len, done;
        int err;
};

static void run_prep(struct zsw_swapfile *sf, struct run *runs, unsigned r, bool write) {
        struct io_uring *ring = write ? &sf->wring : &sf->rring;
        uint8_t *staging = write ? sf->wstaging : sf->rstaging;
        /* The SQ holds twice the most runs in flight: there is always room. */
        struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
        struct run *run = &runs[r];

        if (write)
                io_uring_prep_write_fixed(sqe, sf->fd, staging + run->staged + run->done,
                                          run->len - run->done, run->off + run->done, 0);
        else
                io_uring_prep_read_fixed(sqe, sf->fd, staging + run->staged + run->done,
                                         run->len - run->done, run->off + run->done, 0);
        io_uring_sqe_set_data64(sqe, r);
}

/* Submits every run and reaps every completion. A short transfer is
 * resubmitted for its rest; a run stops at its first error or at a
 * completion that moved nothing (end of file), keeping what was done. */
static int runs_execute(struct zsw_swapfile *sf, struct run *runs, unsigned nruns, bool write) {
        struct io_uring *ring = write ? &sf->wring : &sf->rring;
        unsigned inflight = nruns;
        int r;

        if (*ring_broken(sf, ring))
                return -EIO;
        for (unsigned i = 0; i < nruns; i++)
                run_prep(sf, runs, i, write);
        r = ring_submit(sf, ring);
        if (r < 0)
                return r;
        while (inflight > 0) {
                struct io_uring_cqe *cqe;
                struct run *run;

                r = ring_wait(sf, ring, &cqe);
                if (r < 0)
                        return r;
                run = &runs[io_uring_cqe_get_data64(cqe)];
                if (write)
                        STAT_ADD(sf, write_requests, 1);
                else
                        STAT_ADD(sf, read_requests, 1);
                if (cqe->res < 0)
                        run->err = cqe->res;
                else if (cqe->res == 0) /* no progress: end of file */
                        run->err = write ? -EIO : -ENODATA;
                else
                        run->done += (uint32_t) cqe->res;
                io_uring_cqe_seen(ring, cqe);
                if (run->err == 0 && run->done < run->len) {
                        if (write)
                                STAT_ADD(sf, err_short_write, 1);
                        run_prep(sf, runs, run - runs, write);
                        r = ring_submit(sf, ring);
                        if (r < 0)
                                return r;
                        continue;
                }
                inflight--;
        }
        return 0;
}

/* Copies the placed entries into the staging buffer in disk order and cuts
 * them into runs of consecutive blocks. Returns the number of runs. */
static unsigned stage_batch(struct zsw_swapfile *sf, const void *const *payloads,
                            const uint32_t *lens, size_t n, const uint64_t *slots, struct run *runs,
                            uint8_t *entry_run) {
        unsigned nruns = 0;
        uint32_t staged = 0;

        for (size_t i = 0; i < n; i++) {
                uint32_t bytes = entry_bytes(sf, lens[i]);
                struct run *last = nruns > 0 ? &runs[nruns - 1] : NULL;

                if (slots[i] == ZSW_SWAPFILE_NO_SLOT)
                        continue;
                memcpy(sf->wstaging + staged, payloads[i], lens[i]);
                memset(sf->wstaging + staged + lens[i], 0, bytes - lens[i]);
                if (last && last->off + last->len == slots[i] * sf->block && !sf->no_merge)
                        last->len += bytes;
                else
                        runs[nruns++] = (struct run) { .off = slots[i] * sf->block,
                                                       .staged = staged,
                                                       .len = bytes };
                entry_run[i] = nruns - 1;
                staged += bytes;
        }
        return nruns;
}

/* Settles each entry: written (all of its bytes acknowledged), or failed
 * with its blocks back in the allocator. Returns the entries written. */
static size_t batch_settle(struct zsw_swapfile *sf, const uint32_t *lens, size_t n, uint64_t *slots,
                           int *errors, const struct run *runs, const uint8_t *entry_run,
                           int fatal) {
        size_t ok = 0;

        for (size_t i = 0; i < n; i++) {
                const struct run *run = &runs[entry_run[i]];
                uint64_t bytes = entry_bytes(sf, lens[i]);

                if (slots[i] == ZSW_SWAPFILE_NO_SLOT) {
                        errors[i] = sf->grow_err;
                        if (sf->grow_err == -ENOSPC)
                                STAT_ADD(sf, err_nospace, 1);
                        else
                                STAT_ADD(sf, err_write_io, 1);
                } else if (fatal == 0 && slots[i] * sf->block + bytes <= run->off + run->done) {
                        errors[i] = 0;
                        STAT_ADD(sf, pages_written, 1);
                        STAT_ADD(sf, bytes_written, bytes);
                        STAT_ADD(sf, payload_bytes, lens[i]);
                        ok++;
                } else {
                        errors[i] = fatal < 0 ? fatal : run->err < 0 ? run->err : -EIO;
                        STAT_ADD(sf, err_write_io, 1);
                        (void) blocks_free(sf, slots[i], lens[i]);
                        slots[i] = ZSW_SWAPFILE_NO_SLOT;
                }
        }
        return ok;
}

static void batch_log(struct zsw_swapfile *sf, size_t ok, size_t n, const int *errors) {
        int err = 0;

        for (size_t i = 0; i < n && err == 0; i++)
                err = errors[i];
        if (err == 0) {
                sf->failing = false;
                return;
        }
        /* Once per burst of failures: the shrinker backs off and retries. */
        if (!sf->failing)
                zsw_log_errno(
                        sf->log, LOG_WARNING, err,
                        "Swapfile write failed for %zu of %zu entries, keeping them in memory: %m",
                        n - ok, n);
        sf->failing = true;
}

static size_t write_round(struct zsw_swapfile *sf, const void *const *payloads,
                          const uint32_t *lens, size_t n, uint64_t *slots, int *errors) {
        struct run runs[ZSW_SWAPFILE_BATCH_MAX];
        uint8_t entry_run[ZSW_SWAPFILE_BATCH_MAX] = {};
        unsigned nruns;
        size_t ok;
        int fatal = 0;

        if (batch_alloc(sf, lens, n, slots) == 0) {
                runs[0] = (struct run) {};
                ok = batch_settle(sf, lens, n, slots, errors, runs, entry_run, 0);
                batch_log(sf, ok, n, errors);
                return ok;
        }
        nruns = stage_batch(sf, payloads, lens, n, slots, runs, entry_run);
        fatal = runs_execute(sf, runs, nruns, true);
        ok = batch_settle(sf, lens, n, slots, errors, runs, entry_run, fatal);
        if (ok > 0)
                STAT_ADD(sf, write_batches, 1);
        batch_log(sf, ok, n, errors);
        return ok;
}

int zsw_swapfile_write_batch(struct zsw_swapfile *sf, const void *const *payloads,
                             const uint32_t *lens, size_t n, uint64_t *ret_slots, int *ret_errors) {
        uint64_t slots[ZSW_SWAPFILE_BATCH_MAX];
        int errors[ZSW_SWAPFILE_BATCH_MAX];
        size_t ok = 0;

        if (!sf || (n > 0 && (!payloads || !lens || !ret_slots)))
                return -EINVAL;
        for (size_t i = 0; i < n; i++)
                if (!payloads[i] || lens[i] == 0 || lens[i] > ZSW_SWAPFILE_ENTRY_MAX)
                        return -EINVAL;

        zsw_mutex_lock(&sf->write_lock, ZSW_LOCK_SWAPFILE_WRITE);
        for (size_t done = 0; done < n; done += ZSW_SWAPFILE_BATCH_MAX) {
                size_t m = MIN(n - done, (size_t) ZSW_SWAPFILE_BATCH_MAX);

                ok += write_round(sf, payloads + done, lens + done, m, slots, errors);
                for (size_t i = 0; i < m; i++)
                        ret_slots[done + i] = slot_of(sf, slots[i]);
                if (ret_errors)
                        memcpy(ret_errors + done, errors, m * sizeof(*errors));
        }
        zsw_mutex_unlock(&sf->write_lock);
        return (int) ok;
}

/* ---- reads -------------------------------------------------------------- */

/* Converts a slot to its block, checking that the entry lies in the cap. */
static int read_check(struct zsw_swapfile *sf, uint64_t slot, uint32_t len, uint64_t *ret_block) {
        uint64_t block;

        if (len == 0 || len > ZSW_SWAPFILE_ENTRY_MAX || block_of(sf, slot, &block) < 0 ||
            block >= sf->max_blocks || blocks_of(sf, len) > sf->max_blocks - block)
                return -EINVAL;
        *ret_block = block;
        return 0;
}

static int read_failed(struct zsw_swapfile *sf, int err, uint64_t off) {
        if (err == -ENODATA) {
                STAT_ADD(sf, err_short_read, 1);
                err = -EIO;
        } else
                STAT_ADD(sf, err_read_io, 1);
        return zsw_log_errno(sf->log, LOG_ERR, err,
                             "Swapfile read at offset %" PRIu64 " failed: %m", off);
}

int zsw_swapfile_read(struct zsw_swapfile *sf, uint64_t slot, uint32_t len, void *buf) {
        /* Aligned for O_DIRECT; one entry is at most a page, blocks too. */
        _Alignas(STAGING_ALIGN) uint8_t tmp[ZSW_SWAPFILE_ENTRY_MAX];
        uint32_t bytes, done = 0;
        uint64_t block, off;

        if (!sf || !buf || read_check(sf, slot, len, &block) < 0)
                return -EINVAL;
        off = block * sf->block;
        bytes = entry_bytes(sf, len);
        while (done < bytes) {
                ssize_t r = pread(sf->fd, tmp + done, bytes - done, (off_t) (off + done));

                STAT_ADD(sf, read_requests, 1);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return read_failed(sf, -errno, off);
                if (r == 0) /* end of file: never hand out a partial entry */
                        return read_failed(sf, -ENODATA, off);
                done += (uint32_t) r;
        }
        memcpy(buf, tmp, len);
        STAT_ADD(sf, reads, 1);
        STAT_ADD(sf, read_bytes, bytes);
        return 0;
}

int zsw_swapfile_read_batch(struct zsw_swapfile *sf, const uint64_t *slots, const uint32_t *lens,
                            size_t n, void *const *bufs) {
        struct run runs[ZSW_SWAPFILE_BATCH_MAX];
        uint32_t staged = 0;
        unsigned nruns = 0;
        int r = 0;

        if (!sf || n > ZSW_SWAPFILE_BATCH_MAX || (n > 0 && (!slots || !lens || !bufs)))
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                uint32_t bytes;
                uint64_t block;

                if (!bufs[i] || read_check(sf, slots[i], lens[i], &block) < 0)
                        return -EINVAL;
                bytes = entry_bytes(sf, lens[i]);
                if (nruns > 0 && runs[nruns - 1].off + runs[nruns - 1].len == block * sf->block)
                        runs[nruns - 1].len += bytes;
                else
                        runs[nruns++] = (struct run) { .off = block * sf->block,
                                                       .staged = staged,
                                                       .len = bytes };
                staged += bytes;
        }

        zsw_mutex_lock(&sf->read_lock, ZSW_LOCK_SWAPFILE_READ);
        r = runs_execute(sf, runs, nruns, false);
        for (unsigned i = 0; i < nruns && r == 0; i++)
                if (runs[i].err < 0 || runs[i].done < runs[i].len)
                        r = read_failed(sf, runs[i].err < 0 ? runs[i].err : -ENODATA, runs[i].off);
        if (r == 0) {
                staged = 0;
                for (size_t i = 0; i < n; i++) {
                        memcpy(bufs[i], sf->rstaging + staged, lens[i]);
                        staged += entry_bytes(sf, lens[i]);
                        STAT_ADD(sf, read_bytes, entry_bytes(sf, lens[i]));
                }
                STAT_ADD(sf, reads, n);
        }
        zsw_mutex_unlock(&sf->read_lock);
        return r;
}
