/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Fork children: a target's fork hands its fault thread the child's
 * userfaultfd (UFFD_EVENT_FORK), and the child is adopted as a target of
 * its own, with a clone of the parent's store owner, from that moment
 * (engine_add_fork_child(), a struct fault_events callback). The event
 * does not say which process the child is: the reaper names it a moment
 * later (engine_name_children()) and gives it a reference to its uffd,
 * as attach does for a target. It looks among the parent's children
 * first, then among the processes started around the fork: a child made
 * with CLONE_PARENT, or one whose parent exited at once (a daemon's
 * double fork), is another process's child.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "engine-state.h"
#include "remote.h"
#include "vma.h"

/* How many mappings of a candidate a probe tries. */
#define PROBE_MAPPINGS 16

/* Pages of candidate c, one per private anonymous mapping (the only kind
 * we register), present and not write-protected: where a probe can show
 * whether a uffd's memory is c's. From /proc/PID/maps, the first
 * mappings; from smaps (slower: it walks the page tables), only mappings
 * registered with a uffd, for a process whose first mappings are memory
 * we never registered (our scratch area, mappings made since, a
 * sanitizer's shadow). Returns how many, or a negative errno. */
static int probe_pages(pid_t c, int pagemap, bool smaps, const struct zsw_log *log,
                       uint64_t pages[PROBE_MAPPINGS]) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list maps = {};
        char path[64];
        int r, n = 0;

        snprintf(path, sizeof(path), "/proc/%d/%s", c, smaps ? "smaps" : "maps");
        r = zsw_vma_list_read(AT_FDCWD, path, log, &maps);
        if (r < 0)
                return r;
        for (size_t i = 0; i < maps.n && n < PROBE_MAPPINGS; i++) {
                const struct zsw_vma *v = &maps.vmas[i];
                struct zsw_page_run run;
                uint64_t next;

                if (v->shared || !v->readable || !v->writable || v->inode != 0 ||
                    (v->name[0] && strcmp(v->name, "[heap]") != 0 &&
                     strncmp(v->name, "[anon:", 6) != 0) ||
                    (smaps && !(v->has_vmflags && (v->flags & ZSW_VMF_UFFD))))
                        continue;
                if (zsw_vma_scan(pagemap, v->start, v->end, PAGE_IS_PRESENT | PAGE_IS_WRITTEN, 0,
                                 &run, 1, &next) > 0)
                        pages[n++] = run.start;
        }
        return n;
}

/* Whether page is write-protected (uffd-wp) now, in pagemap's process. */
static int page_protected(int pagemap, uint64_t page) {
        struct zsw_page_run run;
        uint64_t next;
        int r;

        r = zsw_vma_scan(pagemap, page, page + ZSW_PAGE_SIZE, PAGE_IS_PRESENT, PAGE_IS_WRITTEN,
                         &run, 1, &next);
        return r < 0 ? r : r > 0;
}

/* Whether uffd, which a fork event handed us, is process c's: a page of
 * c, present and not protected, is write-protected through uffd, and
 * only if uffd's memory is c's does c's page table show it; lifted again,
 * c's page table must show that too. (A write meanwhile raises a WP
 * fault, which the fault thread answers by lifting the protection: no
 * match this time.) A page uffd does not cover (ENOENT: not registered
 * there) tells nothing, and the next is tried. The caller makes sure c
 * does not share another target's memory (a vfork child shares its
 * parent's, whose pages a round may protect meanwhile). */
static int uffd_is_of(int uffd, pid_t c, const struct zsw_log *log) {
        uint64_t pages[PROBE_MAPPINGS] = { 0 };
        _cleanup_close_ int pagemap = -EBADF;
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/pagemap", c);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                return -errno;
        for (int pass = 0; pass < 2; pass++) {
                int n = probe_pages(c, pagemap, pass == 1, log, pages);

                if (n < 0)
                        return n;
                for (int i = 0; i < n; i++) {
                        int r = zsw_uffd_writeprotect(uffd, pages[i], ZSW_PAGE_SIZE, true, false);
                        int on, off;

                        if (r == -ENOENT)
                                continue;
                        if (r < 0)
                                return r;
                        on = page_protected(pagemap, pages[i]);
                        r = zsw_uffd_writeprotect(uffd, pages[i], ZSW_PAGE_SIZE, false, false);
                        if (on < 0 || r < 0)
                                return on < 0 ? on : r;
                        off = page_protected(pagemap, pages[i]);
                        return on > 0 && off == 0;
                }
        }
        return 0;
}

/* How many children of one parent naming looks at. */
#define CHILDREN_MAX 1024

/* The live children of parent, as listed by each of its threads. */
static size_t list_children(pid_t parent, pid_t *kids, size_t max) {
        struct dirent *de;
        char path[64];
        size_t n = 0;
        DIR *tasks;

        snprintf(path, sizeof(path), "/proc/%d/task", parent);
        tasks = opendir(path);
        while (tasks && n < max && (de = readdir(tasks))) {
                char cpath[300], buf[32];
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(cpath, sizeof(cpath), "/proc/%d/task/%s/children", parent, de->d_name);
                f = fopen(cpath, "re");
                if (!f)
                        continue;
                while (n < max && fscanf(f, "%31s", buf) == 1)
                        if (atoi(buf) > 0)
                                kids[n++] = (pid_t) atoi(buf);
                fclose(f);
        }
        if (tasks)
                closedir(tasks);
        return n;
}

/* A process that may be a fork child, and its parent. */
struct candidate {
        pid_t pid, parent;
        uint64_t start; /* /proc start-time ticks, for the order */
};

/* The candidate of c[0..n) (tried from the last one down) whose memory
 * uffd is, among those we do not serve yet, with a pidfd of it in
 * *ret_pidfd; 0 if none is. Start times (10 ms ticks) cannot tell two
 * children of one tick apart, nor a child from an older one that exec'd:
 * each candidate is probed (uffd_is_of()). One that shares its parent's
 * memory (vfork, posix_spawn) is skipped: a round of the parent's could
 * protect the probed page meanwhile. The pidfd, opened before the probe
 * and still alive after it, is of the process probed. */
static pid_t pick_child(struct zsw_engine *e, const struct candidate *c, size_t n, int uffd,
                        int *ret_pidfd) {
        for (size_t i = n; i-- > 0;) {
                int pidfd;

                if (engine_find_target(e, c[i].pid) ||
                    syscall(SYS_kcmp, c[i].parent, c[i].pid, KCMP_VM, 0, 0) == 0)
                        continue;
                pidfd = (int) syscall(SYS_pidfd_open, c[i].pid, 0);
                if (pidfd < 0)
                        continue;
                if (uffd_is_of(uffd, c[i].pid, e->log) > 0 &&
                    syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0) {
                        *ret_pidfd = pidfd;
                        return c[i].pid;
                }
                close(pidfd);
        }
        return 0;
}

/* The child of parent whose memory uffd is (pick_child()). The fork event
 * names neither the child nor its pid, and the child is linked to its
 * parent only after we have read the event; each thread lists its
 * children oldest first, so the youngest are tried first. */
static pid_t find_child(struct zsw_engine *e, pid_t parent, int uffd, int *ret_pidfd) {
        struct candidate c[CHILDREN_MAX];
        pid_t kids[CHILDREN_MAX];
        size_t n = list_children(parent, kids, ARRAY_SIZE(kids));

        for (size_t i = 0; i < n; i++)
                c[i] = (struct candidate) { .pid = kids[i], .parent = parent };
        return pick_child(e, c, n, uffd, ret_pidfd);
}

static uint64_t clock_ticks(void) {
        return (uint64_t) MAX(sysconf(_SC_CLK_TCK), 1L);
}

/* Now in /proc's start-time ticks. */
static uint64_t now_tick(void) {
        uint64_t hz = clock_ticks();
        struct timespec ts;

        clock_gettime(CLOCK_BOOTTIME, &ts);
        return (uint64_t) ts.tv_sec * hz + (uint64_t) ts.tv_nsec * hz / UINT64_C(1000000000);
}

#define WIDE_BEFORE_S 10u

static uint64_t tick_distance(uint64_t a, uint64_t b) {
        return a > b ? a - b : b - a;
}

/* Farther from the fork's tick (*tick) first: pick_child() tries the last
 * first. */
static int cmp_farther(const void *a, const void *b, void *tick) {
        uint64_t x = tick_distance(((const struct candidate *) a)->start, *(uint64_t *) tick);
        uint64_t y = tick_distance(((const struct candidate *) b)->start, *(uint64_t *) tick);

        return (x < y) - (x > y);
}

/* The same among every process that started from WIDE_BEFORE_S seconds
 * before the fork's tick to a second after it: a child that is not its
 * fork parent's child. The child's start time is taken once we have read
 * the event, the tick when the fault thread handles it (later, if other
 * messages of its batch waited on locks); the probe decides, the window
 * only keeps the search short. Those nearest the fork's tick are tried
 * first. */
static pid_t find_child_anywhere(struct zsw_engine *e, uint64_t forked_tick, int uffd,
                                 int *ret_pidfd) {
        struct candidate c[CHILDREN_MAX];
        DIR *proc = opendir("/proc");
        uint64_t hz = clock_ticks();
        struct dirent *de;
        size_t n = 0;

        while (proc && n < ARRAY_SIZE(c) && (de = readdir(proc))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);

                if (pid <= 0 || *end || pid == getpid() ||
                    state_proc_stat((pid_t) pid, &c[n].parent, &c[n].start) < 0 ||
                    c[n].start + WIDE_BEFORE_S * hz < forked_tick || c[n].start > forked_tick + hz)
                        continue;
                c[n++].pid = (pid_t) pid;
        }
        if (proc)
                closedir(proc);
        qsort_r(c, n, sizeof(c[0]), cmp_farther, &forked_tick);
        return pick_child(e, c, n, uffd, ret_pidfd);
}

/* When a child not found among its parent's children has every process
 * searched: WIDE_FIRST_NS after its fork, then twice as long after each
 * search, up to WIDE_MAX_NS (a search reads every process's stat). */
#define WIDE_FIRST_NS (10 * UINT64_C(1000000))
#define WIDE_MAX_NS (10 * UINT64_C(1000000000))

/* t, forked at forked_tick, is named from now on: the first search of
 * every process in first_ns. */
static void naming_start(struct zsw_target *t, uint64_t forked_tick, uint64_t first_ns) {
        t->forked_ns = zsw_now_ns();
        t->forked_tick = forked_tick;
        t->wide_gap_ns = WIDE_FIRST_NS;
        t->wide_ns = t->forked_ns + first_ns;
}

void engine_add_fork_child(void *userdata, struct zsw_target *parent, int child_uffd) {
        struct zsw_engine *e = userdata;
        /* First: the child's start time is the moment we read the event. */
        uint64_t forked_tick = now_tick();
        struct zsw_target *t = target_new(0, e->log);
        pid_t ppid;
        int r;

        if (!t) {
                safe_close(child_uffd);
                return;
        }
        /* 0 while the parent is not named either; the reaper names it. */
        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        ppid = parent->pid;
        zsw_mutex_unlock(&e->table_lock);
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
                        ppid, strerror(-r));
                target_free(t);
                return;
        }
        /* The child is not in the parent's children list until its fork
         * completes, which waits for us to finish reading this event: the
         * reaper, woken now, names it as soon as it is. */
        t->parent_pid = ppid;
        t->fork_parent = parent;
        naming_start(t, forked_tick, WIDE_FIRST_NS);
        r = engine_publish(e, t);
        if (r < 0) {
                target_free(t);
                return;
        }
        if (ppid > 0)
                zsw_log(e->log, LOG_INFO, "Process %d forked; serving its child too", ppid);
        else
                zsw_log(e->log, LOG_INFO,
                        "A fork child not named yet forked; serving its child too");
        engine_reaper_wake(e);
}

void engine_fork_child_adopted(struct zsw_target *t, uint64_t forked_tick) {
        /* Its parent is not known: the processes started around its fork
         * are searched at once. */
        naming_start(t, forked_tick, 0);
        t->adopted_unnamed = true;
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
 * A child not linked to its parent yet is tried again on the next pass;
 * now: every process is searched for those not found under their parent,
 * whenever it was last. Returns whether a child named none of those tries
 * is younger than NAME_SOON_NS: the reaper then comes back at once. */
bool engine_name_children(struct zsw_engine *e, bool now_all) {
        uint64_t now = zsw_now_ns();
        bool soon = false;

        for (struct zsw_target *t = NULL;;) {
                struct epoll_event ev = { .events = EPOLLIN };
                pid_t pid, parent = 0;
                int pidfd = -EBADF;

                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (t = t ? t->next : e->targets; t; t = t->next)
                        if (t->pid == 0 && !atomic_load(&t->dead))
                                break;
                /* A child of a child not named then: its parent's pid now. */
                if (t && t->parent_pid == 0 && t->fork_parent)
                        t->parent_pid = t->fork_parent->pid;
                if (t)
                        parent = t->parent_pid;
                zsw_mutex_unlock(&e->table_lock);
                if (!t)
                        return soon;
                pid = parent > 0 ? find_child(e, parent, t->uffd, &pidfd) : 0;
                if (pid <= 0 && (now_all || now >= t->wide_ns)) {
                        pid = find_child_anywhere(e, t->forked_tick, t->uffd, &pidfd);
                        t->wide_ns = now + t->wide_gap_ns;
                        t->wide_gap_ns = MIN(t->wide_gap_ns * 2, WIDE_MAX_NS);
                }
                if (pid <= 0) {
                        soon = soon || t->forked_ns + NAME_SOON_NS > now;
                        continue;
                }
                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                t->pid = pid;
                t->pidfd = pidfd;
                t->fork_parent = NULL;
                ev.data.u64 = REAPER_EVENT_EXIT;
                epoll_ctl(e->reaper_epfd, EPOLL_CTL_ADD, t->pidfd, &ev);
                zsw_mutex_unlock(&e->table_lock);
                give_child_its_uffd(e, t);
                /* Taken over after a death: as for any target then, the
                 * copies of pages present again go (engine_drop_present();
                 * no round can take its pages while control_lock is ours). */
                if (t->adopted_unnamed) {
                        int r;

                        /* Under serve_lock: no event of its (a move of
                         * entries onto a page scanned present) in between. */
                        zsw_mutex_lock(&t->serve_lock, ZSW_LOCK_SERVE);
                        r = engine_drop_present(t);
                        zsw_mutex_unlock(&t->serve_lock);
                        if (r < 0)
                                zsw_log(e->log, LOG_WARNING,
                                        "Cannot scan fork child %d for pages present again; "
                                        "their copies stay stored",
                                        t->pid);
                }
        }
}
