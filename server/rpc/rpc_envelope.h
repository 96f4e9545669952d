/* SPDX-License-Identifier: Apache-2.0 */
/* The sbx.v1.Request envelope, read without unpacking it.
 *
 * sbxd must know who is calling before it spends anything on what they
 * sent. protobuf-c's unpack of a 4 MiB envelope of 838,856 unknown fields
 * allocates for every one of them (issue 7: 8 token-less connections kept
 * both CPUs busy). This reads the wire format directly (varint keys, one
 * length-delimited or varint value per field) and refuses any field the
 * envelope does not have and any field given twice, so it looks at no more
 * than six keys whatever the message's size: the scan is O(1) work plus the
 * copy of three short strings, and the body is left where it is, in the
 * received message, until the method's handler unpacks it (after
 * authentication). */
#ifndef SBX_RPC_ENVELOPE_H
#define SBX_RPC_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Bounds on the envelope (documented in sandbox.proto). */
#define RPC_METHOD_MAX	    128
#define RPC_REQUEST_ID_MAX  64
#define RPC_CREDENTIALS_MAX 256

enum rpc_envelope_error {
	RPC_ENVELOPE_OK,
	RPC_ENVELOPE_MALFORMED, /* not protobuf: a truncated key, varint or length */
	RPC_ENVELOPE_UNKNOWN,	/* a field number the envelope has not */
	RPC_ENVELOPE_DUPLICATE, /* a field given twice */
	RPC_ENVELOPE_WIRE_TYPE, /* a known field with the wrong wire type */
	RPC_ENVELOPE_TOO_LONG,	/* a string past its bound */
	RPC_ENVELOPE_NUL,	/* a string with a NUL byte in it */
};

struct rpc_envelope {
	char method[RPC_METHOD_MAX + 1];
	char request_id[RPC_REQUEST_ID_MAX + 1];
	char credentials[RPC_CREDENTIALS_MAX + 1]; /* wipe after use */
	size_t credentials_at; /* where its bytes are in the scanned ones, to wipe */
	uint32_t deadline_ms;
	const uint8_t *body; /* into the scanned bytes, which must outlive it */
	size_t body_len;
};

/* Fills env from the len bytes at data. RPC_ENVELOPE_OK, or the first thing
 * wrong, with err naming the field and the byte offset. Values agree with
 * what protobuf_c_message_unpack(&sbx__v1__request__descriptor) gives for
 * every envelope this accepts (tests/fuzz/fuzz_request.c checks it). */
enum rpc_envelope_error rpc_envelope_scan(const uint8_t *data, size_t len, struct rpc_envelope *env,
					  struct sbx_err *err);

#endif
