/* SPDX-License-Identifier: Apache-2.0 */
/* The byte-budgeted allocator (see rpc_alloc.h). */
#include "rpc_alloc.h"

#include <stdint.h>
#include <stdlib.h>

#define BUDGET_FACTOR 16
#define BUDGET_SLACK  (64 * 1024)

static void *budget_alloc(void *data, size_t size)
{
	struct rpc_alloc *a = data;

	/* Counting what was asked, not what is live, is stricter and needs no
	 * size bookkeeping on free. */
	if (size > a->budget - a->used) {
		a->exceeded = true;
		return NULL;
	}
	a->used += size;
	return malloc(size ? size : 1);
}

static void budget_free(void *data, void *ptr)
{
	(void)data;
	free(ptr);
}

size_t rpc_alloc_budget_for(size_t len)
{
	if (len > (SIZE_MAX - BUDGET_SLACK) / BUDGET_FACTOR)
		return SIZE_MAX;
	return len * BUDGET_FACTOR + BUDGET_SLACK;
}

void rpc_alloc_init(struct rpc_alloc *a, size_t budget)
{
	a->base.alloc = budget_alloc;
	a->base.free = budget_free;
	a->base.allocator_data = a;
	a->budget = budget;
	a->used = 0;
	a->exceeded = false;
}

ProtobufCMessage *rpc_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
			     size_t len, bool *too_complex)
{
	struct rpc_alloc a;
	ProtobufCMessage *m;

	rpc_alloc_init(&a, rpc_alloc_budget_for(len));
	m = protobuf_c_message_unpack(desc, &a.base, len, data);
	*too_complex = !m && a.exceeded;
	return m;
}
