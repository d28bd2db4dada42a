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
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "remote.h"
#include "vma.h"

/* How many mappings of a candidate a probe tries: the first ones may be
 * memory we never registered (our scratch area, mappings made since). */
#define PROBE_MAPPINGS 16

/* Pages of candidate c, one per private anonymous mapping (the only kind
 * we register), present and not write-protected: where a probe can show
 * whether a uffd's memory is c's. Returns how many, or a negative errno. */
static int probe_pages(pid_t c, const struct zsw_log *log, uint64_t pages[PROBE_MAPPINGS]) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list maps = {};
        _cleanup_close_ int pagemap = -EBADF;
        char path[64];
        int r, n = 0;

        snprintf(path, sizeof(path), "/proc/%d/maps", c);
        r = zsw_vma_list_read(AT_FDCWD, path, log, &maps);
        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/proc/%d/pagemap", c);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                return -errno;
        for (size_t i = 0; i < maps.n && n < PROBE_MAPPINGS; i++) {
                const struct zsw_vma *v = &maps.vmas[i];
                struct zsw_page_run run;
                uint64_t next;

                if (v->shared || !v->readable || !v->writable || v->inode != 0 ||
                    (v->name[0] && strcmp(v->name, "[heap]") != 0 &&
                     strncmp(v->name, "[anon:", 6) != 0))
                        continue;
                if (zsw_vma_scan(pagemap, v->start, v->end, PAGE_IS_PRESENT | PAGE_IS_WRITTEN, 0,
                                 &run, 1, &next) > 0)
                        pages[n++] = run.start;
        }
        return n;
}

/* Whether page of process c is write-protected (uffd-wp) now. */
static int page_protected(pid_t c, uint64_t page) {
        _cleanup_close_ int pagemap = -EBADF;
        struct zsw_page_run run;
        char path[64];
        uint64_t next;
        int r;

        snprintf(path, sizeof(path), "/proc/%d/pagemap", c);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                return -errno;
        r = zsw_vma_scan(pagemap, page, page + ZSW_PAGE_SIZE, PAGE_IS_PRESENT, PAGE_IS_WRITTEN,
                         &run, 1, &next);
        return r < 0 ? r : r > 0;
}

/* Whether uffd, which a fork event handed us, is process c's: a page of
 * c, present and not protected, is write-protected through uffd, and
 * only if uffd's memory is c's does c's page table show it. The
 * protection is lifted at once (a write meanwhile raises a WP fault,
 * which the fault thread answers by lifting it too). Another process's
 * page cannot change so: no false match. A page uffd does not cover
 * (ENOENT: not registered there) tells nothing, and the next is tried;
 * a write of c's racing the probe misses a match, for the next pass. */
static int uffd_is_of(int uffd, pid_t c, const struct zsw_log *log) {
        uint64_t pages[PROBE_MAPPINGS];
        int n = probe_pages(c, log, pages);

        for (int i = 0; i < n; i++) {
                int r = zsw_uffd_writeprotect(uffd, pages[i], ZSW_PAGE_SIZE, true, false);
                int was;

                if (r == -ENOENT)
                        continue;
                if (r < 0)
                        return r;
                was = page_protected(c, pages[i]);
                r = zsw_uffd_writeprotect(uffd, pages[i], ZSW_PAGE_SIZE, false, false);
                return was > 0 && r >= 0;
        }
        return n < 0 ? n : 0;
}

/* The child whose memory uffd is, among the live children of parent
 * that we do not serve yet, or 0. The fork event names neither the child
 * nor its pid, and the child is linked to its parent only after we have
 * read the event; start times (10 ms ticks) cannot tell two children of
 * one tick apart, nor a child from an older one that exec'd: each
 * candidate is probed (uffd_is_of()). */
static pid_t find_child(struct zsw_engine *e, pid_t parent, int uffd) {
        struct dirent *de;
        pid_t found = 0;
        char path[64];
        DIR *tasks;

        snprintf(path, sizeof(path), "/proc/%d/task", parent);
        tasks = opendir(path);
        while (tasks && found == 0 && (de = readdir(tasks))) {
                char cpath[300], buf[32];
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", parent, de->d_name);
                f = fopen(cpath, "re");
                if (!f)
                        continue;
                while (found == 0 && fscanf(f, "%31s", buf) == 1) {
                        pid_t c = (pid_t) atoi(buf);

                        if (c > 0 && !engine_find_target(e, c) && uffd_is_of(uffd, c, e->log) > 0)
                                found = c;
                }
                fclose(f);
        }
        if (tasks)
                closedir(tasks);
        return found;
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
         * reaper, woken now, names it as soon as it is. */
        t->parent_pid = parent->pid;
        t->forked_ns = zsw_now_ns();
        r = engine_publish(e, t);
        if (r < 0) {
                target_free(t);
                return;
        }
        zsw_log(e->log, LOG_INFO, "Process %d forked; serving its child too", parent->pid);
        engine_reaper_wake(e);
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

/* How long after its fork a child not named yet has the reaper come
 * back at once: a fork completes microseconds after we read its event.
 * A child named later (one with no page a probe can use yet) waits for
 * the reaper's regular passes. */
#define NAME_SOON_NS (1000 * UINT64_C(1000000))

/* Names fork children (see engine_add_fork_child) and watches their exit.
 * A child not linked to its parent yet is tried again on the next pass.
 * Returns whether a child named none of those tries is younger than
 * NAME_SOON_NS: the reaper then comes back at once. */
bool engine_name_children(struct zsw_engine *e) {
        uint64_t now = zsw_now_ns();
        bool soon = false;

        for (struct zsw_target *t = NULL;;) {
                struct epoll_event ev = { .events = EPOLLIN };
                pid_t pid;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = t ? t->next : e->targets; t; t = t->next)
                        if (t->pid == 0 && t->parent_pid > 0 && !atomic_load(&t->dead))
                                break;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return soon;
                pid = find_child(e, t->parent_pid, t->uffd);
                if (pid <= 0) {
                        soon = soon || now - t->forked_ns < NAME_SOON_NS;
                        continue;
                }
                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                t->parent_pid = 0;
                t->pid = pid;
                t->pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
                ev.data.u64 = REAPER_EVENT_EXIT;
                if (t->pidfd >= 0)
                        epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, t->pidfd, &ev);
                zsw_mutex_unlock(&e->table_lock);
                give_child_its_uffd(e, t);
        }
}
