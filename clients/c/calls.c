/* SPDX-License-Identifier: Apache-2.0 */
/* The twelve calls of service Sandbox, typed. */
#include <stdio.h>

#include "client_internal.h"

static ProtobufCMessage *typed(sbx_client *c, const char *name, const ProtobufCMessage *req,
			       const ProtobufCMessageDescriptor *resp_desc, uint32_t timeout_ms,
			       struct sbx_rpc_status *st)
{
	struct sbx_call_opts o = {.timeout_ms = timeout_ms};
	ProtobufCMessage *resp;
	char method[64];

	snprintf(method, sizeof(method), SBX_METHOD_PREFIX "%s", name);
	if (sbx_client_call_opts(c, method, req, resp_desc, &resp, &o, st) < 0)
		return NULL;
	return resp;
}

/* A long poll may take its own timeout_ms before the server answers: the
 * transport waits that long plus the usual time for an answer. */
static uint32_t poll_timeout(const sbx_client *c, uint32_t poll_ms)
{
	return sbx_client_timeout_ms(c) + poll_ms;
}

#define CALL(c, name, req, resp_t, resp_desc, timeout, st)                                         \
	((resp_t *)typed((c), (name), (const ProtobufCMessage *)(req), &(resp_desc), (timeout),    \
			 (st)))

Sbx__V1__HealthResponse *sbx_health(sbx_client *c, struct sbx_rpc_status *st)
{
	Sbx__V1__HealthRequest req = SBX__V1__HEALTH_REQUEST__INIT;

	return CALL(c, "Health", &req, Sbx__V1__HealthResponse,
		    sbx__v1__health_response__descriptor, 0, st);
}

Sbx__V1__CreateRunResponse *sbx_create_run(sbx_client *c, const Sbx__V1__CreateRunRequest *req,
					   struct sbx_rpc_status *st)
{
	return CALL(c, "CreateRun", req, Sbx__V1__CreateRunResponse,
		    sbx__v1__create_run_response__descriptor, 0, st);
}

Sbx__V1__PutInputResponse *sbx_put_input(sbx_client *c, const Sbx__V1__PutInputRequest *req,
					 struct sbx_rpc_status *st)
{
	return CALL(c, "PutInput", req, Sbx__V1__PutInputResponse,
		    sbx__v1__put_input_response__descriptor, 0, st);
}

Sbx__V1__ExecResponse *sbx_exec(sbx_client *c, const Sbx__V1__ExecRequest *req,
				struct sbx_rpc_status *st)
{
	return CALL(c, "Exec", req, Sbx__V1__ExecResponse, sbx__v1__exec_response__descriptor, 0,
		    st);
}

Sbx__V1__WaitResponse *sbx_wait(sbx_client *c, const char *run_id, const char *exec_id,
				uint32_t timeout_ms, struct sbx_rpc_status *st)
{
	Sbx__V1__WaitRequest req = SBX__V1__WAIT_REQUEST__INIT;

	req.run_id = (char *)run_id;
	req.exec_id = (char *)exec_id;
	req.timeout_ms = timeout_ms;
	return CALL(c, "Wait", &req, Sbx__V1__WaitResponse, sbx__v1__wait_response__descriptor,
		    poll_timeout(c, timeout_ms), st);
}

Sbx__V1__WaitResponse *sbx_wait_end(sbx_client *c, const char *run_id, const char *exec_id,
				    struct sbx_rpc_status *st)
{
	for (;;) {
		Sbx__V1__WaitResponse *r = sbx_wait(c, run_id, exec_id, 30000, st);
		if (!r)
			return NULL;
		if (!r->status) {
			sbx__v1__wait_response__free_unpacked(r, NULL);
			sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "Wait answered without a status");
			return NULL;
		}
		if (r->status->reason != SBX__V1__EXIT_REASON__RUNNING)
			return r;
		sbx__v1__wait_response__free_unpacked(r, NULL);
	}
}

Sbx__V1__ReadOutputResponse *sbx_read_output(sbx_client *c, const Sbx__V1__ReadOutputRequest *req,
					     struct sbx_rpc_status *st)
{
	return CALL(c, "ReadOutput", req, Sbx__V1__ReadOutputResponse,
		    sbx__v1__read_output_response__descriptor, poll_timeout(c, req->timeout_ms),
		    st);
}

Sbx__V1__WriteStdinResponse *sbx_write_stdin(sbx_client *c, const char *run_id, const char *exec_id,
					     uint64_t offset, const void *data, size_t len,
					     bool eof, struct sbx_rpc_status *st)
{
	Sbx__V1__WriteStdinRequest req = SBX__V1__WRITE_STDIN_REQUEST__INIT;

	req.run_id = (char *)run_id;
	req.exec_id = (char *)exec_id;
	req.offset = offset;
	req.data.data = (uint8_t *)data;
	req.data.len = len;
	req.eof = eof;
	return CALL(c, "WriteStdin", &req, Sbx__V1__WriteStdinResponse,
		    sbx__v1__write_stdin_response__descriptor, 0, st);
}

Sbx__V1__SignalResponse *sbx_signal(sbx_client *c, const char *run_id, const char *exec_id,
				    int signal, struct sbx_rpc_status *st)
{
	Sbx__V1__SignalRequest req = SBX__V1__SIGNAL_REQUEST__INIT;

	req.run_id = (char *)run_id;
	req.exec_id = (char *)exec_id;
	req.signal = signal;
	return CALL(c, "Signal", &req, Sbx__V1__SignalResponse,
		    sbx__v1__signal_response__descriptor, 0, st);
}

Sbx__V1__StatusResponse *sbx_status(sbx_client *c, const char *run_id, struct sbx_rpc_status *st)
{
	Sbx__V1__StatusRequest req = SBX__V1__STATUS_REQUEST__INIT;

	req.run_id = (char *)run_id;
	return CALL(c, "Status", &req, Sbx__V1__StatusResponse,
		    sbx__v1__status_response__descriptor, 0, st);
}

Sbx__V1__ListArtifactsResponse *sbx_list_artifacts(sbx_client *c, const char *run_id,
						   struct sbx_rpc_status *st)
{
	Sbx__V1__ListArtifactsRequest req = SBX__V1__LIST_ARTIFACTS_REQUEST__INIT;

	req.run_id = (char *)run_id;
	return CALL(c, "ListArtifacts", &req, Sbx__V1__ListArtifactsResponse,
		    sbx__v1__list_artifacts_response__descriptor, 0, st);
}

Sbx__V1__FetchArtifactResponse *sbx_fetch_artifact(sbx_client *c,
						   const Sbx__V1__FetchArtifactRequest *req,
						   struct sbx_rpc_status *st)
{
	return CALL(c, "FetchArtifact", req, Sbx__V1__FetchArtifactResponse,
		    sbx__v1__fetch_artifact_response__descriptor, 0, st);
}

Sbx__V1__TeardownResponse *sbx_teardown(sbx_client *c, const char *run_id,
					struct sbx_rpc_status *st)
{
	Sbx__V1__TeardownRequest req = SBX__V1__TEARDOWN_REQUEST__INIT;

	req.run_id = (char *)run_id;
	return CALL(c, "Teardown", &req, Sbx__V1__TeardownResponse,
		    sbx__v1__teardown_response__descriptor, 0, st);
}

Sbx__V1__ListRunsResponse *sbx_list_runs(sbx_client *c, struct sbx_rpc_status *st)
{
	Sbx__V1__ListRunsRequest req = SBX__V1__LIST_RUNS_REQUEST__INIT;

	return CALL(c, "ListRuns", &req, Sbx__V1__ListRunsResponse,
		    sbx__v1__list_runs_response__descriptor, 0, st);
}

Sbx__V1__ListRunsResponse *sbx_list_all_runs(sbx_client *c, struct sbx_rpc_status *st)
{
	Sbx__V1__ListRunsRequest req = SBX__V1__LIST_RUNS_REQUEST__INIT;

	req.all = true;
	return CALL(c, "ListRuns", &req, Sbx__V1__ListRunsResponse,
		    sbx__v1__list_runs_response__descriptor, 0, st);
}

Sbx__V1__DrainResponse *sbx_drain(sbx_client *c, bool undrain, struct sbx_rpc_status *st)
{
	Sbx__V1__DrainRequest req = SBX__V1__DRAIN_REQUEST__INIT;

	req.undrain = undrain;
	return CALL(c, "Drain", &req, Sbx__V1__DrainResponse, sbx__v1__drain_response__descriptor,
		    0, st);
}

/* ---- names ---- */

static const char *enum_name(const ProtobufCEnumDescriptor *d, int value, const char *prefix)
{
	static _Thread_local char unknown[48];
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);

	if (v)
		return v->name;
	snprintf(unknown, sizeof(unknown), "%s_%d", prefix, value);
	return unknown;
}

const char *sbx_code_name(Sbx__V1__Code code)
{
	return enum_name(&sbx__v1__code__descriptor, (int)code, "CODE");
}

const char *sbx_exit_reason_name(Sbx__V1__ExitReason r)
{
	return enum_name(&sbx__v1__exit_reason__descriptor, (int)r, "EXIT_REASON");
}

const char *sbx_run_state_name(Sbx__V1__RunState s)
{
	return enum_name(&sbx__v1__run_state__descriptor, (int)s, "RUN_STATE");
}

const char *sbx_serving_state_name(Sbx__V1__ServingState s)
{
	return enum_name(&sbx__v1__serving_state__descriptor, (int)s, "SERVING_STATE");
}
