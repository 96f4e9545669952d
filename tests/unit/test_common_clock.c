/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the one clock (common/clock.c): the units agree with each
 * other and with clock_gettime, the monotonic clock does not go back, and
 * sbx_mono_after_ms gives a normalised instant ms from now. */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "clock.h"

static int64_t ns_of(struct timespec ts)
{
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t raw_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ns_of(ts);
}

int main(void)
{
	int64_t before = raw_ns(CLOCK_MONOTONIC);
	int64_t ns = sbx_mono_ns();
	int64_t ms = sbx_mono_ms();
	int64_t after = raw_ns(CLOCK_MONOTONIC);

	check(before <= ns && ns <= after, "sbx_mono_ns reads CLOCK_MONOTONIC");
	check(before / 1000000 <= ms && ms <= after / 1000000, "sbx_mono_ms is it in ms");

	int64_t last = sbx_mono_ns();
	bool forward = true;
	for (int i = 0; i < 10000; i++) {
		int64_t now = sbx_mono_ns();
		forward &= now >= last;
		last = now;
	}
	check(forward, "sbx_mono_ns never goes back");

	before = raw_ns(CLOCK_REALTIME) / 1000000;
	int64_t unix_ms = sbx_unix_ms();
	after = raw_ns(CLOCK_REALTIME) / 1000000;
	check(before <= unix_ms && unix_ms <= after, "sbx_unix_ms reads CLOCK_REALTIME in ms");
	check(unix_ms > INT64_C(1600000000000), "sbx_unix_ms is since the epoch");

	before = raw_ns(CLOCK_MONOTONIC);
	struct timespec at = sbx_mono_after_ms(1500);
	after = raw_ns(CLOCK_MONOTONIC);
	check(at.tv_nsec >= 0 && at.tv_nsec < 1000000000, "sbx_mono_after_ms is normalised");
	check(ns_of(at) >= before + INT64_C(1500000000) && ns_of(at) <= after + INT64_C(1500000000),
	      "sbx_mono_after_ms(1500) is 1.5 s from now");

	before = raw_ns(CLOCK_MONOTONIC);
	at = sbx_mono_after_ms(-5);
	after = raw_ns(CLOCK_MONOTONIC);
	check(ns_of(at) >= before && ns_of(at) <= after, "a negative delay means now");
	return check_done();
}
