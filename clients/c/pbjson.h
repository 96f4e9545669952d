/* SPDX-License-Identifier: Apache-2.0 */
/* Any protobuf-c message to and from JSON (jansson), by its descriptor,
 * following protobuf's proto3 JSON mapping so that what `sbxctl --json` prints
 * is what other protobuf libraries print and read:
 *
 *  - field names in lowerCamelCase ("run_id" -> "runId"); reading accepts the
 *    .proto names too;
 *  - enums by value name ("EXITED"; an unknown number stays a number);
 *  - 64-bit integers as decimal strings, 32-bit ones as numbers;
 *  - bytes as standard base64 (reading accepts URL-safe and no padding);
 *  - float/double as numbers, or "NaN", "Infinity", "-Infinity";
 *  - repeated fields as arrays, maps (map<K, V>: protobuf-c's repeated
 *    KEntry messages) as objects with string keys;
 *  - fields at their default value (0, "", false, empty) are left out unless
 *    SBX_PBJSON_EMIT_DEFAULTS; a message field that is not set always is.
 * Invalid UTF-8 in strings is written as U+FFFD. */
#ifndef SBX_PBJSON_H
#define SBX_PBJSON_H

#include <stddef.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

#include "err.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
	/* Also write fields that hold their default value (scripts then find
	 * "exitCode": 0 instead of nothing). */
	SBX_PBJSON_EMIT_DEFAULTS = 1u << 0,
	/* Writing only: as sbx's policy file writes JSON rather than as
	 * proto3's mapping does: the .proto's field names ("peak_memory_bytes"),
	 * enum value names in lower case ("exited", "not_found"), and 64-bit
	 * integers as numbers whenever they fit in a signed 64-bit one (a
	 * uint64 above that stays a decimal string). sbx_pbjson_to_message
	 * reads the names back; enums and numbers it reads as proto3 writes. */
	SBX_PBJSON_POLICY_STYLE = 1u << 1,
};

/* The message as a JSON object (keys in field-number order); NULL only when
 * out of memory. */
json_t *sbx_pbjson_from_message(const ProtobufCMessage *msg, unsigned flags);

/* Same, serialized with two-space indent; caller frees. */
char *sbx_pbjson_dumps(const ProtobufCMessage *msg, unsigned flags);

/* A new message of type desc from a JSON object; every member malloc'd, so
 * protobuf_c_message_free_unpacked(msg, NULL) frees it. Strict: an unknown
 * key, a wrong type or an out-of-range number is an error naming its JSON
 * path ("execs[1].exitCode: must be an integer"). null means "default". */
ProtobufCMessage *sbx_pbjson_to_message(const ProtobufCMessageDescriptor *desc, const json_t *json,
					struct sbx_err *err);

/* The JSON name of a .proto field name: "peak_memory_bytes" -> "peakMemoryBytes". */
void sbx_pbjson_name(const char *field, char *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif
