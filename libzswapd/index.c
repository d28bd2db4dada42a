/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Index of stored pages: a radix tree from page number to entry.
 *
 * Six levels of 64-way nodes consume the 36 bits of a page number, six at a
 * time, most significant first; the leaves hold the entries. A node exists
 * only while something below it does: each node keeps a bitmap of its
 * occupied slots, an erase that empties a node frees it and clears its bit
 * in the parent. Two things follow. Memory is proportional to the entries
 * (at most one path of six nodes per entry, far fewer when they cluster, as
 * pages of a mapping do). And a walk never enters an empty subtree: the
 * bitmap gives the next occupied slot with one count-trailing-zeros, so
 * next() costs O(height) and erase_range() O(height + nodes holding entries
 * in the range), whatever the length of the range.
 *
 * The height is fixed: user page numbers of a 47-bit address space span
 * the whole key range anyway (heap near the bottom, stack at the top), so
 * a tree that grows with the largest key would be full height in practice,
 * and a fixed height keeps lookup, on the fault path, a loop of six loads.
 *
 * A reader after the writer's death (the rescue task, which walks the
 * index of a zswapd killed at any instruction) must find a tree it can
 * walk: the bitmap is what a walk follows, so a node or an entry is
 * linked before its bit is set, its bit cleared before it is unlinked,
 * and a node unlinked before it is freed (free() writes into it).
 * PUBLISH_ORDER() keeps the compiler from reordering those stores; a
 * dead thread's stores are all visible, in order.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "index.h"
#include "util.h"

#define BITS 6u
#define FANOUT (1u << BITS)
#define LEVELS 6u
#define SLOT_MASK (FANOUT - 1)

struct node {
        uint64_t bitmap;     /* occupied slots */
        void *slots[FANOUT]; /* child nodes, or entries in a leaf */
};

struct zsw_index {
        struct node *root;
        size_t count;
        size_t nodes;
};

_Static_assert(BITS *LEVELS == 36, "the tree must cover ZSW_INDEX_MAX_PGNO");

#define PUBLISH_ORDER() atomic_signal_fence(memory_order_seq_cst)

/* Slot of pgno in a node at the given level (0 = leaves). */
static unsigned slot_of(uint64_t pgno, unsigned level) {
        return (pgno >> (level * BITS)) & SLOT_MASK;
}

int zsw_index_new(struct zsw_index **ret) {
        struct zsw_index *idx = calloc(1, sizeof(*idx));

        if (!idx)
                return -ENOMEM;
        *ret = idx;
        return 0;
}

static void node_free_tree(struct node *n, unsigned level) {
        if (level > 0)
                for (uint64_t m = n->bitmap; m; m &= m - 1)
                        node_free_tree(n->slots[__builtin_ctzll(m)], level - 1);
        free(n);
}

struct zsw_index *zsw_index_free(struct zsw_index *idx) {
        if (!idx)
                return NULL;
        if (idx->root)
                node_free_tree(idx->root, LEVELS - 1);
        free(idx);
        return NULL;
}

void *zsw_index_lookup(const struct zsw_index *idx, uint64_t pgno) {
        const struct node *n = idx->root;

        if (_unlikely_(pgno > ZSW_INDEX_MAX_PGNO))
                return NULL;
        /* Empty slots are NULL, so no bitmap test is needed on the way. */
        for (unsigned level = LEVELS - 1; level > 0 && n; level--)
                n = n->slots[slot_of(pgno, level)];
        return n ? n->slots[slot_of(pgno, 0)] : NULL;
}

/* Frees the nodes of path[from..] that became empty, deepest first,
 * clearing their bits in their parents. path[l] is the node at level l. */
static void prune(struct zsw_index *idx, struct node **path, unsigned from, uint64_t pgno) {
        for (unsigned level = from; level < LEVELS; level++) {
                struct node *n = path[level];

                if (n->bitmap)
                        return;
                if (level == LEVELS - 1)
                        idx->root = NULL;
                else {
                        struct node *parent = path[level + 1];
                        unsigned s = slot_of(pgno, level + 1);

                        parent->bitmap &= ~(UINT64_C(1) << s);
                        PUBLISH_ORDER();
                        parent->slots[s] = NULL;
                }
                PUBLISH_ORDER();
                free(n);
                idx->nodes--;
        }
}

int zsw_index_insert(struct zsw_index *idx, uint64_t pgno, void *entry) {
        struct node *path[LEVELS];
        struct node **link = &idx->root;
        unsigned s;

        if (pgno > ZSW_INDEX_MAX_PGNO)
                return -ERANGE;
        if (!entry)
                return -EINVAL;

        for (unsigned level = LEVELS; level-- > 0;) {
                if (!*link) {
                        struct node *n = calloc(1, sizeof(*n));

                        if (!n) {
                                /* Nodes made on the way hold nothing yet. */
                                if (level + 1 < LEVELS)
                                        prune(idx, path, level + 1, pgno);
                                return -ENOMEM;
                        }
                        idx->nodes++;
                        *link = n;
                        PUBLISH_ORDER();
                        if (level + 1 < LEVELS)
                                path[level + 1]->bitmap |= UINT64_C(1) << slot_of(pgno, level + 1);
                }
                path[level] = *link;
                if (level > 0)
                        link = (struct node **) &path[level]->slots[slot_of(pgno, level)];
        }

        s = slot_of(pgno, 0);
        if (path[0]->slots[s])
                return -EEXIST;
        path[0]->slots[s] = entry;
        PUBLISH_ORDER();
        path[0]->bitmap |= UINT64_C(1) << s;
        idx->count++;
        return 0;
}

void *zsw_index_erase(struct zsw_index *idx, uint64_t pgno) {
        struct node *path[LEVELS];
        struct node *n = idx->root;
        unsigned s;
        void *entry;

        if (pgno > ZSW_INDEX_MAX_PGNO)
                return NULL;
        for (unsigned level = LEVELS - 1;; level--) {
                if (!n)
                        return NULL;
                path[level] = n;
                if (level == 0)
                        break;
                n = n->slots[slot_of(pgno, level)];
        }

        s = slot_of(pgno, 0);
        entry = path[0]->slots[s];
        if (!entry)
                return NULL;
        path[0]->bitmap &= ~(UINT64_C(1) << s);
        PUBLISH_ORDER();
        path[0]->slots[s] = NULL;
        idx->count--;
        prune(idx, path, 0, pgno);
        return entry;
}

/* The first entry at or after from below node n (covering keys that agree
 * with from above this level). Every present child holds at least one
 * entry, so at most one child per level is entered and left empty-handed:
 * the one on from's own path. */
static void *node_next(const struct node *n, unsigned level, uint64_t from, uint64_t *ret_pgno) {
        unsigned shift = level * BITS;
        unsigned s = slot_of(from, level);
        uint64_t base = from & ~((UINT64_C(1) << (shift + BITS)) - 1);

        for (uint64_t m = n->bitmap & (~UINT64_C(0) << s); m; m &= m - 1) {
                unsigned i = __builtin_ctzll(m);
                uint64_t key = base | ((uint64_t) i << shift);
                void *e;

                if (level == 0) {
                        *ret_pgno = key;
                        return n->slots[i];
                }
                e = node_next(n->slots[i], level - 1, i == s ? from : key, ret_pgno);
                if (e)
                        return e;
        }
        return NULL;
}

void *zsw_index_next(const struct zsw_index *idx, uint64_t from, uint64_t *ret_pgno) {
        uint64_t pgno;
        void *e;

        if (!idx->root || from > ZSW_INDEX_MAX_PGNO)
                return NULL;
        e = node_next(idx->root, LEVELS - 1, from, &pgno);
        if (e && ret_pgno)
                *ret_pgno = pgno;
        return e;
}

struct erase_ctx {
        struct zsw_index *idx;
        uint64_t start, end; /* [start, end) */
        void (*fn)(void *entry, uint64_t pgno, void *userdata);
        void *userdata;
        size_t erased;
};

/* Erases [start, end) below n, whose keys begin at base. Only occupied
 * slots that overlap the range are visited; emptied children are freed. */
static void node_erase_range(struct erase_ctx *c, struct node *n, unsigned level, uint64_t base) {
        unsigned shift = level * BITS;
        uint64_t span = UINT64_C(1) << shift;
        unsigned lo = c->start > base ? (unsigned) ((c->start - base) >> shift) : 0;
        unsigned hi = (c->end - 1 - base) >> shift >= FANOUT
                              ? FANOUT - 1
                              : (unsigned) ((c->end - 1 - base) >> shift);
        uint64_t m = n->bitmap & (~UINT64_C(0) << lo) & (~UINT64_C(0) >> (FANOUT - 1 - hi));

        for (; m; m &= m - 1) {
                unsigned i = __builtin_ctzll(m);
                uint64_t key = base + i * span;

                if (level == 0) {
                        void *entry = n->slots[i];

                        n->bitmap &= ~(UINT64_C(1) << i);
                        PUBLISH_ORDER();
                        n->slots[i] = NULL;
                        c->idx->count--;
                        c->erased++;
                        if (c->fn)
                                c->fn(entry, key, c->userdata);
                        continue;
                }
                node_erase_range(c, n->slots[i], level - 1, key);
                if (((struct node *) n->slots[i])->bitmap == 0) {
                        void *child = n->slots[i];

                        n->bitmap &= ~(UINT64_C(1) << i);
                        PUBLISH_ORDER();
                        n->slots[i] = NULL;
                        PUBLISH_ORDER();
                        free(child);
                        c->idx->nodes--;
                }
        }
}

size_t zsw_index_erase_range(struct zsw_index *idx, uint64_t start, uint64_t end,
                             void (*fn)(void *entry, uint64_t pgno, void *userdata),
                             void *userdata) {
        struct erase_ctx c = {
                .idx = idx,
                .start = start,
                .end = MIN(end, ZSW_INDEX_MAX_PGNO + 1),
                .fn = fn,
                .userdata = userdata,
        };

        if (!idx->root || c.start >= c.end)
                return 0;
        node_erase_range(&c, idx->root, LEVELS - 1, 0);
        if (idx->root->bitmap == 0) {
                struct node *root = idx->root;

                idx->root = NULL;
                PUBLISH_ORDER();
                free(root);
                idx->nodes--;
        }
        return c.erased;
}

size_t zsw_index_count(const struct zsw_index *idx) {
        return idx->count;
}

size_t zsw_index_mem_bytes(const struct zsw_index *idx) {
        return idx->nodes * sizeof(struct node);
}
