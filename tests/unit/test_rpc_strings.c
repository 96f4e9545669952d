/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the wire walk for NUL bytes in string fields
 * (server/rpc/rpc_strings.c), on hand-made bodies: what a caller controls
 * (a singular field sent twice, an overlong length, unknown fields) cannot
 * hide a NUL from it, and each hit is named by its field's path. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sbx/v1/sandbox.pb-c.h>

#include "check.h"
#include "rpc_strings.h"

#define HIT(desc, bytes, path)                                                                     \
	do {                                                                                       \
		char w[128];                                                                       \
		bool hit = rpc_wire_nul_string(&(desc), (const uint8_t *)(bytes),                  \
					       sizeof(bytes) - 1, w, sizeof(w));                   \
		check(hit && !strcmp(w, path), path);                                              \
	} while (0)

#define CLEAN(desc, bytes, what)                                                                   \
	do {                                                                                       \
		char w[128];                                                                       \
		check(!rpc_wire_nul_string(&(desc), (const uint8_t *)(bytes), sizeof(bytes) - 1,   \
					   w, sizeof(w)),                                          \
		      what);                                                                       \
	} while (0)

static void walk_hung(int sig)
{
	(void)sig;
	static const char msg[] = "FAIL: the walk of a 4 MiB body of empty argv entries was still "
				  "going after 10 s (quadratic: one index_of per entry)\n";
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* ExecRequest{run_id "r", argv ""} x n, the smallest entries a body can hold:
 * sbxd's largest body (max_message_bytes, 4 MiB + 64 KiB) holds 2 M of them,
 * and protobuf-c unpacks them within rpc_alloc's budget before the walk. */
static void many_empty_argv(size_t n)
{
	uint8_t *b = malloc(3 + 2 * n + 5), *p = b;
	char w[64];

	*p++ = 0x0a, *p++ = 1, *p++ = 'r';
	for (size_t i = 0; i < n; i++)
		*p++ = 0x12, *p++ = 0;
	check(!rpc_wire_nul_string(&sbx__v1__exec_request__descriptor, b, (size_t)(p - b), w,
				   sizeof(w)),
	      "many empty argv entries are clean");
	/* and the last entry, cut, is still named by its index */
	*p++ = 0x12, *p++ = 1, *p++ = 0;
	check(rpc_wire_nul_string(&sbx__v1__exec_request__descriptor, b, (size_t)(p - b), w,
				  sizeof(w)) &&
		  w[0] == '.' && strtoul(w + strlen(".argv["), NULL, 10) == n,
	      "the last of many argv entries is named by its index");
	free(b);
}

int main(void)
{
	const ProtobufCMessageDescriptor put = sbx__v1__put_input_request__descriptor;
	const ProtobufCMessageDescriptor exec = sbx__v1__exec_request__descriptor;
	const ProtobufCMessageDescriptor create = sbx__v1__create_run_request__descriptor;

	/* PutInputRequest: run_id = 1, path = 2, data = 4 (bytes). */
	CLEAN(put, "\x0a\x01r\x12\x0areport.csv", "a clean body");
	HIT(put, "\x12\x0freport.csv\0.sig", ".path");
	CLEAN(put, "\x22\x03\x61\0\x62", "a NUL in a bytes field is data");
	/* protobuf-c keeps the last of a singular field: the first is still read. */
	HIT(put, "\x12\x03\x61\0\x62\x12\x02ok", ".path");
	/* An overlong length (5 as 0x85 0x00) changes the size, not the walk. */
	HIT(put, "\x12\x85\x00\x61\0\x62\x63\x64", ".path");
	/* Field 99, unknown: no handler reads it. */
	CLEAN(put, "\x9a\x06\x03x\0y", "a NUL in an unknown field");
	/* ExecRequest: argv = 2 (repeated), cwd = 3. */
	HIT(exec, "\x12\x01\x61\x12\x02\x62\0", ".argv[1]");
	HIT(exec, "\x12\x01\x61\x1a\x03/\0x", ".cwd");
	/* CreateRunRequest: inputs = 3 (InputFile: path = 1), labels = 4 (map). */
	HIT(create, "\x1a\x03\x0a\x01\x61\x1a\x04\x0a\x02\x62\0", ".inputs[1].path");
	HIT(create, "\x22\x07\x0a\x01k\x12\x02v\0", ".labels[0].value");
	/* Why not re-encode and compare sizes: run_id "a\0bcde" loses 5 bytes to
	 * the cut, and signal -1 sent as a 5-byte varint (protobuf-c reads the
	 * low 32 bits) comes back as the canonical 10: the sizes match. */
	{
		static const uint8_t body[] = "\x0a\x06"
					      "a\0bcde"
					      "\x18\xff\xff\xff\xff\x0f";
		Sbx__V1__SignalRequest *m =
		    sbx__v1__signal_request__unpack(NULL, sizeof(body) - 1, body);
		char w[32];

		check(m && !strcmp(m->run_id, "a") && m->signal == -1 &&
			  protobuf_c_message_get_packed_size(&m->base) == sizeof(body) - 1,
		      "a cut string can leave the re-encoded size unchanged");
		check(rpc_wire_nul_string(&sbx__v1__signal_request__descriptor, body,
					  sizeof(body) - 1, w, sizeof(w)) &&
			  !strcmp(w, ".run_id"),
		      "the wire walk still finds it");
		sbx__v1__signal_request__free_unpacked(m, NULL);
	}
	/* What protobuf-c cannot read either is not a clean body. */
	{
		char w[16];
		check(rpc_wire_nul_string(&put, (const uint8_t *)"\x12\x09short", 7, w, sizeof(w)),
		      "a length past the end is refused");
	}
	/* Linear in the body: a time bound only against hanging (10 s for what
	 * takes milliseconds; quadratic, this body took hours). */
	signal(SIGALRM, walk_hung);
	alarm(10);
	many_empty_argv((size_t)2 << 20);
	alarm(0);
	HIT(create, "\x1a\x03\x0a\x01\x61\x1a\x03\x0a\x01\x62\x1a\x04\x0a\x02\x63\0",
	    ".inputs[2].path");
	{
		/* A name cut to the caller's buffer stays a C string. */
		char w[8];
		check(rpc_wire_nul_string(&create, (const uint8_t *)"\x22\x07\x0a\x01k\x12\x02v\0",
					  9, w, sizeof(w)) &&
			  strlen(w) == 7 && !strncmp(w, ".labels", 7),
		      "a name longer than where is cut, terminated");
	}
	return check_done();
}
