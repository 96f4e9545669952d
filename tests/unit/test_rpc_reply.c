/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the Response envelope (server/rpc/rpc_reply.c): the body
 * packed in place is byte for byte what protobuf-c packs, errors carry no
 * body, messages are cleaned to printable UTF-8, and an answer too large for
 * the caller becomes INTERNAL. Real nng messages, no sockets needed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <sbx/v1/sandbox.pb-c.h>

#include "check.h"
#include "nng_err.h"
#include "rpc_reply.h"

/* What protobuf-c packs for the whole Response: the reference. */
static bool packs_as(nng_msg *m, Sbx__V1__Code code, const char *message,
		     const ProtobufCMessage *body)
{
	Sbx__V1__Response want = SBX__V1__RESPONSE__INIT;
	uint8_t *body_bytes = NULL, *want_bytes;
	size_t len;
	bool same;

	want.code = code;
	want.message = (char *)message;
	if (body) {
		want.body.len = protobuf_c_message_get_packed_size(body);
		body_bytes = malloc(want.body.len + 1);
		protobuf_c_message_pack(body, body_bytes);
		want.body.data = body_bytes;
	}
	len = sbx__v1__response__get_packed_size(&want);
	want_bytes = malloc(len + 1);
	sbx__v1__response__pack(&want, want_bytes);
	same = m && nng_msg_len(m) == len && memcmp(nng_msg_body(m), want_bytes, len) == 0;
	free(want_bytes);
	free(body_bytes);
	return same;
}

static Sbx__V1__Response *unpacked(nng_msg *m)
{
	return m ? sbx__v1__response__unpack(NULL, nng_msg_len(m), nng_msg_body(m)) : NULL;
}

static void test_envelope(void)
{
	Sbx__V1__HealthResponse h = SBX__V1__HEALTH_RESPONSE__INIT;
	Sbx__V1__SignalResponse empty = SBX__V1__SIGNAL_RESPONSE__INIT;
	Sbx__V1__ReadOutputResponse big = SBX__V1__READ_OUTPUT_RESPONSE__INIT;
	uint8_t data[200000];
	Sbx__V1__Response *r;
	nng_msg *m;

	h.version = "0.1.0";
	h.runs_max = 64;
	h.cgroup = "v2";
	m = rpc_reply(SBX__V1__CODE__OK, "", &h.base, 1 << 20);
	check(packs_as(m, SBX__V1__CODE__OK, "", &h.base),
	      "OK with a body: what packing the whole Response gives");
	nng_msg_free(m);

	m = rpc_reply(SBX__V1__CODE__OK, NULL, &empty.base, 1 << 20);
	check(packs_as(m, SBX__V1__CODE__OK, "", NULL) && nng_msg_len(m) == 0,
	      "an empty body is left out, as proto3 does (%zu bytes)", m ? nng_msg_len(m) : 0);
	nng_msg_free(m);

	/* A body whose length needs a three-byte varint. */
	memset(data, 'x', sizeof(data));
	big.data.data = data;
	big.data.len = sizeof(data);
	big.next_offset = 200000;
	m = rpc_reply(SBX__V1__CODE__OK, "", &big.base, 1 << 20);
	check(packs_as(m, SBX__V1__CODE__OK, "", &big.base), "a 200000-byte body, packed in place");
	nng_msg_free(m);

	m = rpc_reply(SBX__V1__CODE__NOT_FOUND, "run run-x not found", NULL, 1 << 20);
	r = unpacked(m);
	check(r && r->code == SBX__V1__CODE__NOT_FOUND &&
		  strcmp(r->message, "run run-x not found") == 0 && r->body.len == 0,
	      "an error: code and message, no body");
	if (r)
		sbx__v1__response__free_unpacked(r, NULL);
	nng_msg_free(m);

	m = rpc_reply(SBX__V1__CODE__OK, "", &big.base, 100000);
	r = unpacked(m);
	check(r && r->code == SBX__V1__CODE__INTERNAL && r->body.len == 0 &&
		  strcmp(r->message, "response of sbx.v1.ReadOutputResponse larger than "
				     "max_message_bytes (100000)") == 0,
	      "an answer past max_bytes becomes INTERNAL, saying why");
	if (r)
		sbx__v1__response__free_unpacked(r, NULL);
	nng_msg_free(m);

	/* in_progress goes out only with UNAVAILABLE (the fleet clients keep
	 * a create on its host for it), and only when the status says so. */
	{
		struct sbx_rpc_status st;

		sbx_rpc_in_progress(&st, "request_id \"x\": an earlier attempt is still running");
		m = rpc_reply_status(&st, 1 << 20);
		r = unpacked(m);
		check(r && r->code == SBX__V1__CODE__UNAVAILABLE && r->in_progress &&
			  strstr(r->message, "still running") && r->body.len == 0,
		      "an earlier attempt still running: UNAVAILABLE with in_progress");
		if (r)
			sbx__v1__response__free_unpacked(r, NULL);
		nng_msg_free(m);

		st.code = SBX__V1__CODE__INTERNAL; /* in_progress still set */
		m = rpc_reply_status(&st, 1 << 20);
		r = unpacked(m);
		check(r && r->code == SBX__V1__CODE__INTERNAL && !r->in_progress,
		      "never in_progress with another code");
		if (r)
			sbx__v1__response__free_unpacked(r, NULL);
		nng_msg_free(m);

		sbx_rpc_in_progress(&st, "again");
		sbx_rpc_fail(&st, SBX__V1__CODE__UNAVAILABLE, "draining");
		m = rpc_reply_status(&st, 1 << 20);
		r = unpacked(m);
		check(!st.in_progress && r && r->code == SBX__V1__CODE__UNAVAILABLE &&
			  !r->in_progress && strcmp(r->message, "draining") == 0,
		      "a plain UNAVAILABLE (a setter clears in_progress) says nothing in progress");
		if (r)
			sbx__v1__response__free_unpacked(r, NULL);
		nng_msg_free(m);

		sbx_rpc_in_progress(&st, "again");
		sbx_rpc_fail_nng(&st, SBX__V1__CODE__UNAVAILABLE, NNG_ECONNREFUSED,
				 "cannot connect");
		check(!st.in_progress, "sbx_rpc_fail_nng clears in_progress too");
		sbx_rpc_in_progress(&st, "again");
		sbx_rpc_ok(&st);
		check(!st.in_progress, "sbx_rpc_ok clears in_progress");
	}

	m = rpc_reply(SBX__V1__CODE__INVALID_ARGUMENT, "bad \x01 byte \xff in \xc3\xa9t\xc3\xa9",
		      NULL, 1 << 20);
	r = unpacked(m);
	check(r && strcmp(r->message, "bad ? byte ? in \xc3\xa9t\xc3\xa9") == 0,
	      "the message is cleaned to printable UTF-8");
	if (r)
		sbx__v1__response__free_unpacked(r, NULL);
	nng_msg_free(m);
}

/* FetchArtifact's reply with its chunk read straight into the message
 * (rpc_reply_bulk): byte for byte what rpc_reply packs with the chunk in
 * the response. */
static bool bulk_is(const char *desc, size_t n, size_t len, size_t max_bytes)
{
	Sbx__V1__FetchArtifactResponse o = SBX__V1__FETCH_ARTIFACT_RESPONSE__INIT;
	struct rpc_bulk rb;
	uint8_t *room;
	nng_msg *m;
	bool ok;

	rpc_bulk_init(&rb);
	room = rb.b.room(&rb.b, n);
	if (!check(room != NULL, "bulk %s: room for %zu bytes", desc, n))
		return false;
	for (size_t i = 0; i < len; i++)
		room[i] = (uint8_t)(i * 7 + 3);
	rb.b.len = len;
	o.size = 300000;
	o.eof = true;
	o.sha256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	o.live = true;
	m = rpc_reply_bulk(&o.base, &rb, max_bytes);
	check(rb.msg == NULL, "bulk %s: the room is the answer's now", desc);
	/* The reference: the same bytes in the response itself. */
	uint8_t *copy = malloc(len + 1);
	for (size_t i = 0; i < len; i++)
		copy[i] = (uint8_t)(i * 7 + 3);
	o.data.data = copy;
	o.data.len = len;
	ok = check(packs_as(m, SBX__V1__CODE__OK, "", &o.base), "bulk %s: as rpc_reply packs it",
		   desc);
	free(copy);
	if (m)
		nng_msg_free(m);
	rpc_bulk_drop(&rb);
	return ok;
}

/* rpc_reply_bulk's size limit is rpc_reply's: an answer of exactly
 * max_bytes goes, one byte more becomes INTERNAL (review of fetchipc), and
 * a tail longer than the room kept for it (BULK_TAIL) is still appended. */
static void test_bulk_edges(void)
{
	static const size_t lens[] = {0, 1, 127, 128, 16383, 16384, 1 << 20};
	char long_sha[300];

	memset(long_sha, 'f', sizeof(long_sha) - 1);
	long_sha[sizeof(long_sha) - 1] = '\0';
	for (size_t t = 0; t < 2; t++)
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			Sbx__V1__FetchArtifactResponse o = SBX__V1__FETCH_ARTIFACT_RESPONSE__INIT;
			size_t len = lens[i], exact;
			uint8_t *copy = malloc(len + 1);
			nng_msg *ref;

			for (size_t j = 0; j < len; j++)
				copy[j] = (uint8_t)(j * 13 + 1);
			o.size = 1ULL << 40;
			o.eof = true;
			o.live = true;
			o.sha256 = t ? long_sha : "ab";
			o.data.data = copy;
			o.data.len = len;
			ref = rpc_reply(SBX__V1__CODE__OK, "", &o.base, SIZE_MAX);
			exact = nng_msg_len(ref);
			o.data.data = NULL;
			o.data.len = 0;
			for (size_t slack = 0; slack < 2; slack++) {
				struct rpc_bulk rb;
				Sbx__V1__Response *r;
				uint8_t *room;
				nng_msg *m;

				rpc_bulk_init(&rb);
				room = rb.b.room(&rb.b, len + 7);
				memcpy(room, copy, len);
				memset(room + len, 0xEE, 7); /* never sent */
				rb.b.len = len;
				m = rpc_reply_bulk(&o.base, &rb, exact - 1 + slack);
				if (slack) {
					check(m && nng_msg_len(m) == exact &&
						  memcmp(nng_msg_body(m), nng_msg_body(ref),
							 exact) == 0,
					      "bulk edge: %zu bytes (tail %zu) at exactly "
					      "max_bytes is "
					      "rpc_reply's answer",
					      len, t);
				} else {
					/* rpc_reply's answer for the same limit: INTERNAL, or
					 * nothing when even that does not fit. */
					o.data.data = copy;
					o.data.len = len;
					nng_msg *want =
					    rpc_reply(SBX__V1__CODE__OK, "", &o.base, exact - 1);
					o.data.data = NULL;
					o.data.len = 0;
					r = unpacked(m);
					check((!m && !want) ||
						  (m && want && r &&
						   r->code == SBX__V1__CODE__INTERNAL &&
						   r->body.len == 0 &&
						   nng_msg_len(m) == nng_msg_len(want) &&
						   !memcmp(nng_msg_body(m), nng_msg_body(want),
							   nng_msg_len(m))),
					      "bulk edge: %zu bytes (tail %zu), one byte past "
					      "max_bytes: "
					      "rpc_reply's INTERNAL (or nothing)",
					      len, t);
					if (r)
						sbx__v1__response__free_unpacked(r, NULL);
					if (want)
						nng_msg_free(want);
				}
				if (m)
					nng_msg_free(m);
				rpc_bulk_drop(&rb);
			}
			nng_msg_free(ref);
			free(copy);
		}
}

/* An answer rpc_reply_bulk must refuse with INTERNAL and no body: a room of
 * `room` bytes said to hold `len`, field 1 also set in the response
 * (`field1_len` bytes) or not, the answer's limit `max_bytes`. */
static void bulk_refused(const char *desc, size_t room, size_t len, size_t field1_len,
			 size_t max_bytes, const char *want_message)
{
	Sbx__V1__FetchArtifactResponse o = SBX__V1__FETCH_ARTIFACT_RESPONSE__INIT;
	static uint8_t field1[16];
	Sbx__V1__Response *r;
	struct rpc_bulk rb;
	nng_msg *m;

	rpc_bulk_init(&rb);
	rb.b.room(&rb.b, room);
	rb.b.len = len;
	o.size = 4096;
	o.data.data = field1_len ? field1 : NULL;
	o.data.len = field1_len;
	m = rpc_reply_bulk(&o.base, &rb, max_bytes);
	r = unpacked(m);
	check(r && r->code == SBX__V1__CODE__INTERNAL && r->body.len == 0 &&
		  (!want_message || strstr(r->message, want_message)),
	      "bulk: %s", desc);
	if (r)
		sbx__v1__response__free_unpacked(r, NULL);
	if (m)
		nng_msg_free(m);
}

static void test_bulk(void)
{
	struct rpc_bulk rb;

	bulk_is("a whole chunk (a three-byte length)", 1 << 20, 1 << 20, 2 << 20);
	bulk_is("fewer bytes than the room (a short last chunk)", 1 << 20, 200000, 2 << 20);
	bulk_is("one byte", 1, 1, 1 << 20);
	bulk_is("no bytes: field 1 left out", 16, 0, 1 << 20);

	rpc_bulk_init(&rb);
	check(rb.b.room(&rb.b, 4096) != NULL && rb.b.room(&rb.b, 4096) == NULL,
	      "bulk: room is given once");
	rpc_bulk_drop(&rb);

	bulk_refused("an answer past max_bytes becomes INTERNAL, saying why", 4096, 4096, 0, 1000,
		     "larger than max_message_bytes (1000)");
	bulk_refused("field 1 both in the room and in the response is refused, not sent twice", 16,
		     16, 1, 1 << 20, NULL);
	bulk_refused("more bytes than the room is refused, not read past it", 16, 17, 0, 1 << 20,
		     NULL);

	rpc_bulk_init(&rb);
	rb.b.room(&rb.b, 1 << 20);
	rpc_bulk_drop(&rb);
	check(rb.msg == NULL, "bulk: an unused room is dropped (an error answer)");
}

static void clean_is(const char *desc, size_t size, const char *src, const char *want)
{
	char dst[64];

	rpc_text_clean(dst, size, src);
	if (!check(strcmp(dst, want) == 0, "text_clean: %s", desc))
		printf("#   want \"%s\", got \"%s\"\n", want, dst);
}

static void test_text_clean(void)
{
	char big[2000];
	char dst[1024];

	clean_is("plain ASCII stays", 64, "run-1: exec e-2 ended", "run-1: exec e-2 ended");
	clean_is("control characters become ?", 64, "a\tb\nc\x7f", "a?b?c?");
	clean_is("two-, three- and four-byte UTF-8 stays", 64,
		 "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82",
		 "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82");
	clean_is("an overlong '/' is two bad bytes", 64, "\xc0\xaf", "??");
	clean_is("a C1 control and a bidi override are one ? each", 64,
		 "a\xc2\x9b"
		 "b\xe2\x80\xae"
		 "c",
		 "a?b?c");
	clean_is("a surrogate is invalid", 64, "\xed\xa0\x80", "???");
	clean_is("past U+10FFFF is invalid", 64, "\xf4\x90\x80\x80", "????");
	clean_is("a truncated sequence is invalid", 64, "x\xe2\x82", "x??");
	clean_is("a sequence is never cut in half", 3, "a\xc3\xa9", "a");
	clean_is("the copy is always terminated", 4, "abcdef", "abc");

	memset(big, 'm', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	rpc_text_clean(dst, sizeof(dst), big);
	check(strlen(dst) == sizeof(dst) - 1, "a long text is cut to the buffer");
}

int main(void)
{
	test_envelope();
	test_bulk();
	test_bulk_edges();
	test_text_clean();
	nng_fini();
	return check_done();
}
