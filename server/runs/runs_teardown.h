/* Tearing a run down (runs_teardown.c). */
#ifndef SBX_RUNS_TEARDOWN_H
#define SBX_RUNS_TEARDOWN_H

#include "rpc_status.h"
#include "run.h"

/* Tears a claimed (TEARING) run down and unregisters it; fills *manifest
 * if non-NULL. */
int run_teardown(struct sbx_run *r, Sbx__V1__RunManifest **manifest, struct sbx_rpc_status *st);

#endif
