/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fork children: a target's fork hands its fault thread the child's
 * userfaultfd (UFFD_EVENT_FORK), and the child is adopted as a target of
 * its own, with a clone of the parent's store owner, from that moment
 * (engine_add_fork_child(), a struct fault_events callback). The event
 * does not say which process the child is: the reaper names it a moment
 * later (engine_name_children()) and gives it a reference to its uffd,
 * as attach does for a target.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "remote.h"

/* The fork event names the child's uffd but not the child: it is the
 * youngest child of the parent that we do not serve yet. (Two threads of
 * the parent forking at the same instant could be told apart only by
 * probing their memory; we accept the tiny ambiguity for the pid, which
 * only labels statistics and watches for exit.) */
static pid_t find_new_child(struct zsw_engine *e, pid_t parent) {
        unsigned long long best_start = 0;
        pid_t best = 0;
        char path[64];
        DIR *tasks;
        struct dirent *de;

        snprintf(path, sizeof(path), "/proc/%d/task", parent);
        tasks = opendir(path);
        if (!tasks)
                return 0;
        while ((de = readdir(tasks))) {
                char cpath[300], buf[4096];
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", parent, de->d_name);
                f = fopen(cpath, "re");
                if (!f)
                        continue;
                while (fscanf(f, "%4095s", buf) == 1) {
                        pid_t c = (pid_t) atoi(buf);
                        unsigned long long st = 0;
                        char spath[64], sbuf[1024], *p;
                        FILE *sf;

                        if (c <= 0 || engine_find_target(e, c))
                                continue;
                        snprintf(spath, sizeof(spath), "/proc/%d/stat", c);
                        sf = fopen(spath, "re");
                        if (!sf)
                                continue;
                        p = fgets(sbuf, sizeof(sbuf), sf);
                        fclose(sf);
                        if (p && (p = strrchr(sbuf, ')')) &&
                            sscanf(p + 1,
                                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d "
                                   "%*d %*d %*d %*d %*d %llu",
                                   &st) == 1 &&
                            st >= best_start) {
                                best_start = st;
                                best = c;
                        }
                }
                fclose(f);
        }
        closedir(tasks);
        return best;
}

void engine_add_fork_child(void *userdata, struct zsw_target *parent, int child_uffd) {
        struct zsw_engine *e = userdata;
        struct zsw_target *t = target_new(0, e->log);
        int r;

        if (!t) {
                safe_close(child_uffd);
                return;
        }
        t->uffd = child_uffd;
        t->owner_config = parent->owner_config;
        t->prefetch_window = parent->prefetch_window;
        t->prefetch_now = parent->prefetch_window;
        t->zero_window = parent->zero_window;
        /* The child's pages that the parent had evicted are missing in the
         * child too: it gets its own view of the same entries. */
        r = zsw_store_owner_clone(parent->owner, &t->owner);
        if (r < 0) {
                zsw_log(e->log, LOG_ERR,
                        "Cannot follow fork of process %d: %s; the child's evicted pages are lost",
                        parent->pid, strerror(-r));
                target_free(t);
                return;
        }
        /* The child is not in the parent's children list until its fork
         * completes, which waits for us to finish reading this event: the
         * reaper names it a moment later. */
        t->parent_pid = parent->pid;
        r = engine_publish(e, t);
        if (r < 0) {
                target_free(t);
                return;
        }
        zsw_log(e->log, LOG_INFO, "Process %d forked; serving its child too", parent->pid);
}

/* A fork child's uffd arrived in our process only: if we died, its
 * missing pages would read as zeros. Like an attached target, it keeps a
 * reference of its own, and the parent's, which it inherited, goes. */
static void give_child_its_uffd(struct zsw_engine *e, struct zsw_target *t) {
        _cleanup_remote_ struct zsw_remote *remote = NULL;
        int r, tfd;

        r = zsw_remote_seize(t->pid, e->log, &remote);
        if (r >= 0)
                r = zsw_remote_install_fd(remote, t->uffd, &tfd);
        if (r < 0) {
                zsw_log(e->log, LOG_WARNING,
                        "Cannot give fork child %d a reference to its userfaultfd: %s; it depends "
                        "on "
                        "zswapd staying up",
                        t->pid, strerror(-r));
                return;
        }
        t->target_uffd = tfd;
        zsw_log(e->log, LOG_DEBUG, "Fork child %d holds its userfaultfd as fd %d", t->pid, tfd);
}

/* Names fork children (see engine_add_fork_child) and watches their exit. */
void engine_name_children(struct zsw_engine *e) {
        for (;;) {
                struct epoll_event ev = { .events = EPOLLIN };
                struct zsw_target *t;
                pid_t pid;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = e->targets; t; t = t->next)
                        if (t->pid == 0 && t->parent_pid > 0 && !atomic_load(&t->dead))
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return;
                pid = find_new_child(e, t->parent_pid);
                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                t->parent_pid = 0; /* one try: a child gone already stays unnamed */
                if (pid > 0) {
                        t->pid = pid;
                        t->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
                        ev.data.u64 = REAPER_EVENT_EXIT;
                        if (t->pidfd >= 0)
                                epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, t->pidfd, &ev);
                }
                zsw_mutex_unlock(&e->table_lock);
                if (pid > 0)
                        give_child_its_uffd(e, t);
        }
}
