/* SPDX-License-Identifier: Apache-2.0 */
/* The NUL walk over request bodies (server/rpc/rpc_strings.c) against what
 * protobuf-c really did with the same bytes.
 *
 * Input: the first byte picks a method (modulo the service's count, in the
 * order of the .proto), the rest is its request body. protobuf-c copies each
 * string into an allocation of its wire length + 1, so a string of the
 * unpacked message whose strlen + 1 is less than its allocation was cut at a
 * NUL. Properties: every cut string that reaches the message (nested
 * messages, maps, oneofs, repeated entries) is found by the walk; the name
 * it writes is a C string within its buffer. */
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "rpc_strings.h"
#include "sbx/v1/sandbox.pb-c.h"

/* Every allocation protobuf-c asks for while unpacking one body: inputs are
 * at most libFuzzer's -max_len (4096 by default), far fewer than this. */
#define ALLOCS_MAX 65536

static struct {
	void *p;
	size_t size;
} allocs[ALLOCS_MAX];
static size_t n_allocs;

static void *track_alloc(void *data, size_t size)
{
	void *p = malloc(size ? size : 1);

	(void)data;
	if (p && n_allocs < ALLOCS_MAX)
		allocs[n_allocs].p = p, allocs[n_allocs++].size = size;
	return p;
}

static void track_free(void *data, void *p)
{
	(void)data;
	for (size_t i = 0; i < n_allocs; i++)
		if (allocs[i].p == p)
			allocs[i].p = NULL;
	free(p);
}

static ProtobufCAllocator tracker = {track_alloc, track_free, NULL};

/* The size asked for p, or 0 when protobuf-c did not allocate it (a
 * default, e.g. an absent string's ""). */
static size_t allocated(const void *p)
{
	for (size_t i = 0; i < n_allocs; i++)
		if (allocs[i].p == p)
			return allocs[i].size;
	return 0;
}

/* The name of a string field of m (or of a message inside it) that was cut. */
static const char *cut_string(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *field = (const char *)m + f->offset;
		const void *const *values = (const void *const *)field;
		size_t n = 1;

		if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
		    *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			n = *(const size_t *)((const char *)m + f->quantifier_offset);
			values = *(const void *const *const *)field;
		}
		for (size_t k = 0; k < n; k++) {
			const char *name;
			size_t size;

			if (!values[k])
				continue;
			if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
				if ((name = cut_string(values[k])))
					return name;
				continue;
			}
			size = allocated(values[k]);
			if (size && strlen(values[k]) + 1 < size)
				return f->name;
		}
	}
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCServiceDescriptor *svc = &sbx__v1__sandbox__descriptor;
	const ProtobufCMessageDescriptor *desc;
	ProtobufCMessage *m;
	const char *cut;
	char where[64];
	bool hit;

	if (size < 1)
		return 0;
	desc = svc->methods[data[0] % svc->n_methods].input;
	n_allocs = 0;
	m = protobuf_c_message_unpack(desc, &tracker, size - 1, data + 1);
	memset(where, 'x', sizeof(where));
	hit = rpc_wire_nul_string(desc, data + 1, size - 1, where, sizeof(where));
	FUZZ_ASSERT(memchr(where, '\0', sizeof(where)), "%s: where is not terminated", desc->name);
	if (!m)
		return 0;
	cut = cut_string(m);
	FUZZ_ASSERT(!cut || hit, "%s: %s was cut at a NUL and the walk missed it", desc->name, cut);
	protobuf_c_message_free_unpacked(m, &tracker);
	return 0;
}
