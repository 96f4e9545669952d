/* SPDX-License-Identifier: Apache-2.0 */
/* The seccomp filter every exec of a sandbox runs under (DESIGN.md,
 * Invariant 4): default allow, with the syscalls that open escape routes from
 * a user-namespace sandbox denied, and every foreign syscall ABI (i386 via
 * int 0x80, x32) killing the process. */
#ifndef SBX_HELPER_SECCOMP_H
#define SBX_HELPER_SECCOMP_H

#include <linux/filter.h>

#include "err.h"

/* Builds the filter and loads it into the calling thread. The caller has set
 * no_new_privs and dropped all capabilities; this is the last step before the
 * final fork/execve, and the filter is inherited by everything started after.
 * Returns 0, or -1 with err filled (errnum: the libseccomp/kernel errno). */
int sbx_seccomp_install(struct sbx_err *err);

/* Writes the same filter as raw BPF (the bytes the kernel gets) to fd, for
 * debugging and `sbx-helper check`. Loads nothing. */
int sbx_seccomp_export_bpf(int fd, struct sbx_err *err);
/* The supervisor compiles the filter (export_bpf into a pipe) while pid 1
 * builds the root file system; pid 1 reads it once and every exec loads
 * the same program, so libseccomp's compile is off the critical path. */
int sbx_seccomp_read_bpf(int fd, struct sock_fprog *prog, struct sbx_err *err);
int sbx_seccomp_load_bpf(const struct sock_fprog *prog, struct sbx_err *err);

/* The two shapes libseccomp can give the same rules: a binary tree of
 * syscall numbers (what every exec loads, the kernel takes it in half the
 * time) and its default list of tests. unit.helper.syscall_filter checks
 * that they decide alike, so the tree is only ever a speed-up. */
enum sbx_filter_shape { SBX_FILTER_TREE, SBX_FILTER_LIST };

/* export_bpf in the given shape. */
int sbx_seccomp_export_bpf_shaped(int fd, enum sbx_filter_shape shape, struct sbx_err *err);

/* Same, as libseccomp's human-readable pseudo filter code. */
int sbx_seccomp_export_pfc(int fd, struct sbx_err *err);

/* Syscalls denied with EPERM whatever their arguments, NULL-terminated.
 * Names this libseccomp cannot resolve on the native arch are skipped by the
 * filter (a test should resolve each name before expecting EPERM). */
extern const char *const sbx_seccomp_denied[];

/* Syscalls with a rule that depends on the arguments or answers another
 * errno, NULL-terminated: clone and unshare (EPERM when a namespace flag is
 * set), clone3 (always ENOSYS, so libc falls back to clone), ioctl (TIOCSTI,
 * TIOCLINUX: EPERM), socket and socketpair (families other than AF_UNIX,
 * AF_INET, AF_INET6: EAFNOSUPPORT), personality (anything but 0 and
 * 0xffffffff: EPERM), prlimit64 (any pid but 0: EPERM), sched_setaffinity,
 * sched_setscheduler, sched_setparam, sched_setattr (pid 1, exec init: EPERM),
 * setpriority and ioprio_set (pid 1, or every process of a user: EPERM). */
extern const char *const sbx_seccomp_conditional[];

#endif
