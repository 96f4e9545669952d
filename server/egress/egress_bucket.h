/* SPDX-License-Identifier: Apache-2.0 */
/* A token bucket on the monotonic clock: rate units per second, up to burst
 * at once. Not locked: its owner (the proxy's loop thread) alone uses it. */
#ifndef SBX_EGRESS_BUCKET_H
#define SBX_EGRESS_BUCKET_H

#include <stdbool.h>
#include <stdint.h>

struct egress_bucket {
	uint64_t rate;	 /* per second; 0: no limit */
	uint64_t burst;	 /* most tokens held */
	uint64_t tokens; /* as of `at` */
	int64_t at_us;	 /* monotonic microseconds */
	/* Millionths of a token earned but not yet a whole one (< 10^6): kept
	 * so that many short refills add up to the rate. */
	uint64_t frac;
};

/* Full at start. rate 0 makes a bucket that never limits; with a rate, a
 * burst of 0 is taken as 1 (a bucket that can never hold a token would make
 * its users wait forever). */
void egress_bucket_init(struct egress_bucket *b, uint64_t rate, uint64_t burst, int64_t now_us);
/* Tokens available now (refilled up to burst); UINT64_MAX without a limit. */
uint64_t egress_bucket_available(struct egress_bucket *b, int64_t now_us);
/* Takes n tokens (n <= available). */
void egress_bucket_take(struct egress_bucket *b, uint64_t n, int64_t now_us);
/* Microseconds until n tokens are available (0: now); n is capped at burst. */
int64_t egress_bucket_wait_us(struct egress_bucket *b, uint64_t n, int64_t now_us);

#endif
