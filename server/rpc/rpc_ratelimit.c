/* SPDX-License-Identifier: Apache-2.0 */
/* A fixed window of one second (rpc_ratelimit.h). */
#include "rpc_ratelimit.h"

bool rpc_ratelimit_take(struct rpc_ratelimit *rl, int64_t now_ms, unsigned long *suppressed_before)
{
	int64_t now = now_ms / 1000;
	bool emit;

	*suppressed_before = 0;
	pthread_mutex_lock(&rl->lock);
	if (now != rl->second) {
		rl->second = now;
		rl->in_second = 0;
	}
	emit = rl->in_second < rl->per_second;
	if (emit) {
		rl->in_second++;
		*suppressed_before = rl->suppressed;
		rl->suppressed = 0;
	} else {
		rl->suppressed++;
	}
	pthread_mutex_unlock(&rl->lock);
	return emit;
}

unsigned long rpc_ratelimit_flush(struct rpc_ratelimit *rl, int64_t now_ms)
{
	unsigned long n = 0;

	pthread_mutex_lock(&rl->lock);
	if (rl->suppressed && now_ms / 1000 != rl->second) {
		n = rl->suppressed;
		rl->suppressed = 0;
	}
	pthread_mutex_unlock(&rl->lock);
	return n;
}
