/* SPDX-License-Identifier: Apache-2.0 */
#include "realroot.h"

#include <stdio.h>
#include <unistd.h>

#include "util.h"

bool sbx_is_real_root(void)
{
	if (getuid() != 0 && geteuid() != 0)
		return false;
	_cleanup_fclose_ FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long inside, outside, count;
	if (!f || fscanf(f, "%lu %lu %lu", &inside, &outside, &count) != 3)
		return true;
	return inside == 0 && outside == 0 && count == 4294967295UL;
}
