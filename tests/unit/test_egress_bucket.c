/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of server/egress/egress_bucket.c on simulated time: the rate
 * over many short steps, the burst cap, wait_us to the microsecond, rate 0,
 * rates near 2^40 and idle gaps of years. */
#include <inttypes.h>
#include <stdio.h>

#include "check.h"
#include "egress_bucket.h"

#define SEC 1000000LL

/* Takes everything available every `step` microseconds for `span`; returns
 * what was taken (the initial burst excluded). */
static uint64_t drain(uint64_t rate, uint64_t burst, int64_t step, int64_t span)
{
	struct egress_bucket b;
	int64_t t0 = 123456789;
	uint64_t taken = 0;

	egress_bucket_init(&b, rate, burst, t0);
	egress_bucket_take(&b, egress_bucket_available(&b, t0), t0);
	for (int64_t t = t0 + step; t <= t0 + span; t += step) {
		uint64_t n = egress_bucket_available(&b, t);

		egress_bucket_take(&b, n, t);
		taken += n;
	}
	return taken;
}

static void rate_within(uint64_t rate, uint64_t burst, int64_t step)
{
	uint64_t want = rate * 10, got = drain(rate, burst, step, 10 * SEC);
	uint64_t diff = got > want ? got - want : want - got;

	if (!check(diff * 100 <= want,
		   "rate %" PRIu64 "/s in steps of %" PRId64 " us: 10 s give %" PRIu64
		   " within 1%%",
		   rate, step, want))
		printf("#   got %" PRIu64 "\n", got);
}

int main(void)
{
	struct egress_bucket b;

	/* Accuracy over 10 s, steps shorter than one token's time included:
	 * a bucket that rounds each refill down gets nothing at 1 us steps. */
	rate_within(1000, 1000, 1);
	rate_within(1000, 1000, 7);
	rate_within(3, 10, 1000);
	rate_within(16384, 16384, 13);
	rate_within(1000000, 100000, 3);
	rate_within(1000003, 100000, 1);
	rate_within(10 * 1000 * 1000, 1 << 20, 997);
	rate_within((uint64_t)1 << 30, (uint64_t)1 << 27, 333);
	/* Exact where the arithmetic allows it. */
	check(drain(7, 100, 1, 10 * SEC) == 70, "7/s in 1 us steps: exactly 70 in 10 s");
	check(drain(1000, 1000, 3, 9 * SEC) == 9000, "1000/s in 3 us steps: exactly 9000 in 9 s");

	/* Full at start, capped at burst however long the wait. */
	egress_bucket_init(&b, 100, 50, 0);
	check(egress_bucket_available(&b, 0) == 50, "full at start");
	check(egress_bucket_available(&b, 3600 * SEC) == 50, "capped at the burst after an hour");
	egress_bucket_take(&b, 50, 3600 * SEC);
	check(egress_bucket_available(&b, 3600 * SEC) == 0, "empty after taking the burst");
	check(egress_bucket_available(&b, 3600 * SEC + 100 * 1000) == 10, "10 back after 100 ms");
	check(egress_bucket_available(&b, 3600 * SEC + 10 * SEC) == 50, "capped again");
	/* Excess past the cap is not kept as a fraction either. */
	egress_bucket_take(&b, 50, 3610 * SEC);
	check(egress_bucket_available(&b, 3610 * SEC + 9999) == 0 &&
		  egress_bucket_available(&b, 3610 * SEC + 10000) == 1,
	      "after the cap the first token takes a whole 10 ms");
	/* A clock read before the last one earns nothing and breaks nothing. */
	check(egress_bucket_available(&b, 3600 * SEC) == 1, "an earlier time: as before");
	check(egress_bucket_available(&b, 3610 * SEC + 20000) == 2, "then time goes on");

	/* wait_us, exact: the answer gives the tokens, one microsecond less
	 * does not. */
	const uint64_t rates[] = {1, 3, 7, 1000, 999983, 1000000, 12345678, (uint64_t)1 << 40};
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		uint64_t r = rates[i], burst = r < 16 ? 16 : r;
		bool ok = true;

		egress_bucket_init(&b, r, burst, 1000);
		egress_bucket_take(&b, burst, 1000);
		for (uint64_t n = 1; n <= burst && ok; n = n * 3 + 1) {
			struct egress_bucket copy = b, before = b;
			int64_t w = egress_bucket_wait_us(&copy, n, 1000);

			ok = w > 0 && egress_bucket_available(&copy, 1000 + w) >= n;
			copy = before;
			ok = ok && egress_bucket_available(&copy, 1000 + w - 1) < n;
		}
		check(ok, "rate %" PRIu64 ": wait_us is the exact microsecond", r);
	}
	/* After a partial refill (a fraction held) still exact. */
	egress_bucket_init(&b, 3, 10, 0);
	egress_bucket_take(&b, 10, 0);
	check(egress_bucket_available(&b, 500000) == 1, "3/s: 1 token after 0.5 s (1.5 earned)");
	check(egress_bucket_wait_us(&b, 1, 500000) == 0, "a token held: no wait");
	egress_bucket_take(&b, 1, 500000);
	int64_t w = egress_bucket_wait_us(&b, 1, 500000);
	check(w == 166667, "3/s with 0.5 held: the next in 166667 us (got %" PRId64 ")", w);
	check(egress_bucket_wait_us(&b, 0, 500000) == 0, "wait for 0 tokens: 0");
	w = egress_bucket_wait_us(&b, 2, 500000);
	check(w == 500000, "3/s with 0.5 held: 2 in 500000 us (got %" PRId64 ")", w);
	check(egress_bucket_wait_us(&b, 1000, 500000) == egress_bucket_wait_us(&b, 10, 500000),
	      "n is capped at the burst");
	check(egress_bucket_wait_us(&b, 10, 500000) == 3166667, "10 (the burst) in 3.166667 s");

	/* Rate 0: never limits. */
	egress_bucket_init(&b, 0, 0, 0);
	check(egress_bucket_available(&b, 0) == UINT64_MAX, "rate 0: unlimited");
	egress_bucket_take(&b, (uint64_t)1 << 62, 5);
	check(egress_bucket_available(&b, 5) == UINT64_MAX, "rate 0: still unlimited after a take");
	check(egress_bucket_wait_us(&b, UINT64_MAX, 5) == 0, "rate 0: never waits");

	/* Burst 0 with a rate: one token, not a bucket that never fills. */
	egress_bucket_init(&b, 10, 0, 0);
	check(egress_bucket_available(&b, 0) == 1, "burst 0 with a rate holds 1");

	/* 2^40 per second over gaps of days and years: no overflow. */
	const uint64_t big = (uint64_t)1 << 40;
	egress_bucket_init(&b, big, (uint64_t)1 << 50, 0);
	egress_bucket_take(&b, (uint64_t)1 << 50, 0);
	check(egress_bucket_available(&b, SEC) == big, "2^40/s: 2^40 after 1 s");
	check(egress_bucket_available(&b, 100 * SEC) == 100 * big,
	      "2^40/s: 100 x 2^40 after 100 s");
	check(egress_bucket_available(&b, 10LL * 365 * 86400 * SEC) == (uint64_t)1 << 50,
	      "2^40/s after 10 years: the burst (2^50), no wrap");
	egress_bucket_init(&b, big, UINT64_MAX, 0);
	egress_bucket_take(&b, UINT64_MAX, 0);
	check(egress_bucket_available(&b, INT64_MAX) == UINT64_MAX,
	      "2^40/s, burst 2^64-1, to the end of int64 time: full, no wrap");
	egress_bucket_take(&b, UINT64_MAX, INT64_MAX);
	check(egress_bucket_wait_us(&b, UINT64_MAX, INT64_MAX) == 16777216LL * SEC,
	      "2^64-1 tokens at 2^40/s: 2^24 s");
	egress_bucket_init(&b, 1, UINT64_MAX, 0);
	egress_bucket_take(&b, UINT64_MAX, 0);
	check(egress_bucket_wait_us(&b, UINT64_MAX, 0) == INT64_MAX,
	      "a wait past int64: INT64_MAX, not a negative number");
	egress_bucket_init(&b, UINT64_MAX, UINT64_MAX, INT64_MIN + 1);
	egress_bucket_take(&b, UINT64_MAX, INT64_MIN + 1);
	check(egress_bucket_available(&b, INT64_MAX) == UINT64_MAX,
	      "rate 2^64-1 over the whole int64 clock: full");
	/* 2^40 per second in 1 us steps: exactly 1099511.627776 per us. */
	check(drain(big, big, 1, SEC) == big, "2^40/s in 1 us steps: exactly 2^40 in 1 s");
	return check_done();
}
