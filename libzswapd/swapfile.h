/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The I/O layer of the writeback tier: one private backing file, a block
 * allocator over it, and batched io_uring writes of compressed entries.
 *
 * The shrinker hands over up to ZSW_SWAPFILE_BATCH_MAX cold compressed
 * payloads at a time; each takes ceil(len / 512) sectors (whole blocks on
 * devices whose direct-I/O unit is larger), the batch takes one
 * run of consecutive sectors whenever the file has one, and every run goes
 * to the disk as a single write request. Entries come back one at a time for
 * a fault (a direct pread, the cheapest path for one small read) or together
 * with the neighbours written in the same batch (one read request).
 *
 * The file is opened with O_DIRECT, so that written-back entries leave
 * memory for real and a write error reaches the entries it belongs to.
 * Space is reserved with fallocate ahead of the writes, so a full disk shows
 * up as ENOSPC at allocation, never as a lost write.
 *
 * Threads: one writer (zsw_swapfile_write_batch, serialised internally) and
 * any number of readers and freers may run concurrently. The caller owns the
 * slot <-> entry mapping and must not free a slot while a read of it may run.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page.h"
#include "util.h"

/* Slots count sectors of this size: an entry lives at byte slot * 512. */
#define ZSW_SWAPFILE_SECTOR 512u
/* Largest payload of one entry: a compressed page never exceeds a page. */
#define ZSW_SWAPFILE_ENTRY_MAX ZSW_PAGE_SIZE
/* Entries per write round; larger batches are written in rounds of this. */
#define ZSW_SWAPFILE_BATCH_MAX 32u
/* The slot of an entry that was not written. */
#define ZSW_SWAPFILE_NO_SLOT UINT64_MAX

struct zsw_swapfile;

struct zsw_swapfile_stats {
        uint64_t write_batches;       /* write_batch rounds that wrote something */
        uint64_t write_requests;      /* write SQEs completed, resubmissions included */
        uint64_t pages_written;       /* entries written and reported as written */
        uint64_t bytes_written;       /* block-padded bytes of those entries */
        uint64_t payload_bytes;       /* their payload bytes */
        uint64_t reads;               /* entries read back successfully */
        uint64_t read_requests;       /* read syscalls or SQEs issued */
        uint64_t read_bytes;          /* block-padded bytes read */
        uint64_t err_nospace;         /* entries refused: no space (file cap or disk) */
        uint64_t err_write_io;        /* entries failed by a write (or fallocate) error */
        uint64_t err_short_write;     /* short write completions (the rest was resubmitted) */
        uint64_t err_read_io;         /* read calls failed by an I/O error */
        uint64_t err_short_read;      /* read calls failed by reaching end of file */
        uint64_t disk_bytes_in_use;   /* allocated blocks, in bytes */
        uint64_t file_bytes_reserved; /* bytes reserved with fallocate */
        uint64_t file_bytes_max;      /* the cap given at open */
};

/* Opens a backing file of at most max_bytes (rounded down to 4 KiB; at least
 * 4 KiB). If path names a directory, the file is an unnamed O_TMPFILE in it,
 * mode 0600, gone when closed (or when the process dies). Otherwise path is
 * created (it must not exist) mode 0600 and unlinked by zsw_swapfile_close;
 * a crash leaves it behind. log may be NULL and must outlive the swapfile.
 * Returns 0, or -EINVAL, -EEXIST, -ENOMEM, -EOPNOTSUPP (no O_DIRECT or no
 * O_TMPFILE on that filesystem), an open(2) or io_uring error. */
int zsw_swapfile_open(const char *path, uint64_t max_bytes, const struct zsw_log *log,
                      struct zsw_swapfile **ret);

/* Closes and removes the file; every slot becomes invalid. Accepts NULL and
 * returns NULL. */
struct zsw_swapfile *zsw_swapfile_close(struct zsw_swapfile *sf);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_swapfile *, zsw_swapfile_close);

/* Disk bytes an entry of len bytes takes in this file: len rounded up to
 * 512 bytes, or to the device's direct-I/O unit when that is larger (4 KiB
 * on 4Kn devices). */
uint64_t zsw_swapfile_entry_bytes(const struct zsw_swapfile *sf, uint32_t len);

/* Writes n entries, payload i of lens[i] bytes (1 .. ZSW_SWAPFILE_ENTRY_MAX).
 * Synchronous: every completion is reaped before it returns and the payloads
 * are copied out before the first request is submitted, so the caller may
 * free or reuse the payload memory as soon as it returns.
 *
 * Per entry, ret_slots[i] gets its slot, or ZSW_SWAPFILE_NO_SLOT when it was
 * not written (no space, I/O error); ret_errors[i] (optional, may be NULL)
 * gets 0 or that negative errno. A failed entry holds no blocks and the
 * caller keeps it in memory: an entry is reported written only after the
 * disk acknowledged all of its bytes.
 *
 * Returns the number of entries written (0 .. n), or -EINVAL for bad
 * arguments, with the outputs untouched. */
int zsw_swapfile_write_batch(struct zsw_swapfile *sf, const void *const *payloads,
                             const uint32_t *lens, size_t n, uint64_t *ret_slots, int *ret_errors);

/* Reads the entry of len bytes at slot into buf (len bytes). A direct pread:
 * safe from any number of threads, concurrently with the writer. Returns 0,
 * or a negative errno (-EIO also for a short read) with buf's content
 * unspecified: never partial data reported as success. */
int zsw_swapfile_read(struct zsw_swapfile *sf, uint64_t slot, uint32_t len, void *buf);

/* Reads n entries (at most ZSW_SWAPFILE_BATCH_MAX) into bufs[i]; entries on
 * consecutive sectors (neighbours written in one batch) come in one read
 * request through io_uring. Concurrent calls share one ring and take turns.
 * All or nothing: returns 0, or a negative errno and no buffer is written. */
int zsw_swapfile_read_batch(struct zsw_swapfile *sf, const uint64_t *slots, const uint32_t *lens,
                            size_t n, void *const *bufs);

/* Returns the blocks of an entry (loaded back or invalidated) to the
 * allocator; any thread. Returns 0, or -EINVAL when any of them is not
 * allocated (nothing is freed then). */
int zsw_swapfile_free(struct zsw_swapfile *sf, uint64_t slot, uint32_t len);

/* For comparisons: with merge off, every entry of a batch is a write request
 * of its own (all of a round still in flight together, as kernel zswap's
 * writeback issues them). On by default. */
void zsw_swapfile_set_merge(struct zsw_swapfile *sf, bool merge);

/* Makes the next reads come from the disk: syncs and drops any cached pages
 * of the file (direct I/O leaves none, unless someone else read it through
 * the page cache). For benchmarks. */
int zsw_swapfile_drop_cache(struct zsw_swapfile *sf);

/* A snapshot of the counters; any thread. Each counter is read atomically,
 * not the set as a whole. */
void zsw_swapfile_get_stats(struct zsw_swapfile *sf, struct zsw_swapfile_stats *ret);
