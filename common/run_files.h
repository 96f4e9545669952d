/* SPDX-License-Identifier: Apache-2.0 */
/* A run's share of the host's file table (fs.file-max, one for the whole
 * host): RLIMIT_NOFILE counts per process, and a run has up to `pids`
 * processes, so the run's budget is divided among them. sbx-helper applies
 * it to each exec's command; sbxd checks its config and each policy with it. */
#ifndef SBX_RUN_FILES_H
#define SBX_RUN_FILES_H

#include <stdbool.h>
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

/* A file stays open without a descriptor while a mapping holds it: open,
 * mmap, close, again, and each mapping pins its own `struct file`, which
 * RLIMIT_NOFILE does not count (one exec pinned ~300k). What bounds them is
 * vm.max_map_count per process and, where the run has a memory cgroup, the
 * kernel memory each costs the run: the file and its vm_area_struct are
 * both SLAB_ACCOUNT. This is the least a pinned file costs: the two slab
 * objects, 192 bytes each on x86_64 6.x. Measured 398-403 bytes per file
 * (the objects and their obj_cgroup pointers) on 6.18 by
 * `sbx-bench-pinned-files 50000` alone in a memory cgroup
 * (bench/pinned_files.c says how); an overlayfs file pins a 256-byte backing
 * file instead, more. */
#define SBX_PINNED_FILE_BYTES 384

/* The bound of a run's memory cgroup, in MiB: one exec's memory_mb plus
 * full /out and tmpfs mounts (/tmp, /dev/shm), which stay charged to the
 * run after the exec that wrote them; execs running at once share it (as
 * helper/supervisor.c sets it). Each at most 2^20: no overflow. */
uint64_t sbx_run_memory_mb(uint64_t memory_mb, uint64_t out_mb, uint64_t tmp_mb);

/* Files a run of run_mb (sbx_run_memory_mb) and pids processes may pin
 * through mappings: pids * max_map_count, and run_mb /
 * SBX_PINNED_FILE_BYTES when the run's memory cgroup is charged for them
 * (memory_counts; not under the rlimit fallback, whose RLIMIT_AS counts no
 * kernel memory). */
uint64_t sbx_run_pinned_files(uint64_t run_mb, uint32_t pids, uint64_t max_map_count,
			      bool memory_counts);

/* How many runs, each holding run_files descriptors and pinning
 * run_pinned files, fit in half of file_max (the other half is the rest of
 * the host's); UINT64_MAX when a run takes none. */
uint64_t sbx_runs_fit(uint64_t file_max, uint64_t run_files, uint64_t run_pinned);

#endif
