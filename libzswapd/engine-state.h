/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The state one zswapd hands to the binary it executes in its place
 * (zsw_engine_save(), zsw_engine_load()): the layout, written by
 * engine-state.c and read by engine-load.c. Not a public interface;
 * docs/design.md describes it for people.
 *
 * Host byte order and host layout: the state never leaves the machine, it
 * only crosses one execve(2). A reader refuses a version it does not know
 * (the pages then stay with the process that wrote them, see
 * zsw_engine_load()).
 *
 *   header                  struct state_header
 *   per target:
 *     struct state_target   who it is and its settings
 *     struct state_dict     if the record says so (the first target of a
 *                           family that has a dictionary; version 2), then
 *                           its length bytes of content, padded to 8
 *     per stored page:      struct state_page, then, for a page whose
 *                           entry is new (id == the count of entries so
 *                           far), struct state_entry and length payload
 *                           bytes; a page of an entry already given
 *                           (shared within a fork family) has id < that
 *                           count and nothing follows; an entry of state
 *                           ZSW_STORE_PAGE_LOST (a dead zswapd's page
 *                           whose disk copy could not be read) has no
 *                           payload: a load of it fails, its fault is
 *                           answered with poison
 *     per event (version 3): struct state_event, one the dead zswapd read
 *                           from the target's uffd and had not applied
 *                           (or only in part): applied in order once
 *                           the pages are in
 *   trailer                 struct state_trailer
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "page.h"

#define ZSW_STATE_MAGIC "ZSWSTATE"
#define ZSW_STATE_END "ZSWSTEND"
#define ZSW_STATE_VERSION 4u
/* Version 1 is version 2 without dictionaries, version 2 is version 3
 * without events (and its target record ends before n_events), version 3
 * is version 4 without fork children not named yet: read alike. A writer
 * writes the lowest version that holds its state, so that the release
 * before can take most states over. */
#define ZSW_STATE_VERSION_MIN 1u
#define ZSW_STATE_LABEL_MAX 64u

struct state_header {
        char magic[8];      /* ZSW_STATE_MAGIC */
        uint32_t version;   /* ZSW_STATE_VERSION */
        uint32_t page_size; /* ZSW_PAGE_SIZE of the writer */
        uint32_t n_targets;
        uint32_t header_size; /* sizeof(struct state_header) */
        uint32_t target_size; /* sizeof(struct state_target) */
        /* Version 4: the process that keeps the uffds of the fork
         * children not named yet (pid 0) open, the dead zswapd's rescue
         * task; the uffd of such a record is its descriptor there. */
        int32_t keeper;
};

struct state_target {
        int32_t pid;                    /* 0: a fork child not named yet (version 4) */
        int32_t uffd;                   /* the writer's descriptor, kept across exec */
        uint64_t start_time;            /* field 22 of /proc/PID/stat, in clock ticks; of a
                                         * fork child not named, when its fork was read */
        int32_t target_uffd;            /* the target's own descriptor number, -1 if none */
        uint32_t family;                /* index of the first target of its fork family */
        uint64_t scratch, scratch_size; /* the scratch mapping inside the target */
        uint32_t compressor;            /* enum zsw_compressor */
        int32_t level;
        uint64_t max_pages;
        uint8_t no_writeback, aging, throttle;
        uint8_t dict; /* 1: a struct state_dict follows (0 in version 1) */
        uint32_t prefetch_window, zero_window;
        char label[ZSW_STATE_LABEL_MAX]; /* the owner's label (a policy name), "" for none */
        uint64_t n_pages;
        /* Version 3: */
        uint32_t n_events;
        uint32_t reserved;
};
/* The record as versions 1 and 2 wrote it. */
#define STATE_TARGET_V2_SIZE offsetof(struct state_target, n_events)

struct state_dict {
        uint64_t length; /* content bytes that follow */
};

struct state_page {
        uint64_t pgno;
        uint64_t id; /* the entry's number, in the order first given */
};

struct state_entry {
        uint8_t state; /* enum zsw_entry_state: SAME, COMPRESSED or RAW; ZSW_STORE_PAGE_LOST */
        uint8_t compressor;
        uint16_t length; /* payload bytes that follow; 0 for SAME */
        uint32_t reserved;
        uint64_t value; /* SAME: the repeated word */
};

struct state_event {
        uint8_t event; /* UFFD_EVENT_REMOVE, UFFD_EVENT_UNMAP or UFFD_EVENT_REMAP */
        uint8_t reserved[7];
        uint64_t start, end; /* REMOVE, UNMAP: the range; REMAP: from, to */
        uint64_t len;        /* REMAP: its length */
};
struct state_trailer {
        char magic[8]; /* ZSW_STATE_END */
        uint64_t n_entries;
        uint64_t total_bytes; /* the whole state, trailer included */
};

/* Shared by the save (engine-state.c) and the load (engine-load.c). */

/* The lowest address a wake may name (mmap_min_addr is at most this
 * here) and the end of x86_64 user space: one UFFDIO_WAKE over it wakes
 * every waiter of a uffd, registered ranges or not. */
#define WAKE_START (UINT64_C(1) << 16)
#define WAKE_END ((UINT64_C(1) << 47) - ZSW_PAGE_SIZE)

#define ALIGN8(n) (((size_t) (n) + 7u) & ~(size_t) 7u)

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks
 * since boot; with the pid, the identity of a process. */
int state_proc_start_time(pid_t pid, uint64_t *ret);
/* The same, and field 4, the parent's pid (ret_ppid may be NULL). */
int state_proc_stat(pid_t pid, pid_t *ret_ppid, uint64_t *ret_start);
int state_fd_set_cloexec(int fd, bool on);
