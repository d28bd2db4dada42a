/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The compressed store: pages of target address spaces, kept compressed
 * in memory, keyed by (owner, page number).
 *
 * Objects:
 * - struct zsw_store: the pool, the entry cache, global counters and
 *   latency histograms, the settings. One per daemon.
 * - struct zsw_owner: one per target address space. Its own index, lock,
 *   counters and limit; an LRU shared with its fork family (see clone).
 * - struct zsw_worker: what one thread needs to store and load: a
 *   compression context per compressor, a decompression context, scratch
 *   room for a batch. One per thread; never shared between threads.
 *
 * Stores are batched the way the kernel's zswap_store_pages() batches them:
 * a batch of up to ZSW_STORE_BATCH_MAX pages goes through named stages,
 * each working on the whole batch (entries, compress, pool, index,
 * account). A failed stage rolls the whole batch back and counts the
 * reason; compression runs outside every lock.
 *
 * Concurrency: every call is thread-safe for distinct workers, except that
 * an owner must not be freed while other calls use it. An owner's lock is
 * held only for index and LRU updates, never while compressing, so a load
 * never waits for a compression batch, of its own owner or another.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compress.h"
#include "histogram.h"
#include "index.h"
#include "pool.h"
#include "util.h"

#define ZSW_STORE_BATCH_MAX 32u

struct zsw_store;
struct zsw_owner;
struct zsw_worker;
struct zsw_entry;

/* The stages of a store batch, as passed to the fault injection hook. */
enum zsw_store_stage {
        ZSW_STAGE_ENTRIES,
        ZSW_STAGE_COMPRESS,
        ZSW_STAGE_POOL,
        ZSW_STAGE_INDEX,
        _ZSW_STAGE_MAX,
};

/* Why pages were not stored (counted in pages). */
enum zsw_reject {
        ZSW_REJECT_ENOMEM,         /* entries or worker contexts could not be allocated */
        ZSW_REJECT_COMPRESS,       /* the compressor failed */
        ZSW_REJECT_POOL,           /* the pool could not allocate */
        ZSW_REJECT_INDEX,          /* the index could not insert */
        ZSW_REJECT_LIMIT,          /* the owner's page limit */
        ZSW_REJECT_INCOMPRESSIBLE, /* did not shrink, and reject_incompressible is set */
        ZSW_REJECT_POOL_LIMIT,     /* the global pool limit, until back under its threshold */
        ZSW_REJECT_WRITEBACK_OFF,  /* the owner's limit, and the owner may not write back */
        ZSW_REJECT_RECLAIM_FAIL,   /* a limit, and writeback is failing (disk full, EIO) */
        _ZSW_REJECT_MAX,
};

const char *zsw_reject_to_string(enum zsw_reject r);

struct zsw_store_config {
        /* Default compressor and zstd level of new owners. */
        enum zsw_compressor compressor;
        int level;
        /* A page whose compressed size is above this is incompressible;
         * 0 means ZSW_PAGE_SIZE * 7 / 8 (a page must save an eighth to be
         * worth a decompression on every load). */
        uint32_t max_compressed;
        /* Incompressible pages are kept raw (false) or not stored (true). */
        bool reject_incompressible;
        /* No compression dictionaries (store.c: a fork family gets one
         * once it holds 1024 pages). */
        bool no_dict;
        /* The writeback tier's read of a payload it moved to disk: reads
         * len bytes at sector into dst. Loads of on-disk entries fail with
         * -EIO while this is NULL. */
        int (*read_disk)(void *userdata, uint64_t sector, uint32_t len, void *dst);
        /* Gives the disk space of an on-disk entry back, when its last
         * reference goes (or when it was invalidated while being written). */
        void (*free_disk)(void *userdata, uint64_t sector, uint32_t len);
        /* Optional: reads n payloads at once (entries written in one batch
         * lie on consecutive sectors: one request), for
         * zsw_store_load_run(). All or nothing, like read_disk. */
        int (*read_disk_batch)(void *userdata, const uint64_t *sectors, const uint32_t *lens,
                               size_t n, void *const *dsts);
        void *disk_userdata;
        /* Test hook: called at the start of each stage (for
         * ZSW_STAGE_INDEX before each page's insertion, page = its position
         * in the batch); a negative return fails the stage with that errno. */
        int (*fault_inject)(void *userdata, enum zsw_store_stage stage, unsigned page);
        void *fault_userdata;
        const struct zsw_log *log;
};

struct zsw_owner_config {
        enum zsw_compressor compressor;
        int level; /* the compressor's level, 0 for its default (compress.h) */
        /* Limit of pages kept in the pool (stored pages neither
         * same-filled nor written back; the analogue of memory.zswap.max),
         * 0 for none. At the limit,
         * stores are refused and the writeback tier is woken to make room,
         * unless no_writeback. */
        uint64_t max_pages;
        /* Never write this owner's pages back (memory.zswap.writeback=0):
         * at a limit its stores are refused instead. */
        bool no_writeback;
};

/* Counters, global or per owner. "Stored" figures are what is there now;
 * the others count events since creation, in pages. Per owner, a page
 * shared with a clone counts for each owner that has it; globally once.
 * Written-back pages are counted per fork family: an owner reports its
 * family's disk_pages and disk_bytes (capped by its own stored figures). */
struct zsw_store_stats {
        uint64_t stored_pages;  /* in memory, on disk, and lost */
        uint64_t payload_bytes; /* compressed (or raw) bytes of stored pages in memory */
        uint64_t same_filled_pages;
        uint64_t lost_pages;           /* ZSW_STORE_PAGE_LOST: their fault is SIGBUS */
        uint64_t incompressible_pages; /* stored raw */
        uint64_t stores;
        uint64_t loads;
        uint64_t invalidations;
        uint64_t rejects[_ZSW_REJECT_MAX];
        uint64_t disk_pages;     /* stored pages written back */
        uint64_t disk_bytes;     /* their payload bytes */
        uint64_t written_back;   /* pages switched to disk, in all */
        uint64_t disk_reads;     /* loads that read the disk */
        uint64_t pool_limit_hit; /* global only: stores that found the pool full */
        uint64_t pool_bytes;     /* global only: memory the pool took from the system */
        /* Global only, the parts of pool_bytes (struct zsw_pool_stats):
         * objects (class-rounded), empty slabs and arena rest kept for
         * reuse; and what compaction did. */
        uint64_t pool_used_bytes;
        uint64_t pool_cached_bytes;
        uint64_t pool_compacted_objects;
        uint64_t pool_compacted_bytes;
        /* Globally: entries, index nodes, owners, pool bookkeeping; per
         * owner: its index nodes and itself. */
        uint64_t meta_bytes;
        /* Of meta_bytes: compression dictionaries (per owner: its family's). */
        uint64_t dict_bytes;
};

/* Latencies in ns, per page (a batch's time is spread over its pages). */
struct zsw_store_latency {
        uint64_t p50, p95, p99, count;
};

enum zsw_latency_kind {
        ZSW_LATENCY_STORE,
        ZSW_LATENCY_COMPRESS,
        ZSW_LATENCY_LOAD,
        _ZSW_LATENCY_MAX,
};

/* ---- store --------------------------------------------------------------- */

/* config may be NULL for the defaults (lz4, keep incompressible pages raw).
 * -EINVAL for a bad setting, -ENOMEM. */
int zsw_store_new(const struct zsw_store_config *config, struct zsw_store **ret);
/* Frees the store and every owner still in it. Workers must be freed first. */
struct zsw_store *zsw_store_free(struct zsw_store *s);

void zsw_store_get_stats(struct zsw_store *s, struct zsw_store_stats *ret);
/* Percentiles of the store-wide histogram of kind. */
void zsw_store_get_latency(struct zsw_store *s, enum zsw_latency_kind kind,
                           struct zsw_store_latency *ret);
/* The histogram itself, to merge or export; owned by the store. */
struct zsw_histogram *zsw_store_histogram(struct zsw_store *s, enum zsw_latency_kind kind);

/* ---- workers ------------------------------------------------------------- */

int zsw_worker_new(struct zsw_store *s, struct zsw_worker **ret);
struct zsw_worker *zsw_worker_free(struct zsw_worker *w);

/* ---- owners -------------------------------------------------------------- */

/* config may be NULL for the store's defaults. */
int zsw_store_owner_new(struct zsw_store *s, const struct zsw_owner_config *config,
                        struct zsw_owner **ret);
/* Drops every page of the owner and frees it. Entries isolated from its
 * LRU must have been put back first (through any owner of the family). */
struct zsw_owner *zsw_store_owner_free(struct zsw_owner *o);

/* For fork: a new owner whose index holds exactly the parent's pages, the
 * same entries (shared, reference counted; nothing is copied). Parent and
 * child then diverge: stores, loads and invalidations on one do not touch
 * the other's view. The child shares the parent's LRU and settings. */
int zsw_store_owner_clone(struct zsw_owner *parent, struct zsw_owner **ret);

void zsw_store_owner_get_stats(struct zsw_owner *o, struct zsw_store_stats *ret);
void zsw_store_owner_get_latency(struct zsw_owner *o, enum zsw_latency_kind kind,
                                 struct zsw_store_latency *ret);

/* ---- the data path ------------------------------------------------------- */

/*
 * Stores n (1..ZSW_STORE_BATCH_MAX) pages: pages[i] (ZSW_PAGE_SIZE bytes)
 * at page number pgnos[i] (<= ZSW_INDEX_MAX_PGNO, no duplicates) of o.
 *
 * A page number that already has an entry in o gets the new content; the
 * old entry is dropped from o even if the store fails, as the kernel does:
 * the caller still holds the page, so the old copy is stale either way.
 *
 * All or nothing: on failure no page of the batch is stored, the reason is
 * counted, and a negative errno is returned (-ENOMEM, -ENOSPC for the
 * owner's limit, -EINVAL for bad arguments, or the injected error).
 * With reject_incompressible, incompressible pages are left out of an
 * otherwise successful batch. Returns the number of pages stored; bit i of
 * *ret_stored (if not NULL) is set when page i was stored: the caller keeps
 * the pages whose bit is clear.
 */
int zsw_store_pages(struct zsw_worker *w, struct zsw_owner *o, const uint64_t *pgnos,
                    const void *const *pages, size_t n, uint32_t *ret_stored);

/* Loads keep the entry (a clone may still need it, or the caller may drop
 * the page again unmodified) unless ZSW_LOAD_EXCLUSIVE, which removes it
 * from o and frees it once no other owner has it. */
#define ZSW_LOAD_EXCLUSIVE 1u

/*
 * The fault path: copies page pgno of o into the ZSW_PAGE_SIZE bytes at
 * buf. Returns 0, -ENOENT when o has no such page (buf untouched),
 * -EBADMSG for a payload that does not decode (the entry is kept), -EIO
 * when the page is on disk and reading it failed, -ENODATA (not logged)
 * for a page lost (ZSW_STORE_PAGE_LOST). Takes o's lock for a lookup
 * only; decompression runs outside it.
 */
int zsw_store_load(struct zsw_worker *w, struct zsw_owner *o, uint64_t pgno, void *buf,
                   unsigned flags);

/*
 * Prefetch: shared loads (as zsw_store_load() without ZSW_LOAD_EXCLUSIVE)
 * of the pages first, first + 1, ... up to n (at most
 * ZSW_STORE_BATCH_MAX), stopping at the first page o does not have;
 * page i goes to bufs[i]. Pages on disk are read together with
 * read_disk_batch when the store has it: neighbours written back in one
 * batch come back in one read request. Returns the number of pages loaded
 * (0 when o lacks the first), or a negative errno when the first page
 * could not be read; a failure further on shortens the run instead.
 */
int zsw_store_load_run(struct zsw_worker *w, struct zsw_owner *o, uint64_t first, size_t n,
                       void *const *bufs);

/* Whether o has page pgno. */
bool zsw_store_contains(struct zsw_owner *o, uint64_t pgno);

/* The first page number >= from that o holds, in *ret_pgno; false when
 * there is none (*ret_pgno untouched). For walking an owner's pages. */
bool zsw_store_next(struct zsw_owner *o, uint64_t from, uint64_t *ret_pgno);

/* Drops o's pages in [start, start + n) (munmap, MADV_DONTNEED in the
 * target). Time proportional to the pages present. Returns how many. */
uint64_t zsw_store_invalidate(struct zsw_owner *o, uint64_t start, uint64_t n);

/* mremap: moves o's pages in [old_start, old_start + n) to [new_start,
 * new_start + n), after dropping whatever o had there (mremap replaces
 * the destination). The ranges must not overlap (-EINVAL), as for
 * MREMAP_FIXED. On -ENOMEM the pages stay where they were (the destination
 * is dropped anyway). Returns how many pages moved. */
int zsw_store_move(struct zsw_owner *o, uint64_t old_start, uint64_t new_start, uint64_t n);
/* The rest of a zsw_store_move() that stopped part way (a dead zswapd's,
 * applied again to the index loaded from its state, where each page of
 * an entry holds its own reference): when no entry of the source is at
 * its place in the destination yet, the destination is emptied first, as
 * the move does; then each page of [old_start, old_start + n) that still
 * has an entry moves to the same offset from new_start, replacing what
 * is there, and an entry found at both places (copied, its source not yet
 * dropped) keeps the copy. A source with no entry left changes nothing.
 * Returns the pages moved or a negative errno; a failure leaves every
 * entry at one place. */
int zsw_store_move_rest(struct zsw_owner *o, uint64_t old_start, uint64_t new_start, uint64_t n);

DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_store *, zsw_store_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_worker *, zsw_worker_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct zsw_owner *, zsw_store_owner_free);

/* ---- writeback interface ------------------------------------------------- */

/* Takes up to n of the coldest pool-backed entries of o's LRU (shared with
 * o's fork family) off the LRU for writeback, each with a reference of its
 * own, and returns how many. Loads keep working on isolated entries. */
size_t zsw_store_isolate(struct zsw_owner *o, struct zsw_entry **ret, size_t n);

/* Returns isolated entries to the cold end of the LRU and drops their
 * isolation references (entries nobody else holds are freed). */
void zsw_store_putback(struct zsw_owner *o, struct zsw_entry *const *entries, size_t n);

/* Compacts the pool (zsw_pool_compact()) in short steps under pool_lock,
 * then gives the emptied slabs back to the system; returns the bytes
 * given back. Unless force, only when the free room inside slabs exceeds
 * 1 MiB and 1/64 of the objects' bytes; else it only releases the empty
 * slabs cached, when they exceed 2 MiB. Any thread; loads wait for one
 * step at most. */
uint64_t zsw_store_compact(struct zsw_store *s, bool force);

/* An isolated entry's payload: its pool memory, byte count and code
 * (compress.h). Returns 0 for a compressed payload, 1 for a raw page
 * (ret_code untouched), -EINVAL for an entry that is not in the pool. */
int zsw_store_entry_payload(struct zsw_store *s, struct zsw_entry *e, const void **ret_data,
                            uint32_t *ret_len, unsigned *ret_code);

/*
 * Ends the writeback of n isolated entries of o's family: entries[i] was
 * written at sectors[i]. Each entry still referenced elsewhere switches to
 * disk (its pool memory is freed, its charge moves from memory to disk,
 * later loads read it with read_disk); an entry nobody references any more
 * (invalidated while it was written) gets its sectors freed with
 * free_disk. Either way the isolation reference is dropped.
 *
 * Loads never see a half switch: a load that started before the switch
 * finishes reading the pool copy first. Must be called with the owners
 * pinned (zsw_store_owners_lock), as it locks o's whole family. Returns
 * how many entries switched to disk.
 */
size_t zsw_store_writeback_done(struct zsw_owner *o, struct zsw_entry *const *entries,
                                const uint64_t *sectors, size_t n);

/* Pins every owner: while held, zsw_store_owner_free() waits, so the
 * writeback tier can work on an owner between store calls. Stores, loads
 * and clones go on (a clone's registration waits). */
void zsw_store_owners_lock(struct zsw_store *s);
void zsw_store_owners_unlock(struct zsw_store *s);

/* With the owners pinned: the owner created next after the one *cursor
 * names (0 to start), wrapping around, and updates *cursor; NULL when the
 * store has no owner. For round-robin walks that survive owners coming and
 * going. */
struct zsw_owner *zsw_store_owner_next(struct zsw_store *s, uint64_t *cursor);

struct zsw_store_limits {
        uint64_t pool_bytes;     /* global limit of pool memory in use, 0 for none */
        unsigned accept_percent; /* 1..100, 0 for 90 (zswap's accept_thr_percent) */
        /* Called (outside every store lock) when a store finds a limit it
         * may write back to make room for: the shrinker's wake-up. */
        void (*wake)(void *userdata);
        void *userdata;
};

/*
 * Sets the limits. Pool memory in use is the pool's allocated object
 * bytes. Once the pool reaches the limit, stores are refused
 * (ZSW_REJECT_POOL_LIMIT, or ZSW_REJECT_RECLAIM_FAIL while writeback is
 * failing) until it is back at or under accept_percent of the limit, as
 * zswap does: without that hysteresis every store would refill the room
 * the last writeback made. -EINVAL for a percent above 100. Call while no
 * store runs (wake may be called until then).
 */
int zsw_store_set_limits(struct zsw_store *s, const struct zsw_store_limits *limits);

/* The writeback tier says whether it is failing (disk full, I/O errors):
 * refusals at a limit are then counted as ZSW_REJECT_RECLAIM_FAIL. */
void zsw_store_set_reclaim_failing(struct zsw_store *s, bool failing);

/* Whether the pool is above the accept threshold of its limit: the
 * shrinker works while this holds. */
bool zsw_store_over_threshold(struct zsw_store *s);

/* Whether o may be written back, reached its own limit (max_pages) and is
 * still above its accept threshold: the lower of accept_percent of the
 * limit and room for a whole batch under it. Stores of o are refused
 * meanwhile. */
bool zsw_store_owner_over_threshold(struct zsw_owner *o);

/* Whether o's pages may be written back (not no_writeback). */
bool zsw_store_owner_may_writeback(struct zsw_owner *o);

/* ---- handing the store to another process ------------------------------- */

/* One stored page as the state handed across exec carries it
 * (engine-state.c): where it is, and its payload in the form it is
 * kept. */
struct zsw_store_page {
        uint64_t pgno;
        uint8_t state;       /* enum zsw_entry_state: SAME, COMPRESSED, RAW or
                              * LOST (ZSW_STORE_PAGE_LOST) */
        uint8_t compressor;  /* COMPRESSED: its code (compress.h: the compressor,
                              * with ZSW_WITH_DICT after the family's dictionary) */
        uint16_t length;     /* payload bytes; 0 for SAME */
        uint64_t value;      /* SAME: the repeated word */
        const void *payload; /* COMPRESSED, RAW: length bytes */
        /* Identifies the entry while the walk runs: owners of one fork
         * family share entries, and a shared entry must be handed over
         * once and shared again on the other side. */
        const void *entry;
};

/* enum zsw_entry_state's ZSW_ENTRY_LOST: a page without content (its
 * disk could not read it when zswapd died), whose load fails and whose
 * fault is answered by poisoning the page. */
#define ZSW_STORE_PAGE_LOST 4u

/*
 * Calls fn for every page of o, in page order, with o's lock held (fn must
 * not call into the store). A page on disk is read back and reported with
 * the payload it was written with (COMPRESSED or RAW): the receiving store
 * keeps it in memory. Stops at fn's first negative return and returns it;
 * -EIO when a page on disk cannot be read. For a quiesced store only: no
 * store, load or writeback runs meanwhile.
 */
int zsw_store_export(struct zsw_owner *o, int (*fn)(void *userdata, const struct zsw_store_page *p),
                     void *userdata);
/* The same for a store whose every other thread is gone (they died with
 * their process, in the middle of anything): takes no lock, since a dead
 * thread may hold one for good. A store and index changed half way by a
 * dead thread read as they were left. A page on disk that cannot be read
 * is reported as ZSW_STORE_PAGE_LOST: this is the last chance to save the
 * others (after 16 such failures in a row, over every owner, the pages
 * on disk are reported so without a read: a dying disk can take seconds
 * a read). */
int zsw_store_export_orphaned(struct zsw_owner *o,
                              int (*fn)(void *userdata, const struct zsw_store_page *p),
                              void *userdata);
/* The pages zsw_store_export_orphaned() reports, counted the same way. */
uint64_t zsw_store_owner_count_orphaned(struct zsw_owner *o);

/* A new owner without pages in the fork family of sibling (sharing its LRU
 * and settings), to receive a family's pages with zsw_store_import(). */
int zsw_store_owner_new_sibling(struct zsw_owner *sibling, struct zsw_owner **ret);

/* Whether a and b belong to one fork family (may share entries). */
bool zsw_store_same_family(const struct zsw_owner *a, const struct zsw_owner *b);

/* The content of the compression dictionary of o's family, NULL while it
 * has none; valid as long as o. */
const void *zsw_store_dict(struct zsw_owner *o, size_t *ret_len);
/* Gives o's family the dictionary of the len bytes at content, for pages
 * imported with ZSW_WITH_DICT: -EEXIST when it has one, -EINVAL, -ENOMEM. */
int zsw_store_set_dict(struct zsw_owner *o, const void *content, size_t len);

/*
 * Puts page p->pgno into o: a new entry made from p, or, with share not
 * NULL, that entry of o's family (another reference to it; p's payload is
 * then not read). The pool limit and o's limit do not apply: these pages
 * have no other copy. Returns 0 and the entry in *ret_entry (may be NULL),
 * -EEXIST for a page o has, -EINVAL for a malformed p, -ENOMEM.
 */
int zsw_store_import(struct zsw_owner *o, const struct zsw_store_page *p, struct zsw_entry *share,
                     struct zsw_entry **ret_entry);

/* zsw_store_import() of n (1..ZSW_STORE_BATCH_MAX) pages at once, share[i]
 * (share may be NULL) for p[i], the entries in ret_entries[i] (may be
 * NULL): one pool allocation and one lock round trip for the batch. All or
 * nothing. */
int zsw_store_import_batch(struct zsw_owner *o, const struct zsw_store_page *p,
                           struct zsw_entry *const *share, size_t n,
                           struct zsw_entry **ret_entries);
