/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Handing the engine to the next zswapd binary across execve(2): freezing
 * it (nothing new starts, what runs ends, fault threads stop reading), the
 * save of its state into a descriptor (layout: engine-state.h) and the
 * load of it by the new process. The targets' userfaultfds cross the exec
 * as descriptors; the targets hold their own references too, so a fault
 * raised meanwhile waits in the kernel and is never answered with zeros.
 *
 * Order (zswapd side in daemon/main.c): freeze, save, exec; then, in the
 * new process, load: verify each process, rebuild its store, serve its
 * uffd, and wake every thread waiting on it, because a fault message the
 * old process read and never answered would otherwise wait forever (a wake
 * makes the kernel raise the fault again, to us).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "engine-internal.h"
#include "engine-state.h"
#include "uffd.h"
#include "vma.h"
#include "writeback.h"

_Static_assert(ZSW_STATE_LABEL_MAX == ZSW_ENGINE_LABEL_MAX, "a target's label fits its record");

/* The lowest address a wake may name (mmap_min_addr is at most this
 * here) and the end of x86_64 user space: one UFFDIO_WAKE over it wakes
 * every waiter of a uffd, registered ranges or not. */
#define WAKE_START (UINT64_C(1) << 16)
#define WAKE_END ((UINT64_C(1) << 47) - ZSW_PAGE_SIZE)

#define ALIGN8(n) (((size_t) (n) + 7u) & ~(size_t) 7u)

/* ---- process identity --------------------------------------------------- */

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks
 * since boot; with the pid, the identity of a process. */
static int proc_start_time(pid_t pid, uint64_t *ret) {
        char path[64], buf[1024], *p;
        unsigned long long st;
        ssize_t n;
        int fd;

        /* open and read, not stdio: zswapd-rescue calls this after the
         * other threads died, maybe holding stdio's locks. */
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -EIO;
        buf[n] = 0;
        if (!(p = strrchr(buf, ')')) ||
            sscanf(p + 1,
                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                   "%*d %*d %llu",
                   &st) != 1)
                return -EIO;
        *ret = st;
        return 0;
}

static int fd_set_cloexec(int fd, bool on) {
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
        engine_name_children(e);
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
        engine_name_children(e);
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
                (void) fd_set_cloexec(t->uffd, true);
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

/* Whether t holds, as its own descriptor target_uffd, the very uffd we
 * serve it through: then a new zswapd can take it from t after we are
 * gone (pidfd_getfd()), and t's faults wait for it meanwhile. */
static bool target_holds_uffd(const struct zsw_target *t) {
        return t->target_uffd >= 0 &&
               syscall(SYS_kcmp, getpid(), t->pid, KCMP_FILE, t->uffd, t->target_uffd) == 0;
}

/* The targets to save, in a new *ret_v: live, named (orphaned: and
 * holding their uffd); (*ret_family)[i] the first of i's family. Sized by
 * the list, not n_targets: a dead engine_publish() may have linked one
 * without counting it. What it leaves out alive is counted in *skipped
 * (may be NULL). */
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
                if (t->pid <= 0 || (orphaned && !target_holds_uffd(t))) {
                        if (skipped && t->pid <= 0)
                                skipped->unnamed++;
                        else if (skipped)
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
 * injected thread still ran on our registers: that target dies of
 * SIGTRAP anyway (docs/design.md), and invalidating its dropped pages
 * again changes nothing. Returns how many, in ev. */
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
                .target_uffd = target_holds_uffd(t) ? t->target_uffd : -1,
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

        r = proc_start_time(t->pid, &st.start_time);
        if (r < 0)
                return r;
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
        bool dicts = false, pending = false;
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
        }
        h.version = pending ? ZSW_STATE_VERSION : dicts ? 2u : ZSW_STATE_VERSION_MIN;
        h.target_size = w.target_size =
                pending ? sizeof(struct state_target) : STATE_TARGET_V2_SIZE;
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
                r = fd_set_cloexec(v[i]->uffd, false);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        (void) fd_set_cloexec(v[i]->uffd, true);
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

/* ---- load --------------------------------------------------------------- */

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
        if (proc_start_time(st->pid, &start) < 0 || start != st->start_time) {
                close(pidfd);
                return false;
        }
        (void) fd_set_cloexec(pidfd, true);
        *ret_pidfd = pidfd;
        return true;
}

/* The uffd of a target whose zswapd died: the target's own reference,
 * which the dead process checked was the one it served (kcmp), taken
 * with pidfd_getfd(); -errno if it is not a userfaultfd now. */
static int adopt_uffd(const struct zsw_target *t) {
        char path[64], link[64];
        ssize_t n;
        int fd;

        fd = (int) syscall(SYS_pidfd_getfd, t->pidfd, t->target_uffd, 0);
        if (fd < 0)
                return -errno;
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        n = readlink(path, link, sizeof(link) - 1);
        if (n < 0 || (link[n] = 0, strcmp(link, "anon_inode:[userfaultfd]") != 0)) {
                close(fd);
                return -EBADF;
        }
        (void) fd_set_cloexec(fd, true);
        return fd;
}

/* After a zswapd died: entries of pages present in the target go. They
 * are of a round that had not dropped its pages yet, or of a fault whose
 * page was placed before its entry was forgotten; the page present is
 * the target's content. Pages a dead round left write-protected stay so
 * until written: a write to a page of no round is let through (fault.c). */
static int adopt_drop_present(struct zsw_target *t) {
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
                t->uffd = adopt_uffd(t);
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
        *ret_made = calloc(MAX(h.n_targets, 1u), sizeof(**ret_made));
        *ret_recs = calloc(MAX(h.n_targets, 1u), sizeof(**ret_recs));
        if (!*ret_made || !*ret_recs)
                return engine_fail(err, -ENOMEM, "out of memory for the state");
        *ret_n = h.n_targets;
        for (size_t i = 0; i < h.n_targets; i++) {
                const struct state_target *st = reader_take(rd, h.target_size);

                /* An older record is a prefix of this one: no events. */
                if (st)
                        memcpy(&(*ret_recs)[i], st, h.target_size);
                r = st ? load_target(e, rd, *ret_made, i, &(*ret_recs)[i]) : -EPROTO;
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

/* Serves each target that is still its process and wakes its waiters;
 * frees the others. adopt: the state of a zswapd that died, whose uffds
 * the targets hold (adopt_uffd()). */
static int load_publish(struct zsw_engine *e, struct zsw_target **made,
                        const struct state_target *recs, size_t n, bool adopt,
                        zsw_engine_adopted_fn adopted, void *userdata) {
        const char *when = adopt ? "after the previous zswapd died" : "during the re-exec";
        int adopted_n = 0;

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
                        (void) fd_set_cloexec(t->uffd, true);
                if (adopt && engine_find_target(e, t->pid)) {
                        zsw_log(e->log, LOG_INFO,
                                "Process %d was taken over from a newer state already", t->pid);
                        target_free(t);
                        continue;
                }
                r = load_check_target(t, &recs[i], adopt);
                if (r == -ESRCH) {
                        zsw_log(e->log, LOG_INFO, "Process %d exited %s; its pages are freed",
                                t->pid, when);
                        target_free(t);
                        continue;
                }
                if (r < 0) {
                        zsw_log_errno(e->log, LOG_ERR, r,
                                      "Cannot take over process %d: its userfaultfd (its fd "
                                      "%d) is gone: %m; its %" PRIu64 " pages are lost",
                                      t->pid, t->target_uffd, recs[i].n_pages);
                        target_free(t);
                        continue;
                }
                if (adopt) {
                        /* A copy left is never served (its page is present)
                         * and goes with the page's removal or unmap. */
                        r = adopt_drop_present(t);
                        if (r > 0)
                                zsw_log(e->log, LOG_INFO,
                                        "Process %d: %d pages taken by the dead zswapd were "
                                        "still present; their copies are dropped",
                                        t->pid, r);
                        else if (r < 0)
                                zsw_log_errno(e->log, LOG_WARNING, r,
                                              "Cannot scan process %d for pages present again: "
                                              "%m; their copies stay stored",
                                              t->pid);
                }
                r = engine_publish(e, t);
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
                if (adopted)
                        adopted(userdata, t->pid, t->label);
                adopted_n++;
        }
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
                r = load_publish(e, made, recs, n, adopt, adopted, userdata);
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
