/* SPDX-License-Identifier: Apache-2.0 */
/* The run's monitor thread (runs_monitor.c). */
#ifndef SBX_RUNS_MONITOR_H
#define SBX_RUNS_MONITOR_H

#include "err.h"
#include "run.h"

/* CreateRun, while the run is STARTING: makes r->wake and starts it. */
int monitor_start(struct sbx_run *r, struct sbx_err *err);
/* The Teardown that claimed r: waits for the monitor to return. */
void monitor_stop(struct sbx_run *r);
/* The helper was waited for (mu not held); `exited`: it exited rather
 * than being killed. Sets reaped, and sandbox_gone once no process of the
 * sandbox can be left: a helper that exited by itself waited for its pid 1,
 * whose pid namespace (every exec's with it) dies first; a killed one left
 * pid 1 to die by PR_SET_PDEATHSIG, asynchronously, so its processes are
 * known gone only once `sbx-helper cleanup` emptied and removed the run's
 * cgroups, and never for a sandbox without cgroups. */
void monitor_reaped(struct sbx_run *r, bool exited);

#endif
