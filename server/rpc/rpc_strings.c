/* SPDX-License-Identifier: Apache-2.0 */
/* NUL bytes in a body's strings (see rpc_strings.h).
 *
 * Why the wire and not the unpacked message: comparing strlen with a length
 * needs the length, which protobuf-c drops. Re-encoding the message and
 * comparing its size with the body's is not exact: a caller controls the
 * encoding. Overlong varints, a singular field sent twice (the last one
 * wins) or a zero sent explicitly shrink the re-encoding, so honest
 * non-canonical bodies would be refused, naming no field; and an int32 sent
 * as a 5-byte varint grows it (a negative one is re-encoded in 10), which
 * cancels a cut string: SignalRequest{run_id "a\0bcde", signal -1 in 5
 * bytes} re-encodes to its own size (tests/unit/test_rpc_strings.c). Reading the length-delimited
 * fields where protobuf-c reads them, by the same descriptors, sees exactly the bytes it copied. A
 * singular field sent twice is checked in both copies: the first one is discarded by protobuf-c,
 * and refusing it costs an honest caller nothing. */
#include "rpc_strings.h"

#include <stdio.h>
#include <string.h>

/* Deeper than any sbx message nests; protobuf-c's own unpack recurses no
 * further than the bytes allow, this keeps the walk's stack small too. */
#define DEPTH_MAX 32

enum { WIRE_VARINT = 0, WIRE_64BIT = 1, WIRE_LEN = 2, WIRE_32BIT = 5 };

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;

		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

/* One field at *p: its number, wire type and, for a length-delimited one,
 * where its bytes are. *p moves past it. */
static bool next_field(const uint8_t **p, const uint8_t *end, uint32_t *number, unsigned *wire,
		       const uint8_t **value, size_t *value_len)
{
	uint64_t tag, n;

	if (!read_varint(p, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
		return false;
	*number = (uint32_t)(tag >> 3);
	*wire = (unsigned)(tag & 7);
	switch (*wire) {
	case WIRE_VARINT:
		return read_varint(p, end, &n);
	case WIRE_64BIT:
		n = 8;
		break;
	case WIRE_32BIT:
		n = 4;
		break;
	case WIRE_LEN:
		if (!read_varint(p, end, &n))
			return false;
		break;
	default: /* groups: protobuf-c refuses them */
		return false;
	}
	if (n > (uint64_t)(end - *p))
		return false;
	*value = *p;
	*value_len = (size_t)n;
	*p += n;
	return true;
}

/* How many times field `number` came before `at`: its index when repeated. */
static size_t index_of(const uint8_t *data, const uint8_t *at, uint32_t number)
{
	const uint8_t *p = data;
	size_t k = 0;

	while (p < at) {
		uint32_t nr;
		unsigned wire;
		const uint8_t *v;
		size_t vlen;

		if (!next_field(&p, at, &nr, &wire, &v, &vlen))
			break;
		k += nr == number;
	}
	return k;
}

/* Puts text into where at `at`, the rest moved after it, cut to size. */
static void insert_at(char *where, size_t size, size_t at, const char *text)
{
	size_t n = strlen(text), tail = strlen(where + at);

	if (at + n >= size) {
		n = size - 1 - at;
		tail = 0;
	} else if (at + n + tail >= size) {
		tail = size - 1 - at - n;
	}
	memmove(where + at + n, where + at, tail);
	memcpy(where + at, text, n);
	where[at + n + tail] = '\0';
}

enum walk_result { WALK_CLEAN, WALK_NUL, WALK_UNREADABLE };

static enum walk_result walk(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
			     size_t len, char *where, size_t size, unsigned depth)
{
	const uint8_t *p = data, *end = data + len;
	size_t base = strlen(where);

	if (depth > DEPTH_MAX)
		return WALK_UNREADABLE;
	while (p < end) {
		const uint8_t *at = p, *v;
		uint32_t number;
		unsigned wire;
		size_t vlen, name_end;
		const ProtobufCFieldDescriptor *f;
		enum walk_result r;

		if (!next_field(&p, end, &number, &wire, &v, &vlen))
			return WALK_UNREADABLE;
		f = protobuf_c_message_descriptor_get_field(desc, number);
		if (!f || wire != WIRE_LEN ||
		    (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
			continue;
		snprintf(where + base, size - base, ".%s", f->name);
		name_end = strlen(where);
		r = f->type == PROTOBUF_C_TYPE_STRING
			? (memchr(v, '\0', vlen) ? WALK_NUL : WALK_CLEAN)
			: walk(f->descriptor, v, vlen, where, size, depth + 1);
		if (r == WALK_NUL && f->label == PROTOBUF_C_LABEL_REPEATED) {
			/* The index only for the field named: index_of reads the
			 * message from its start, and asking it for every entry
			 * made the walk quadratic (an Exec of 2 M empty argv
			 * entries, 4 MiB, held a worker for hours). */
			char index[32];

			snprintf(index, sizeof(index), "[%zu]", index_of(data, at, number));
			insert_at(where, size, name_end, index);
		}
		if (r != WALK_CLEAN)
			return r;
		where[base] = '\0';
	}
	return WALK_CLEAN;
}

bool rpc_wire_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
			 char *where, size_t size)
{
	if (size == 0)
		return true;
	where[0] = '\0';
	switch (walk(desc, data, len, where, size, 0)) {
	case WALK_CLEAN:
		return false;
	case WALK_NUL:
		return true;
	default:
		snprintf(where, size, ".");
		return true;
	}
}
