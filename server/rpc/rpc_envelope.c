/* SPDX-License-Identifier: Apache-2.0 */
/* The envelope scan (see rpc_envelope.h).
 *
 * protobuf-c 1.4's wire rules, which this follows so that both read an
 * accepted envelope the same way: a key is a varint of at most 5 bytes,
 * (field number << 3) | wire type (number 0 is kept as an unknown field
 * when the key is not minimal, refused otherwise); a varint
 * value has at most 10 bytes and a uint32 field keeps its low 32 bits; a
 * length prefix is a varint of at most 5 bytes and must fit in what is left.
 * Unlike protobuf-c it refuses unknown fields (which it would keep, one
 * allocation each) and repeats (where it keeps the last): a client of this
 * API never sends either, and refusing them is what bounds the scan. */
#include "rpc_envelope.h"

#include <stdbool.h>
#include <string.h>

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

enum {
	F_METHOD = 1,
	F_BODY = 2,
	F_REQUEST_ID = 3,
	F_DEADLINE_MS = 4,
	F_CREDENTIALS = 5,
	F_LAST = F_CREDENTIALS,
};

static const char *const field_name[F_LAST + 1] = {
    [F_METHOD] = "method",	     [F_BODY] = "body",
    [F_REQUEST_ID] = "request_id",   [F_DEADLINE_MS] = "deadline_ms",
    [F_CREDENTIALS] = "credentials",
};

/* A varint of at most max bytes at *pos; false when it is cut short or
 * longer than max. */
static bool varint(const uint8_t *data, size_t len, size_t *pos, unsigned max, uint64_t *out)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < max && *pos < len; i++) {
		uint8_t b = data[(*pos)++];

		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*out = v;
			return true;
		}
	}
	return false;
}

/* Copies a string field into buf (cap bytes plus the NUL). */
static enum rpc_envelope_error string_field(unsigned f, const uint8_t *p, size_t n, char *buf,
					    size_t cap, size_t at, struct sbx_err *err)
{
	if (n > cap) {
		sbx_fail(err, "request: %s: longer than %zu bytes", field_name[f], cap);
		return RPC_ENVELOPE_TOO_LONG;
	}
	if (memchr(p, '\0', n)) {
		sbx_fail(err, "request: %s (at byte %zu): contains a NUL byte", field_name[f], at);
		return RPC_ENVELOPE_NUL;
	}
	memcpy(buf, p, n);
	buf[n] = '\0';
	return RPC_ENVELOPE_OK;
}

static enum rpc_envelope_error malformed(struct sbx_err *err, const char *what, size_t at)
{
	sbx_fail(err, "request: not a valid sbx.v1.Request: %s at byte %zu", what, at);
	return RPC_ENVELOPE_MALFORMED;
}

enum rpc_envelope_error rpc_envelope_scan(const uint8_t *data, size_t len, struct rpc_envelope *env,
					  struct sbx_err *err)
{
	unsigned seen = 0;
	size_t pos = 0;

	memset(env, 0, sizeof(*env));
	while (pos < len) {
		size_t at = pos;
		uint64_t key, v;
		unsigned f, wire;
		enum rpc_envelope_error e = RPC_ENVELOPE_OK;

		/* Field number 0 is unknown too: protobuf-c takes it when the
		 * key is not written in its shortest form. */
		if (!varint(data, len, &pos, 5, &key))
			return malformed(err, "bad field key", at);
		f = (unsigned)(key >> 3) <= F_LAST ? (unsigned)(key >> 3) : 0;
		wire = (unsigned)(key & 7);
		if (!f) {
			sbx_fail(err,
				 "request: unknown field %llu at byte %zu (sbx.v1.Request has "
				 "fields 1-%d)",
				 (unsigned long long)(key >> 3), at, F_LAST);
			return RPC_ENVELOPE_UNKNOWN;
		}
		if (seen & (1u << f)) {
			sbx_fail(err, "request: field %s given twice (again at byte %zu)",
				 field_name[f], at);
			return RPC_ENVELOPE_DUPLICATE;
		}
		seen |= 1u << f;
		if (wire != (f == F_DEADLINE_MS ? WIRE_VARINT : WIRE_LEN)) {
			sbx_fail(err, "request: %s (at byte %zu) has wire type %u", field_name[f],
				 at, wire);
			return RPC_ENVELOPE_WIRE_TYPE;
		}
		if (f == F_DEADLINE_MS) {
			if (!varint(data, len, &pos, 10, &v))
				return malformed(err, "bad varint", at);
			env->deadline_ms = (uint32_t)v; /* the low 32 bits, as protobuf-c */
			continue;
		}
		if (!varint(data, len, &pos, 5, &v))
			return malformed(err, "bad length", at);
		if (v > len - pos)
			return malformed(err, "length past the end", at);
		const uint8_t *p = data + pos;
		size_t n = (size_t)v;

		pos += n;
		switch (f) {
		case F_METHOD:
			e = string_field(f, p, n, env->method, RPC_METHOD_MAX, at, err);
			break;
		case F_REQUEST_ID:
			e = string_field(f, p, n, env->request_id, RPC_REQUEST_ID_MAX, at, err);
			break;
		case F_CREDENTIALS:
			env->credentials_at = (size_t)(p - data);
			e = string_field(f, p, n, env->credentials, RPC_CREDENTIALS_MAX, at, err);
			break;
		default:
			env->body = p;
			env->body_len = n;
			break;
		}
		if (e != RPC_ENVELOPE_OK)
			return e;
	}
	return RPC_ENVELOPE_OK;
}
