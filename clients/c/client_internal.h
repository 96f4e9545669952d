/* SPDX-License-Identifier: Apache-2.0 */
/* What the library's files share and callers never see. */
#ifndef SBX_CLIENT_INTERNAL_H
#define SBX_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "err.h"
#include "sbxclient.h"

#define SBX_METHOD_PREFIX "/sbx.v1.Sandbox/"

/* Random request id: 16 random bytes as 32 hex digits + NUL. */
int sbx_request_id(char out[33], struct sbx_err *err);

/* Bytes as lowercase hex; out holds 2*n+1. */
void sbx_hex(const unsigned char *in, size_t n, char *out);

/* Beneath the destination top (sbx_dest_open), the directories of the
 * relative path rel made (0755 less the umask) or opened, each without
 * following a link and held to the destination's rule (ours, not writable
 * by others); returns the last one's fd, *base pointing into rel at the
 * file's name. "", "." and ".." components are refused. */
int sbx_dest_subdir(int top, const char *rel, const char **base, struct sbx_err *err);
/* dir and every directory above it, up to the root: each owned by root or
 * the caller and writable by no one else unless sticky (OpenSSH's rule), or
 * refused naming the first that is not; dest names the destination. */
int sbx_dest_check_ancestors(int dir, const char *dest, struct sbx_err *err);
/* Whether name in dir may be replaced by a rename: nothing there or a
 * regular file; anything else (a link, a directory, a FIFO) is refused,
 * named as rel. */
int sbx_dest_check_slot(int dir, const char *name, const char *rel, struct sbx_err *err);

/* One protobuf field as it lies in a buffer (pbwire.c): its number and
 * wire type, a varint's value, or where a length-delimited (or fixed)
 * field's bytes are. */
struct sbx_pb_field {
	uint32_t num;
	int wt;
	uint64_t v;
	const uint8_t *data;
	size_t len;
};
/* The field at *p (before end), *p moved past it: 1, or 0 at end, -1 when
 * the bytes are not protobuf. */
int sbx_pb_next(const uint8_t **p, const uint8_t *end, struct sbx_pb_field *f);

/* sbx_client_call_opts (without options), but an OK reply's body is left
 * where it arrived: *reply is the nng message (the caller frees it with
 * nng_msg_free) and *body, *len point into it. */
int sbx_client_call_msg(sbx_client *c, const char *method, const ProtobufCMessage *req,
			nng_msg **reply, const uint8_t **body, size_t *len,
			struct sbx_rpc_status *st);

/* Why a file of a live run (an exec running) differs from its listing, in
 * every fetch's words (files.c, export.c): not corruption, try later. */
#define CHANGED_BY_AN_EXEC                                                                         \
	"an exec is running, so the file can change and digests are not final; fetch it "          \
	"again when the run's execs have ended"

#endif
