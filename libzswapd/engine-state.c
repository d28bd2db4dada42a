/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Handing the engine to the next zswapd binary across execve(2): freezing
 * it (nothing new starts, what runs ends, fault threads stop reading) and
 * the save of its state into a descriptor (layout: engine-state.h), or,
 * for a zswapd that died, the salvage of what its threads left; the new
 * process loads it (engine-load.c). The targets' userfaultfds cross the
 * exec as descriptors; the targets hold their own references too, so a
 * fault raised meanwhile waits in the kernel and is never answered with
 * zeros.
 *
 * Order (zswapd side in daemon/main.c): freeze, save, exec; then, in the
 * new process, load: verify each process, rebuild its store, serve its
 * uffd, and wake every thread waiting on it, because a fault message the
 * old process read and never answered would otherwise wait forever (a wake
 * makes the kernel raise the fault again, to us).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "engine-internal.h"
#include "engine-state.h"
#include "remote.h"
#include "uffd.h"
#include "writeback.h"

_Static_assert(ZSW_STATE_LABEL_MAX == ZSW_ENGINE_LABEL_MAX, "a target's label fits its record");

/* ---- process identity --------------------------------------------------- */

int state_proc_stat(pid_t pid, pid_t *ret_ppid, uint64_t *ret_start) {
        char path[64], buf[1024], *p;
        unsigned long long st;
        int r, ppid;

        /* Not stdio: zswapd-rescue calls this after the other threads
         * died, maybe holding stdio's locks. */
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        r = zsw_read_small_file(path, buf, sizeof(buf));
        if (r < 0)
                return r;
        if (!(p = strrchr(buf, ')')) ||
            sscanf(p + 1,
                   " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                   "%*d %*d %llu",
                   &ppid, &st) != 2)
                return -EIO;
        if (ret_ppid)
                *ret_ppid = ppid;
        *ret_start = st;
        return 0;
}

int state_proc_start_time(pid_t pid, uint64_t *ret) {
        return state_proc_stat(pid, NULL, ret);
}

int state_fd_set_cloexec(int fd, bool on) {
        int flags = fcntl(fd, F_GETFD);

        if (flags < 0)
                return -errno;
        flags = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC;
        return fcntl(fd, F_SETFD, flags) < 0 ? -errno : 0;
}

/* ---- freeze ------------------------------------------------------------- */

static bool target_live(struct zsw_target *t) {
        return !atomic_load(&t->dead) && zsw_uffd_mm_alive(t->uffd) != -ESRCH;
}

/* A target a fault thread serves, or NULL. */
static struct zsw_target *first_served(struct zsw_engine *e) {
        struct zsw_target *t;

        zsw_mutex_lock(&e->table_lock, ZSW_LOCK_TABLE);
        for (t = e->targets; t && !t->fault_thread; t = t->next)
                ;
        zsw_mutex_unlock(&e->table_lock);
        return t;
}

int zsw_engine_freeze(struct zsw_engine *e, struct zsw_engine_error *err) {
        uint64_t start = zsw_now_ns();
        struct zsw_target *t;

        /* The reaper takes control_lock: stopped before we take it. */
        engine_reaper_stop(e);
        zsw_mutex_lock(&e->control_lock, ZSW_LOCK_CONTROL);
        /* A fork child must have its pid to be found again after the exec. */
        engine_name_children(e, true);
        for (t = e->targets; t; t = t->next)
                if (t->pid == 0 && target_live(t)) {
                        zsw_mutex_unlock(&e->control_lock);
                        (void) engine_reaper_start(e);
                        return engine_fail(err, -EBUSY,
                                           "a fork child of a target is not named yet; "
                                           "try again in a moment");
                }
        /* A reclaim or age scan in flight holds its target's evict_lock
         * (taken under control_lock, which we now hold) until its last
         * round is committed or rolled back. */
        for (t = e->targets; t; t = t->next) {
                zsw_mutex_lock(&t->evict_lock, ZSW_LOCK_EVICT);
                zsw_mutex_unlock(&t->evict_lock);
        }
        /* The shrinker ends its step; the store is still when it is gone. */
        e->writeback = zsw_writeback_free(e->writeback);
        /* Out of the fault threads: faults wait in the kernel from now on,
         * and every message read so far has been handled. A fork read
         * meanwhile publishes its child (at the head of the table, served
         * already): go on until no target is served, and no fork can come
         * any more. */
        while ((t = first_served(e)))
                fault_threads_remove(e->faults, t);
        /* Such a child is named now, or the freeze is undone. */
        engine_name_children(e, true);
        for (t = e->targets; t; t = t->next)
                if (t->pid == 0 && target_live(t)) {
                        zsw_engine_thaw(e);
                        return engine_fail(err, -EBUSY,
                                           "a target forked during the freeze and "
                                           "its child is not named yet; try again in a moment");
                }
        zsw_log(e->log, LOG_INFO, "Engine frozen in %" PRIu64 " ms: %u targets, faults held",
                (zsw_now_ns() - start) / 1000000, e->n_targets);
        return 0;
}

void zsw_engine_thaw(struct zsw_engine *e) {
        for (struct zsw_target *t = e->targets; t; t = t->next) {
                int r = fault_threads_add(e->faults, t);

                if (r < 0)
                        zsw_log_errno(e->log, LOG_ERR, r,
                                      "Cannot serve process %d again: %m; its "
                                      "faults wait",
                                      t->pid);
                (void) state_fd_set_cloexec(t->uffd, true);
        }
        if (engine_writeback_start(e) < 0)
                zsw_log(e->log, LOG_ERR, "Cannot restart writeback after a failed re-exec");
        zsw_mutex_unlock(&e->control_lock);
        if (engine_reaper_start(e) < 0)
                zsw_log(e->log, LOG_ERR, "Cannot restart the reaper after a failed re-exec");
        zsw_log(e->log, LOG_INFO, "Engine thawed: serving again");
}

/* ---- save --------------------------------------------------------------- */

/* The save allocates with mmap(2), never malloc: a salvage runs after
 * zswapd's threads died at any instruction, one maybe inside malloc with
 * its arena's lock held, which nobody would ever release. Zeroed, like
 * calloc's; the size is kept in front for save_free(). */
#define SAVE_ALLOC_HEADER 16u

static void *save_alloc(size_t size) {
        size_t total = size + SAVE_ALLOC_HEADER;
        uint8_t *p;

        if (total < size)
                return NULL;
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return NULL;
        memcpy(p, &total, sizeof(total));
        return p + SAVE_ALLOC_HEADER;
}

static void save_free(void *p) {
        size_t total;

        if (!p)
                return;
        memcpy(&total, (uint8_t *) p - SAVE_ALLOC_HEADER, sizeof(total));
        munmap((uint8_t *) p - SAVE_ALLOC_HEADER, total);
}

static void save_freep(void *p) {
        save_free(*(void **) p);
}

struct writer {
        int fd;
        int error;
        uint64_t total;
        size_t n;
        uint8_t *buf;
        /* Entries given so far, to give a shared one once: open
         * addressing on the entry's address. */
        const void **keys;
        uint64_t *ids;
        size_t cap, n_entries;
        uint64_t lost;      /* entries of ZSW_STORE_PAGE_LOST */
        size_t target_size; /* of the version written */
};

#define WRITER_BUF (1u << 20)

static void writer_flush(struct writer *w) {
        size_t done = 0;

        while (w->error == 0 && done < w->n) {
                ssize_t k = write(w->fd, w->buf + done, w->n - done);

                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        w->error = k < 0 ? -errno : -EIO;
                else
                        done += (size_t) k;
        }
        w->n = 0;
}

static void writer_put(struct writer *w, const void *data, size_t len) {
        w->total += len;
        while (len > 0 && w->error == 0) {
                size_t k = MIN(len, WRITER_BUF - w->n);

                memcpy(w->buf + w->n, data, k);
                w->n += k;
                data = (const uint8_t *) data + k;
                len -= k;
                if (w->n == WRITER_BUF)
                        writer_flush(w);
        }
}

static size_t hash_ptr(const void *p, size_t cap) {
        return (size_t) (((uintptr_t) p >> 3) * UINT64_C(0x9e3779b97f4a7c15) >> 17) & (cap - 1);
}

/* The id of entry, and whether it is new (given now for the first time). */
static int writer_entry_id(struct writer *w, const void *entry, uint64_t *ret_id, bool *ret_new) {
        size_t i;

        if (w->n_entries * 2 >= w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 1u << 16;
                const void **keys = save_alloc(cap * sizeof(*keys));
                uint64_t *ids = save_alloc(cap * sizeof(*ids));

                if (!keys || !ids) {
                        save_free(keys);
                        save_free(ids);
                        return -ENOMEM;
                }
                for (size_t k = 0; k < w->cap; k++)
                        if (w->keys[k]) {
                                for (i = hash_ptr(w->keys[k], cap); keys[i];
                                     i = (i + 1) & (cap - 1))
                                        ;
                                keys[i] = w->keys[k];
                                ids[i] = w->ids[k];
                        }
                save_free(w->keys);
                save_free(w->ids);
                w->keys = keys;
                w->ids = ids;
                w->cap = cap;
        }
        for (i = hash_ptr(entry, w->cap); w->keys[i]; i = (i + 1) & (w->cap - 1))
                if (w->keys[i] == entry) {
                        *ret_id = w->ids[i];
                        *ret_new = false;
                        return 0;
                }
        w->keys[i] = entry;
        w->ids[i] = w->n_entries;
        *ret_id = w->n_entries++;
        *ret_new = true;
        return 0;
}

static int save_page(void *userdata, const struct zsw_store_page *p) {
        struct writer *w = userdata;
        struct state_page sp = { .pgno = p->pgno };
        bool is_new;
        int r;

        r = writer_entry_id(w, p->entry, &sp.id, &is_new);
        if (r < 0)
                return r;
        writer_put(w, &sp, sizeof(sp));
        if (is_new) {
                struct state_entry se = { .state = p->state,
                                          .compressor = p->compressor,
                                          .length = p->length,
                                          .value = p->value };

                static const uint8_t pad[8];

                w->lost += p->state == ZSW_STORE_PAGE_LOST;
                writer_put(w, &se, sizeof(se));
                writer_put(w, p->payload, p->length);
                /* Records stay 8-byte aligned. */
                writer_put(w, pad, ALIGN8(p->length) - p->length);
        }
        return w->error;
}

int zsw_engine_wait_tracers(void) {
        return zsw_remote_wait_tracers(ZSW_REMOTE_CALL_TIMEOUT_MS + 2 * ZSW_REMOTE_STOP_TIMEOUT_MS);
}

static bool target_fd_is_uffd(const struct zsw_target *t, int fd) {
        return fd >= 0 && syscall(SYS_kcmp, getpid(), t->pid, KCMP_FILE, t->uffd, fd) == 0;
}

/* Which descriptor of t's own is the very uffd we serve it through, or
 * -1: then a new zswapd can take it from t after we are gone
 * (pidfd_getfd()), and t's faults wait for it meanwhile. Mostly
 * target_uffd; else t's table is searched: a fork child given its uffd
 * by a tracer that finished the call after zswapd died holds it without
 * zswapd having learnt the number (remote.c), and would wait for good
 * if it were left out. getdents64, not readdir(): zswapd-rescue calls
 * this, maybe with malloc's locks held by a dead thread. */
static int target_uffd_fd(const struct zsw_target *t) {
        _Alignas(struct dirent64) char buf[4096];
        char path[64];
        int dir, found = -1;
        long n;

        if (target_fd_is_uffd(t, t->target_uffd))
                return t->target_uffd;
        snprintf(path, sizeof(path), "/proc/%d/fd", t->pid);
        dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0)
                return -1;
        while (found < 0 && (n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0)
                for (long off = 0; found < 0 && off < n;) {
                        const struct dirent64 *de = (const struct dirent64 *) (buf + off);
                        char *end;
                        long fd = strtol(de->d_name, &end, 10);

                        if (end != de->d_name && *end == 0 && fd <= INT_MAX &&
                            target_fd_is_uffd(t, (int) fd))
                                found = (int) fd;
                        off += de->d_reclen;
                }
        close(dir);
        return found;
}

/* fd into the ascending kept_fds of res (room checked by the caller). */
static void keep_fd(struct zsw_engine_salvage_result *res, int fd) {
        unsigned i = res->unnamed++;

        for (; i > 0 && res->kept_fds[i - 1] > fd; i--)
                res->kept_fds[i] = res->kept_fds[i - 1];
        res->kept_fds[i] = fd;
}

/* The targets to save, in a new *ret_v: live, named (orphaned: and
 * holding their uffd, or fork children not named yet, whose uffds the
 * caller keeps: skipped->kept_fds); (*ret_family)[i] the first of i's
 * family. Sized by the list, not n_targets: a dead engine_publish() may
 * have linked one without counting it. What it leaves out alive is
 * counted in *skipped (may be NULL). */
static int save_list(struct zsw_engine *e, bool orphaned, struct zsw_target ***ret_v,
                     uint32_t **ret_family, size_t *ret_n,
                     struct zsw_engine_salvage_result *skipped) {
        struct zsw_target **v;
        uint32_t *family;
        size_t n = 0, listed = 0;

        for (struct zsw_target *t = e->targets; t; t = t->next)
                listed++;
        v = save_alloc(MAX(listed, 1u) * sizeof(*v));
        family = save_alloc(MAX(listed, 1u) * sizeof(*family));
        if (!v || !family) {
                save_free(v);
                save_free(family);
                return -ENOMEM;
        }
        for (struct zsw_target *t = e->targets; t; t = t->next) {
                if (!target_live(t))
                        continue;
                if (t->pid <= 0) {
                        /* A re-exec waits until every child is named. */
                        if (!orphaned || !skipped || t->uffd < 0 ||
                            skipped->unnamed >= ZSW_SALVAGE_KEPT_MAX) {
                                if (skipped)
                                        skipped->unnamed_lost++;
                                continue;
                        }
                        keep_fd(skipped, t->uffd);
                } else if (orphaned && target_uffd_fd(t) < 0) {
                        if (skipped)
                                skipped->unheld++;
                        continue;
                }
                family[n] = (uint32_t) n;
                for (size_t k = 0; k < n; k++)
                        if (zsw_store_same_family(v[k]->owner, t->owner)) {
                                family[n] = (uint32_t) k;
                                break;
                        }
                v[n++] = t;
        }
        *ret_v = v;
        *ret_family = family;
        *ret_n = n;
        return 0;
}

/* with_dict: t is the first of its family in a version-2 state. */
/* The events of t a fault thread read and had not applied, the last
 * one maybe in part (target-internal.h): a dead zswapd's. None once the
 * fault threads are frozen. A REMOVE of our own drop by MADV_DONTNEED
 * (kernels without guard markers) can be among them only while the
 * injected thread still ran on our registers: its orphaned tracer leaves
 * that target to die of SIGTRAP (remote.c, finish_orphaned()), and
 * invalidating its dropped pages again changes nothing. Returns how many,
 * in ev. */
static size_t pending_events(const struct zsw_target *t, struct state_event ev[TARGET_MSGS]) {
        size_t n = 0;

        for (unsigned i = atomic_load(&t->msgs_applied); i < TARGET_MSGS; i++) {
                const struct uffd_msg *m = &t->msgs[i];

                if (m->event == UFFD_EVENT_REMOVE || m->event == UFFD_EVENT_UNMAP)
                        ev[n++] = (struct state_event) { .event = m->event,
                                                         .start = m->arg.remove.start,
                                                         .end = m->arg.remove.end };
                else if (m->event == UFFD_EVENT_REMAP)
                        ev[n++] = (struct state_event) { .event = m->event,
                                                         .start = m->arg.remap.from,
                                                         .end = m->arg.remap.to,
                                                         .len = m->arg.remap.len };
        }
        return n;
}

static int save_target(struct writer *w, struct zsw_target *t, uint32_t family, bool with_dict,
                       bool orphaned, const char *label) {
        struct state_event events[TARGET_MSGS];
        struct zsw_store_stats os;
        struct state_target st = {
                .pid = t->pid,
                .uffd = t->uffd,
                /* Only the very uffd we serve: a kept state may be adopted
                 * from it after a death (adopt_uffd()). */
                .target_uffd = t->pid > 0 ? target_uffd_fd(t) : -1,
                .family = family,
                .scratch = t->scratch,
                .scratch_size = t->scratch_size,
                .compressor = t->owner_config.compressor,
                .level = t->owner_config.level,
                .max_pages = t->owner_config.max_pages,
                .no_writeback = t->owner_config.no_writeback,
                .aging = t->aging,
                .throttle = atomic_load(&t->throttle),
                .prefetch_window = t->prefetch_window,
                .zero_window = t->zero_window,
        };
        static const uint8_t pad[8];
        const void *dict = NULL;
        size_t dict_len = 0;
        int r;

        if (t->pid > 0) {
                r = state_proc_start_time(t->pid, &st.start_time);
                if (r < 0)
                        return r;
        } else
                st.start_time = t->forked_tick;
        memcpy(st.label, label, strnlen(label, sizeof(st.label) - 1));
        /* Orphaned, the index is what is saved: a dead thread may have
         * changed it without its counters (and holds the lock of stats). */
        if (orphaned)
                st.n_pages = zsw_store_owner_count_orphaned(t->owner);
        else {
                zsw_store_owner_get_stats(t->owner, &os);
                st.n_pages = os.stored_pages;
        }
        /* A family's dictionary goes with its first target, before any
         * page that needs it. */
        if (with_dict)
                dict = zsw_store_dict(t->owner, &dict_len);
        st.dict = !!dict;
        st.n_events = (uint32_t) pending_events(t, events);
        writer_put(w, &st, w->target_size);
        if (dict) {
                struct state_dict sd = { .length = dict_len };

                writer_put(w, &sd, sizeof(sd));
                writer_put(w, dict, dict_len);
                writer_put(w, pad, ALIGN8(dict_len) - dict_len);
        }
        r = orphaned ? zsw_store_export_orphaned(t->owner, save_page, w)
                     : zsw_store_export(t->owner, save_page, w);
        if (r >= 0 && w->target_size == sizeof(st))
                writer_put(w, events, st.n_events * sizeof(events[0]));
        return r < 0 ? r : w->error;
}

/* Writes the state of e's targets to fd; the targets written in a new
 * *ret_v (*ret_n of them), the trailer in *ret_tr, the targets left out
 * and the pages saved without content in *skipped (may be NULL). */
static int state_write(struct zsw_engine *e, int fd, bool orphaned, struct zsw_target ***ret_v,
                       size_t *ret_n, struct state_trailer *ret_tr,
                       struct zsw_engine_salvage_result *skipped, struct zsw_engine_error *err) {
        _cleanup_(save_freep) struct zsw_target **v = NULL;
        _cleanup_(save_freep) uint32_t *family = NULL;
        struct writer w = { .fd = fd };
        struct state_header h = { .magic = ZSW_STATE_MAGIC,
                                  .version = ZSW_STATE_VERSION,
                                  .page_size = ZSW_PAGE_SIZE,
                                  .header_size = sizeof(h) };
        struct state_trailer tr = { .magic = ZSW_STATE_END };
        struct state_event events[TARGET_MSGS];
        bool dicts = false, pending = false, unnamed = false;
        size_t n;
        int r;

        w.buf = save_alloc(WRITER_BUF);
        r = w.buf ? save_list(e, orphaned, &v, &family, &n, skipped) : -ENOMEM;
        if (r < 0) {
                save_free(w.buf);
                return engine_fail(err, r, "out of memory for the state");
        }
        h.n_targets = (uint32_t) n;
        /* Without dictionaries, the version before them: a binary of the
         * release before can still take the state over. */
        for (size_t i = 0; i < n; i++) {
                dicts = dicts || zsw_store_dict(v[i]->owner, &(size_t) { 0 });
                pending = pending || pending_events(v[i], events) > 0;
                unnamed = unnamed || v[i]->pid <= 0;
        }
        h.version = unnamed ? ZSW_STATE_VERSION : pending ? 3u : dicts ? 2u : ZSW_STATE_VERSION_MIN;
        h.target_size = w.target_size =
                unnamed || pending ? sizeof(struct state_target) : STATE_TARGET_V2_SIZE;
        /* Only orphaned: the task saving, which keeps their uffds. */
        h.keeper = unnamed ? getpid() : 0;
        writer_put(&w, &h, sizeof(h));
        for (size_t i = 0; i < n && r >= 0; i++) {
                r = save_target(&w, v[i], family[i], dicts && family[i] == i, orphaned,
                                v[i]->label);
                if (r < 0)
                        (void) engine_fail(err, r, "cannot save process %d: %s", v[i]->pid,
                                           strerror(-r));
        }
        tr.n_entries = w.n_entries;
        tr.total_bytes = w.total + sizeof(tr);
        writer_put(&w, &tr, sizeof(tr));
        writer_flush(&w);
        save_free(w.buf);
        save_free(w.keys);
        save_free(w.ids);
        if (r >= 0 && w.error < 0)
                r = engine_fail(err, w.error, "cannot write the state: %s", strerror(-w.error));
        *ret_v = TAKE_PTR(v);
        *ret_n = n;
        *ret_tr = tr;
        if (skipped)
                skipped->lost = w.lost;
        return r;
}

int zsw_engine_save(struct zsw_engine *e, int fd, struct zsw_engine_error *err) {
        _cleanup_(save_freep) struct zsw_target **v = NULL;
        struct state_trailer tr = {};
        uint64_t start = zsw_now_ns();
        size_t n = 0;
        int r;

        r = state_write(e, fd, false, &v, &n, &tr, NULL, err);
        for (size_t i = 0; i < n && r >= 0; i++)
                r = state_fd_set_cloexec(v[i]->uffd, false);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        (void) state_fd_set_cloexec(v[i]->uffd, true);
                return err && err->message[0]
                               ? r
                               : engine_fail(err, r, "cannot keep a userfaultfd across exec: %s",
                                             strerror(-r));
        }
        zsw_log(e->log, LOG_INFO,
                "State saved in %" PRIu64 " ms: %zu targets, %" PRIu64 " entries, "
                "%" PRIu64 " bytes",
                (zsw_now_ns() - start) / 1000000, n, tr.n_entries, tr.total_bytes);
        return (int) n;
}

int zsw_engine_salvage(struct zsw_engine *e, int fd, struct zsw_engine_salvage_result *ret,
                       struct zsw_engine_error *err) {
        _cleanup_(save_freep) struct zsw_target **v = NULL;
        struct state_trailer tr = {};
        size_t n = 0;
        int r;

        *ret = (struct zsw_engine_salvage_result) {};
        r = state_write(e, fd, true, &v, &n, &tr, ret, err);
        if (r < 0)
                return r;
        ret->targets = n;
        ret->entries = tr.n_entries;
        ret->bytes = tr.total_bytes;
        return (int) n;
}
