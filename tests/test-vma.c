/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Address-space readers: smaps fixtures (valid and malformed), the real
 * mappings of a child process and their eligibility, present-page runs
 * with PAGEMAP_SCAN, and vectored reads of a child's pages.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "vma.h"

#define PAGE 4096ul

static char fixture_dir[] = "/tmp/test-vma-XXXXXX";
/* Whether mkdtemp() made it (the name it picks may end in 'X' too). */
static bool fixture_made;

__attribute__((destructor)) static void fixture_cleanup(void) {
        char path[128];

        if (!fixture_made)
                return;
        snprintf(path, sizeof(path), "%s/smaps", fixture_dir);
        unlink(path);
        rmdir(fixture_dir);
}

/* Writes text to a fixture file and parses it. */
static int parse_text(const char *text, struct zsw_vma_list *ret) {
        _cleanup_close_ int dfd = -EBADF;
        FILE *f;

        if (!fixture_made) {
                ASSERT_TRUE(mkdtemp(fixture_dir));
                fixture_made = true;
        }
        dfd = open(fixture_dir, O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(dfd, 0);
        f = fopen(strcat(strcpy((char[128]) {}, fixture_dir), "/smaps"), "we");
        ASSERT_TRUE(f);
        ASSERT_GE(fputs(text, f), 0);
        ASSERT_EQ(fclose(f), 0);
        return zsw_vma_list_read(dfd, "smaps", NULL, ret);
}

static const char valid_smaps[] =
        "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]\n"
        "Size:                132 kB\n"
        "Rss:                  12 kB\n"
        "Anonymous:            12 kB\n"
        "Swap:                  4 kB\n"
        "VmFlags: rd wr mr mw me ac \n"
        "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 \n"
        "VmFlags: rd wr mr mw me ac \n"
        "7f0000100000-7f0000200000 rw-s 00000000 00:01 1234                       /dev/zero "
        "(deleted)\n"
        "VmFlags: rd wr sh mr mw me ms \n"
        "7f0000200000-7f0000300000 rw-p 00000000 00:00 0 \n"
        "VmFlags: rd wr mr mw me lo ac \n"
        "7f0000300000-7f0000500000 rw-p 00000000 00:10 77                         /anon_hugepage "
        "(deleted)\n"
        "VmFlags: rd wr mr mw me de ht \n"
        "7f0000500000-7f0000501000 r--p 00002000 08:01 4242                       /usr/lib/with "
        "space.so\n"
        "VmFlags: rd mr mw me \n"
        "7f0000501000-7f0000502000 rw-p 00003000 08:01 4242                       /usr/lib/with "
        "space.so\n"
        "VmFlags: rd wr mr mw me ac \n"
        "7f0000600000-7f0000610000 rw-p 00000000 00:00 0                          [anon:jit heap]\n"
        "VmFlags: rd wr mr mw me ac \n"
        "7f0000610000-7f0000620000 rw-p 00000000 00:00 0 \n"
        "VmFlags: rd wr mr mw me dd ac \n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
        "VmFlags: rd wr mr mw me gd ac \n"
        "7ffd000fe000-7ffd00100000 r--p 00000000 00:00 0                          [vvar]\n"
        "VmFlags: rd mr pf io de dd \n"
        "7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0                          [vdso]\n"
        "VmFlags: rd ex mr mw me de \n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
        "VmFlags: ex \n";

TEST(fixture_smaps_parses_and_judges_eligibility) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list l = {};
        /* heap, anon, shared, mlocked, hugetlb, file ro, file rw, named anon,
         * dontdump, stack, vvar, vdso, vsyscall */
        const bool expected[] = { 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0 };

        ASSERT_OK(parse_text(valid_smaps, &l));
        ASSERT_EQ(l.n, ARRAY_SIZE(expected));
        ASSERT_STREQ(l.vmas[0].name, "[heap]");
        ASSERT_EQ_U(l.vmas[0].start, 0x55d0c0a00000);
        ASSERT_EQ_U(l.vmas[0].end, 0x55d0c0a21000);
        ASSERT_EQ(l.vmas[0].rss_kb, 12);
        ASSERT_EQ(l.vmas[0].anon_kb, 12);
        ASSERT_EQ(l.vmas[0].swap_kb, 4);
        ASSERT_STREQ(l.vmas[1].name, "");
        ASSERT_TRUE(l.vmas[2].shared);
        ASSERT_TRUE(l.vmas[3].flags & ZSW_VMF_LOCKED);
        ASSERT_TRUE(l.vmas[4].flags & ZSW_VMF_HUGETLB);
        ASSERT_STREQ(l.vmas[5].name, "/usr/lib/with space.so");
        ASSERT_EQ(l.vmas[5].inode, 4242);
        ASSERT_EQ(l.vmas[6].offset, 0x3000);
        ASSERT_STREQ(l.vmas[7].name, "[anon:jit heap]");
        ASSERT_EQ_U(l.vmas[12].end, 0xffffffffff601000);
        for (size_t i = 0; i < l.n; i++) {
                if (zsw_vma_eligible(&l.vmas[i]) != expected[i])
                        TEST_FAIL("mapping %zu (%s): eligibility should be %d", i, l.vmas[i].name,
                                  expected[i]);
        }
}

TEST(eligible_ranges_leave_out_the_excluded_range) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list l = {};
        _cleanup_free_ struct zsw_range *r = NULL;
        size_t n;

        ASSERT_OK(parse_text(valid_smaps, &l));
        ASSERT_EQ(zsw_vma_eligible_ranges(&l, (struct zsw_range) {}, &r, &n), 4);
        free(TAKE_PTR(r));
        /* A hole in the middle of the anonymous mapping splits it. */
        ASSERT_EQ(zsw_vma_eligible_ranges(&l, (struct zsw_range) { 0x7f0000010000, 0x7f0000020000 },
                                          &r, &n),
                  5);
        ASSERT_EQ(n, 5);
        ASSERT_EQ_U(r[1].start, 0x7f0000000000);
        ASSERT_EQ_U(r[1].end, 0x7f0000010000);
        ASSERT_EQ_U(r[2].start, 0x7f0000020000);
        ASSERT_EQ_U(r[2].end, 0x7f0000100000);
        free(TAKE_PTR(r));
        /* Covering a whole mapping removes it. */
        ASSERT_EQ(zsw_vma_eligible_ranges(&l, (struct zsw_range) { 0x7f0000600000, 0x7f0000610000 },
                                          &r, &n),
                  3);
}

TEST(malformed_smaps_is_an_error_not_a_crash) {
        static const char *const bad[] = {
                "garbage\n",
                "Rss: 4 kB\n", /* a field before any mapping */
                "7f00-\n",
                "7f0000001000-7f0000000000 rw-p 00000000 00:00 0\n", /* end < start */
                "7f0000000000-7f0000001000 rw-x 00000000 00:00 0\n", /* neither p nor s */
                "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n: no key\n",
                "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\nVmFlags rd wr\n",
                "7f0000000000-7f0000001000 rw-p zz 00:00 0\n",
        };

        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                struct zsw_vma_list l = { .n = 99 };

                ASSERT_ERRNO(parse_text(bad[i], &l), EBADMSG);
                ASSERT_EQ(l.n, 99); /* untouched on failure */
        }
}

TEST(empty_and_maps_format) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list l = {};
        struct zsw_vma_list e = {};

        ASSERT_OK(parse_text("", &e));
        ASSERT_EQ(e.n, 0);
        /* maps has no VmFlags: nothing can be judged eligible. */
        ASSERT_OK(parse_text("7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n", &l));
        ASSERT_EQ(l.n, 1);
        ASSERT_FALSE(l.vmas[0].has_vmflags);
        ASSERT_FALSE(zsw_vma_eligible(&l.vmas[0]));
        ASSERT_ERRNO(zsw_vma_list_read(AT_FDCWD, "/nonexistent/smaps", NULL, &l), ENOENT);
}

/* A child with known mappings, stopped in read(2) until we are done. */
struct child {
        pid_t pid;
        int go; /* write end: closing it lets the child exit */
        uint64_t addr[6];
};

enum { C_ANON, C_SHARED, C_FILE, C_LOCKED, C_STACK, C_SPARSE };
#define SPARSE_PAGES 1500ul

static uint64_t page_word(size_t i) {
        return 0x9e3779b97f4a7c15ull * (i + 1);
}

static void child_main(int out, int in) {
        uint64_t a[6];
        volatile char stack_var = 1;
        char *anon, *sparse;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        anon = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        a[C_SHARED] = (uintptr_t) mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE,
                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        a[C_FILE] = (uintptr_t) mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                                     open("/proc/self/exe", O_RDONLY | O_CLOEXEC), 0);
        a[C_LOCKED] = (uintptr_t) mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_LOCKED, -1, 0);
        a[C_STACK] = (uintptr_t) &stack_var;
        /* Pages 0-2, 10 and 20-29 touched; all of them carry a known word
         * in their first 8 bytes, the rest read as zero. */
        sparse = mmap(NULL, SPARSE_PAGES * PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (anon == MAP_FAILED || sparse == MAP_FAILED)
                _exit(2);
        anon[0] = 1;
        for (size_t i = 0; i < SPARSE_PAGES; i++)
                if (i < 3 || i == 10 || (i >= 20 && i < 30) || i >= 100)
                        memcpy(sparse + i * PAGE, &(uint64_t) { page_word(i) }, 8);
        /* A hole that appears later for the reader: unmapped page 500. */
        munmap(sparse + 500 * PAGE, PAGE);
        a[C_ANON] = (uintptr_t) anon;
        a[C_SPARSE] = (uintptr_t) sparse;
        if (write(out, a, sizeof(a)) != sizeof(a))
                _exit(3);
        (void) !read(in, a, 1);
        _exit(stack_var == 1 ? 0 : 4);
}

static struct child child_start(void) {
        int up[2], down[2];
        struct child c;

        ASSERT_OK(pipe2(up, O_CLOEXEC));
        ASSERT_OK(pipe2(down, O_CLOEXEC));
        c.pid = fork();
        ASSERT_GE(c.pid, 0);
        if (c.pid == 0) {
                /* Our copy of the write end would keep read() from EOF. */
                close(up[0]);
                close(down[1]);
                child_main(up[1], down[0]);
        }
        close(up[1]);
        close(down[0]);
        ASSERT_EQ(read(up[0], c.addr, sizeof(c.addr)), (ssize_t) sizeof(c.addr));
        close(up[0]);
        c.go = down[1];
        return c;
}

static void child_finish(struct child *c) {
        int status;

        close(c->go);
        ASSERT_EQ(waitpid(c->pid, &status, 0), c->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static const struct zsw_vma *find_vma(const struct zsw_vma_list *l, uint64_t addr) {
        for (size_t i = 0; i < l->n; i++)
                if (l->vmas[i].start <= addr && addr < l->vmas[i].end)
                        return &l->vmas[i];
        TEST_FAIL("no mapping holds %" PRIx64, addr);
}

static int open_proc(pid_t pid) {
        char path[64];
        int fd;

        snprintf(path, sizeof(path), "/proc/%d", (int) pid);
        fd = open(path, O_DIRECTORY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        return fd;
}

TEST(real_child_mappings_eligibility) {
        _cleanup_(zsw_vma_list_free) struct zsw_vma_list l = {}, self = {};
        struct child c = child_start();
        _cleanup_close_ int dfd = open_proc(c.pid);
        bool have_vdso = false;

        ASSERT_OK(zsw_vma_list_read(dfd, "smaps", NULL, &l));
        ASSERT_TRUE(zsw_vma_eligible(find_vma(&l, c.addr[C_ANON])));
        ASSERT_TRUE(zsw_vma_eligible(find_vma(&l, c.addr[C_SPARSE])));
        ASSERT_FALSE(zsw_vma_eligible(find_vma(&l, c.addr[C_SHARED])));
        ASSERT_FALSE(zsw_vma_eligible(find_vma(&l, c.addr[C_FILE])));
        ASSERT_TRUE(find_vma(&l, c.addr[C_LOCKED])->flags & ZSW_VMF_LOCKED);
        ASSERT_FALSE(zsw_vma_eligible(find_vma(&l, c.addr[C_LOCKED])));
        ASSERT_STREQ(find_vma(&l, c.addr[C_STACK])->name, "[stack]");
        ASSERT_TRUE(zsw_vma_eligible(find_vma(&l, c.addr[C_STACK])));
        for (size_t i = 0; i < l.n; i++) {
                if (strcmp(l.vmas[i].name, "[vdso]") == 0 ||
                    strcmp(l.vmas[i].name, "[vvar]") == 0) {
                        have_vdso = true;
                        ASSERT_FALSE(zsw_vma_eligible(&l.vmas[i]));
                }
                if (strcmp(l.vmas[i].name, "[heap]") == 0)
                        ASSERT_TRUE(zsw_vma_eligible(&l.vmas[i]));
        }
        ASSERT_TRUE(have_vdso);
        child_finish(&c);

        /* The path form works on the real file too. */
        ASSERT_OK(zsw_vma_list_read(AT_FDCWD, "/proc/self/smaps", NULL, &self));
        ASSERT_GT(self.n, 5);
}

TEST(pagemap_scan_finds_present_runs) {
        struct child c = child_start();
        _cleanup_close_ int dfd = open_proc(c.pid),
                            pm = openat(dfd, "pagemap", O_RDONLY | O_CLOEXEC);
        const uint64_t base = c.addr[C_SPARSE], end = base + 40 * PAGE;
        const uint64_t expect[][2] = { { 0, 3 }, { 10, 11 }, { 20, 30 } };
        struct zsw_page_run runs[8], one;
        uint64_t next;
        size_t got = 0;

        ASSERT_GE(pm, 0);
        ASSERT_EQ(zsw_vma_scan(pm, base, end, PAGE_IS_PRESENT, 0, runs, 8, &next), 3);
        ASSERT_EQ_U(next, end);
        for (size_t i = 0; i < 3; i++) {
                ASSERT_EQ_U(runs[i].start, base + expect[i][0] * PAGE);
                ASSERT_EQ_U(runs[i].end, base + expect[i][1] * PAGE);
                ASSERT_TRUE(runs[i].categories & PAGE_IS_PRESENT);
        }

        /* One run at a time: the walk stops early and resumes at next. */
        for (uint64_t pos = base; pos < end; pos = next) {
                int r = zsw_vma_scan(pm, pos, end, PAGE_IS_PRESENT, 0, &one, 1, &next);

                ASSERT_GE(r, 0);
                ASSERT_GT(next, pos);
                if (r == 0)
                        continue;
                ASSERT_LT(got, 3);
                ASSERT_EQ_U(one.start, base + expect[got][0] * PAGE);
                ASSERT_EQ_U(one.end, base + expect[got][1] * PAGE);
                got++;
        }
        ASSERT_EQ(got, 3);
        child_finish(&c);
}

TEST(vectored_read_of_child_pages) {
        struct child c = child_start();
        const uint64_t base = c.addr[C_SPARSE];
        static uint64_t addrs[SPARSE_PAGES];
        static void *bufs[SPARSE_PAGES];
        static bool ok[SPARSE_PAGES];
        _cleanup_free_ char *mem = malloc(SPARSE_PAGES * PAGE);
        size_t n = 0;

        ASSERT_TRUE(mem);
        /* Pages 100.. backwards (more than IOV_MAX of them, page 500
         * unmapped), then the three at the start. */
        for (size_t i = SPARSE_PAGES; i-- > 100;)
                addrs[n++] = base + i * PAGE;
        for (size_t i = 0; i < 3; i++)
                addrs[n++] = base + i * PAGE;
        for (size_t i = 0; i < n; i++)
                bufs[i] = mem + i * PAGE;
        memset(ok, 0, sizeof(ok));

        ASSERT_EQ(zsw_vma_read_pages(c.pid, addrs, n, bufs, ok), (int) n - 1);
        for (size_t i = 0; i < n; i++) {
                size_t idx = (addrs[i] - base) / PAGE;
                uint64_t w;

                if (idx == 500) {
                        ASSERT_FALSE(ok[i]);
                        continue;
                }
                ASSERT_TRUE(ok[i]);
                memcpy(&w, bufs[i], 8);
                ASSERT_EQ_U(w, page_word(idx));
        }
        child_finish(&c);
        /* A process that is gone. */
        ASSERT_ERRNO(zsw_vma_read_pages(c.pid, addrs, 1, bufs, NULL), ESRCH);
}
