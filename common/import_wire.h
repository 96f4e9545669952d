/* SPDX-License-Identifier: Apache-2.0 */
/* The same-host upload (ImportInputs) on the side channel of
 * common/export_wire.h: its connection and sbxd's hello are the export's
 * (the caller listens, sbxd connects, checks the listener's uid and says
 * hello with the nonce); then the bytes go the other way.
 *
 * After the hello, the caller sends the request's files in order, each as
 * exactly its declared size in bytes, in messages of 1 to
 * SBX_IMPORT_CHUNK bytes (a message never spans two files; an empty file
 * sends none), then closes its socket (or shuts down its writing side).
 * sbxd takes nothing else: no descriptor (its socket refuses them,
 * SO_PASSRIGHTS; runs_side.c says why), no message larger than
 * SBX_IMPORT_CHUNK or than what is left of the file, nothing after the
 * last byte but the end; anything else fails the call and changes
 * nothing. sbxd answers the call once every file matched its sha256 and
 * is in /data. */
#ifndef SBX_IMPORT_WIRE_H
#define SBX_IMPORT_WIRE_H

#include "export_wire.h"

#define SBX_IMPORT_MAX_FILES 256
/* The largest message of a file's bytes: the caller asks a 1 MiB send
 * buffer (net.core.wmem_max's default lets it have 416 KiB); a unix
 * socket refuses a message larger than its sender's buffer (EMSGSIZE). */
#define SBX_IMPORT_CHUNK (256 * 1024)

#endif
