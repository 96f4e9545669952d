/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's life cycle (its per-method work is in service.h). */
#ifndef SBX_RUNS_H
#define SBX_RUNS_H

#include "config.h"
#include "err.h"

/* Removes what a crashed predecessor left under state_dir and the cgroup
 * root (run directories, cgroups of sbx-helper runs), then gets ready. */
struct sbx_runs;
struct sbx_egress;
struct sbx_runs *sbx_runs_init(const struct sbx_config *cfg, struct sbx_err *err);
/* Before the first handler runs: the egress proxy the runs with an
 * allowlist use (it must outlive every run: stop it after
 * sbx_runs_shutdown), or NULL and why it did not start (CreateRun then
 * refuses allowlists with that reason). */
void sbx_runs_set_egress(struct sbx_runs *runs, struct sbx_egress *eg, const char *why_not);
/* Refuses new runs from now on (CreateRun: UNAVAILABLE). */
void sbx_runs_stop_accepting(struct sbx_runs *runs);
/* The runs registered now, stopped ones (kept for their artifacts) and
 * ones being created or torn down included: a drain waits for 0. */
unsigned sbx_runs_count(struct sbx_runs *runs);
/* Tears every run down and waits until all are gone. why is the audit
 * line's teardown reason: "drain" (the drain's timeout) also writes each
 * run's manifest to the audit log and remembers the run, so that its
 * owner's next call says the drain tore it down (FAILED_PRECONDITION)
 * instead of NOT_FOUND; "shutdown" (a second signal) is quicker. */
void sbx_runs_teardown_all(struct sbx_runs *runs, const char *why);
void sbx_runs_shutdown(struct sbx_runs *runs);
/* Applies what a reload may change of cfg (already checked whole):
 * runs_max_per_identity, idle_seconds_default, expired_keep_seconds,
 * limits_max, quotas; the next CreateRun, upload or sweep uses them, runs
 * already there are untouched. Appends the names of what changed to
 * changed (", "-separated, cut at size). */
void sbx_runs_reload(struct sbx_runs *runs, const struct sbx_config *cfg, char *changed,
		     size_t size);

#endif
