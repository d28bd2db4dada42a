/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Second-chance LRU (see lru.h). The list is circular around a sentinel so
 * that linking never tests for the ends; an entry off the list has NULL
 * links, which is how the free path knows whether to unlink.
 *
 * Reference rule: an entry on the list may already have dropped to zero
 * references, its last holder waiting for this lock to unlink and free it.
 * The walk therefore takes references with "increment unless zero" and
 * leaves such entries alone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "compress.h"
#include "lockdep.h"
#include "lru.h"

int zsw_lru_new(struct zsw_lru **ret) {
        struct zsw_lru *lru = calloc(1, sizeof(*lru));

        if (!lru)
                return -ENOMEM;
        pthread_mutex_init(&lru->lock, NULL);
        pthread_mutex_init(&lru->sample_lock, NULL);
        lru->head.next = lru->head.prev = &lru->head;
        atomic_init(&lru->owners, 1);
        *ret = lru;
        return 0;
}

struct zsw_lru *zsw_lru_ref(struct zsw_lru *lru) {
        atomic_fetch_add_explicit(&lru->owners, 1, memory_order_relaxed);
        return lru;
}

struct zsw_lru *zsw_lru_unref(struct zsw_lru *lru) {
        if (!lru || atomic_fetch_sub_explicit(&lru->owners, 1, memory_order_acq_rel) != 1)
                return NULL;
        pthread_mutex_destroy(&lru->lock);
        pthread_mutex_destroy(&lru->sample_lock);
        free(lru->sample);
        zsw_dict_free(atomic_load_explicit(&lru->dict, memory_order_relaxed));
        free(lru);
        return NULL;
}

static void link_after(struct zsw_entry *pos, struct zsw_entry *e) {
        e->prev = pos;
        e->next = pos->next;
        pos->next->prev = e;
        pos->next = e;
}

static void unlink_entry(struct zsw_entry *e) {
        e->prev->next = e->next;
        e->next->prev = e->prev;
        e->prev = e->next = NULL;
}

void zsw_lru_add_locked(struct zsw_lru *lru, struct zsw_entry *const *entries, size_t n) {
        for (size_t i = 0; i < n; i++)
                link_after(&lru->head, entries[i]);
        lru->count += n;
}

void zsw_lru_del_locked(struct zsw_lru *lru, struct zsw_entry *e) {
        if (!e->next)
                return;
        unlink_entry(e);
        lru->count--;
}

static bool get_unless_zero(struct zsw_entry *e) {
        uint32_t r = atomic_load_explicit(&e->refs, memory_order_relaxed);

        while (r != 0)
                if (atomic_compare_exchange_weak_explicit(&e->refs, &r, r + 1, memory_order_acquire,
                                                          memory_order_relaxed))
                        return true;
        return false;
}

size_t zsw_lru_isolate(struct zsw_lru *lru, struct zsw_entry **ret, size_t n) {
        size_t got = 0, budget;

        zsw_mutex_lock(&lru->lock, ZSW_LOCK_LRU);
        budget = lru->count;
        while (got < n && budget-- > 0 && lru->count > 0) {
                struct zsw_entry *e = lru->head.prev;

                if (atomic_exchange_explicit(&e->referenced, 0, memory_order_relaxed)) {
                        unlink_entry(e);
                        link_after(&lru->head, e);
                        continue;
                }
                if (!get_unless_zero(e)) {
                        /* Dying: its last holder unlinks it. Rotate it out
                         * of the way so the walk can go on. */
                        unlink_entry(e);
                        link_after(&lru->head, e);
                        continue;
                }
                unlink_entry(e);
                lru->count--;
                ret[got++] = e;
        }
        zsw_mutex_unlock(&lru->lock);
        return got;
}

struct zsw_entry *zsw_lru_putback(struct zsw_lru *lru, struct zsw_entry *const *entries, size_t n) {
        struct zsw_entry *dead = NULL;

        zsw_mutex_lock(&lru->lock, ZSW_LOCK_LRU);
        for (size_t i = 0; i < n; i++) {
                struct zsw_entry *e = entries[i];

                /* Dropping our reference under the lock: whoever else holds
                 * one and drops it to zero later finds the entry listed and
                 * unlinks it; if ours is the last, nobody else can see it. */
                if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) {
                        e->next = dead;
                        dead = e;
                        continue;
                }
                link_after(lru->head.prev, e);
                lru->count++;
        }
        zsw_mutex_unlock(&lru->lock);
        return dead;
}
