/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's registry without a helper: runs that never had a
 * sandbox, registered by hand in a manager made by hand. The caps per host
 * and per identity, NOT_FOUND for another identity's run (the same answer
 * as for none), claims, draining, and the handlers' answers that come
 * before any sandbox is involved. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "run.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "service.h"

static const struct sbx_identity alice = {.name = "uid:1000"}, bob = {.name = "uid:2000"};

static struct sbx_run *new_run(struct sbx_runs *runs, const struct sbx_identity *who,
			       const char *id)
{
	struct sbx_run *r = run_alloc(runs);

	snprintf(r->identity, sizeof(r->identity), "%s", who->name);
	snprintf(r->id, sizeof(r->id), "%s", id);
	return r;
}

static struct sbx_run *registered(struct sbx_runs *runs, const struct sbx_identity *who,
				  const char *id, struct sbx_rpc_status *st)
{
	struct sbx_run *r = new_run(runs, who, id);
	const struct runs_live live = runs_live(runs);

	if (run_register(r, &live, st) < 0) {
		run_unref(r);
		return NULL;
	}
	return r;
}

static bool found(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
		  struct sbx_rpc_status *st)
{
	struct sbx_run *r = run_lookup(runs, who, id, st);

	run_unref(r);
	return r != NULL;
}

static void caps_and_owners(void)
{
	struct sbx_runs *runs = runs_new();
	struct sbx_rpc_status st = {0};
	struct sbx_run *a1, *a2, *b1, **v = NULL;
	char none_msg[SBX_ERR_MAX];
	size_t n;

	runs->cfg.runs_max = 3;
	runs->live.runs_max_per_identity = 2;
	a1 = registered(runs, &alice, "run-a1", &st);
	check(a1 != NULL, "a first run registers");
	check(!found(runs, &alice, "run-a1", &st) && st.code == SBX__V1__CODE__NOT_FOUND,
	      "a starting run is not found, even by its owner");
	run_publish(a1);
	check(found(runs, &alice, "run-a1", &st), "a published run is found by its owner");

	found(runs, &bob, "run-none", &st);
	snprintf(none_msg, sizeof(none_msg), "%s", st.err.msg);
	check(!found(runs, &bob, "run-a1", &st) && st.code == SBX__V1__CODE__NOT_FOUND,
	      "another identity's run is NOT_FOUND");
	check(strstr(st.err.msg, "not found") && strstr(none_msg, "not found"),
	      "with the message of a run that does not exist (%s)", st.err.msg);

	a2 = registered(runs, &alice, "run-a2", &st);
	check(a2 != NULL, "a second run of the same identity registers");
	check(!registered(runs, &alice, "run-a3", &st) &&
		  st.code == SBX__V1__CODE__RESOURCE_EXHAUSTED &&
		  strstr(st.err.msg, "runs_max_per_identity"),
	      "a third is RESOURCE_EXHAUSTED by runs_max_per_identity: %s", st.err.msg);
	b1 = registered(runs, &bob, "run-b1", &st);
	check(b1 != NULL, "another identity still has room");
	check(!registered(runs, &bob, "run-b2", &st) &&
		  st.code == SBX__V1__CODE__RESOURCE_EXHAUSTED && strstr(st.err.msg, "(runs_max)"),
	      "the host's fourth run is RESOURCE_EXHAUSTED by runs_max: %s", st.err.msg);

	run_publish(a2);
	run_publish(b1);
	n = runs_of(runs, alice.name, &v);
	check(n == 2 && v[0] == a1 && v[1] == a2, "ListRuns: the caller's runs, oldest first");
	for (size_t i = 0; i < n; i++)
		run_unref(v[i]);
	free(v);
	check(runs_listed(runs) == 3, "three runs are listed");

	check(run_claim(a1, &st) == 0, "a Teardown claims a run");
	check(a1->state == RUN_TEARING, "which is TEARING then");
	check(run_claim(a1, &st) < 0 && st.code == SBX__V1__CODE__NOT_FOUND,
	      "a second Teardown of it is NOT_FOUND");
	check(!found(runs, &alice, "run-a1", &st), "a claimed run is no longer found");
	check(runs_listed(runs) == 2, "nor listed");

	runs_stop_taking(runs);
	run_unregister(a1);
	check(!registered(runs, &alice, "run-a4", &st) && st.code == SBX__V1__CODE__UNAVAILABLE,
	      "a draining manager takes no runs (UNAVAILABLE)");

	n = runs_claim_all(runs, 0, &v);
	check(n == 2, "draining claims every listed run");
	for (size_t i = 0; i < n; i++) {
		run_unregister(v[i]);
		run_unref(v[i]);
	}
	free(v);
	check(runs->count == 0 && runs->creating == 0, "the registry is empty again");
	runs_free(runs);
}

/* The handlers find nothing of another identity's run, whatever they ask. */
static void handlers_not_found(void)
{
	struct sbx_runs *runs = runs_new();
	struct sbx_rpc_status st = {0};
	struct sbx_run *r;
	int rc;

	runs->cfg.runs_max = runs->live.runs_max_per_identity = 4;
	r = registered(runs, &alice, "run-a1", &st);
	run_publish(r);

	Sbx__V1__StatusRequest sreq = SBX__V1__STATUS_REQUEST__INIT;
	Sbx__V1__StatusResponse *sresp = NULL;
	sreq.run_id = "run-a1";
	rc = sbx_handle_status(runs, &bob, &sreq, &sresp, &st);
	check(rc < 0 && st.code == SBX__V1__CODE__NOT_FOUND && !sresp, "Status: NOT_FOUND");

	Sbx__V1__WaitRequest wreq = SBX__V1__WAIT_REQUEST__INIT;
	Sbx__V1__WaitResponse *wresp = NULL;
	wreq.run_id = "run-a1";
	wreq.exec_id = "exec-1";
	rc = sbx_handle_wait(runs, &bob, &wreq, &wresp, &st);
	check(rc < 0 && st.code == SBX__V1__CODE__NOT_FOUND, "Wait: NOT_FOUND");

	Sbx__V1__TeardownRequest treq = SBX__V1__TEARDOWN_REQUEST__INIT;
	Sbx__V1__TeardownResponse *tresp = NULL;
	treq.run_id = "run-a1";
	rc = sbx_handle_teardown(runs, &bob, &treq, &tresp, &st);
	check(rc < 0 && st.code == SBX__V1__CODE__NOT_FOUND, "Teardown: NOT_FOUND");
	check(r->state == RUN_CREATED, "and the run is untouched");

	Sbx__V1__ListRunsRequest lreq = SBX__V1__LIST_RUNS_REQUEST__INIT;
	Sbx__V1__ListRunsResponse *lresp = NULL;
	rc = sbx_handle_list_runs(runs, &bob, &lreq, &lresp, &st);
	check(rc == 0 && lresp && lresp->n_runs == 0, "ListRuns: none of them");
	if (lresp)
		sbx__v1__list_runs_response__free_unpacked(lresp, NULL);

	Sbx__V1__HealthRequest hreq = SBX__V1__HEALTH_REQUEST__INIT;
	Sbx__V1__HealthResponse *hresp = NULL;
	rc = sbx_handle_health(runs, &bob, &hreq, &hresp, &st);
	check(rc == 0 && hresp && hresp->runs_active == 1 && hresp->runs_max == 4 &&
		  !strcmp(hresp->identity, bob.name),
	      "Health counts the host's runs and names the caller");
	if (hresp)
		sbx__v1__health_response__free_unpacked(hresp, NULL);

	check(run_claim(r, &st) == 0, "the owner's claim still works");
	run_unregister(r);
	runs_free(runs);
}

/* CreateRun's answers that come before anything is registered. */
static void create_run_refusals(void)
{
	struct sbx_runs *runs = runs_new();
	struct sbx_rpc_status st = {0};
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	Sbx__V1__CreateRunResponse *resp = NULL;
	int rc;

	runs->cfg.runs_max = runs->live.runs_max_per_identity = 4;
	req.policy_json = "{";
	rc = sbx_handle_create_run(runs, &alice, &req, &resp, &st);
	check(rc < 0 && st.code == SBX__V1__CODE__INVALID_ARGUMENT && !resp,
	      "a malformed policy is INVALID_ARGUMENT: %s", st.err.msg);

	req.policy_json = "{\"image\": \"host\", \"mounts\": [{\"path\": \"/data\", \"mode\": "
			  "\"ro\"}]}";
	Sbx__V1__InputFile in = SBX__V1__INPUT_FILE__INIT, *ins[] = {&in};
	in.path = "../etc/passwd";
	in.sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
	req.inputs = ins;
	req.n_inputs = 1;
	rc = sbx_handle_create_run(runs, &alice, &req, &resp, &st);
	check(rc < 0 && st.code == SBX__V1__CODE__INVALID_ARGUMENT &&
		  strstr(st.err.msg, "inputs[0].path"),
	      "an input path with \"..\" is INVALID_ARGUMENT: %s", st.err.msg);

	req.inputs = NULL;
	req.n_inputs = 0;
	req.input_dir = "/tmp";
	rc = sbx_handle_create_run(runs, &(struct sbx_identity){.name = "token:ci"}, &req, &resp,
				   &st);
	check(rc < 0 && st.code == SBX__V1__CODE__PERMISSION_DENIED,
	      "input_dir from a caller not on this host is PERMISSION_DENIED: %s", st.err.msg);
	check(runs->count == 0, "and nothing was registered");
	runs_free(runs);
}

int main(void)
{
	caps_and_owners();
	handlers_not_found();
	create_run_refusals();
	return check_done();
}
