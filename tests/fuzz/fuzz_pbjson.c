/* SPDX-License-Identifier: Apache-2.0 */
/* pbjson, both directions that take hostile input (clients/c/pbjson.h).
 *
 * Input: byte 0 picks the message type (the envelope, the policy, then each
 * method's request and response in the .proto's order), byte 1's low bit
 * the direction:
 *   0: the rest is JSON -> sbx_pbjson_to_message; what it reads must print
 *      (sbx_pbjson_from_message) as JSON that reads back to the same bytes;
 *   1: the rest is protobuf (what a server sends) -> sbx_pbjson_dumps, which
 *      must be valid JSON. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pbjson.h"
#include "sbx/v1/policy.pb-c.h"
#include "sbx/v1/sandbox.pb-c.h"

#define TYPES_MAX 64

static const ProtobufCMessageDescriptor *types[TYPES_MAX];
static size_t n_types;

static void list_types(void)
{
	const ProtobufCServiceDescriptor *svc = &sbx__v1__sandbox__descriptor;

	types[n_types++] = &sbx__v1__request__descriptor;
	types[n_types++] = &sbx__v1__response__descriptor;
	types[n_types++] = &sbx__v1__policy__descriptor;
	for (unsigned i = 0; i < svc->n_methods && n_types + 2 <= TYPES_MAX; i++) {
		types[n_types++] = svc->methods[i].input;
		types[n_types++] = svc->methods[i].output;
	}
}

static uint8_t *packed(const ProtobufCMessage *m, size_t *len)
{
	uint8_t *buf;

	*len = protobuf_c_message_get_packed_size(m);
	buf = malloc(*len ? *len : 1);
	FUZZ_ASSERT(buf, "out of memory");
	FUZZ_ASSERT(protobuf_c_message_pack(m, buf) == *len, "pack");
	return buf;
}

static void from_json(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len)
{
	struct sbx_err err = {0};
	json_error_t jerr;
	json_t *j = json_loadb((const char *)data, len, JSON_DECODE_ANY, &jerr);
	ProtobufCMessage *m, *m2;
	json_t *printed;
	uint8_t *a, *b;
	size_t alen, blen;

	if (!j)
		return;
	m = sbx_pbjson_to_message(desc, j, &err);
	json_decref(j);
	if (!m) {
		FUZZ_ASSERT(err.msg[0], "%s: to_message failed without a message", desc->name);
		return;
	}
	printed = sbx_pbjson_from_message(m, SBX_PBJSON_EMIT_DEFAULTS);
	FUZZ_ASSERT(printed, "%s: from_message", desc->name);
	m2 = sbx_pbjson_to_message(desc, printed, &err);
	if (!m2) {
		char *s = json_dumps(printed, JSON_COMPACT);

		FUZZ_ASSERT(m2, "%s: what pbjson printed does not read back: %s\n%s", desc->name,
			    err.msg, s ? s : "(null)");
	}
	json_decref(printed);
	a = packed(m, &alen);
	b = packed(m2, &blen);
	FUZZ_ASSERT(alen == blen && memcmp(a, b, alen) == 0,
		    "%s: JSON -> message -> JSON -> message changed the message", desc->name);
	free(a);
	free(b);
	protobuf_c_message_free_unpacked(m, NULL);
	protobuf_c_message_free_unpacked(m2, NULL);
}

static void from_protobuf(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, data);
	json_error_t jerr;

	if (!m)
		return;
	for (unsigned flags = 0; flags <= SBX_PBJSON_EMIT_DEFAULTS; flags++) {
		char *s = sbx_pbjson_dumps(m, flags);
		json_t *j;

		FUZZ_ASSERT(s, "%s: dumps", desc->name);
		j = json_loads(s, 0, &jerr);
		FUZZ_ASSERT(j, "%s: dumps wrote invalid JSON (%s):\n%s", desc->name, jerr.text, s);
		json_decref(j);
		free(s);
	}
	protobuf_c_message_free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!n_types)
		list_types();
	if (size < 2)
		return 0;
	const ProtobufCMessageDescriptor *desc = types[data[0] % n_types];

	if (data[1] & 1)
		from_protobuf(desc, data + 2, size - 2);
	else
		from_json(desc, data + 2, size - 2);
	return 0;
}
