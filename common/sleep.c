/* SPDX-License-Identifier: Apache-2.0 */
#include "sleep.h"

#include <errno.h>
#include <time.h>

#include "clock.h"

void sbx_sleep_ms(int64_t ms)
{
	/* An absolute end: a signal neither cuts the sleep short nor, by
	 * restarting it, makes it longer. */
	struct timespec end = sbx_mono_after_ms(ms);

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
		;
}
