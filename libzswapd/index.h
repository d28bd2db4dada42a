/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Index of stored pages: maps a page number (a 47-bit user virtual address
 * shifted by the page size, so up to 35 bits) to an entry pointer.
 *
 * A radix tree of 64-way nodes whose empty subtrees are absent, so that
 * sparse address spaces cost memory in proportion to what they hold and a
 * range walk or range erase costs time in proportion to the entries in the
 * range, not to its length. Not thread-safe: the store serializes access
 * per owner.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZSW_INDEX_MAX_PGNO ((UINT64_C(1) << 36) - 1)

struct zsw_index;

int zsw_index_new(struct zsw_index **ret);
/* Frees the tree, not the entries it points to. */
struct zsw_index *zsw_index_free(struct zsw_index *idx);

/* Inserts entry (non-NULL) at pgno. -EEXIST if the slot is taken, -ENOMEM,
 * -ERANGE for pgno > ZSW_INDEX_MAX_PGNO, -EINVAL for a NULL entry. A
 * failed insert leaves the tree as it was. */
int zsw_index_insert(struct zsw_index *idx, uint64_t pgno, void *entry);

void *zsw_index_lookup(const struct zsw_index *idx, uint64_t pgno);

/* Removes and returns the entry at pgno, or NULL. Frees emptied nodes. */
void *zsw_index_erase(struct zsw_index *idx, uint64_t pgno);

/* Finds the first entry with pgno >= from; returns it and stores its pgno
 * in *ret_pgno, or returns NULL. */
void *zsw_index_next(const struct zsw_index *idx, uint64_t from, uint64_t *ret_pgno);

/* The first entry after pgno, as zsw_index_next(); NULL after the last
 * page number. A walk: for (e = zsw_index_next(idx, 0, &p); e;
 * e = zsw_index_after(idx, p, &p)). */
static inline void *zsw_index_after(const struct zsw_index *idx, uint64_t pgno,
                                    uint64_t *ret_pgno) {
        return pgno < ZSW_INDEX_MAX_PGNO ? zsw_index_next(idx, pgno + 1, ret_pgno) : NULL;
}

/* Removes every entry with start <= pgno < end, calling fn(entry, pgno,
 * userdata) for each in ascending pgno order (fn may free the entry, but
 * must not call into the index). end is clamped to the key space, so
 * (0, UINT64_MAX) empties the tree. Returns how many. */
size_t zsw_index_erase_range(struct zsw_index *idx, uint64_t start, uint64_t end,
                             void (*fn)(void *entry, uint64_t pgno, void *userdata),
                             void *userdata);

size_t zsw_index_count(const struct zsw_index *idx);
/* Bytes of tree nodes, for the metadata-per-page figure. */
size_t zsw_index_mem_bytes(const struct zsw_index *idx);
