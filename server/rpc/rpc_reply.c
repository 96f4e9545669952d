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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

static nng_msg *pack(Sbx__V1__Code code, const char *message, bool in_progress,
		     const ProtobufCMessage *body, size_t max_bytes, bool *too_big)
{
	Sbx__V1__Response head = SBX__V1__RESPONSE__INIT;
	char clean[1024];
	size_t head_len, body_len = 0, total;
	nng_msg *m;
	uint8_t *p;

	rpc_text_clean(clean, sizeof(clean), message ? message : "");
	head.code = code;
	head.message = clean;
	head.in_progress = in_progress && code == SBX__V1__CODE__UNAVAILABLE;
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

/* The answer to send instead of one larger than max_bytes. */
static nng_msg *too_big_reply(const ProtobufCMessage *body, size_t max_bytes)
{
	char why[128];
	bool too_big;

	snprintf(why, sizeof(why), "response of %s larger than max_message_bytes (%zu)",
		 body->descriptor->name, max_bytes);
	return pack(SBX__V1__CODE__INTERNAL, why, false, NULL, max_bytes, &too_big);
}

nng_msg *rpc_reply(Sbx__V1__Code code, const char *message, const ProtobufCMessage *body,
		   size_t max_bytes)
{
	bool too_big;
	nng_msg *m = pack(code, message, false, body, max_bytes, &too_big);

	if (m || !too_big)
		return m;
	return too_big_reply(body, max_bytes);
}

nng_msg *rpc_reply_status(const struct sbx_rpc_status *st, size_t max_bytes)
{
	bool too_big;

	/* An error's message is cut to 1 KiB: never too big for sbxd's own
	 * bound (at least 64 KiB), so pack's NULL is out of memory. */
	return pack(st->code, st->err.msg, st->in_progress, NULL, max_bytes, &too_big);
}

/* ---- bulk bytes read straight into the answer ---- */

/* Before the bytes: the OK envelope (which packs to nothing), the body's
 * tag and length, field 1's tag and length: at most 22. */
#define BULK_HEAD 32
/* After them: the response's other fields (a size, flags, a digest), so
 * that appending them moves nothing. More is still appended, by a copy. */
#define BULK_TAIL  128
#define FIELD1_TAG 0x0a /* field 1, wire type 2 */

static uint8_t *bulk_room(struct sbx_bulk *b, size_t n)
{
	struct rpc_bulk *rb = (struct rpc_bulk *)(void *)b; /* b is its first member */
	nng_msg *m;

	if (rb->msg || n > SIZE_MAX - BULK_HEAD - BULK_TAIL ||
	    nng_msg_alloc(&m, BULK_HEAD + n + BULK_TAIL) != 0)
		return NULL;
	/* The head and tail become room nng fills in place (insert, append). */
	if (nng_msg_trim(m, BULK_HEAD) != 0 || nng_msg_chop(m, BULK_TAIL) != 0) {
		nng_msg_free(m);
		return NULL;
	}
	rb->msg = m;
	rb->room = n;
	return nng_msg_body(m);
}

void rpc_bulk_init(struct rpc_bulk *rb)
{
	*rb = (struct rpc_bulk){.b = {.room = bulk_room}};
}

void rpc_bulk_drop(struct rpc_bulk *rb)
{
	if (rb->msg)
		nng_msg_free(rb->msg);
	rb->msg = NULL;
	rb->room = rb->b.len = 0;
}

static nng_msg *bulk_fail(nng_msg *m, const char *why)
{
	bool too_big;

	nng_msg_free(m);
	return pack(SBX__V1__CODE__INTERNAL, why, false, NULL, SIZE_MAX, &too_big);
}

nng_msg *rpc_reply_bulk(const ProtobufCMessage *body, struct rpc_bulk *rb, size_t max_bytes)
{
	Sbx__V1__Response head = SBX__V1__RESPONSE__INIT;
	nng_msg *m = rb->msg;
	size_t len = rb->b.len, tail_len, body_len, head_len, total, n = 0;
	uint8_t small[BULK_TAIL], pre[BULK_HEAD];
	uint8_t *tail = small;

	rb->msg = NULL;
	if (!m)
		return rpc_reply(SBX__V1__CODE__OK, "", body, max_bytes);
	if (!body || len > rb->room)
		return bulk_fail(m, "bulk bytes without a response, or beyond their room");
	tail_len = protobuf_c_message_get_packed_size(body);
	if (tail_len > sizeof(small) && !(tail = malloc(tail_len))) {
		nng_msg_free(m);
		return NULL;
	}
	if (protobuf_c_message_pack(body, tail) != tail_len ||
	    (tail_len && tail[0] == FIELD1_TAG)) {
		/* Field 1 twice: a handler's bug, never worth sending. */
		if (tail != small)
			free(tail);
		return bulk_fail(m, "bulk bytes and the response's own field 1 both set");
	}
	/* Fields in number order, as protobuf-c packs them: 1 (the bytes,
	 * left out when empty, as proto3 does), then the rest. */
	body_len = (len ? 1 + varint_len(len) + len : 0) + tail_len;
	head.message = "";
	head_len = sbx__v1__response__get_packed_size(&head);
	total = head_len + (body_len ? 1 + varint_len(body_len) + body_len : 0);
	if (total > max_bytes || head_len > sizeof(pre) - 22) {
		if (tail != small)
			free(tail);
		nng_msg_free(m);
		return too_big_reply(body, max_bytes);
	}
	n += sbx__v1__response__pack(&head, pre);
	if (body_len) {
		pre[n++] = BODY_TAG;
		n += put_varint(pre + n, body_len);
	}
	if (len) {
		pre[n++] = FIELD1_TAG;
		n += put_varint(pre + n, len);
	}
	int rv = nng_msg_chop(m, rb->room - len);
	if (rv == 0 && tail_len)
		rv = nng_msg_append(m, tail, tail_len);
	if (rv == 0)
		rv = nng_msg_insert(m, pre, n);
	if (tail != small)
		free(tail);
	if (rv != 0 || nng_msg_len(m) != total) {
		nng_msg_free(m);
		return NULL;
	}
	return m;
}
