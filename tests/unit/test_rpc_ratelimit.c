/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the log rate limit (server/rpc/rpc_ratelimit.c): at most N
 * lines a second, the rest counted and said with the next line written,
 * or by a flush once their second is over. */
#include "check.h"
#include "rpc_ratelimit.h"

int main(void)
{
	struct rpc_ratelimit rl = RPC_RATELIMIT_INIT(3);
	unsigned long before = 99, written = 0;

	for (int i = 0; i < 1000; i++)
		written += rpc_ratelimit_take(&rl, 5000 + i % 1000, &before);
	check(written == 3, "1000 in one second: 3 written (%lu)", written);
	check(rpc_ratelimit_flush(&rl, 5999) == 0, "no flush within their second");
	check(rpc_ratelimit_take(&rl, 6000, &before) && before == 997,
	      "the next second's first line says the 997 left out (%lu)", before);
	check(rpc_ratelimit_take(&rl, 6001, &before) && before == 0, "and the next says none");
	for (int i = 0; i < 10; i++)
		(void)rpc_ratelimit_take(&rl, 6002, &before);
	check(rpc_ratelimit_flush(&rl, 7000) == 9, "a flush after their second: 9 left out");
	check(rpc_ratelimit_flush(&rl, 8000) == 0, "said once");
	return check_done();
}
