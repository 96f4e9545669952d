/* SPDX-License-Identifier: Apache-2.0 */
/* A byte-budgeted protobuf-c allocator, for unpacking what strangers send.
 *
 * protobuf-c 1.4 can allocate ~56x its input while unpacking (a repeated
 * empty submessage costs 2 bytes on the wire and a struct plus bookkeeping
 * in memory), with no limit of its own. Every unpack of untrusted bytes goes
 * through one of these, so a 4 MiB message costs at most its budget. The
 * memory comes from malloc, so the result is freed with free_unpacked(m, NULL)
 * like any other message. */
#ifndef SBX_RPC_ALLOC_H
#define SBX_RPC_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct rpc_alloc {
	ProtobufCAllocator base; /* pass &a.base to unpack */
	size_t budget;
	size_t used; /* every byte asked for; frees do not give budget back */
	bool exceeded;
};

/* What a message of len bytes may cost: 16x plus a fixed allowance for the
 * structs of a small message. */
size_t rpc_alloc_budget_for(size_t len);
void rpc_alloc_init(struct rpc_alloc *a, size_t budget);

/* Unpacks data with a fresh allocator of rpc_alloc_budget_for(len). NULL on
 * failure, with *too_complex telling a blown budget from bad bytes. */
ProtobufCMessage *rpc_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
			     size_t len, bool *too_complex);

#endif
