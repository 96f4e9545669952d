/* SPDX-License-Identifier: Apache-2.0 */
/* The same-host side channel (ExportArtifacts), one layout for sbxd and the
 * clients.
 *
 * The caller listens on a SOCK_SEQPACKET unix socket in the abstract
 * namespace (no file, so no path for sbxd to resolve through links or
 * mounts of another user) and names it in the request with a random nonce.
 * sbxd connects, checks that the listener's uid (SO_PEERCRED) is the ipc
 * caller's, and says hello with the nonce; the caller hears only a peer of
 * sbxd's uid that repeats it. No descriptor goes either way, and nothing
 * goes from the caller to sbxd at all: sbxd's socket is shut down for
 * reading before it connects, so whatever the caller sends fails EPIPE in
 * its own sendmsg (runs_side.c says why). The files' bytes travel on this
 * connection.
 *
 * Export: per path, in order, sbxd sends a record (index, mode, size), then
 * exactly size bytes of the file in messages of at most SBX_EXPORT_CHUNK
 * bytes. The caller's acknowledgement is its hang-up, once it has taken
 * and written every byte: shutdown(SHUT_RDWR) then close (a close alone
 * hangs up only as the last reference, and a process the caller forked
 * meanwhile holds one: sbxd then waits to its deadline). sbxd answers OK only when the caller's end
 * hung up with every message sbxd sent taken from it (a close that left some unread frees them and
 * is ABORTED; one that never takes them is DEADLINE_EXCEEDED), so nothing it sent is left queued by
 * a call that succeeded. That OK, files_sent included, says what sbxd sent and that the caller's
 * socket took it, no more: whether the caller kept the bytes (wrote them, renamed them into place)
 * only the caller knows, and its library reports its own failure, which a close before the last
 * record always is. The magics changed (2 to 3) when the caller's one-byte acknowledgement gave way
 * to its close: a caller of the old channel hears no hello it knows, and sbxd no acknowledgement.
 */
#ifndef SBX_EXPORT_WIRE_H
#define SBX_EXPORT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_EXPORT_MAX_PATHS 256
#define SBX_EXPORT_NAME_MAX  100 /* the abstract name, without its NUL */
#define SBX_EXPORT_NONCE_MIN 16
#define SBX_EXPORT_NONCE_MAX 64
/* sbxd's defaults for config same_host_record_ms and same_host_call_ms:
 * each record's bytes must be taken by the caller within the first of its
 * open, the whole call (and the caller's close) within the second. A
 * caller that stops reading costs its own worker that long. 30 s moves
 * out_mb's largest file to a slow disk. */
#define SBX_EXPORT_RECORD_MS 30000
#define SBX_EXPORT_CALL_MS   120000
/* The largest message of a file's bytes: sbxd asks a 1 MiB send buffer,
 * and even net.core.wmem_max's default (208 KiB, doubled) holds it. */
#define SBX_EXPORT_CHUNK (256 * 1024)

/* How sbxd's refusal begins when it could not connect to the caller's
 * socket (FAILED_PRECONDITION). Abstract names are listed for every user
 * in /proc/net/unix, so another local user can keep a listener's backlog
 * full and sbxd's connect then fails EAGAIN: the clients take this refusal
 * for "upload or fetch in chunks instead", so that such a user can slow a
 * caller's transfer but not stop it. */
#define SBX_SIDE_UNREACHED "same-host: connecting to the caller's socket_name"

/* The largest valid ExportArtifacts or ImportInputs request body: 256
 * paths (SBX_EXPORT_MAX_PATHS, SBX_IMPORT_MAX_FILES) of at most PATH_MAX
 * (4096) bytes each, with room for each file's fields (a sha256 in hex,
 * size, mode, tags and lengths: 128 bytes) and the run id, socket name and
 * nonce (1 KiB). sbxd refuses a larger one before it is queued: a repeat
 * of a pending one is compared byte for byte with the caller's pending
 * calls in the nng callback, so this bounds what a repeat costs there. */
#define SBX_SIDE_REQUEST_MAX (SBX_EXPORT_MAX_PATHS * (4096 + 128) + 1024)

/* sbxd's hello: magic[8] "sbxhel3", nonce_len u8, nonce */
#define SBX_SIDE_HELLO_HEAD 9
#define SBX_SIDE_HELLO_MAX  (SBX_SIDE_HELLO_HEAD + SBX_EXPORT_NONCE_MAX)
/* An export record: magic[8] "sbxexp3", index u32, mode u32, size u64 */
#define SBX_EXPORT_RECORD_LEN 24

struct sbx_export_record {
	uint32_t index; /* of the path in the request */
	uint32_t mode;	/* st_mode's permission bits (07777) in /out */
	uint64_t size;	/* st_size when sbxd opened it: the bytes that follow */
};

/* Integers go in the host's byte order: both ends are on one host. */
size_t sbx_side_hello_pack(const uint8_t *nonce, size_t nonce_len, uint8_t *buf);
/* true if buf[0..len) is a hello repeating nonce */
bool sbx_side_hello_check(const uint8_t *buf, size_t len, const uint8_t *nonce, size_t nonce_len);
void sbx_export_record_pack(const struct sbx_export_record *rec,
			    uint8_t buf[SBX_EXPORT_RECORD_LEN]);
/* false unless buf[0..len) is a whole record. */
bool sbx_export_record_unpack(const uint8_t *buf, size_t len, struct sbx_export_record *rec);

#endif
