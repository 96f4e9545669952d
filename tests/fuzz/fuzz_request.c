/* SPDX-License-Identifier: Apache-2.0 */
/* What sbxd unpacks from strangers: the sbx.v1.Request envelope and each
 * method's body, through the byte-budgeted allocator (rpc_alloc.h).
 *
 * Input: the first byte picks what the rest is: a method's body (byte <
 * number of methods, in the order of the .proto's service) or else an
 * envelope, whose body is then unpacked as its method's request the way
 * sbxd dispatches it (rpc_method_find).
 *
 * Properties, for every unpack: rpc_unpack and a counted unpack with the
 * same budget agree; the bytes asked of the allocator never exceed
 * rpc_alloc_budget_for(len); a budget one byte short of what a message
 * needed fails cleanly (no leak, no crash in protobuf-c's failure paths).
 *
 * And for every envelope, the scan sbxd runs before authentication
 * (rpc_envelope_scan) agrees with protobuf-c: what the scan accepts,
 * protobuf-c unpacks to the same method, body, request_id, deadline_ms and
 * credentials; what protobuf-c unpacks, the scan accepts unless it refused
 * for one of its own stricter rules (an unknown field, a repeat, a string
 * past its bound or holding a NUL). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "rpc_alloc.h"
#include "rpc_envelope.h"
#include "rpc_methods.h"
#include "sbx/v1/sandbox.pb-c.h"

/* Counts what the budgeted allocator hands out, independently of its own
 * bookkeeping. Frees give nothing back, so what was asked bounds the peak
 * of what was live. */
struct counted {
	ProtobufCAllocator base;
	struct rpc_alloc inner;
	size_t asked;
};

static void *counted_alloc(void *data, size_t size)
{
	struct counted *c = data;
	void *p = c->inner.base.alloc(&c->inner, size);

	if (p)
		c->asked += size;
	return p;
}

static void counted_free(void *data, void *ptr)
{
	struct counted *c = data;

	c->inner.base.free(&c->inner, ptr);
}

static ProtobufCMessage *unpack_counted(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
					size_t len, size_t budget, struct counted *c)
{
	memset(c, 0, sizeof(*c));
	rpc_alloc_init(&c->inner, budget);
	c->base.alloc = counted_alloc;
	c->base.free = counted_free;
	c->base.allocator_data = c;
	return protobuf_c_message_unpack(desc, &c->base, len, data);
}

/* One untrusted unpack, checked; returns what rpc_unpack returned. */
static ProtobufCMessage *unpack_checked(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
					size_t len)
{
	size_t budget = rpc_alloc_budget_for(len);
	bool too_complex = false;
	ProtobufCMessage *m = rpc_unpack(desc, data, len, &too_complex);
	struct counted c;
	ProtobufCMessage *m2 = unpack_counted(desc, data, len, budget, &c);

	FUZZ_ASSERT(!m == !m2, "%s: rpc_unpack %s, the counted unpack %s", desc->name,
		    m ? "succeeded" : "failed", m2 ? "succeeded" : "failed");
	FUZZ_ASSERT(!too_complex || !m, "%s: too complex, yet unpacked", desc->name);
	FUZZ_ASSERT(too_complex == (!m2 && c.inner.exceeded), "%s: too_complex disagrees",
		    desc->name);
	FUZZ_ASSERT(c.asked <= budget && c.inner.used == c.asked,
		    "%s: %zu bytes of input took %zu from the allocator (budget %zu, it "
		    "counted %zu)",
		    desc->name, len, c.asked, budget, c.inner.used);
	if (m2) {
		/* A message is unpacked with its members from the allocator:
		 * the budget's promise is about all of them. */
		size_t needed = c.asked;

		protobuf_c_message_free_unpacked(m2, NULL);
		if (needed > 0) {
			ProtobufCMessage *m3 = unpack_counted(desc, data, len, needed - 1, &c);

			FUZZ_ASSERT(!m3 && c.inner.exceeded,
				    "%s: unpacked within %zu bytes, though it needed %zu",
				    desc->name, needed - 1, needed);
		}
	}
	return m;
}

static void body(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len)
{
	ProtobufCMessage *m = unpack_checked(desc, data, len);

	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
}

static bool same_string(const char *scanned, const char *unpacked)
{
	return strcmp(scanned, unpacked ? unpacked : "") == 0;
}

static void scan_agrees(const uint8_t *data, size_t len, const Sbx__V1__Request *req)
{
	struct rpc_envelope env;
	struct sbx_err err;
	enum rpc_envelope_error e = rpc_envelope_scan(data, len, &env, &err);

	if (e == RPC_ENVELOPE_OK) {
		FUZZ_ASSERT(req, "the scan accepted an envelope protobuf-c refuses");
		FUZZ_ASSERT(
		    same_string(env.method, req->method) &&
			same_string(env.request_id, req->request_id) &&
			same_string(env.credentials, req->credentials) &&
			env.deadline_ms == req->deadline_ms && env.body_len == req->body.len &&
			(!env.body_len || memcmp(env.body, req->body.data, env.body_len) == 0),
		    "the scan and protobuf-c read different envelopes");
		FUZZ_ASSERT(req->base.n_unknown_fields == 0,
			    "the scan accepted an envelope with unknown fields");
		return;
	}
	FUZZ_ASSERT(err.msg[0], "the scan refused without saying why");
	FUZZ_ASSERT(!req || e == RPC_ENVELOPE_UNKNOWN || e == RPC_ENVELOPE_DUPLICATE ||
			e == RPC_ENVELOPE_TOO_LONG || e == RPC_ENVELOPE_NUL,
		    "protobuf-c unpacks an envelope the scan calls malformed: %s", err.msg);
}

static void envelope(const uint8_t *data, size_t len)
{
	Sbx__V1__Request *req =
	    (Sbx__V1__Request *)unpack_checked(&sbx__v1__request__descriptor, data, len);
	const struct rpc_method *m;

	scan_agrees(data, len, req);
	if (!req)
		return;
	m = rpc_method_find(req->method);
	if (m)
		body(m->request, req->body.data, req->body.len);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const ProtobufCServiceDescriptor *svc = &sbx__v1__sandbox__descriptor;

	if (size == 0)
		return 0;
	if (data[0] < svc->n_methods)
		body(svc->methods[data[0]].input, data + 1, size - 1);
	else
		envelope(data + 1, size - 1);
	return 0;
}
