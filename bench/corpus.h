/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Realistic page contents for benchmarks, demos and tests: pages cut from
 * files found on this machine (ELF executables and libraries, C headers,
 * documentation and other text), mixed with a share of zero pages, in an
 * order fixed by a seed. Never random bytes: compressors must see what they
 * see in real anonymous memory, which is mostly program data and text.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Fills npages pages at buf. zero_percent of them (0..100) are zero pages.
 * The same seed on the same machine gives the same content. Returns 0, or
 * -ENOENT when the machine has too few readable files. */
int corpus_fill(void *buf, size_t npages, unsigned zero_percent, uint64_t seed);

/* The next number of the seeded generator behind the corpus (splitmix64),
 * advancing *state: for benchmarks that want orders fixed by a seed. */
uint64_t corpus_random(uint64_t *state);

/* Fills order[0..n) with 0..n-1 in a random order fixed by seed (a
 * Fisher-Yates shuffle with corpus_random()). */
void corpus_shuffle(uint32_t *order, size_t n, uint64_t seed);

/* A 64-bit checksum of one page, for byte-exact verification. */
uint64_t corpus_page_sum(const void *page);
