/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * x86_64 half of ptrace injection (see remote-arch.h): `syscall` is 0f 05,
 * the number goes in rax and the arguments in rdi, rsi, rdx, r10, r8, r9;
 * the instruction clobbers rcx and r11, which the caller restores with the
 * rest of the saved registers.
 */
#include "remote-arch.h"

#if ZSW_ARCH_REMOTE && defined(__x86_64__)
#include <elf.h>
#include <errno.h>
#include <sys/ptrace.h>
#include <sys/uio.h>

const uint8_t zsw_arch_syscall_insn[] = { 0x0f, 0x05 };
const size_t zsw_arch_syscall_insn_len = sizeof(zsw_arch_syscall_insn);
const size_t zsw_arch_syscall_insn_align = 1;

int zsw_arch_get_regs(pid_t tid, zsw_arch_regs *regs) {
        struct iovec iov = { .iov_base = regs, .iov_len = sizeof(*regs) };

        if (ptrace(PTRACE_GETREGSET, tid, (void *) NT_PRSTATUS, &iov) < 0)
                return -errno;
        /* A 32-bit task answers with the smaller compat layout. */
        return iov.iov_len == sizeof(*regs) ? 0 : -EOPNOTSUPP;
}

int zsw_arch_set_regs(pid_t tid, const zsw_arch_regs *regs) {
        struct iovec iov = { .iov_base = (void *) regs, .iov_len = sizeof(*regs) };

        return ptrace(PTRACE_SETREGSET, tid, (void *) NT_PRSTATUS, &iov) < 0 ? -errno : 0;
}

void zsw_arch_prepare_syscall(zsw_arch_regs *regs, uint64_t insn, long nr,
                              const unsigned long args[6]) {
        regs->rip = insn;
        regs->rax = (unsigned long) nr;
        /* orig_rax < 0 says "not in a system call": resuming from a stop
         * inside get_signal() then never rewinds rip for a restart. */
        regs->orig_rax = (unsigned long) -1;
        regs->rdi = args[0];
        regs->rsi = args[1];
        regs->rdx = args[2];
        regs->r10 = args[3];
        regs->r8 = args[4];
        regs->r9 = args[5];
}

bool zsw_arch_stepped_over(const zsw_arch_regs *regs, uint64_t insn) {
        return regs->rip == insn + zsw_arch_syscall_insn_len;
}

long zsw_arch_syscall_result(const zsw_arch_regs *regs) {
        return (long) regs->rax;
}

uint64_t zsw_arch_pc(const zsw_arch_regs *regs) {
        return regs->rip;
}

#endif
