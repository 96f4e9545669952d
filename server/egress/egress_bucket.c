/* SPDX-License-Identifier: Apache-2.0 */
/* Token bucket arithmetic in millionths of a token: elapsed microseconds
 * times the rate is exactly what was earned, so nothing is lost between
 * refills however short. The products are 128-bit: a rate near 2^40 over
 * an idle gap of days overflows 64 bits. */
#include "egress_bucket.h"

#define MICRO 1000000u

typedef unsigned __int128 u128;

void egress_bucket_init(struct egress_bucket *b, uint64_t rate, uint64_t burst, int64_t now_us)
{
	if (rate && burst == 0)
		burst = 1;
	*b = (struct egress_bucket){
	    .rate = rate, .burst = burst, .tokens = burst, .at_us = now_us, .frac = 0};
}

static void refill(struct egress_bucket *b, int64_t now_us)
{
	/* A clock read before `at` (two readers racing to a caller) earns
	 * nothing, and `at` never moves back. */
	if (now_us <= b->at_us)
		return;
	u128 earned = (u128)((uint64_t)now_us - (uint64_t)b->at_us) * b->rate + b->frac;
	u128 whole = earned / MICRO;

	b->at_us = now_us;
	if (whole >= b->burst - b->tokens) {
		/* Full: what is earned past the burst is not kept. */
		b->tokens = b->burst;
		b->frac = 0;
		return;
	}
	b->tokens += (uint64_t)whole;
	b->frac = (uint64_t)(earned % MICRO);
}

uint64_t egress_bucket_available(struct egress_bucket *b, int64_t now_us)
{
	if (b->rate == 0)
		return UINT64_MAX;
	refill(b, now_us);
	return b->tokens;
}

void egress_bucket_take(struct egress_bucket *b, uint64_t n, int64_t now_us)
{
	if (b->rate == 0)
		return;
	refill(b, now_us);
	/* n <= available is the caller's promise; past it the bucket is
	 * empty rather than wrapped around. */
	b->tokens = n < b->tokens ? b->tokens - n : 0;
}

int64_t egress_bucket_wait_us(struct egress_bucket *b, uint64_t n, int64_t now_us)
{
	if (b->rate == 0)
		return 0;
	refill(b, now_us);
	if (n > b->burst)
		n = b->burst;
	if (b->tokens >= n)
		return 0;
	/* The least t with t * rate + frac >= missing * 10^6. */
	u128 missing = (u128)(n - b->tokens) * MICRO - b->frac;
	u128 t = (missing + b->rate - 1) / b->rate;

	return t > (u128)INT64_MAX ? INT64_MAX : (int64_t)t;
}
