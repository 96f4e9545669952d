/* SPDX-License-Identifier: Apache-2.0 */
/* Packing the Response envelope straight into an nng message. */
#ifndef SBX_RPC_REPLY_H
#define SBX_RPC_REPLY_H

#include <stddef.h>

#include <nng/nng.h>

#include "service.h"

/* Response{code, message, body} as one nng message, the body packed in place
 * (no intermediate copy of a 1 MiB chunk). body is NULL for errors. The
 * message is cleaned to printable UTF-8 (it often quotes what the caller
 * sent, and clients in other languages refuse invalid UTF-8 in a string).
 * An answer larger than max_bytes, which the caller could not receive,
 * becomes an INTERNAL error instead. NULL only when out of memory. */
nng_msg *rpc_reply(Sbx__V1__Code code, const char *message, const ProtobufCMessage *body,
		   size_t max_bytes);

/* An error's Response (no body): st's code, its message cleaned as above,
 * and in_progress when st says so (only ever with UNAVAILABLE). NULL only
 * when out of memory. */
nng_msg *rpc_reply_status(const struct sbx_rpc_status *st, size_t max_bytes);

/* The room a handler reads its bulk bytes into (service.h, struct
 * sbx_bulk): an nng message with space before it for the envelope and the
 * field's tag, and after it for the response's other fields. */
struct rpc_bulk {
	struct sbx_bulk b;
	nng_msg *msg; /* NULL until the handler asks for room */
	size_t room;
};

void rpc_bulk_init(struct rpc_bulk *rb);
/* Drops the room if it is still there (an error, or not used). */
void rpc_bulk_drop(struct rpc_bulk *rb);

/* The OK answer whose body is body with field 1 the rb->b.len bytes the
 * handler read into rb (body's own field 1 left empty): byte for byte
 * what rpc_reply packs with the bytes in body, without copying them. Takes
 * the room. Too large for max_bytes: INTERNAL, as rpc_reply; NULL only when
 * out of memory. */
nng_msg *rpc_reply_bulk(const ProtobufCMessage *body, struct rpc_bulk *rb, size_t max_bytes);

/* Copies src into dst (always terminated), keeping valid UTF-8 and
 * replacing control characters and invalid bytes with '?'. */
void rpc_text_clean(char *dst, size_t dst_size, const char *src);

#endif
