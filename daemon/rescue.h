/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * zswapd-rescue: a task that shares zswapd's memory and descriptors and
 * outlives it. If zswapd dies holding pages (SIGKILL, a crash, an abort),
 * it writes the engine's state, as the dead process left it, to a file
 * (rescue_state_path()) that the next zswapd adopts before it serves
 * anything: no target loses a page, and their faults wait meanwhile.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "engine.h"

struct rescue;

/* The state file of the zswapd whose control socket is socket_path: the
 * socket's name with ".state" in place of ".sock" (or added). */
char *rescue_state_path(const char *socket_path);

/* zswapd's first argument for the keeper of a dead zswapd's fork children
 * not named yet (rescue.c): `zswapd-rescue --keep-uffds FD...` holds
 * those descriptors, and no other, until killed. */
#define RESCUE_KEEP_ARG "--keep-uffds"
_Noreturn void rescue_keeper_main(int argc, char *argv[]);

/* Starts the rescue task for engine (each target's policy is the label
 * the engine keeps of it: zsw_engine_set_label()). */
int rescue_start(struct zsw_engine *engine, const char *state_path, struct rescue **ret);

/* A state a re-exec handed over and this zswapd has not taken in (it is
 * loading it, or could not read it): fd, or -1 once there is none. Should
 * zswapd die meanwhile, the rescue keeps it as it is (rescue_keep_state()),
 * before and beside the engine's own state. r may be NULL. */
void rescue_set_pending(struct rescue *r, int fd);

/* Writes the state in fd, as it is, under the first free name of path's
 * (rescue_adopt() takes them all over), given in ret_saved (PATH_MAX
 * bytes); 0 or -errno. Allocates nothing (the rescue task calls it). */
int rescue_keep_state(const char *path, int fd, char *ret_saved);

/* Ends the rescue task (before an exec, or once nothing is held any
 * more): zswapd's death is no rescue's business from here. NULL is fine. */
struct rescue *rescue_stop(struct rescue *r);

static inline void rescue_stopp(struct rescue **r) {
        *r = rescue_stop(*r);
}

/* Takes over the state a dead zswapd's rescue left at path, if any:
 * 0 if there is none, the number of targets adopted, or -errno (logged;
 * the file is kept for a zswapd that can read it). The file goes once
 * adopted. */
int rescue_adopt(struct zsw_engine *engine, const char *path, zsw_engine_adopted_fn adopted,
                 void *userdata);
