/* SPDX-License-Identifier: Apache-2.0 */
/* The one result object of `sbxctl run --json` and `sbxctl exec --json`: the
 * exec's status as sbxd keeps it (reason, exit code, signal, times, CPU,
 * peak memory, bytes and truncation of each stream), what sbxctl made of it
 * (exit_status, wall_ms, a signal that interrupted sbxctl) and the run's /out
 * at the end (every artifact with its sha256). Field names and enum values
 * as the policy file writes them (cli_json_of). */
#include <stdlib.h>

#include "cli.h"

static int oom(struct sbx_rpc_status *st)
{
	return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
}

static int set(json_t *o, const char *key, json_t *v, struct sbx_rpc_status *st)
{
	return v && json_object_set_new(o, key, v) == 0 ? 0 : oom(st);
}

json_t *cli_exec_result(const char *run_id, const Sbx__V1__ExecStatus *s, int exit_status,
			struct sbx_rpc_status *st)
{
	json_t *r = json_object(), *status = cli_json_of(&s->base);
	const char *key;
	json_t *v;

	if (!r || !status || set(r, "run_id", json_string(run_id), st) < 0) {
		json_decref(r);
		json_decref(status);
		oom(st);
		return NULL;
	}
	/* The exec's own fields at the top, after the run's id. */
	json_object_foreach(status, key, v)
	{
		if (json_object_set(r, key, v) < 0) {
			json_decref(status);
			json_decref(r);
			oom(st);
			return NULL;
		}
	}
	json_decref(status);
	int64_t wall = s->ended_unix_ms > 0 && s->started_unix_ms > 0
			   ? s->ended_unix_ms - s->started_unix_ms
			   : 0;
	if (set(r, "wall_ms", json_integer(wall), st) < 0 ||
	    set(r, "exit_status", json_integer(exit_status), st) < 0 ||
	    set(r, "interrupted_by_signal", json_integer(cli_first_signal), st) < 0) {
		json_decref(r);
		return NULL;
	}
	return r;
}

int cli_result_add_artifacts(json_t *r, sbx_client *c, const char *run_id,
			     struct sbx_rpc_status *st)
{
	Sbx__V1__ListArtifactsResponse *l = sbx_list_artifacts(c, run_id, st);

	if (!l)
		return sbx_rpc_prefix(st, "ListArtifacts");
	json_t *j = cli_json_of(&l->base);
	sbx__v1__list_artifacts_response__free_unpacked(l, NULL);
	if (!j)
		return oom(st);
	/* artifacts, listing (live, truncated...), skipped: each as its own key. */
	int rc = set(r, "artifacts", json_incref(json_object_get(j, "artifacts")), st);
	if (rc == 0)
		rc = set(r, "artifacts_listing", json_incref(json_object_get(j, "listing")), st);
	if (rc == 0)
		rc = set(r, "artifacts_skipped", json_incref(json_object_get(j, "skipped")), st);
	json_decref(j);
	return rc;
}
