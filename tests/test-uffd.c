/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * userfaultfd wrappers against the real kernel: faults served by a handler
 * thread, write protection, the non-cooperative events, and the
 * cross-process setup the daemon uses (a uffd created by one process and
 * served by another through pidfd_getfd).
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "uffd.h"
#include "util.h"

#define PAGE 4096ul
#define ALL_EVENTS                                                                        \
        (UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE | \
         UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_PAGEFAULT_FLAG_WP)

/* How the handler answers a page fault. */
enum serve {
        SERVE_COPY,     /* copy a page of bytes (page index + 1) */
        SERVE_ZERO,     /* map the zero page */
        SERVE_UNPROTECT /* clear write protection of the page */
};

#define MAX_MSGS 64

/* A handler thread: reads every message, answers faults, records all. */
struct handler {
        int uffd;
        int stop; /* eventfd */
        uint64_t base;
        enum serve serve;
        pthread_t thread;
        pthread_mutex_t lock;
        struct uffd_msg msgs[MAX_MSGS];
        unsigned nmsgs;
};

static void serve_fault(struct handler *h, const struct uffd_msg *m) {
        uint64_t addr = m->arg.pagefault.address & ~(PAGE - 1);
        static __thread char page[PAGE];

        switch (h->serve) {
        case SERVE_COPY:
                memset(page, (int) ((addr - h->base) / PAGE + 1), PAGE);
                ASSERT_EQ(zsw_uffd_copy(h->uffd, addr, page, PAGE, 0), (ssize_t) PAGE);
                break;
        case SERVE_ZERO:
                ASSERT_EQ(zsw_uffd_zeropage(h->uffd, addr, PAGE, false), (ssize_t) PAGE);
                break;
        case SERVE_UNPROTECT:
                ASSERT_OK(zsw_uffd_writeprotect(h->uffd, addr, PAGE, false, false));
                break;
        }
}

static void *handler_main(void *arg) {
        struct handler *h = arg;

        for (;;) {
                struct pollfd p[2] = { { .fd = h->uffd, .events = POLLIN },
                                       { .fd = h->stop, .events = POLLIN } };
                struct uffd_msg msgs[8];
                int n;

                ASSERT_GE(poll(p, 2, -1), 0);
                if (p[1].revents)
                        return NULL;
                n = zsw_uffd_read_msgs(h->uffd, msgs, ARRAY_SIZE(msgs));
                if (n == -EAGAIN)
                        continue;
                ASSERT_GT(n, 0);
                for (int i = 0; i < n; i++) {
                        if (msgs[i].event == UFFD_EVENT_PAGEFAULT)
                                serve_fault(h, &msgs[i]);
                        pthread_mutex_lock(&h->lock);
                        if (h->nmsgs < MAX_MSGS)
                                h->msgs[h->nmsgs++] = msgs[i];
                        pthread_mutex_unlock(&h->lock);
                }
        }
}

static void handler_start(struct handler *h, int uffd, uint64_t base, enum serve serve) {
        *h = (struct handler) { .uffd = uffd, .base = base, .serve = serve };
        h->stop = eventfd(0, EFD_CLOEXEC);
        ASSERT_GE(h->stop, 0);
        pthread_mutex_init(&h->lock, NULL);
        ASSERT_EQ(pthread_create(&h->thread, NULL, handler_main, h), 0);
}

static void handler_stop(struct handler *h) {
        uint64_t one = 1;

        ASSERT_EQ(write(h->stop, &one, sizeof(one)), (ssize_t) sizeof(one));
        ASSERT_EQ(pthread_join(h->thread, NULL), 0);
        close(h->stop);
}

/* Copies out the messages of one kind seen so far. */
static unsigned handler_events(struct handler *h, uint8_t event, struct uffd_msg *out) {
        unsigned n = 0;

        pthread_mutex_lock(&h->lock);
        for (unsigned i = 0; i < h->nmsgs; i++)
                if (h->msgs[i].event == event)
                        out[n++] = h->msgs[i];
        pthread_mutex_unlock(&h->lock);
        return n;
}

/* Events are read before the target's call returns but recorded just
 * after: wait for the record (meson's timeout bounds a missing one). */
static unsigned handler_wait(struct handler *h, uint8_t event, unsigned n, struct uffd_msg *out) {
        unsigned got;

        while ((got = handler_events(h, event, out)) < n)
                usleep(1000);
        return got;
}

static int new_uffd(uint64_t features) {
        uint64_t have = 0;
        int fd = zsw_uffd_new(0);

        if (fd == -EPERM || fd == -ENOSYS)
                TEST_SKIP("userfaultfd: %s", strerror(-fd));
        ASSERT_GE(fd, 0);
        ASSERT_OK(zsw_uffd_api(fd, features, &have));
        ASSERT_EQ_U(have & features, features);
        return fd;
}

static char *map_pages(size_t n) {
        char *p = mmap(NULL, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        ASSERT_TRUE(p != MAP_FAILED);
        return p;
}

struct toucher {
        volatile char *addr;
        size_t npages;
        char value; /* write this, or only read when 0 */
        unsigned sum;
};

static void *toucher_main(void *arg) {
        struct toucher *t = arg;

        for (size_t i = 0; i < t->npages; i++) {
                if (t->value)
                        t->addr[i * PAGE + 7] = t->value;
                t->sum += (unsigned char) t->addr[i * PAGE + 5];
        }
        return NULL;
}

TEST(api_reports_features_and_refuses_second_handshake) {
        _cleanup_close_ int fd = zsw_uffd_new(0);
        uint64_t have = 0;

        if (fd == -EPERM)
                TEST_SKIP("userfaultfd not permitted");
        ASSERT_GE(fd, 0);
        ASSERT_OK(zsw_uffd_api(fd, ALL_EVENTS, &have));
        ASSERT_EQ_U(have & ALL_EVENTS, ALL_EVENTS);
        ASSERT_ERRNO(zsw_uffd_api(fd, ALL_EVENTS, &have), EINVAL);
}

TEST(missing_faults_served_by_copy_and_zeropage) {
        for (int serve = SERVE_COPY; serve <= SERVE_ZERO; serve++) {
                _cleanup_close_ int fd = new_uffd(0);
                const size_t n = 16;
                char *p = map_pages(n);
                struct toucher t = { .addr = p, .npages = n };
                struct handler h;
                struct uffd_msg faults[MAX_MSGS];
                uint64_t ioctls = 0;
                pthread_t th;

                ASSERT_OK(zsw_uffd_register(fd, (uintptr_t) p, n * PAGE,
                                            UFFDIO_REGISTER_MODE_MISSING, &ioctls));
                ASSERT_TRUE(ioctls & (1ull << _UFFDIO_COPY));
                handler_start(&h, fd, (uintptr_t) p, serve);
                ASSERT_EQ(pthread_create(&th, NULL, toucher_main, &t), 0);
                ASSERT_EQ(pthread_join(th, NULL), 0);
                handler_stop(&h);

                /* Every page faulted exactly once, in order, as a read. */
                ASSERT_EQ(handler_events(&h, UFFD_EVENT_PAGEFAULT, faults), n);
                for (size_t i = 0; i < n; i++) {
                        ASSERT_EQ_U(faults[i].arg.pagefault.address & ~(PAGE - 1),
                                    (uintptr_t) p + i * PAGE);
                        ASSERT_FALSE(faults[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE);
                }
                ASSERT_EQ(t.sum, serve == SERVE_COPY ? n * (n + 1) / 2 : 0);
                ASSERT_OK(zsw_uffd_unregister(fd, (uintptr_t) p, n * PAGE));
                munmap(p, n * PAGE);
        }
}

TEST(copy_over_present_page_is_eexist_and_short_copy_counts) {
        _cleanup_close_ int fd = new_uffd(0);
        char *p = map_pages(4);
        static char src[4 * PAGE];

        ASSERT_OK(
                zsw_uffd_register(fd, (uintptr_t) p, 4 * PAGE, UFFDIO_REGISTER_MODE_MISSING, NULL));
        memset(src, 0x5a, sizeof(src));
        /* Page 2 becomes present first; a 4-page copy then stops there. */
        ASSERT_EQ(zsw_uffd_copy(fd, (uintptr_t) p + 2 * PAGE, src, PAGE, 0), (ssize_t) PAGE);
        ASSERT_ERRNO(zsw_uffd_copy(fd, (uintptr_t) p + 2 * PAGE, src, PAGE, 0), EEXIST);
        ASSERT_EQ(zsw_uffd_copy(fd, (uintptr_t) p, src, 4 * PAGE, 0), (ssize_t) (2 * PAGE));
        ASSERT_ERRNO(zsw_uffd_copy(fd, (uintptr_t) p + 2 * PAGE, src, 2 * PAGE, 0), EEXIST);
        ASSERT_EQ(zsw_uffd_copy(fd, (uintptr_t) p + 3 * PAGE, src, PAGE, 0), (ssize_t) PAGE);
        ASSERT_ERRNO(zsw_uffd_zeropage(fd, (uintptr_t) p, PAGE, false), EEXIST);
        for (size_t i = 0; i < 4 * PAGE; i++)
                ASSERT_EQ(p[i], 0x5a);
        munmap(p, 4 * PAGE);
}

TEST(write_to_protected_page_is_a_wp_fault) {
        _cleanup_close_ int fd = new_uffd(UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID);
        const size_t n = 4;
        char *p = map_pages(n);
        struct toucher t = { .addr = p, .npages = n, .value = 'w' };
        struct uffd_msg faults[MAX_MSGS];
        struct handler h;
        pthread_t th;

        memset(p, 'r', n * PAGE);
        ASSERT_OK(zsw_uffd_register(fd, (uintptr_t) p, n * PAGE,
                                    UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, NULL));
        ASSERT_OK(zsw_uffd_writeprotect(fd, (uintptr_t) p, n * PAGE, true, false));
        ASSERT_EQ(p[PAGE + 1], 'r'); /* reads pass */

        handler_start(&h, fd, (uintptr_t) p, SERVE_UNPROTECT);
        ASSERT_EQ(pthread_create(&th, NULL, toucher_main, &t), 0);
        ASSERT_EQ(pthread_join(th, NULL), 0);
        handler_stop(&h);

        ASSERT_EQ(handler_events(&h, UFFD_EVENT_PAGEFAULT, faults), n);
        for (size_t i = 0; i < n; i++) {
                ASSERT_TRUE(faults[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP);
                ASSERT_TRUE(faults[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE);
                ASSERT_NE(faults[i].arg.pagefault.feat.ptid, 0);
                ASSERT_EQ(p[i * PAGE + 7], 'w');
                ASSERT_EQ(p[i * PAGE + 6], 'r');
        }
        munmap(p, n * PAGE);
}

/* The target's own MADV_DONTNEED is announced before the pages go, and
 * madvise waits until the event has been read. */
TEST(event_remove_on_madv_dontneed) {
        _cleanup_close_ int fd = new_uffd(UFFD_FEATURE_EVENT_REMOVE);
        char *p = map_pages(8);
        struct uffd_msg ev[MAX_MSGS];
        struct handler h;

        memset(p, 1, 8 * PAGE);
        ASSERT_OK(
                zsw_uffd_register(fd, (uintptr_t) p, 8 * PAGE, UFFDIO_REGISTER_MODE_MISSING, NULL));
        handler_start(&h, fd, (uintptr_t) p, SERVE_ZERO);
        ASSERT_OK(madvise(p + 2 * PAGE, 3 * PAGE, MADV_DONTNEED));
        ASSERT_EQ(handler_wait(&h, UFFD_EVENT_REMOVE, 1, ev), 1);
        ASSERT_EQ_U(ev[0].arg.remove.start, (uintptr_t) p + 2 * PAGE);
        ASSERT_EQ_U(ev[0].arg.remove.end, (uintptr_t) p + 5 * PAGE);
        /* The dropped pages are missing again: reading them faults. */
        ASSERT_EQ(p[3 * PAGE], 0);
        ASSERT_EQ(p[PAGE], 1);
        handler_stop(&h);
        ASSERT_EQ(handler_events(&h, UFFD_EVENT_PAGEFAULT, ev), 1);
        munmap(p, 8 * PAGE);
}

TEST(event_remap_on_mremap_and_unmap_on_munmap) {
        _cleanup_close_ int fd = new_uffd(UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_UNMAP);
        char *p = map_pages(4), *dst = map_pages(8), *q;
        struct uffd_msg ev[MAX_MSGS];
        struct handler h;

        ASSERT_OK(
                zsw_uffd_register(fd, (uintptr_t) p, 4 * PAGE, UFFDIO_REGISTER_MODE_MISSING, NULL));
        handler_start(&h, fd, (uintptr_t) dst + 2 * PAGE, SERVE_COPY);
        q = mremap(p, 4 * PAGE, 4 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 2 * PAGE);
        ASSERT_TRUE(q == dst + 2 * PAGE);
        ASSERT_EQ(handler_wait(&h, UFFD_EVENT_REMAP, 1, ev), 1);
        ASSERT_EQ_U(ev[0].arg.remap.from, (uintptr_t) p);
        ASSERT_EQ_U(ev[0].arg.remap.to, (uintptr_t) q);
        ASSERT_EQ_U(ev[0].arg.remap.len, 4 * PAGE);
        /* The registration moved with the mapping. */
        ASSERT_EQ(q[PAGE], 2);

        ASSERT_OK(munmap(q + 2 * PAGE, 2 * PAGE));
        /* The move itself also reports the old range as unmapped, after
         * the REMAP: entries moved on REMAP must not be dropped by it. */
        ASSERT_EQ(handler_wait(&h, UFFD_EVENT_UNMAP, 2, ev), 2);
        ASSERT_EQ_U(ev[0].arg.remove.start, (uintptr_t) p);
        ASSERT_EQ_U(ev[0].arg.remove.end, (uintptr_t) p + 4 * PAGE);
        ASSERT_EQ_U(ev[1].arg.remove.start, (uintptr_t) q + 2 * PAGE);
        ASSERT_EQ_U(ev[1].arg.remove.end, (uintptr_t) q + 4 * PAGE);
        ASSERT_EQ(h.msgs[0].event, UFFD_EVENT_REMAP);
        ASSERT_EQ(h.msgs[1].event, UFFD_EVENT_UNMAP);
        /* Unmapping the rest raises another UNMAP: the reader must live. */
        ASSERT_OK(munmap(dst, 8 * PAGE));
        handler_stop(&h);
}

/* fork() waits for its event; the child's uffd arrives in this process,
 * already registered over the child's copy of the range, and serves the
 * child's faults from then on. */
TEST(event_fork_delivers_child_uffd) {
        _cleanup_close_ int fd = new_uffd(UFFD_FEATURE_EVENT_FORK);
        char *p = map_pages(4);
        struct uffd_msg ev[MAX_MSGS], msg;
        struct handler h;
        int child_uffd, status;
        char page[PAGE];
        pid_t pid;

        ASSERT_OK(
                zsw_uffd_register(fd, (uintptr_t) p, 4 * PAGE, UFFDIO_REGISTER_MODE_MISSING, NULL));
        ASSERT_EQ(zsw_uffd_copy(fd, (uintptr_t) p, memset(page, 9, PAGE), PAGE, 0), (ssize_t) PAGE);
        handler_start(&h, fd, (uintptr_t) p, SERVE_COPY);
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0)
                /* Page 0 was copied before the fork; page 3 is served by the
                 * parent through the child's uffd. */
                _exit(p[0] == 9 && p[3 * PAGE] == 0x33 ? 0 : 1);
        ASSERT_EQ(handler_wait(&h, UFFD_EVENT_FORK, 1, ev), 1);
        handler_stop(&h);
        child_uffd = (int) ev[0].arg.fork.ufd;
        ASSERT_GE(fcntl(child_uffd, F_GETFD), 0);
        ASSERT_TRUE(fcntl(child_uffd, F_GETFD) & FD_CLOEXEC);

        for (;;) {
                struct pollfd pfd = { .fd = child_uffd, .events = POLLIN };
                int n;

                ASSERT_EQ(poll(&pfd, 1, -1), 1);
                n = zsw_uffd_read_msgs(child_uffd, &msg, 1);
                if (n == -EAGAIN)
                        continue;
                ASSERT_EQ(n, 1);
                break;
        }
        ASSERT_EQ(msg.event, UFFD_EVENT_PAGEFAULT);
        ASSERT_EQ_U(msg.arg.pagefault.address & ~(PAGE - 1), (uintptr_t) p + 3 * PAGE);
        ASSERT_EQ(zsw_uffd_copy(child_uffd, (uintptr_t) p + 3 * PAGE, memset(page, 0x33, PAGE),
                                PAGE, 0),
                  (ssize_t) PAGE);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        /* The child is gone: its uffd refuses fills. */
        ASSERT_ERRNO(zsw_uffd_copy(child_uffd, (uintptr_t) p + 2 * PAGE, page, PAGE, 0), ESRCH);
        close(child_uffd);
        munmap(p, 4 * PAGE);
}

/* The daemon's setup: the target creates the uffd, another process takes
 * it with pidfd_getfd and does everything else on the target's memory. */
TEST(uffd_taken_with_pidfd_getfd_serves_the_child) {
        int to_child[2], to_parent[2], status;
        struct {
                int fd;
                uint64_t addr;
        } hello;
        _cleanup_close_ int pidfd = -EBADF, fd = -EBADF;
        struct uffd_msg msg;
        char page[PAGE], go = 'g';
        pid_t pid;

        ASSERT_OK(pipe2(to_child, O_CLOEXEC));
        ASSERT_OK(pipe2(to_parent, O_CLOEXEC));
        pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
                char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
                int ok;

                /* Nobody else would ever serve it: a wait, never zeros. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                hello.fd = zsw_uffd_new(0);
                hello.addr = (uintptr_t) p;
                if (p == MAP_FAILED || hello.fd < 0 ||
                    write(to_parent[1], &hello, sizeof(hello)) != sizeof(hello) ||
                    read(to_child[0], &go, 1) != 1)
                        _exit(2);
                /* Blocks until the parent serves it through the stolen fd. */
                ok = p[PAGE + 100] == 0x77 && p[PAGE] == 0x77;
                _exit(ok ? 0 : 1);
        }
        ASSERT_EQ(read(to_parent[0], &hello, sizeof(hello)), (ssize_t) sizeof(hello));
        ASSERT_GE(hello.fd, 0);
        pidfd = (int) syscall(SYS_pidfd_open, pid, 0);
        ASSERT_GE(pidfd, 0);
        fd = (int) syscall(SYS_pidfd_getfd, pidfd, hello.fd, 0);
        ASSERT_GE(fd, 0);
        ASSERT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        ASSERT_OK(zsw_uffd_api(fd, ALL_EVENTS, NULL));
        ASSERT_OK(zsw_uffd_register(fd, hello.addr, 2 * PAGE,
                                    UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP, NULL));
        ASSERT_EQ(write(to_child[1], &go, 1), 1);

        for (;;) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };

                ASSERT_EQ(poll(&pfd, 1, -1), 1);
                if (zsw_uffd_read_msgs(fd, &msg, 1) == 1)
                        break;
        }
        ASSERT_EQ(msg.event, UFFD_EVENT_PAGEFAULT);
        /* Page aligned: exact addresses need UFFD_FEATURE_EXACT_ADDRESS. */
        ASSERT_EQ_U(msg.arg.pagefault.address, hello.addr + PAGE);
        ASSERT_EQ(zsw_uffd_copy(fd, hello.addr + PAGE, memset(page, 0x77, PAGE), PAGE, 0),
                  (ssize_t) PAGE);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        close(to_child[0]);
        close(to_child[1]);
        close(to_parent[0]);
        close(to_parent[1]);
}
