/* SPDX-License-Identifier: Apache-2.0 */
/* A run's share of the host's file table (fs.file-max, one for the whole
 * host): RLIMIT_NOFILE counts per process, and a run has up to `pids`
 * processes, so the run's budget is divided among them. sbx-helper applies
 * it to each exec's command; sbxd checks its config and each policy with it. */
#ifndef SBX_RUN_FILES_H
#define SBX_RUN_FILES_H

#include <stdint.h>

/* 2^18 per run: 1024 per process at the default 256 pids (the usual soft
 * limit programs expect), 4096 up to 64 pids, 64 at the ceiling of 4096. */
#define SBX_RUN_FILES_DEFAULT (UINT64_C(1) << 18)
/* What one process gets at most (the limit before the budget). */
#define SBX_NOFILE_MAX 4096
/* Fewer and an interpreter cannot start (python3 holds ~10 while importing). */
#define SBX_NOFILE_MIN 16

/* RLIMIT_NOFILE for each process of a run of `pids` processes within
 * run_files open files; 0 when that leaves a process fewer than
 * SBX_NOFILE_MIN (the run must be refused, not given more). */
uint64_t sbx_nofile_per_process(uint64_t run_files, uint32_t pids);

#endif
