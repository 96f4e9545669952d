/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "host_files.h"

static uint64_t read_u64(const char *path)
{
	FILE *f = fopen(path, "re");
	unsigned long long n = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu", &n) != 1)
		n = 0;
	fclose(f);
	return n;
}

uint64_t sbx_host_file_max(void)
{
	return read_u64("/proc/sys/fs/file-max");
}

uint64_t sbx_host_max_map_count(void)
{
	return read_u64("/proc/sys/vm/max_map_count");
}
