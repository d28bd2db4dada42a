/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corpus.h"
#include "util.h"

#define PAGE 4096u

/* Sources, in the proportion real anonymous memory tends to show: program
 * images and libraries (heaps full of pointers and code-like data), then
 * text. Each directory is read in sorted order so runs are repeatable. */
static const struct {
        const char *dir;
        unsigned weight;
} sources[] = {
        { "/usr/lib/x86_64-linux-gnu", 4 },
        { "/usr/bin", 3 },
        { "/usr/include", 2 },
        { "/usr/share/doc", 1 },
        { "/usr/share/perl", 1 },
};

struct page_source {
        char **paths;
        size_t n, next;
        int fd;
        off_t off;
};

uint64_t corpus_random(uint64_t *state) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

void corpus_shuffle(uint32_t *order, size_t n, uint64_t seed) {
        for (size_t i = 0; i < n; i++)
                order[i] = (uint32_t) i;
        for (size_t i = n - 1; n > 1 && i > 0; i--) {
                size_t j = corpus_random(&seed) % (i + 1);
                uint32_t tmp = order[i];

                order[i] = order[j];
                order[j] = tmp;
        }
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Collects regular files of at least one page below dir, depth-first. */
static void collect(const char *dir, struct page_source *src, unsigned depth) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d)) && src->n < 4096) {
                char path[4096];
                struct stat st;

                if (de->d_name[0] == '.')
                        continue;
                if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
                        continue;
                if (lstat(path, &st) < 0)
                        continue;
                if (S_ISDIR(st.st_mode) && depth < 3)
                        collect(path, src, depth + 1);
                else if (S_ISREG(st.st_mode) && st.st_size >= (off_t) PAGE &&
                         !strstr(de->d_name, ".gz") && !strstr(de->d_name, ".xz")) {
                        char **p = realloc(src->paths, (src->n + 1) * sizeof(char *));

                        if (!p)
                                break;
                        src->paths = p;
                        if (!(src->paths[src->n] = strdup(path)))
                                break;
                        src->n++;
                }
        }
        closedir(d);
}

/* Reads the next whole page of the source's files, moving on to the next
 * file at the end of one. Returns false when nothing is readable. */
static bool next_page(struct page_source *src, void *page) {
        for (size_t tries = 0; tries < src->n + 1;) {
                if (src->fd < 0) {
                        if (src->n == 0)
                                return false;
                        src->fd = open(src->paths[src->next++ % src->n], O_RDONLY | O_CLOEXEC);
                        src->off = 0;
                        tries++;
                        if (src->fd < 0)
                                continue;
                }
                if (pread(src->fd, page, PAGE, src->off) == (ssize_t) PAGE) {
                        src->off += PAGE;
                        return true;
                }
                src->fd = safe_close(src->fd);
        }
        return false;
}

int corpus_fill(void *buf, size_t npages, unsigned zero_percent, uint64_t seed) {
        struct page_source src[ARRAY_SIZE(sources)] = {};
        unsigned total_weight = 0;
        uint64_t rng = seed;
        int r = 0;

        for (size_t i = 0; i < ARRAY_SIZE(sources); i++) {
                src[i].fd = -EBADF;
                collect(sources[i].dir, &src[i], 0);
                if (src[i].n > 0) /* paths is NULL then, which qsort must not get */
                        qsort(src[i].paths, src[i].n, sizeof(char *), cmp_str);
                /* Start each source at a seed-dependent file, so that
                 * different seeds give different pages. */
                src[i].next = src[i].n ? corpus_random(&rng) % src[i].n : 0;
                total_weight += sources[i].weight;
        }

        for (size_t p = 0; p < npages; p++) {
                uint8_t *page = (uint8_t *) buf + p * PAGE;
                uint64_t x = corpus_random(&rng);
                unsigned pick = (unsigned) (x >> 32) % total_weight;
                size_t s = 0;

                if ((unsigned) (x % 100) < zero_percent) {
                        memset(page, 0, PAGE);
                        continue;
                }
                while (pick >= sources[s].weight)
                        pick -= sources[s++].weight;
                if (!next_page(&src[s], page)) {
                        /* This source is empty here; any other will do. */
                        bool ok = false;

                        for (size_t o = 0; o < ARRAY_SIZE(sources) && !ok; o++)
                                ok = next_page(&src[o], page);
                        if (!ok) {
                                r = -ENOENT;
                                break;
                        }
                }
        }

        for (size_t i = 0; i < ARRAY_SIZE(sources); i++) {
                safe_close(src[i].fd);
                for (size_t j = 0; j < src[i].n; j++)
                        free(src[i].paths[j]);
                free(src[i].paths);
        }
        return r;
}

uint64_t corpus_page_sum(const void *page) {
        /* FNV-1a over 64-bit words: cheap and order-sensitive. */
        const uint64_t *w = page;
        uint64_t h = 0xcbf29ce484222325ull;

        for (size_t i = 0; i < PAGE / sizeof(uint64_t); i++)
                h = (h ^ w[i]) * 0x100000001b3ull;
        return h;
}
