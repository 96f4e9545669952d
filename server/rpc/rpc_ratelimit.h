/* SPDX-License-Identifier: Apache-2.0 */
/* At most N lines a second of one kind (an unauthenticated flood must not
 * become a log flood); the rest are counted and said with the next line. */
#ifndef SBX_RPC_RATELIMIT_H
#define SBX_RPC_RATELIMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct rpc_ratelimit {
	pthread_mutex_t lock;
	unsigned per_second;
	int64_t second; /* now_ms / 1000 of the current second */
	unsigned in_second;
	unsigned long suppressed;
};

#define RPC_RATELIMIT_INIT(n)                                                                      \
	{                                                                                          \
		.lock = PTHREAD_MUTEX_INITIALIZER, .per_second = (n)                               \
	}

/* true: write the line now, saying *suppressed_before (the lines left out
 * since the last one written, now reset); false: leave it out (counted). */
bool rpc_ratelimit_take(struct rpc_ratelimit *rl, int64_t now_ms, unsigned long *suppressed_before);
/* Lines left out and not yet said, once their second is over (reset):
 * what a periodic sweep says when no further line came. 0: none. */
unsigned long rpc_ratelimit_flush(struct rpc_ratelimit *rl, int64_t now_ms);

#endif
