/* SPDX-License-Identifier: Apache-2.0 */
/* The administrator's ceilings (config limits_max) on what a CreateRun may
 * ask. The policy parser accepts what the format allows on any host; these
 * are what this host gives, checked on the effective policy (defaults
 * filled in), so a default above a ceiling is refused the same way, and
 * every refusal names the limit, the ceiling and the config key. */
#include <stdio.h>

#include "run_files.h"
#include "runs_ceilings.h"

static int over(struct sbx_rpc_status *st, const char *what, unsigned long long asked,
		unsigned long long ceiling, const char *key)
{
	return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			    "%s: %llu is above this host's ceiling %llu (config limits_max.%s)",
			    what, asked, ceiling, key);
}

int ceilings_check(const struct sbx_limits_max *max, const SbxPolicy *p,
		   const Sbx__V1__CreateRunRequest *req, struct sbx_rpc_status *st)
{
	const Sbx__V1__Limits *l = p->limits;
	const struct {
		const char *key;
		unsigned long long asked, ceiling;
	} limits[] = {
	    {"memory_mb", l->memory_mb, max->memory_mb},
	    {"script_seconds", l->script_seconds, max->script_seconds},
	    {"run_seconds", l->run_seconds, max->run_seconds},
	    {"idle_seconds", l->idle_seconds, max->idle_seconds},
	    {"pids", l->pids, max->pids},
	    {"out_mb", l->out_mb, max->out_mb},
	    {"tmp_mb", l->tmp_mb, max->tmp_mb},
	    {"output_kb", l->output_kb, max->output_kb},
	};
	unsigned long long bytes = 0;
	char what[32];

	if (l->cpu_millis > max->cpu_millis)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "limits.cpu: %g is above this host's ceiling %g (config "
				    "limits_max.cpu)",
				    l->cpu_millis / 1000.0, max->cpu_millis / 1000.0);
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		snprintf(what, sizeof(what), "limits.%s", limits[i].key);
		if (limits[i].asked > limits[i].ceiling)
			return over(st, what, limits[i].asked, limits[i].ceiling, limits[i].key);
	}
	/* The run's open files are divided among its processes: too many
	 * processes would each get fewer than a program needs to start. */
	if (!sbx_nofile_per_process(max->files, l->pids))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "limits.pids: %u processes would get fewer than %d open files "
				    "each of this host's %llu per run (config limits_max.files); "
				    "at most %llu",
				    l->pids, SBX_NOFILE_MIN, (unsigned long long)max->files,
				    (unsigned long long)(max->files / SBX_NOFILE_MIN));
	if (req->n_inputs > max->inputs)
		return over(st, "inputs", req->n_inputs, max->inputs, "inputs");
	for (size_t i = 0; i < req->n_inputs; i++) {
		/* No wrap-around: each size is checked before it is added. */
		if (req->inputs[i]->size > max->input_bytes - bytes)
			return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
					    "inputs: more than this host's ceiling of %llu bytes "
					    "per run (config limits_max.input_bytes)",
					    (unsigned long long)max->input_bytes);
		bytes += req->inputs[i]->size;
	}
	return 0;
}
