/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What ptrace injection (remote.c) needs from the CPU architecture: the
 * register set, the bytes of a system-call instruction to look for in the
 * target's vDSO, and how arguments, results and kernel restart codes sit in
 * the registers. One remote-<arch>.c implements it per architecture; an
 * architecture without one builds, and attaching fails with EOPNOTSUPP.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sys/types.h>

#if defined(__x86_64__) && !defined(ZSW_NO_ARCH_REMOTE)
#include <sys/user.h>
#define ZSW_ARCH_REMOTE 1
typedef struct user_regs_struct zsw_arch_regs;
#else
#define ZSW_ARCH_REMOTE 0
typedef struct {
        unsigned long unused;
} zsw_arch_regs;
#endif

#if ZSW_ARCH_REMOTE
/* The system-call instruction and the alignment it must have to be found
 * in the vDSO's bytes. */
extern const uint8_t zsw_arch_syscall_insn[];
extern const size_t zsw_arch_syscall_insn_len;
extern const size_t zsw_arch_syscall_insn_align;

/* Everything a call may change, read and written with PTRACE_GETREGSET /
 * SETREGSET (aarch64 needs NT_ARM_SYSTEM_CALL beside NT_PRSTATUS for the
 * restart state, hence per architecture). -EOPNOTSUPP for a task whose
 * register set is not the native 64-bit one (a 32-bit compat task). */
int zsw_arch_get_regs(pid_t tid, zsw_arch_regs *regs);
int zsw_arch_set_regs(pid_t tid, const zsw_arch_regs *regs);

/* Turns a copy of the stopped thread's registers into the state that runs
 * syscall nr(args) at insn: the kernel must not take it for an interrupted
 * system call of its own, which it would restart. */
void zsw_arch_prepare_syscall(zsw_arch_regs *regs, uint64_t insn, long nr,
                              const unsigned long args[6]);

/* After a step: did the thread execute the instruction at insn? */
bool zsw_arch_stepped_over(const zsw_arch_regs *regs, uint64_t insn);

long zsw_arch_syscall_result(const zsw_arch_regs *regs);
uint64_t zsw_arch_pc(const zsw_arch_regs *regs);
#else
/* No injection here: zsw_remote_seize() fails first; these only let the
 * architecture-neutral code build. */
#include <errno.h>
static const uint8_t zsw_arch_syscall_insn[1];
static const size_t zsw_arch_syscall_insn_len = 1, zsw_arch_syscall_insn_align = 1;
static inline int zsw_arch_get_regs(pid_t tid, zsw_arch_regs *regs) {
        return -EOPNOTSUPP;
}
static inline int zsw_arch_set_regs(pid_t tid, const zsw_arch_regs *regs) {
        return -EOPNOTSUPP;
}
static inline void zsw_arch_prepare_syscall(zsw_arch_regs *regs, uint64_t insn, long nr,
                                            const unsigned long args[6]) {
}
static inline bool zsw_arch_stepped_over(const zsw_arch_regs *regs, uint64_t insn) {
        return false;
}
static inline long zsw_arch_syscall_result(const zsw_arch_regs *regs) {
        return -EOPNOTSUPP;
}
static inline uint64_t zsw_arch_pc(const zsw_arch_regs *regs) {
        return 0;
}
#endif
