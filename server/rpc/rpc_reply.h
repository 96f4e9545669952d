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

/* Copies src into dst (always terminated), keeping valid UTF-8 and
 * replacing control characters and invalid bytes with '?'. */
void rpc_text_clean(char *dst, size_t dst_size, const char *src);

#endif
