/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the byte-budgeted protobuf allocator (server/rpc/rpc_alloc.c):
 * the budget a message gets, an allocation past it failing, and a message
 * whose unpacking would exceed it failing cleanly (NULL, "too complex", and
 * nothing left allocated) while the same bytes unpack with a larger budget. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/v1/sandbox.pb-c.h>

#include "check.h"
#include "rpc_alloc.h"

static void test_budget(void)
{
	struct rpc_alloc a;
	void *p, *q;

	check(rpc_alloc_budget_for(0) == 64 * 1024, "an empty message may cost 64 KiB");
	check(rpc_alloc_budget_for(1000) == 16 * 1000 + 64 * 1024,
	      "a message may cost 16x its size plus 64 KiB");
	check(rpc_alloc_budget_for(SIZE_MAX / 8) == SIZE_MAX, "the budget never overflows");

	rpc_alloc_init(&a, 100);
	p = a.base.alloc(a.base.allocator_data, 60);
	check(p && a.used == 60 && !a.exceeded, "an allocation within the budget succeeds");
	q = a.base.alloc(a.base.allocator_data, 41);
	check(!q && a.exceeded && a.used == 60, "one past it fails and says so");
	a.base.free(a.base.allocator_data, p);
	q = a.base.alloc(a.base.allocator_data, 41);
	check(!q, "freeing gives no budget back (what was asked counts)");
	q = a.base.alloc(a.base.allocator_data, 40);
	check(q && a.used == 100, "what is left of the budget can still be used");
	a.base.free(a.base.allocator_data, q);
}

/* A CreateRunRequest of n empty inputs: 2 bytes each on the wire, a struct
 * and a pointer each in memory. */
static uint8_t *many_inputs(size_t n, size_t *len)
{
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	Sbx__V1__InputFile empty = SBX__V1__INPUT_FILE__INIT;
	Sbx__V1__InputFile **inputs = calloc(n, sizeof(*inputs));
	uint8_t *buf;

	if (!inputs)
		abort();
	for (size_t i = 0; i < n; i++)
		inputs[i] = &empty;
	req.n_inputs = n;
	req.inputs = inputs;
	*len = sbx__v1__create_run_request__get_packed_size(&req);
	buf = malloc(*len);
	if (!buf)
		abort();
	sbx__v1__create_run_request__pack(&req, buf);
	free(inputs);
	return buf;
}

static void test_unpack(void)
{
	Sbx__V1__ExecRequest exec = SBX__V1__EXEC_REQUEST__INIT;
	char *argv[] = {"/bin/sh", "-c", "true"};
	uint8_t buf[128], *big;
	size_t len, big_len;
	bool too_complex = true;
	ProtobufCMessage *m;

	exec.run_id = "run-1";
	exec.n_argv = 3;
	exec.argv = argv;
	len = sbx__v1__exec_request__pack(&exec, buf);
	m = rpc_unpack(&sbx__v1__exec_request__descriptor, buf, len, &too_complex);
	check(m && !too_complex && strcmp(((Sbx__V1__ExecRequest *)m)->run_id, "run-1") == 0 &&
		  ((Sbx__V1__ExecRequest *)m)->n_argv == 3 &&
		  strcmp(((Sbx__V1__ExecRequest *)m)->argv[2], "true") == 0,
	      "a small message unpacks whole");
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);

	m = rpc_unpack(&sbx__v1__exec_request__descriptor, (const uint8_t *)"\x0a\xff", 2,
		       &too_complex);
	check(!m && !too_complex, "bad bytes fail as bad bytes, not as too complex");

	big = many_inputs(200000, &big_len);
	m = rpc_unpack(&sbx__v1__create_run_request__descriptor, big, big_len, &too_complex);
	check(!m && too_complex, "200000 empty inputs (%zu bytes) are too complex for their budget",
	      big_len);
	m = protobuf_c_message_unpack(&sbx__v1__create_run_request__descriptor, NULL, big_len, big);
	check(m && ((Sbx__V1__CreateRunRequest *)m)->n_inputs == 200000,
	      "the same bytes are a valid message (the budget, not the bytes, refused them)");
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
	free(big);
}

/* Exactly at the budget a message unpacks, one byte short it fails; either
 * way whatever was allocated is freed (valgrind and ASan would say). */
static void test_edge(void)
{
	size_t len;
	uint8_t *buf = many_inputs(100, &len);
	struct rpc_alloc a;
	ProtobufCMessage *m;
	size_t needed;

	rpc_alloc_init(&a, SIZE_MAX);
	m = protobuf_c_message_unpack(&sbx__v1__create_run_request__descriptor, &a.base, len, buf);
	needed = a.used;
	check(m != NULL, "100 inputs unpack with an unlimited budget (%zu bytes asked)", needed);
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);

	rpc_alloc_init(&a, needed);
	m = protobuf_c_message_unpack(&sbx__v1__create_run_request__descriptor, &a.base, len, buf);
	check(m && !a.exceeded, "with exactly that budget they unpack");
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);

	rpc_alloc_init(&a, needed - 1);
	m = protobuf_c_message_unpack(&sbx__v1__create_run_request__descriptor, &a.base, len, buf);
	check(!m && a.exceeded, "one byte less and the unpack fails cleanly");
	free(buf);
}

int main(void)
{
	test_budget();
	test_unpack();
	test_edge();
	return check_done();
}
