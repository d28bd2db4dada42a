/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Second-chance LRU of pool-backed entries, one per fork family of owners
 * (an owner and the clones made from it share it, because they share
 * entries and an entry can be on one list only).
 *
 * New entries go to the head, one splice per store batch. A load that keeps
 * its entry sets the entry's referenced bit instead of moving it, so loads
 * never take the LRU lock; the walk from the tail gives a referenced entry
 * a second round (clears the bit, moves it to the head) and isolates the
 * others for the writeback tier: an isolated entry is off the list and
 * holds one extra reference until it is put back or its writeback ends.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "entry.h"

struct zsw_dict;

struct zsw_lru {
        pthread_mutex_t lock;
        struct zsw_entry head; /* sentinel: head.next is the newest */
        size_t count;
        _Atomic unsigned owners; /* owners sharing this LRU */
        /* The family's written-back entries (an entry is shared only
         * within its family, so the family can count it exactly). */
        _Atomic uint64_t disk_pages, disk_bytes;
        /* The family's compression dictionary (store.c): set once, never
         * changed, freed with the family, so that every payload coded with
         * it can be decoded as long as it is stored. */
        _Atomic(struct zsw_dict *) dict;
        /* Until then, the pages sampled for it (store.c), under sample_lock. */
        pthread_mutex_t sample_lock;
        uint8_t *sample;
        uint64_t sample_seen;
        uint64_t stats_pass; /* store.c: counted in this stats pass, under owners_lock */
};

int zsw_lru_new(struct zsw_lru **ret);
/* Takes one more owner reference. */
struct zsw_lru *zsw_lru_ref(struct zsw_lru *lru);
/* Drops an owner reference; frees the LRU (which must be empty) with the last. */
struct zsw_lru *zsw_lru_unref(struct zsw_lru *lru);

/* Adds n entries at the head. Called with lru->lock held. */
void zsw_lru_add_locked(struct zsw_lru *lru, struct zsw_entry *const *entries, size_t n);
/* Unlinks e if it is on the list. Called with lru->lock held. */
void zsw_lru_del_locked(struct zsw_lru *lru, struct zsw_entry *e);

/* Isolates up to n of the coldest unreferenced entries into ret, taking a
 * reference on each, and returns how many. Referenced entries met on the
 * way lose their bit and go to the head; at most one full round is walked. */
size_t zsw_lru_isolate(struct zsw_lru *lru, struct zsw_entry **ret, size_t n);

/* Puts isolated entries back at the tail (they are still the coldest) if
 * something besides the isolation still references them; returns the
 * entries whose isolation reference was the last one through ret_dead
 * (a chain linked by next, to be freed by the caller), or NULL. */
struct zsw_entry *zsw_lru_putback(struct zsw_lru *lru, struct zsw_entry *const *entries, size_t n);

static inline size_t zsw_lru_count(struct zsw_lru *lru) {
        size_t n;

        pthread_mutex_lock(&lru->lock);
        n = lru->count;
        pthread_mutex_unlock(&lru->lock);
        return n;
}
