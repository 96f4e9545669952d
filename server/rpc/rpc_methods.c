/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatch table (see rpc_methods.h).
 *
 * Each handler has its own request and response types, so each gets a small
 * typed wrapper rather than a cast of its function pointer (calling through
 * a mismatched pointer type is undefined, and UBSan says so). */
#include "rpc_methods.h"

#include <stdio.h>
#include <string.h>

#include "export_wire.h"
#include "import_wire.h"
#include "rpc_alloc.h"
#include "rpc_strings.h"
#include "text.h"
#include "util.h"

#define PREFIX "/sbx.v1.Sandbox/"

/* clang-format off */
/* call_<fn>: the typed handler behind the method table's one signature; a
 * bulk handler (WRAP_BULK) also gets the answer's message to read its
 * bytes into, the others answer with bytes of their own response only. */
#define WRAP_WITH(fn, req_t, resp_t, ...)					\
	static int call_##fn(struct sbx_runs *runs,				\
			     const struct sbx_identity *who,			\
			     const ProtobufCMessage *req,			\
			     ProtobufCMessage **resp,				\
			     struct sbx_bulk *bulk __attribute__((unused)),	\
			     struct sbx_rpc_status *st)				\
	{									\
		resp_t *r = NULL;						\
		int rc = sbx_handle_##fn(runs, who, (const req_t *)req, &r,	\
					 __VA_ARGS__ st);			\
		*resp = r ? &r->base : NULL;					\
		return rc;							\
	}
#define WRAP(fn, req_t, resp_t) WRAP_WITH(fn, req_t, resp_t, )
#define WRAP_BULK(fn, req_t, resp_t) WRAP_WITH(fn, req_t, resp_t, bulk, )

WRAP(health, Sbx__V1__HealthRequest, Sbx__V1__HealthResponse)
WRAP(create_run, Sbx__V1__CreateRunRequest, Sbx__V1__CreateRunResponse)
WRAP(put_input, Sbx__V1__PutInputRequest, Sbx__V1__PutInputResponse)
WRAP(exec, Sbx__V1__ExecRequest, Sbx__V1__ExecResponse)
WRAP(wait, Sbx__V1__WaitRequest, Sbx__V1__WaitResponse)
WRAP(read_output, Sbx__V1__ReadOutputRequest, Sbx__V1__ReadOutputResponse)
WRAP(signal, Sbx__V1__SignalRequest, Sbx__V1__SignalResponse)
WRAP(status, Sbx__V1__StatusRequest, Sbx__V1__StatusResponse)
WRAP(list_artifacts, Sbx__V1__ListArtifactsRequest, Sbx__V1__ListArtifactsResponse)
WRAP_BULK(fetch_artifact, Sbx__V1__FetchArtifactRequest, Sbx__V1__FetchArtifactResponse)
WRAP(export_artifacts, Sbx__V1__ExportArtifactsRequest, Sbx__V1__ExportArtifactsResponse)
WRAP(import_inputs, Sbx__V1__ImportInputsRequest, Sbx__V1__ImportInputsResponse)
WRAP(teardown, Sbx__V1__TeardownRequest, Sbx__V1__TeardownResponse)
WRAP(list_runs, Sbx__V1__ListRunsRequest, Sbx__V1__ListRunsResponse)
WRAP(drain, Sbx__V1__DrainRequest, Sbx__V1__DrainResponse)
WRAP(write_stdin, Sbx__V1__WriteStdinRequest, Sbx__V1__WriteStdinResponse)

/* once: NO (reads, or repeats harmlessly), YES (a request_id makes a retry
 * happen once), WAITS (YES, and a repeat of a running one is never
 * refused: rpc_methods.h, repeat_waits). */
enum { NO, YES, WAITS };
_Static_assert(SBX_IMPORT_MAX_FILES <= SBX_EXPORT_MAX_PATHS,
	       "SBX_SIDE_REQUEST_MAX counts SBX_EXPORT_MAX_PATHS files");
#define METHOD(Name, fn, lower, lane_, once_) {				\
	.name = PREFIX #Name,							\
	.request = &sbx__v1__##lower##_request__descriptor,			\
	.response = &sbx__v1__##lower##_response__descriptor,			\
	.call = call_##fn, .lane = (lane_), .dedupe = (once_) != NO,		\
	.repeat_waits = (once_) == WAITS,					\
	.body_max = (once_) == WAITS ? SBX_SIDE_REQUEST_MAX : 0,		\
}

static const struct rpc_method methods[] = {
	METHOD(Health,        health,         health,         RPC_INLINE, NO),
	METHOD(CreateRun,     create_run,     create_run,     RPC_SHORT,  YES),
	METHOD(PutInput,      put_input,      put_input,      RPC_SHORT,  YES),
	METHOD(Exec,          exec,           exec,           RPC_SHORT,  YES),
	METHOD(Wait,          wait,           wait,           RPC_LONG,   NO),
	METHOD(ReadOutput,    read_output,    read_output,    RPC_LONG,   NO),
	METHOD(Signal,        signal,         signal,         RPC_SHORT,  YES),
	METHOD(Status,        status,         status,         RPC_SHORT,  NO),
	METHOD(ListArtifacts, list_artifacts, list_artifacts, RPC_SHORT,  NO),
	METHOD(FetchArtifact, fetch_artifact, fetch_artifact, RPC_LONG,   NO),
	/* Both wait on the caller's socket for as long as the bytes take,
	 * which can outlast REQ's resend (60 s): a repeat run as a call of
	 * its own would connect again to a listener the client closed after
	 * the first connection (refused, "unreached") or find the inputs
	 * being written by the first (ABORTED), and its answer, carrying the
	 * same REQ id, would reach the client before the first's and end a
	 * transfer that was going well. A repeat waits for the first's
	 * answer instead, also when the pools have no room for it. */
	METHOD(ExportArtifacts, export_artifacts, export_artifacts, RPC_LONG, WAITS),
	METHOD(ImportInputs,  import_inputs,  import_inputs,  RPC_LONG,   WAITS),
	METHOD(Teardown,      teardown,       teardown,       RPC_SHORT,  YES),
	METHOD(ListRuns,      list_runs,      list_runs,      RPC_SHORT,  NO),
	/* Idempotent: a retried Drain finds the flag as the first left it. */
	METHOD(Drain,         drain,          drain,          RPC_SHORT,  NO),
	/* Never waits: takes what the exec's stdin pipe has room for. */
	METHOD(WriteStdin,    write_stdin,    write_stdin,    RPC_SHORT,  YES),
};
/* clang-format on */

const struct rpc_method *rpc_method_find(const char *name)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(methods); i++)
		if (strcmp(methods[i].name, name) == 0)
			return &methods[i];
	return NULL;
}

int rpc_methods_check(struct sbx_err *err)
{
	const ProtobufCServiceDescriptor *svc = &sbx__v1__sandbox__descriptor;

	if (svc->n_methods != SBX_ARRAY_SIZE(methods))
		return sbx_fail(err, "dispatch table has %zu methods, %s has %u",
				SBX_ARRAY_SIZE(methods), svc->name, svc->n_methods);
	for (unsigned i = 0; i < svc->n_methods; i++) {
		const ProtobufCMethodDescriptor *md = &svc->methods[i];
		char name[128];
		const struct rpc_method *m;

		snprintf(name, sizeof(name), "/%s/%s", svc->name, md->name);
		m = rpc_method_find(name);
		if (!m || m->request != md->input || m->response != md->output)
			return sbx_fail(err, "dispatch table does not match %s", name);
	}
	return 0;
}

int rpc_method_run(const struct rpc_method *m, struct sbx_runs *runs,
		   const struct sbx_identity *who, const uint8_t *body, size_t len,
		   ProtobufCMessage **resp, struct sbx_bulk *bulk, struct sbx_rpc_status *st)
{
	ProtobufCMessage *req;
	bool too_complex;
	int rc;

	*resp = NULL;
	req = rpc_unpack(m->request, body, len, &too_complex);
	if (!req)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    too_complex ? "body: message too complex for %s (%zu bytes)"
						: "body: not a valid %s (%zu bytes)",
				    m->request->name, len);
	memset(st, 0, sizeof(*st));
	/* Before anything reads a string protobuf-c cut at its first NUL. */
	{
		char where[256];

		if (rpc_wire_nul_string(m->request, body, len, where, sizeof(where))) {
			protobuf_c_message_free_unpacked(req, NULL);
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "%s: contains a NUL byte",
					    where[1] ? where + 1 : "body");
		}
	}
	/* proto3 strings are UTF-8: a strict parser refuses the body, and what
	 * a request names comes back in answers (Status, manifests) and logs. */
	{
		char where[256] = "";

		if (sbx_proto_bad_string(req, where, sizeof(where))) {
			protobuf_c_message_free_unpacked(req, NULL);
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s: not UTF-8",
					    where + 1);
		}
	}
	rc = m->call(runs, who, req, resp, bulk, st);
	protobuf_c_message_free_unpacked(req, NULL);
	if (rc < 0) {
		if (*resp)
			protobuf_c_message_free_unpacked(*resp, NULL);
		*resp = NULL;
		/* A handler that failed without saying why is still a failure. */
		if (st->code == SBX__V1__CODE__OK)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s failed", m->name);
		return -1;
	}
	if (*resp && (*resp)->descriptor != m->response) {
		protobuf_c_message_free_unpacked(*resp, NULL);
		*resp = NULL;
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s returned the wrong type",
				    m->name);
	}
	return 0;
}
