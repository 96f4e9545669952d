/* SPDX-License-Identifier: Apache-2.0 */
/* The caller's side of the same-host side channel (common/export_wire.h):
 * the abstract socket sbxd connects to, heard only from sbxd's uid with
 * the call's nonce. Library-internal. */
#ifndef SBX_CLIENT_SIDE_H
#define SBX_CLIENT_SIDE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "export_wire.h"
#include "sbxclient.h"

struct side_listener {
	int listener;
	int wake[2];	/* the call returned: stop waiting */
	uid_t sbxd_uid; /* the owner of sbxd's ipc socket */
	uint8_t nonce[SBX_EXPORT_NONCE_MIN];
	int64_t deadline_ms; /* sbx_mono_ms() */
	const char *what;    /* "export": said in errors */
};
#define SIDE_LISTENER_INIT                                                                         \
	{                                                                                          \
		.listener = -1, .wake = { -1, -1 }                                                 \
	}

/* Listening on a new random abstract name (written to name) with a new
 * nonce, for the ipc:// client c; -1 with st on another transport. */
int side_listen(struct side_listener *sl, const sbx_client *c, const char *what,
		int64_t deadline_ms, char name[SBX_EXPORT_NAME_MAX + 1], struct sbx_rpc_status *st);
/* sbxd's connection, its hello checked, the listener closed (one
 * connection per call): the socket, or -1 with st. */
int side_accept(struct side_listener *sl, struct sbx_rpc_status *st);
/* One message from s into buf: its length, 0 at its end, or -1 with st
 * (woken, past the deadline, a message longer than len). */
ssize_t side_recv(struct side_listener *sl, int s, void *buf, size_t len,
		  struct sbx_rpc_status *st);
/* The call returned: a thread in side_accept or side_recv stops. */
void side_wake(struct side_listener *sl);
void side_listener_clear(struct side_listener *sl);
/* A failed same-host call's status, for callers that take one beginning
 * with SBX_SIDE_UNREACHED for "do it in chunks": it keeps that beginning
 * only when it is sbxd's refusal and sbxd never connected (unreached);
 * otherwise (our own error, which may begin with a name the sandbox chose)
 * the message gets "same-host: " in front. Returns -1. */
int side_unreached_only_if(struct sbx_rpc_status *st, bool unreached);
/* ImportInputs: all of buf sent on s as one message (s non-blocking),
 * waiting for room until woken or past the deadline: 0, or -1 with st. */
int side_send_msg(struct side_listener *sl, int s, const void *buf, size_t len,
		  struct sbx_rpc_status *st);

#endif
