/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The lock-order check (libzswapd/include/lockdep.h) on real pthread locks: each
 * case runs in a child, which must abort with the check's message where
 * it takes locks against the order and exit normally where it follows it.
 * Skipped in builds without the check (a release build).
 */
#define TEST_NO_MAIN
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lockdep.h"
#include "test.h"

static pthread_mutex_t control = PTHREAD_MUTEX_INITIALIZER, evict = PTHREAD_MUTEX_INITIALIZER,
                       serve = PTHREAD_MUTEX_INITIALIZER, table = PTHREAD_MUTEX_INITIALIZER,
                       owner_a = PTHREAD_MUTEX_INITIALIZER, owner_b = PTHREAD_MUTEX_INITIALIZER,
                       class_a = PTHREAD_MUTEX_INITIALIZER, class_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t pool = PTHREAD_RWLOCK_INITIALIZER;

/* Runs fn in a child, its stderr into ret_err (NUL-terminated). Returns
 * the child's wait status. */
static int in_child(void (*fn)(void), char *ret_err, size_t size) {
        int pipefd[2], status;
        size_t n = 0;
        ssize_t k;
        pid_t pid;

        ASSERT_OK(pipe2(pipefd, O_CLOEXEC) < 0 ? -errno : 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                dup2(pipefd[1], STDERR_FILENO);
                fn();
                _exit(0);
        }
        close(pipefd[1]);
        while (n + 1 < size && (k = read(pipefd[0], ret_err + n, size - 1 - n)) > 0)
                n += (size_t) k;
        ret_err[n] = '\0';
        close(pipefd[0]);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        return status;
}

static void expect_abort(void (*fn)(void), const char *taking, const char *holding) {
        char err[4096];
        int status = in_child(fn, err, sizeof(err));

        if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
                TEST_FAIL("child was not aborted (status 0x%x), it said: %s", status, err);
        if (!strstr(err, taking) || !strstr(err, holding))
                TEST_FAIL("the report names neither %s nor %s: %s", taking, holding, err);
}

static void expect_exit_0(void (*fn)(void)) {
        char err[4096];
        int status = in_child(fn, err, sizeof(err));

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                TEST_FAIL("child failed (status 0x%x): %s", status, err);
}

static void in_order(void) {
        zsw_mutex_lock(&control, ZSW_LOCK_CONTROL);
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT);
        zsw_mutex_lock(&serve, ZSW_LOCK_SERVE);
        zsw_mutex_lock(&owner_a, ZSW_LOCK_OWNER);
        zsw_mutex_lock(&owner_b, ZSW_LOCK_OWNER); /* a family: owners nest */
        zsw_rwlock_rdlock(&pool, ZSW_LOCK_STORE_POOL);
        zsw_mutex_lock(&class_a, ZSW_LOCK_POOL_CLASS);
        zsw_mutex_unlock(&class_a);
        zsw_mutex_lock(&class_b, ZSW_LOCK_POOL_CLASS); /* one class at a time */
        zsw_mutex_unlock(&class_b);
        zsw_rwlock_unlock(&pool);
        zsw_mutex_unlock(&owner_b);
        zsw_mutex_unlock(&owner_a);
        /* Released out of order, then an earlier lock again: allowed once
         * nothing later is held. */
        zsw_mutex_unlock(&evict);
        zsw_mutex_unlock(&serve);
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT);
        zsw_mutex_unlock(&evict);
        zsw_mutex_unlock(&control);
}

TEST(locks_in_order_pass) {
        expect_exit_0(in_order);
}

static void serve_then_evict(void) {
        zsw_mutex_lock(&serve, ZSW_LOCK_SERVE);
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT);
}

TEST(earlier_lock_under_later_one_aborts) {
        expect_abort(serve_then_evict, "evict_lock", "serve_lock");
}

static void table_then_control(void) {
        /* zsw_engine_get_stats' pair, reversed. */
        zsw_mutex_lock(&table, ZSW_LOCK_TABLE);
        zsw_mutex_lock(&control, ZSW_LOCK_CONTROL);
}

TEST(control_under_table_aborts) {
        expect_abort(table_then_control, "control_lock", "table_lock");
}

static void two_classes(void) {
        zsw_mutex_lock(&class_a, ZSW_LOCK_POOL_CLASS);
        zsw_mutex_lock(&class_b, ZSW_LOCK_POOL_CLASS);
}

TEST(two_locks_of_a_rank_that_does_not_nest_abort) {
        expect_abort(two_classes, "class_b", "class_a");
}

static void same_twice(void) {
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT);
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT); /* would hang without the check */
}

TEST(relocking_aborts_instead_of_hanging) {
        expect_abort(same_twice, "taking again", "evict_lock");
}

static void owner_under_pool(void) {
        zsw_rwlock_rdlock(&pool, ZSW_LOCK_STORE_POOL);
        zsw_mutex_lock(&owner_a, ZSW_LOCK_OWNER);
}

TEST(rwlock_counts_as_held) {
        expect_abort(owner_under_pool, "owner lock", "pool_lock");
}

static void trylock_then_earlier(void) {
        /* A trylock may go against the order (it never waits) ... */
        zsw_mutex_lock(&serve, ZSW_LOCK_SERVE);
        if (zsw_mutex_trylock(&evict, ZSW_LOCK_EVICT) != 0)
                _exit(3);
        zsw_mutex_unlock(&evict);
        zsw_mutex_unlock(&serve);
        /* ... but what it took is held like any lock. */
        if (zsw_mutex_trylock(&table, ZSW_LOCK_TABLE) != 0)
                _exit(3);
        zsw_mutex_lock(&serve, ZSW_LOCK_SERVE);
}

TEST(trylock_is_not_checked_but_recorded) {
        expect_abort(trylock_then_earlier, "serve_lock", "table_lock");
}

static void *hold_serve(void *arg) {
        int *go = arg;

        zsw_mutex_lock(&serve, ZSW_LOCK_SERVE);
        __atomic_store_n(go, 1, __ATOMIC_RELEASE);
        while (__atomic_load_n(go, __ATOMIC_ACQUIRE) != 2)
                sched_yield();
        zsw_mutex_unlock(&serve);
        return NULL;
}

static void other_thread_holds_later_lock(void) {
        pthread_t th;
        int go = 0;

        if (pthread_create(&th, NULL, hold_serve, &go) != 0)
                _exit(3);
        while (__atomic_load_n(&go, __ATOMIC_ACQUIRE) != 1)
                sched_yield();
        zsw_mutex_lock(&evict, ZSW_LOCK_EVICT);
        zsw_mutex_unlock(&evict);
        __atomic_store_n(&go, 2, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
}

TEST(held_sets_are_per_thread) {
        expect_exit_0(other_thread_holds_later_lock);
}

static void unlock_not_held(void) {
        zsw_mutex_unlock(&owner_a);
}

TEST(unlocking_a_lock_not_held_aborts) {
        expect_abort(unlock_not_held, "releasing", "does not hold");
}

int main(int argc, char **argv) {
        if (!ZSW_LOCKDEP)
                TEST_SKIP("the lock-order check is compiled out of this build "
                          "(meson configure -Dlockdep=enabled, or a debug or sanitizer build)");
        return test_run_cases(argc, argv);
}
