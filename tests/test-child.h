/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A child process for the tests of the engine on real processes: the
 * target, driven over two pipes. The test writes one command byte, the
 * child answers one uint64_t; 'q' makes it exit 0 without an answer, and
 * every child has 'v', which verifies all its pages and answers how many
 * read wrong. The other commands, and the memory the child sets up, are
 * each test's own.
 *
 * The child is forked before the engine is made: forking a process that
 * already runs the engine's threads is only safe if the child execs at
 * once. It dies with the test (PR_SET_PDEATHSIG), so a failed assertion
 * leaves no target behind.
 *
 * Include after test.h and engine.h.
 */
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

struct test_child {
        pid_t pid;
        int cmd, reply; /* pipes: commands to the child, answers back */
};

/* In the child: sets up its memory; <0 if it cannot (the child exits 3). */
typedef int (*test_child_setup_fn)(void);
/* In the child: the answer to command c. A command that answers more than
 * once writes its first answers to reply itself; the returned one is the
 * last. */
typedef uint64_t (*test_child_command_fn)(char c, int reply);

static inline _Noreturn void test_child_serve(int cmd, int reply, test_child_command_fn command) {
        char c;

        while (read(cmd, &c, 1) == 1 && c != 'q') {
                uint64_t answer = command(c, reply);

                if (write(reply, &answer, sizeof(answer)) != sizeof(answer))
                        _exit(2);
        }
        _exit(0);
}

static inline uint64_t test_child_read(const struct test_child *ch) {
        uint64_t answer;

        ASSERT_EQ(read(ch->reply, &answer, sizeof(answer)), (ssize_t) sizeof(answer));
        return answer;
}

static inline void test_child_send(const struct test_child *ch, char c) {
        ASSERT_EQ(write(ch->cmd, &c, 1), 1);
}

static inline uint64_t test_child_ask(const struct test_child *ch, char c) {
        test_child_send(ch, c);
        return test_child_read(ch);
}

/* Forks the child, which runs setup() and then serves commands. With
 * wait_ready the child answers once when set up, and this waits for that,
 * for tests whose first command is not a question to the child (an attach
 * must not find it still writing its data). */
static inline struct test_child test_child_start(test_child_setup_fn setup,
                                                 test_child_command_fn command, bool wait_ready) {
        int to[2], from[2];
        struct test_child ch;

        ASSERT_OK(pipe2(to, O_CLOEXEC));
        ASSERT_OK(pipe2(from, O_CLOEXEC));
        ch.pid = fork();
        ASSERT_GE(ch.pid, 0);
        if (ch.pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(to[1]);
                close(from[0]);
                if (setup() < 0)
                        _exit(3);
                if (wait_ready &&
                    write(from[1], &(uint64_t) { 0 }, sizeof(uint64_t)) != sizeof(uint64_t))
                        _exit(2);
                test_child_serve(to[0], from[1], command);
        }
        close(to[0]);
        close(from[1]);
        ch.cmd = to[1];
        ch.reply = from[0];
        if (wait_ready)
                (void) test_child_read(&ch);
        return ch;
}

static inline void test_child_stop(struct test_child *ch) {
        int status;

        test_child_send(ch, 'q');
        ASSERT_EQ(waitpid(ch->pid, &status, 0), ch->pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(ch->cmd);
        close(ch->reply);
}

/* An engine; skips the binary where it cannot attach to anything. */
static inline struct zsw_engine *test_engine_new(const struct zsw_engine_config *cfg) {
        struct zsw_engine *e;

        if (geteuid() != 0)
                TEST_SKIP("needs root for ptrace and userfaultfd");
        ASSERT_OK(zsw_engine_new(cfg, &e));
        return e;
}

/* The end of a test that leaves the child attached: everything evicted
 * once more and read back, then detached, after which every page must
 * still read right. Stops the child and frees the engine. */
static inline void test_child_finish(struct test_child *ch, struct zsw_engine *e) {
        struct zsw_engine_error err = {};
        struct zsw_reclaim_result res;

        ASSERT_OK(zsw_engine_reclaim(e, ch->pid, UINT64_MAX, &res, &err));
        ASSERT_EQ(test_child_ask(ch, 'v'), 0);
        ASSERT_OK(zsw_engine_detach(e, ch->pid, &err));
        ASSERT_EQ(test_child_ask(ch, 'v'), 0);
        test_child_stop(ch);
        zsw_engine_free(e);
}
