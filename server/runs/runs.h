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
/* Tears every run down and waits until all are gone. */
void sbx_runs_teardown_all(struct sbx_runs *runs);
void sbx_runs_shutdown(struct sbx_runs *runs);

#endif
