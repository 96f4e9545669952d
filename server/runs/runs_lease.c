/* SPDX-License-Identifier: Apache-2.0 */
/* The lease arithmetic (runs_lease.h). */
#include "runs_lease.h"

int64_t lease_ends_at(int64_t last_call, unsigned pollers, uint32_t idle_seconds)
{
	if (pollers > 0 || idle_seconds == 0)
		return INT64_MAX;
	return last_call + (int64_t)idle_seconds * 1000;
}

bool lease_ran_out(int64_t now, int64_t last_call, unsigned pollers, uint32_t idle_seconds)
{
	return now >= lease_ends_at(last_call, pollers, idle_seconds);
}

int64_t keep_ends_at(int64_t stopped_at, uint32_t keep_seconds)
{
	return stopped_at + (int64_t)keep_seconds * 1000;
}

void lease_fill_default(SbxPolicy *p, uint32_t idle_seconds_default)
{
	if (p && p->limits && p->limits->idle_seconds == 0)
		p->limits->idle_seconds = idle_seconds_default;
}
