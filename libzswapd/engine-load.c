/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Loading a state that zsw_engine_save() or zsw_engine_salvage() wrote
 * (engine-state.c; layout: engine-state.h) into a fresh engine: every
 * record checked, each target's store rebuilt with its pages and the
 * events its last zswapd had read and not applied, each process checked
 * to be the one saved (pidfd and start time), its uffd served (taken
 * from the process itself after a death) and every thread waiting in it
 * woken. Nothing is published until the whole state has loaded.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine-internal.h"
#include "engine-state.h"
#include "uffd.h"
#include "vma.h"

/* The state is read with read(2) through one buffer rather than mapped:
 * a mapping would take a page fault per 4 KiB of state, and a first touch
 * is slow under a hypervisor (docs/design.md, the store). Every record is
 * 8-byte aligned and shorter than the buffer. */
#define READER_BUF (1u << 20)

struct reader {
        int fd;
        uint8_t *buf;
        size_t len, pos; /* bytes in buf, and the next to take */
        uint64_t left;   /* bytes of the state not read yet, trailer excluded */
        uint64_t taken;
        /* Entries made so far, by id. */
        struct zsw_entry **entries;
        uint32_t *families; /* of entries[i]: the family it may be shared in */
        size_t n_entries, cap;
        uint32_t version; /* the header's */
        pid_t keeper;     /* version 4: who keeps the unnamed children's uffds */
};

/* The next len bytes of the state; valid until the next call. */
static const void *reader_take(struct reader *rd, size_t len) {
        const void *p;

        if (len > READER_BUF)
                return NULL;
        if (rd->len - rd->pos < len) {
                memmove(rd->buf, rd->buf + rd->pos, rd->len - rd->pos);
                rd->len -= rd->pos;
                rd->pos = 0;
                while (rd->len < len && rd->left > 0) {
                        ssize_t k = read(rd->fd, rd->buf + rd->len,
                                         (size_t) MIN((uint64_t) (READER_BUF - rd->len), rd->left));

                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0)
                                return NULL;
                        rd->len += (size_t) k;
                        rd->left -= (uint64_t) k;
                }
                if (rd->len < len)
                        return NULL;
        }
        p = rd->buf + rd->pos;
        rd->pos += len;
        rd->taken += len;
        return p;
}

static int reader_note_entry(struct reader *rd, struct zsw_entry *e, uint32_t family) {
        if (rd->n_entries == rd->cap) {
                size_t cap = rd->cap ? rd->cap * 2 : 1u << 16;
                struct zsw_entry **v = realloc(rd->entries, cap * sizeof(*v));
                uint32_t *f;

                if (!v)
                        return -ENOMEM;
                rd->entries = v;
                f = realloc(rd->families, cap * sizeof(*f));
                if (!f)
                        return -ENOMEM;
                rd->families = f;
                rd->cap = cap;
        }
        rd->families[rd->n_entries] = family;
        rd->entries[rd->n_entries++] = e;
        return 0;
}

/* Pages of one owner imported ZSW_STORE_BATCH_MAX at a time. Their
 * payloads point into the reader's buffer, so the batch is imported before
 * the buffer may move (a take that would refill it). */
struct import_batch {
        struct zsw_store_page pages[ZSW_STORE_BATCH_MAX];
        struct zsw_entry *share[ZSW_STORE_BATCH_MAX];
        size_t n, n_new;
};

static int batch_flush(struct reader *rd, struct zsw_owner *o, uint32_t family,
                       struct import_batch *b) {
        struct zsw_entry *made[ZSW_STORE_BATCH_MAX];
        int r;

        if (b->n == 0)
                return 0;
        r = zsw_store_import_batch(o, b->pages, b->share, b->n, made);
        if (r < 0)
                return r == -ENOMEM ? r : -EPROTO;
        for (size_t i = 0; i < b->n && r >= 0; i++)
                if (!b->share[i])
                        r = reader_note_entry(rd, made[i], family);
        b->n = b->n_new = 0;
        return r;
}

/* The largest page record: what must be in the buffer for a take not to
 * move it. */
#define PAGE_RECORD_MAX (sizeof(struct state_page) + sizeof(struct state_entry) + ZSW_PAGE_SIZE)

/* Pages of owner o of fork family family (the index of its first target);
 * in *ret_lost, how many of its entries are lost (ZSW_STORE_PAGE_LOST). */
static int load_pages(struct reader *rd, struct zsw_owner *o, uint32_t family, uint64_t n,
                      uint64_t *ret_lost) {
        struct import_batch b = {};
        uint64_t lost = 0;
        int r;

        for (uint64_t i = 0; i < n; i++) {
                const struct state_page *sp;
                const struct state_entry *se;
                struct zsw_store_page *p;

                if (b.n == ZSW_STORE_BATCH_MAX || rd->len - rd->pos < PAGE_RECORD_MAX) {
                        r = batch_flush(rd, o, family, &b);
                        if (r < 0)
                                return r;
                }
                sp = reader_take(rd, sizeof(*sp));
                if (!sp || sp->id > rd->n_entries + b.n_new)
                        return -EPROTO;
                if (sp->id >= rd->n_entries && sp->id < rd->n_entries + b.n_new) {
                        /* An entry of this very batch at a second page (a
                         * move a dead zswapd had copied and not yet
                         * dropped at its source): made first. sp stays
                         * valid, the batch's records were taken already. */
                        r = batch_flush(rd, o, family, &b);
                        if (r < 0)
                                return r;
                }
                p = &b.pages[b.n];
                *p = (struct zsw_store_page) { .pgno = sp->pgno };
                if (sp->id < rd->n_entries) {
                        /* Entries are shared within a family only: its
                         * LRU and its dictionary are the family's. */
                        if (rd->families[sp->id] != family)
                                return -EPROTO;
                        b.share[b.n++] = rd->entries[sp->id];
                        continue;
                }
                if (sp->id != rd->n_entries + b.n_new)
                        return -EPROTO;
                se = reader_take(rd, sizeof(*se));
                if (!se)
                        return -EPROTO;
                lost += se->state == ZSW_STORE_PAGE_LOST;
                p->state = se->state;
                p->compressor = se->compressor;
                p->length = se->length;
                p->value = se->value;
                p->payload = reader_take(rd, ALIGN8(se->length));
                if (!p->payload)
                        return -EPROTO;
                b.share[b.n++] = NULL;
                b.n_new++;
        }
        r = batch_flush(rd, o, family, &b);
        if (r >= 0)
                *ret_lost = lost;
        return r;
}

/* Whether the saved target is still the same process; its new pidfd. */
static bool load_same_process(const struct state_target *st, int *ret_pidfd) {
        uint64_t start = 0;
        int pidfd;

        pidfd = (int) syscall(SYS_pidfd_open, st->pid, 0);
        if (pidfd < 0)
                return false;
        /* Read after the pidfd is open: a pid reused before that has
         * another start time. */
        if (state_proc_start_time(st->pid, &start) < 0 || start != st->start_time) {
                close(pidfd);
                return false;
        }
        (void) state_fd_set_cloexec(pidfd, true);
        *ret_pidfd = pidfd;
        return true;
}

/* fd, ours, if it is a userfaultfd (close-on-exec from now on); else
 * -EBADF, and fd closed. */
static int uffd_checked(int fd) {
        char path[64], link[64];
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, link, sizeof(link) - 1);
        if (n < 0 || (link[n] = 0, strcmp(link, "anon_inode:[userfaultfd]") != 0)) {
                close(fd);
                return -EBADF;
        }
        (void) state_fd_set_cloexec(fd, true);
        return fd;
}

/* Descriptor fd of the process of pidfd, taken with pidfd_getfd(): the
 * uffd of a target whose zswapd died (the target's own reference, which
 * the dead process checked was the one it served, kcmp), or of a fork
 * child not named yet (the dead zswapd's, which its rescue task keeps);
 * -errno if it is not a userfaultfd now. */
static int adopt_uffd(int pidfd, int target_fd) {
        int fd = (int) syscall(SYS_pidfd_getfd, pidfd, target_fd, 0);

        return fd < 0 ? -errno : uffd_checked(fd);
}

/* After a zswapd died: entries of pages present in the target go. They
 * are of a round that had not dropped its pages yet, or of a fault whose
 * page was placed before its entry was forgotten; the page present is
 * the target's content. Pages a dead round left write-protected stay so
 * until written: a write to a page of no round is let through (fault.c). */
int engine_drop_present(struct zsw_target *t) {
        struct zsw_page_run runs[64];
        _cleanup_close_ int pagemap = -EBADF;
        uint64_t pos = WAKE_START, dropped = 0;
        char path[64];

        snprintf(path, sizeof(path), "/proc/%d/pagemap", t->pid);
        pagemap = open(path, O_RDONLY | O_CLOEXEC);
        if (pagemap < 0)
                return -errno;
        while (pos < WAKE_END) {
                int k = zsw_vma_scan(pagemap, pos, WAKE_END, PAGE_IS_PRESENT, 0, runs,
                                     ARRAY_SIZE(runs), &pos);

                if (k < 0)
                        return k;
                if (k == 0)
                        break;
                for (int i = 0; i < k; i++)
                        dropped +=
                                zsw_store_invalidate(t->owner, runs[i].start / ZSW_PAGE_SIZE,
                                                     (runs[i].end - runs[i].start) / ZSW_PAGE_SIZE);
        }
        return (int) MIN(dropped, (uint64_t) INT32_MAX);
}

/* Whether t is still the process of rec, with its uffd (adopt: taken
 * from it now): 0, -ESRCH if it exited (or exec'd), or -errno if the uffd
 * is gone. */
static int load_check_target(struct zsw_target *t, const struct state_target *rec, bool adopt) {
        if (!load_same_process(rec, &t->pidfd))
                return -ESRCH;
        if (adopt) {
                t->uffd = adopt_uffd(t->pidfd, t->target_uffd);
                if (t->uffd < 0)
                        return t->uffd;
        }
        return zsw_uffd_mm_alive(t->uffd) == -ESRCH ? -ESRCH : 0;
}

/* Applies the events a dead zswapd read from the target and had not
 * applied (pending_events()), in the order they came. The last one may
 * have been applied in part: an invalidation is one again, a move takes
 * what is left at its source (zsw_store_move_rest()). */
static int load_events(struct reader *rd, struct zsw_target *t, uint32_t n) {
        if (n > TARGET_MSGS)
                return -EPROTO;
        for (uint32_t i = 0; i < n; i++) {
                const struct state_event *ev = reader_take(rd, sizeof(*ev));
                uint64_t a, b;

                if (!ev)
                        return -EPROTO;
                a = ev->start / ZSW_PAGE_SIZE;
                b = ev->end / ZSW_PAGE_SIZE;
                if (ev->event == UFFD_EVENT_REMOVE || ev->event == UFFD_EVENT_UNMAP) {
                        if (a < b)
                                (void) zsw_store_invalidate(t->owner, a, b - a);
                } else if (ev->event == UFFD_EVENT_REMAP) {
                        int r = zsw_store_move_rest(t->owner, a, b, ev->len / ZSW_PAGE_SIZE);

                        if (r < 0 && r != -EINVAL && r != -ERANGE)
                                return r;
                } else
                        return -EPROTO;
        }
        return 0;
}

/* Makes the target of one record, with its owner (in the family of an
 * earlier target when it has one) and its pages. */
static int load_target(struct zsw_engine *e, struct reader *rd, struct zsw_target **made, size_t i,
                       const struct state_target *st) {
        struct zsw_target *t;
        uint64_t lost = 0;
        size_t dict_len;
        int r, level;

        if (st->family > i || st->compressor >= _ZSW_COMPRESSOR_MAX)
                return -EPROTO;
        /* lz4's level was 0 before lz4 had levels. */
        level = zsw_compress_level(st->compressor, st->level);
        if (level < 0)
                return -EPROTO;
        t = target_new(st->pid, e->log);
        if (!t)
                return -ENOMEM;
        made[i] = t;
        t->owner_config = (struct zsw_owner_config) {
                .compressor = st->compressor,
                .level = level,
                .max_pages = st->max_pages,
                .no_writeback = st->no_writeback,
        };
        t->prefetch_window = MIN(st->prefetch_window, FAULT_PREFETCH_MAX);
        t->prefetch_now = t->prefetch_window;
        t->zero_window = MIN(st->zero_window, ZSW_ZERO_WINDOW_MAX);
        t->aging = st->aging;
        atomic_store(&t->throttle, st->throttle);
        t->scratch = st->scratch;
        t->scratch_size = st->scratch_size;
        t->target_uffd = st->target_uffd;
        if (st->pid == 0)
                engine_fork_child_adopted(t, st->start_time);
        if (st->family == i)
                r = zsw_store_owner_new(e->store, &t->owner_config, &t->owner);
        else
                r = zsw_store_owner_new_sibling(made[st->family]->owner, &t->owner);
        if (r < 0)
                return r == -ENOMEM ? r : -EPROTO;
        if (st->dict) {
                const struct state_dict *sd;
                const void *content;

                if (rd->version < 2 || st->family != i || !(sd = reader_take(rd, sizeof(*sd))) ||
                    sd->length < 1 || sd->length > ZSW_DICT_MAX)
                        return -EPROTO;
                dict_len = (size_t) sd->length;
                content = reader_take(rd, ALIGN8(dict_len));
                if (!content)
                        return -EPROTO;
                r = zsw_store_set_dict(t->owner, content, dict_len);
                if (r < 0)
                        return r == -ENOMEM ? r : -EPROTO;
        }
        r = load_pages(rd, t->owner, st->family, st->n_pages, &lost);
        if (r >= 0)
                r = load_events(rd, t, st->n_events);
        if (r >= 0 && lost > 0)
                zsw_log(e->log, LOG_ERR,
                        "Process %d: %" PRIu64 " of its pages were lost with the swapfile of a "
                        "zswapd that died, which could not read them; the process gets SIGBUS "
                        "where it touches one",
                        st->pid, lost);
        return r;
}

static int load_check_header(const struct state_header *h, const struct state_trailer *tr,
                             uint64_t size, struct zsw_engine_error *err) {
        if (!h || memcmp(h->magic, ZSW_STATE_MAGIC, sizeof(h->magic)) != 0)
                return engine_fail(err, -EPROTO, "not a zswapd state (bad magic)");
        if (h->version < ZSW_STATE_VERSION_MIN || h->version > ZSW_STATE_VERSION ||
            h->header_size != sizeof(*h) ||
            h->target_size !=
                    (h->version >= 3 ? sizeof(struct state_target) : STATE_TARGET_V2_SIZE))
                return engine_fail(err, -EPROTO,
                                   "state version %u (layout %u/%u) is not one "
                                   "this zswapd reads (%u to %u)",
                                   h->version, h->header_size, h->target_size,
                                   ZSW_STATE_VERSION_MIN, ZSW_STATE_VERSION);
        if (h->page_size != ZSW_PAGE_SIZE)
                return engine_fail(err, -EPROTO, "state of %u-byte pages", h->page_size);
        if (memcmp(tr->magic, ZSW_STATE_END, sizeof(tr->magic)) != 0 || tr->total_bytes != size)
                return engine_fail(err, -EPROTO, "state truncated or corrupt (no end marker)");
        return 0;
}

/* Every target of the state, made and filled, and its record; nothing
 * published. */
static int load_all(struct zsw_engine *e, struct reader *rd, const struct state_trailer *tr,
                    bool adopt, struct zsw_target ***ret_made, struct state_target **ret_recs,
                    size_t *ret_n, struct zsw_engine_error *err) {
        const struct state_header *hp = reader_take(rd, sizeof(*hp));
        struct state_header h;
        int r;

        r = load_check_header(hp, tr, rd->left + rd->len + sizeof(*tr), err);
        if (r < 0)
                return r;
        h = *hp;
        rd->version = h.version;
        rd->keeper = h.version >= 4 ? h.keeper : 0;
        *ret_made = calloc(MAX(h.n_targets, 1u), sizeof(**ret_made));
        *ret_recs = calloc(MAX(h.n_targets, 1u), sizeof(**ret_recs));
        if (!*ret_made || !*ret_recs)
                return engine_fail(err, -ENOMEM, "out of memory for the state");
        *ret_n = h.n_targets;
        for (size_t i = 0; i < h.n_targets; i++) {
                const struct state_target *st = reader_take(rd, h.target_size);

                /* An older record is a prefix of this one: no events. A
                 * fork child not named yet comes only from a dead zswapd,
                 * with its keeper. */
                if (st)
                        memcpy(&(*ret_recs)[i], st, h.target_size);
                r = !st || (st->pid <= 0 && (!adopt || st->pid < 0 || rd->keeper <= 0))
                            ? -EPROTO
                            : load_target(e, rd, *ret_made, i, &(*ret_recs)[i]);
                if (r < 0)
                        return engine_fail(err, r, "cannot load target %zu of the state: %s", i,
                                           r == -EPROTO ? "malformed record" : strerror(-r));
                /* Adopted: taken from the target once it is checked. */
                (*ret_made)[i]->uffd = adopt ? -EBADF : (*ret_recs)[i].uffd;
        }
        if (rd->left != 0 || rd->pos != rd->len)
                return engine_fail(err, -EPROTO, "state has bytes after its last target");
        return 0;
}

/* The keeper a dead zswapd's state names (its rescue task, which keeps
 * the uffds of fork children not named yet open for us, itself or as the
 * zswapd binary it executes for that): a pidfd of it, or -ESRCH if that
 * process is gone (or another one has its pid), or shares our
 * descriptors (our own rescue task). */
static int keeper_open(pid_t keeper) {
        static const char keeper_cmdline[] = "zswapd-rescue\0--keep-uffds";
        char path[64], comm[32] = "", cmdline[sizeof(keeper_cmdline) + 1] = "";
        int pidfd;

        pidfd = (int) syscall(SYS_pidfd_open, keeper, 0);
        if (pidfd < 0)
                return -ESRCH;
        /* Read after the pidfd is open: the pid's process then. */
        snprintf(path, sizeof(path), "/proc/%d/comm", keeper);
        (void) zsw_read_small_file(path, comm, sizeof(comm));
        snprintf(path, sizeof(path), "/proc/%d/cmdline", keeper);
        (void) zsw_read_small_file(path, cmdline, sizeof(cmdline));
        if ((strcmp(comm, "zswapd-rescue\n") != 0 &&
             memcmp(cmdline, keeper_cmdline, sizeof(keeper_cmdline)) != 0) ||
            syscall(SYS_kcmp, getpid(), keeper, KCMP_FILES, 0, 0) == 0) {
                close(pidfd);
                return -ESRCH;
        }
        (void) state_fd_set_cloexec(pidfd, true);
        return pidfd;
}

/* The uffd that keeper held as number and handed to the service manager,
 * which gave it to us (zsw_engine_add_kept_uffd()); -ESRCH if none. */
static int take_kept(struct zsw_engine *e, pid_t keeper, int number) {
        for (size_t i = 0; i < e->n_kept; i++) {
                struct kept_uffd *k = &e->kept[i];

                if (k->keeper == keeper && k->number == number && k->fd >= 0)
                        return uffd_checked(TAKE_FD(k->fd));
        }
        return -ESRCH;
}

/* Whether the target of rec can be served (0), with its uffd; -ESRCH if
 * its process exited (or exec'd), another -errno if it cannot be served
 * (logged; the caller frees t). */
static int load_take(struct zsw_engine *e, struct zsw_target *t, const struct state_target *rec,
                     bool adopt, pid_t keeper, int keeper_pidfd) {
        const char *when = adopt ? "after the previous zswapd died" : "during the re-exec";
        int r;

        if (t->pid == 0) {
                /* Its uffd is the dead zswapd's, which the keeper holds,
                 * or handed to the service manager for us. */
                r = keeper_pidfd >= 0 ? adopt_uffd(keeper_pidfd, rec->uffd)
                                      : take_kept(e, keeper, rec->uffd);
                if (r >= 0) {
                        t->uffd = r;
                        r = zsw_uffd_mm_alive(t->uffd) == -ESRCH ? -ESRCH : 0;
                }
                /* Taken from a newer state already (a zswapd died taking
                 * this one over), as a process would be. */
                zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
                for (struct zsw_target *o = e->targets; r == 0 && o; o = o->next)
                        if (syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, o->uffd, t->uffd) == 0)
                                r = -EEXIST;
                zsw_mutex_unlock(&e->table_lock);
                if (r == -EEXIST) {
                        zsw_log(e->log, LOG_INFO,
                                "A fork child not named yet was taken over from a newer state "
                                "already");
                        return r;
                }
                if (r == -ESRCH && t->uffd >= 0)
                        zsw_log(e->log, LOG_INFO,
                                "A fork child not named yet exited %s; its pages are freed", when);
                else if (r < 0)
                        zsw_log_errno(e->log, LOG_ERR, r,
                                      "Cannot take over a fork child not named yet: the dead "
                                      "zswapd's rescue task no longer keeps its userfaultfd: "
                                      "%m; its %" PRIu64 " pages are lost",
                                      rec->n_pages);
                return r;
        }
        if (adopt && engine_find_target(e, t->pid)) {
                zsw_log(e->log, LOG_INFO, "Process %d was taken over from a newer state already",
                        t->pid);
                return -EEXIST;
        }
        r = load_check_target(t, rec, adopt);
        if (r == -ESRCH)
                zsw_log(e->log, LOG_INFO, "Process %d exited %s; its pages are freed", t->pid,
                        when);
        else if (r < 0)
                zsw_log_errno(e->log, LOG_ERR, r,
                              "Cannot take over process %d: its userfaultfd (its fd "
                              "%d) is gone: %m; its %" PRIu64 " pages are lost",
                              t->pid, t->target_uffd, rec->n_pages);
        if (r < 0 || !adopt)
                return r;
        /* A copy left is never served (its page is present) and goes with
         * the page's removal or unmap. */
        r = engine_drop_present(t);
        if (r > 0)
                zsw_log(e->log, LOG_INFO,
                        "Process %d: %d pages taken by the dead zswapd were still present; "
                        "their copies are dropped",
                        t->pid, r);
        else if (r < 0)
                zsw_log_errno(e->log, LOG_WARNING, r,
                              "Cannot scan process %d for pages present again: %m; their "
                              "copies stay stored",
                              t->pid);
        return 0;
}

/* Serves each target that is still its process and wakes its waiters;
 * frees the others. adopt: the state of a zswapd that died, whose uffds
 * the targets hold (adopt_uffd()), but for the fork children not named
 * yet, whose uffds keeper holds: it is killed once they are taken. */
static int load_publish(struct zsw_engine *e, struct zsw_target **made,
                        const struct state_target *recs, size_t n, bool adopt, pid_t keeper,
                        zsw_engine_adopted_fn adopted, void *userdata) {
        const char *when = adopt ? "after the previous zswapd died" : "during the re-exec";
        _cleanup_close_ int keeper_pidfd = keeper > 0 ? keeper_open(keeper) : -EBADF;
        int adopted_n = 0, unnamed = 0;

        for (size_t i = 0; i < n; i++) {
                struct zsw_target *t = made[i];
                int r;

                if (!t)
                        continue; /* load_all() made every one; for the analyzer */
                /* Kept for the next state too, until its policy names it. */
                memcpy(t->label, recs[i].label, sizeof(t->label) - 1);
                t->label[sizeof(t->label) - 1] = 0;
                made[i] = NULL;
                if (!adopt)
                        (void) state_fd_set_cloexec(t->uffd, true);
                r = load_take(e, t, &recs[i], adopt, keeper, keeper_pidfd);
                if (r >= 0)
                        r = engine_publish(e, t);
                else {
                        target_free(t);
                        continue;
                }
                if (r < 0) {
                        /* A re-exec's uffd is the only one we have: never
                         * closed, or its pages would read as zeros. An
                         * adopted one is our copy of the target's. */
                        zsw_log_errno(e->log, LOG_ERR, r, "Cannot serve process %d %s: %m; %s",
                                      t->pid, when,
                                      adopt ? "its pages are lost and its faults wait for good: "
                                              "kill it"
                                            : "its faults wait for the next zswapd");
                        if (!adopt)
                                t->uffd = -EBADF;
                        target_free(t);
                        continue;
                }
                /* Published first: the woken faults come to a fault thread. */
                r = zsw_uffd_wake(t->uffd, WAKE_START, WAKE_END - WAKE_START);
                if (r < 0)
                        zsw_log_errno(e->log, LOG_WARNING, r, "Cannot wake the faults of %d: %m",
                                      t->pid);
                if (adopted && t->pid > 0)
                        adopted(userdata, t->pid, t->label);
                unnamed += t->pid == 0;
                adopted_n++;
        }
        if (keeper_pidfd >= 0) {
                /* What it kept is ours now (or lost, and logged). */
                (void) syscall(SYS_pidfd_send_signal, keeper_pidfd, SIGKILL, NULL, 0);
                zsw_log(e->log, LOG_INFO,
                        "Took %d fork children not named yet from the dead zswapd's rescue "
                        "task %d, which kept their userfaultfds; it exits now",
                        unnamed, keeper);
        } else if (unnamed > 0)
                zsw_log(e->log, LOG_INFO,
                        "Took %d fork children not named yet, whose userfaultfds the service "
                        "manager kept",
                        unnamed);
        if (unnamed > 0)
                engine_reaper_wake(e);
        return adopted_n;
}

static int state_load(struct zsw_engine *e, int fd, bool adopt, zsw_engine_adopted_fn adopted,
                      void *userdata, struct zsw_engine_error *err) {
        _cleanup_free_ struct state_target *recs = NULL;
        _cleanup_free_ struct zsw_target **made = NULL;
        struct state_trailer tr = {};
        struct reader rd = { .fd = fd };
        uint64_t start = zsw_now_ns();
        struct stat sb;
        size_t n = 0;
        int r;

        if (fstat(fd, &sb) < 0)
                return engine_fail(err, -errno, "cannot read the state: %m");
        if ((uint64_t) sb.st_size < sizeof(struct state_header) + sizeof(tr) ||
            pread(fd, &tr, sizeof(tr), sb.st_size - (off_t) sizeof(tr)) != (ssize_t) sizeof(tr) ||
            lseek(fd, 0, SEEK_SET) < 0)
                return engine_fail(err, -EPROTO, "the state is truncated (%" PRIu64 " bytes)",
                                   (uint64_t) sb.st_size);
        rd.left = (uint64_t) sb.st_size - sizeof(tr);
        rd.buf = malloc(READER_BUF);
        if (!rd.buf)
                return engine_fail(err, -ENOMEM, "out of memory for the state");
        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        /* Several states are adopted one after the other (rescue.c). */
        if (e->n_targets > 0 && !adopt)
                r = engine_fail(err, -EBUSY, "the engine serves targets already");
        else
                r = load_all(e, &rd, &tr, adopt, &made, &recs, &n, err);
        if (r >= 0)
                r = load_publish(e, made, recs, n, adopt, rd.keeper, adopted, userdata);
        else
                /* Nothing taken over: the descriptors stay open, so the
                 * targets wait rather than read zeros. */
                for (size_t i = 0; made && i < n; i++)
                        if (made[i]) {
                                made[i]->uffd = -EBADF;
                                target_free(made[i]);
                        }
        zsw_mutex_unlock(&e->control_lock);
        free(rd.entries);
        free(rd.families);
        free(rd.buf);
        if (r >= 0)
                zsw_log(e->log, LOG_INFO,
                        "State loaded in %" PRIu64 " ms: %d targets adopted, %zu "
                        "entries",
                        (zsw_now_ns() - start) / 1000000, r, rd.n_entries);
        return r;
}

int zsw_engine_load(struct zsw_engine *e, int fd, zsw_engine_adopted_fn adopted, void *userdata,
                    struct zsw_engine_error *err) {
        return state_load(e, fd, false, adopted, userdata, err);
}

int zsw_engine_adopt(struct zsw_engine *e, int fd, zsw_engine_adopted_fn adopted, void *userdata,
                     struct zsw_engine_error *err) {
        return state_load(e, fd, true, adopted, userdata, err);
}
