/* SPDX-License-Identifier: Apache-2.0 */
#include "run_files.h"

uint64_t sbx_nofile_per_process(uint64_t run_files, uint32_t pids)
{
	uint64_t each = run_files / (pids ? pids : 1);

	if (each > SBX_NOFILE_MAX)
		each = SBX_NOFILE_MAX;
	return each < SBX_NOFILE_MIN ? 0 : each;
}

uint64_t sbx_run_memory_mb(uint64_t memory_mb, uint64_t out_mb, uint64_t tmp_mb)
{
	return memory_mb + out_mb + 2 * tmp_mb;
}

uint64_t sbx_run_pinned_files(uint64_t run_mb, uint32_t pids, uint64_t max_map_count,
			      bool memory_counts)
{
	/* Unknown (0) is unbounded, as the sysctl's own ceiling INT_MAX;
	 * at most 2^32 * 2^31: no overflow. */
	uint64_t maps = !max_map_count || max_map_count > INT32_MAX ? INT32_MAX : max_map_count;
	uint64_t by_maps = (uint64_t)pids * maps;
	uint64_t by_memory;

	if (!memory_counts || run_mb > (UINT64_MAX >> 20))
		return by_maps;
	by_memory = (run_mb << 20) / SBX_PINNED_FILE_BYTES;
	return by_memory < by_maps ? by_memory : by_maps;
}

uint64_t sbx_runs_fit(uint64_t file_max, uint64_t run_files, uint64_t run_pinned)
{
	uint64_t each = run_files + run_pinned;

	if (each < run_files) /* wrapped: no run fits */
		return 0;
	return each ? (file_max / 2) / each : UINT64_MAX;
}
