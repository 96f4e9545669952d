/* SPDX-License-Identifier: Apache-2.0 */
/* The Response envelope (see rpc_reply.h).
 *
 * Response is {1: code, 2: message, 3: body}. protobuf-c packs fields in
 * number order, so packing {code, message} and appending field 3 by hand is
 * byte for byte what packing the whole message would give, without first
 * serializing the body into a buffer of its own. */
#include "rpc_reply.h"
#include "text.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define BODY_TAG 0x1a /* field 3, wire type 2 (length-delimited) */

void rpc_text_clean(char *dst, size_t dst_size, const char *src)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t o = 0;

	if (dst_size == 0)
		return;
	while (*s && o + 1 < dst_size) {
		size_t bad = sbx_text_unsafe_len(s);
		size_t n = sbx_utf8_len(s);

		/* What a terminal would act on (C0, DEL, C1, bidi controls) or
		 * what is not UTF-8 becomes one '?' each: the message stays
		 * valid proto3 text that no client can be fooled by. */
		if (bad) {
			dst[o++] = '?';
			s += bad;
			continue;
		}
		if (o + n >= dst_size)
			break; /* never cut a sequence in half */
		memcpy(dst + o, s, n);
		o += n;
		s += n;
	}
	dst[o] = '\0';
}

static size_t varint_len(size_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static size_t put_varint(uint8_t *p, size_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static nng_msg *pack(Sbx__V1__Code code, const char *message, const ProtobufCMessage *body,
		     size_t max_bytes, bool *too_big)
{
	Sbx__V1__Response head = SBX__V1__RESPONSE__INIT;
	char clean[1024];
	size_t head_len, body_len = 0, total;
	nng_msg *m;
	uint8_t *p;

	rpc_text_clean(clean, sizeof(clean), message ? message : "");
	head.code = code;
	head.message = clean;
	head_len = sbx__v1__response__get_packed_size(&head);
	total = head_len;
	if (body) {
		body_len = protobuf_c_message_get_packed_size(body);
		/* proto3 leaves an empty bytes field out. */
		if (body_len)
			total += 1 + varint_len(body_len) + body_len;
	}
	*too_big = total > max_bytes;
	if (*too_big || nng_msg_alloc(&m, total) != 0)
		return NULL;
	p = nng_msg_body(m);
	p += sbx__v1__response__pack(&head, p);
	if (body_len) {
		*p++ = BODY_TAG;
		p += put_varint(p, body_len);
		p += protobuf_c_message_pack(body, p);
	}
	if ((size_t)(p - (uint8_t *)nng_msg_body(m)) != total) {
		/* The packed sizes and the packing disagree: a protobuf-c bug,
		 * and never worth sending garbage for. */
		nng_msg_free(m);
		return NULL;
	}
	return m;
}

nng_msg *rpc_reply(Sbx__V1__Code code, const char *message, const ProtobufCMessage *body,
		   size_t max_bytes)
{
	char why[128];
	bool too_big;
	nng_msg *m = pack(code, message, body, max_bytes, &too_big);

	if (m || !too_big)
		return m;
	snprintf(why, sizeof(why), "response of %s larger than max_message_bytes (%zu)",
		 body->descriptor->name, max_bytes);
	return pack(SBX__V1__CODE__INTERNAL, why, NULL, max_bytes, &too_big);
}
