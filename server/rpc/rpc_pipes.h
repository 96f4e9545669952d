/* SPDX-License-Identifier: Apache-2.0 */
/* When each connection (nng pipe) last had something to do, for the idle
 * timeout. Not locked: the RPC server guards it with its pipes lock. */
#ifndef SBX_RPC_PIPES_H
#define SBX_RPC_PIPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rpc_pipes;

struct rpc_pipes *rpc_pipes_new(void);
void rpc_pipes_free(struct rpc_pipes *t);
/* Pipe id was active at now_ms (added, a request came, an answer went);
 * false: out of memory, the pipe is not timed. */
bool rpc_pipes_touch(struct rpc_pipes *t, uint32_t id, int64_t now_ms);
void rpc_pipes_forget(struct rpc_pipes *t, uint32_t id);
/* Up to max pipes last active before before_ms for which busy(arg, id) is
 * false, into out; they are forgotten. */
size_t rpc_pipes_take_idle(struct rpc_pipes *t, int64_t before_ms, bool (*busy)(void *, uint32_t),
			   void *arg, uint32_t *out, size_t max);

#endif
