/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatch table: method name -> request type, handler, and which
 * workers run it. The handlers themselves are the run manager's
 * (service.h); this is the typed glue between bytes and them. */
#ifndef SBX_RPC_METHODS_H
#define SBX_RPC_METHODS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "service.h"

enum rpc_lane {
	RPC_INLINE, /* answered in the nng callback: must never block (Health) */
	RPC_SHORT,  /* bounded work: creating, uploading, listing, tearing down */
	RPC_LONG,   /* may wait for the sandbox: Wait, ReadOutput, FetchArtifact */
};

struct rpc_method {
	const char *name; /* "/sbx.v1.Sandbox/CreateRun" */
	const ProtobufCMessageDescriptor *request, *response;
	int (*call)(struct sbx_runs *runs, const struct sbx_identity *who,
		    const ProtobufCMessage *req, ProtobufCMessage **resp, struct sbx_bulk *bulk,
		    struct sbx_rpc_status *st);
	enum rpc_lane lane;
	bool dedupe; /* changes something: a request_id makes a retry happen once */
	/* A long transfer: a repeat that comes while the first still runs,
	 * or waits in the queue for a worker, is never answered with a
	 * refusal (its answer would carry the first's REQ id, reach the
	 * caller first and end the transfer). It is parked, or, when it
	 * cannot be (no worker for it, no room to park), dropped unanswered:
	 * the first's answer, or the replay a later resend gets, is the
	 * caller's. */
	bool repeat_waits;
	/* The largest request body a valid call can have, 0: no cap below
	 * max_message_bytes. Larger ones are INVALID_ARGUMENT before they
	 * are queued. */
	size_t body_max;
};

/* NULL when no such method. */
const struct rpc_method *rpc_method_find(const char *name);

/* Checks the table against the generated service descriptor, so that a
 * method added to the .proto without a handler is caught at start. */
int rpc_methods_check(struct sbx_err *err);

/* Decodes body as m's request (byte-budgeted) and runs the handler. 0: *resp
 * is the response message (NULL means an empty one); free it with
 * protobuf_c_message_free_unpacked(*resp, NULL). -1: st says why. bulk
 * (may be NULL) goes to a handler declared with SBX_BULK_HANDLER; what it
 * put there is the caller's to pack (rpc_reply_bulk) or drop. */
int rpc_method_run(const struct rpc_method *m, struct sbx_runs *runs,
		   const struct sbx_identity *who, const uint8_t *body, size_t len,
		   ProtobufCMessage **resp, struct sbx_bulk *bulk, struct sbx_rpc_status *st);

#endif
