/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the envelope scan (server/rpc/rpc_envelope.c) against
 * protobuf-c's own packing: what a client packs, the scan reads the same;
 * unknown fields, repeats and over-long strings are refused at the first
 * offending key, however much follows. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rpc_envelope.h"
#include "sbx/v1/sandbox.pb-c.h"

static size_t pack(const Sbx__V1__Request *req, uint8_t *buf)
{
	return protobuf_c_message_pack(&req->base, buf);
}

static void test_agrees_with_protobuf_c(void)
{
	Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
	uint8_t body[3] = {1, 2, 3}, buf[512];
	struct rpc_envelope env;
	struct sbx_err err;
	size_t n;

	req.method = "/sbx.v1.Sandbox/Health";
	req.body.data = body;
	req.body.len = sizeof(body);
	req.request_id = "id-1";
	req.deadline_ms = 4000000000u;
	req.credentials = "tok";
	n = pack(&req, buf);
	check(rpc_envelope_scan(buf, n, &env, &err) == RPC_ENVELOPE_OK, "a packed envelope scans");
	check(strcmp(env.method, req.method) == 0 && strcmp(env.request_id, "id-1") == 0 &&
		  strcmp(env.credentials, "tok") == 0 && env.deadline_ms == 4000000000u &&
		  env.body_len == 3 && memcmp(env.body, body, 3) == 0,
	      "and reads every field as packed");
	check(memcmp(buf + env.credentials_at, "tok", 3) == 0,
	      "credentials_at points at the token");
	check(rpc_envelope_scan(buf, 0, &env, &err) == RPC_ENVELOPE_OK && !env.method[0],
	      "an empty envelope is all defaults");
	check(rpc_envelope_scan(buf, n - 1, &env, &err) == RPC_ENVELOPE_MALFORMED,
	      "a truncated one is malformed: %s", err.msg);
}

static void test_refusals(void)
{
	Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
	size_t big = 4u << 20;
	uint8_t *buf = malloc(big + 512);
	struct rpc_envelope env;
	struct sbx_err err;
	char longer[RPC_CREDENTIALS_MAX + 2];
	size_t n;

	if (!check(buf != NULL, "4 MiB for the flood"))
		return;
	req.method = "/sbx.v1.Sandbox/Health";
	n = pack(&req, buf);
	/* Issue 7's flood: a valid envelope followed by ~840,000 small
	 * unknown fields; refused at the first. */
	for (size_t i = n; i + 5 <= big; i += 5)
		memcpy(buf + i, "\x30\x81\x82\x83\x04", 5);
	check(rpc_envelope_scan(buf, big, &env, &err) == RPC_ENVELOPE_UNKNOWN &&
		  strstr(err.msg, "unknown field 6 at byte"),
	      "unknown fields are refused at the first: %s", err.msg);
	memcpy(buf + n, buf, n);
	check(rpc_envelope_scan(buf, 2 * n, &env, &err) == RPC_ENVELOPE_DUPLICATE &&
		  strstr(err.msg, "method given twice"),
	      "a repeated field is refused: %s", err.msg);
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	req.credentials = longer;
	n = pack(&req, buf);
	check(rpc_envelope_scan(buf, n, &env, &err) == RPC_ENVELOPE_TOO_LONG &&
		  strstr(err.msg, "credentials: longer than 256 bytes"),
	      "an over-long token is refused: %s", err.msg);
	check(rpc_envelope_scan((const uint8_t *)"\x0a\x03\x61\x00\x62", 5, &env, &err) ==
		  RPC_ENVELOPE_NUL,
	      "a NUL in a string is refused: %s", err.msg);
	check(rpc_envelope_scan((const uint8_t *)"\x20\x01", 2, &env, &err) == RPC_ENVELOPE_OK &&
		  env.deadline_ms == 1 &&
		  rpc_envelope_scan((const uint8_t *)"\x22\x00", 2, &env, &err) ==
		      RPC_ENVELOPE_WIRE_TYPE,
	      "deadline_ms must be a varint: %s", err.msg);
	check(rpc_envelope_scan((const uint8_t *)"\x80\x00\x00", 3, &env, &err) ==
		  RPC_ENVELOPE_UNKNOWN,
	      "field number 0 is unknown: %s", err.msg);
	check(rpc_envelope_scan((const uint8_t *)"\x0a\x80", 2, &env, &err) ==
		  RPC_ENVELOPE_MALFORMED,
	      "a cut length is malformed: %s", err.msg);
	free(buf);
}

int main(void)
{
	test_agrees_with_protobuf_c();
	test_refusals();
	return check_done();
}
