/* The run's monitor thread (runs_monitor.c). */
#ifndef SBX_RUNS_MONITOR_H
#define SBX_RUNS_MONITOR_H

#include "err.h"
#include "run.h"

/* CreateRun, while the run is STARTING: makes r->wake and starts it. */
int monitor_start(struct sbx_run *r, struct sbx_err *err);
/* The Teardown that claimed r: waits for the monitor to return. */
void monitor_stop(struct sbx_run *r);

#endif
