/* SPDX-License-Identifier: Apache-2.0 */
/* The same-host export's side channel (ExportArtifacts), one layout for
 * sbxd and the clients.
 *
 * nng cannot carry descriptors, so the caller listens on a SOCK_SEQPACKET
 * unix socket in the abstract namespace (no file, so no path for sbxd to
 * resolve through links or mounts of another user) and names it in the
 * request; sbxd connects, checks that the listener's uid (SO_PEERCRED) is
 * the ipc caller's, and sends one record per path, in order, each with the
 * file's descriptor (SCM_RIGHTS). The caller answers each with one byte
 * once it has copied the file, so at most one descriptor of sbxd is ever
 * in flight (in-flight descriptors count against the sender's limits) and
 * none is left queued once the call ends. The caller accepts a record only
 * from a peer of sbxd's uid that repeats the request's nonce. */
#ifndef SBX_EXPORT_WIRE_H
#define SBX_EXPORT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX_EXPORT_MAX_PATHS 256
#define SBX_EXPORT_NAME_MAX  100 /* the abstract name, without its NUL */
#define SBX_EXPORT_NONCE_MIN 16
#define SBX_EXPORT_NONCE_MAX 64
/* The caller acknowledges a record once it has copied the file (so that
 * sbxd can vouch for its cached digest): each record within
 * SBX_EXPORT_RECORD_MS of its open, the whole call within
 * SBX_EXPORT_CALL_MS. A caller that stops reading costs its own worker
 * that long. 30 s copies out_mb's largest file to a slow disk. */
#define SBX_EXPORT_RECORD_MS 30000
#define SBX_EXPORT_CALL_MS   120000
#define SBX_EXPORT_ACK	     'k'

/* magic[8] "sbxexp1", index u32, pad u32, size u64, nonce_len u8, nonce */
#define SBX_EXPORT_RECORD_HEAD 25
#define SBX_EXPORT_RECORD_MAX  (SBX_EXPORT_RECORD_HEAD + SBX_EXPORT_NONCE_MAX)

struct sbx_export_record {
	uint32_t index; /* of the path in the request */
	uint64_t size;	/* st_size when sbxd opened it */
	uint8_t nonce[SBX_EXPORT_NONCE_MAX];
	size_t nonce_len;
};

/* The record's bytes into buf (SBX_EXPORT_RECORD_MAX); returns the length. */
size_t sbx_export_record_pack(const struct sbx_export_record *rec, uint8_t *buf);
/* false unless buf[0..len) is a whole record. */
bool sbx_export_record_unpack(const uint8_t *buf, size_t len, struct sbx_export_record *rec);

#endif
