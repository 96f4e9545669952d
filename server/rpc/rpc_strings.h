/* SPDX-License-Identifier: Apache-2.0 */
/* A NUL byte inside a request body's string fields, found on the wire.
 *
 * protobuf-c hands each string field as a C string: "report.csv\0.sig"
 * arrives as "report.csv", so sbxd would act on a name the caller never
 * sent whole (a parent that vetted the full name in a language where NUL
 * is an ordinary character approved something else). The unpacked message
 * no longer has the length, so the check reads the bytes protobuf-c read. */
#ifndef SBX_RPC_STRINGS_H
#define SBX_RPC_STRINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* True when a string field of a message of type `desc` encoded in
 * data[0..len) (or of a message inside it, maps included) holds a NUL byte;
 * `where` then names it as sbx_proto_bad_string does (".inputs[0].path").
 * Also true, with where ".", for bytes this walk cannot read (protobuf-c's
 * unpack of them failed first, so sbxd never gets there). Unknown fields are
 * skipped: no string of theirs reaches a handler. */
bool rpc_wire_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
			 char *where, size_t size);

#endif
