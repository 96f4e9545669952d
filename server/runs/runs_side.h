/* SPDX-License-Identifier: Apache-2.0 */
/* The same-host side channel's connection (common/export_wire.h), once for
 * every call that uses it (ExportArtifacts). */
#ifndef SBX_RUNS_SIDE_H
#define SBX_RUNS_SIDE_H

#include <stdint.h>

#include "err.h"
#include "service.h"

/* The deadlines of one call, from the config (same_host_record_ms,
 * same_host_call_ms), named in the errors that they end. */
struct side_deadlines {
	uint32_t record_ms;
	uint32_t call_ms;
	int64_t call_end; /* sbx_mono_ms() */
};

/* Waits until sock is ready for events or deadline_ms (sbx_mono_ms) passes:
 * 0, or -1 with st DEADLINE_EXCEEDED naming what the caller did not do. */
int side_wait(int sock, short events, int64_t deadline_ms, const struct side_deadlines *dl,
	      const char *what, struct sbx_rpc_status *st);
/* 0 if a request's socket_name and nonce fit the wire (export_wire.h),
 * else -1 with st INVALID_ARGUMENT naming the field. */
int side_check_address(const char *socket_name, size_t nonce_len, struct sbx_rpc_status *st);
/* Connected, without blocking, to the caller's abstract SOCK_SEQPACKET
 * socket name, whose listener must be of the calling uid (SO_PEERCRED),
 * with sbxd's hello (the nonce) sent: the socket (non-blocking), or -1
 * with st. One way: shut down for reading before it connected, so the
 * caller can send it nothing (runs_side.c); the caller's close shows as
 * POLLHUP. */
int side_connect(const struct sbx_identity *who, const char *name, const uint8_t *nonce,
		 size_t nonce_len, const struct side_deadlines *dl, struct sbx_rpc_status *st);
/* Sends all of buf as one message within deadline_ms. */
int side_send(int sock, const void *buf, size_t len, int64_t deadline_ms,
	      const struct side_deadlines *dl, const char *what, struct sbx_rpc_status *st);

/* ---- Receiving (ImportInputs) ---- */
/* A new non-blocking socket that refuses descriptors (SO_PASSRIGHTS 0):
 * sbxd reads from it, and a descriptor the kernel dropped there would be
 * closed in sbxd's thread. -1 with st UNIMPLEMENTED naming SO_PASSRIGHTS
 * where the kernel cannot (before Linux 6.16). */
int side_receiving_socket(struct sbx_rpc_status *st);
/* The connection on s (side_connect's, or side_receiving_socket's): connected to
 * the caller's abstract name, its listener's uid checked, the hello sent. */
int side_connect_on(int s, const struct sbx_identity *who, const char *name, const uint8_t *nonce,
		    size_t nonce_len, const struct side_deadlines *dl, struct sbx_rpc_status *st);

#endif
