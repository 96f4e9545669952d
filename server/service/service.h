/* SPDX-License-Identifier: Apache-2.0 */
/* The Sandbox service's methods, as the RPC layer calls them.
 *
 * The RPC layer (rpc_*.c) owns transport, authentication, envelopes,
 * request-id deduplication and threads; the run manager (runs_*.c) owns
 * everything a method does. Each handler gets the caller's identity and the
 * unpacked request, and fills a response message allocated by the handler
 * (freed by the RPC layer with the matching free_unpacked, so every member
 * must be malloc'd) or returns an error status with a message naming what
 * was wrong.
 *
 * Handlers run on worker threads and may block (Wait and ReadOutput up to
 * their timeouts); everything they share is locked inside the run manager. */
#ifndef SBX_SERVICE_H
#define SBX_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc_status.h"
#include "sbx/v1/sandbox.pb-c.h"

/* Who is calling: "uid:1000" on ipc, "token:<name>" with a bearer token,
 * "tls:<config name>" when the transport alone identifies the caller.
 * Runs belong to the identity that created them. An operator (config
 * `operators`, decided by rpc_auth.c) may also list, read the Status of
 * and tear down every identity's runs, and drain and undrain. */
struct sbx_identity {
	char name[128];
	bool operator;
	/* ipc:// only: the kernel's word (SO_PEERCRED) on the calling uid,
	 * whatever name a token gave the caller. ExportArtifacts hands
	 * descriptors to this uid alone; false on every other transport. */
	bool local;
	uint32_t local_uid;
};

/* The run manager (runs/runs.h makes one); handlers work on it alone. */
struct sbx_runs;

/* Room for a response's bulk bytes in the message that will carry the
 * answer, so that a handler reads them straight there (FetchArtifact's
 * chunk: no second copy of it into the reply). The RPC layer gives one to
 * the handlers declared with SBX_BULK_HANDLER (rpc_reply.h makes it).
 * room(b, n): where to put at most n bytes, which become the response's
 * field 1 (a bytes field the handler then leaves empty in the message it
 * returns); NULL when it cannot (out of memory, asked twice): the handler
 * then fills the field itself. The handler sets len to the bytes it put
 * there; on an error the room is dropped. */
struct sbx_bulk {
	uint8_t *(*room)(struct sbx_bulk *b, size_t n);
	size_t len;
};

#define SBX_HANDLER(name, req_t, resp_t)                                                           \
	int sbx_handle_##name(struct sbx_runs *runs, const struct sbx_identity *who,               \
			      const req_t *req, resp_t **resp, struct sbx_rpc_status *st)

/* The same, given the room for its bulk bytes; bulk may be NULL (a call
 * from outside the RPC layer): then the response carries them itself. */
#define SBX_BULK_HANDLER(name, req_t, resp_t)                                                      \
	int sbx_handle_##name(struct sbx_runs *runs, const struct sbx_identity *who,               \
			      const req_t *req, resp_t **resp, struct sbx_bulk *bulk,              \
			      struct sbx_rpc_status *st)

SBX_HANDLER(health, Sbx__V1__HealthRequest, Sbx__V1__HealthResponse);
SBX_HANDLER(create_run, Sbx__V1__CreateRunRequest, Sbx__V1__CreateRunResponse);
SBX_HANDLER(put_input, Sbx__V1__PutInputRequest, Sbx__V1__PutInputResponse);
SBX_HANDLER(exec, Sbx__V1__ExecRequest, Sbx__V1__ExecResponse);
SBX_HANDLER(wait, Sbx__V1__WaitRequest, Sbx__V1__WaitResponse);
SBX_HANDLER(read_output, Sbx__V1__ReadOutputRequest, Sbx__V1__ReadOutputResponse);
SBX_HANDLER(signal, Sbx__V1__SignalRequest, Sbx__V1__SignalResponse);
SBX_HANDLER(status, Sbx__V1__StatusRequest, Sbx__V1__StatusResponse);
SBX_HANDLER(list_artifacts, Sbx__V1__ListArtifactsRequest, Sbx__V1__ListArtifactsResponse);
SBX_BULK_HANDLER(fetch_artifact, Sbx__V1__FetchArtifactRequest, Sbx__V1__FetchArtifactResponse);
SBX_HANDLER(export_artifacts, Sbx__V1__ExportArtifactsRequest, Sbx__V1__ExportArtifactsResponse);
SBX_HANDLER(import_inputs, Sbx__V1__ImportInputsRequest, Sbx__V1__ImportInputsResponse);
SBX_HANDLER(teardown, Sbx__V1__TeardownRequest, Sbx__V1__TeardownResponse);
SBX_HANDLER(list_runs, Sbx__V1__ListRunsRequest, Sbx__V1__ListRunsResponse);
SBX_HANDLER(drain, Sbx__V1__DrainRequest, Sbx__V1__DrainResponse);
SBX_HANDLER(write_stdin, Sbx__V1__WriteStdinRequest, Sbx__V1__WriteStdinResponse);

#endif
