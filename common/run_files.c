/* SPDX-License-Identifier: Apache-2.0 */
#include "run_files.h"

uint64_t sbx_nofile_per_process(uint64_t run_files, uint32_t pids)
{
	uint64_t each = run_files / (pids ? pids : 1);

	if (each > SBX_NOFILE_MAX)
		each = SBX_NOFILE_MAX;
	return each < SBX_NOFILE_MIN ? 0 : each;
}
