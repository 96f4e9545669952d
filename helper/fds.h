/* SPDX-License-Identifier: Apache-2.0 */
/* File descriptor chores: closing every inherited fd but a few, so nothing
 * the helper held reaches pid 1 or a command (writing a /proc, cgroup or
 * sysctl file: common/write_file.h). */
#ifndef SBX_FDS_H
#define SBX_FDS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "err.h"
#include "write_file.h" /* sbx_write_at, sbx_write_proc */

/* Closes every fd from 3 up except those in keep (which is sorted).
 * Fails (close_range: Linux 5.9) with err set: an fd that stays open would
 * reach the sandbox, so the caller fails closed. */
int sbx_close_fds_except(int *keep, size_t n, struct sbx_err *err);

/* fork() for a child that must join a namespace with setns(), which the
 * kernel allows a single-threaded process only: the raw clone system call,
 * as for the sandbox's own processes, since a sanitizer's fork() (TSan's)
 * starts its background thread again in the child. Same results as fork(). */
pid_t sbx_fork_single(void);

/* A child's report of a fixed size on a pipe, for a parent waiting to
 * reap it: written whole, then the child exits (1 when it could not). */
__attribute__((noreturn)) void sbx_report_exit(int fd, const void *report, size_t size);
/* The parent's side: reads the report of `child` from fd (EINTR
 * retried), then reaps the child (*status, if not NULL). true when all of
 * it came; false when the child died first. */
bool sbx_report_collect(int fd, pid_t child, void *report, size_t size, int *status);

/* Reads at most size-1 bytes of dirfd/file into buf, NUL-terminated; -1 with
 * errno set when it cannot be opened or read. */
int sbx_read_at(int dirfd, const char *file, char *buf, size_t size);

#endif
