/* SPDX-License-Identifier: Apache-2.0 */
#include "clock.h"

static int64_t read_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t sbx_mono_ns(void)
{
	return read_ns(CLOCK_MONOTONIC);
}

int64_t sbx_mono_ms(void)
{
	return read_ns(CLOCK_MONOTONIC) / 1000000;
}

int64_t sbx_unix_ms(void)
{
	return read_ns(CLOCK_REALTIME) / 1000000;
}

struct timespec sbx_mono_after_ms(int64_t ms)
{
	int64_t at = read_ns(CLOCK_MONOTONIC) + (ms > 0 ? ms : 0) * 1000000;

	return (struct timespec){.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000};
}
