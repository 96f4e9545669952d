/* SPDX-License-Identifier: Apache-2.0 */
/* Tearing a run down (runs_teardown.c). */
#ifndef SBX_RUNS_TEARDOWN_H
#define SBX_RUNS_TEARDOWN_H

#include "rpc_status.h"
#include "run.h"

/* Tears a claimed (TEARING) run down and unregisters it; fills *manifest
 * if non-NULL. When listing /out or removing the run's directory fails, the
 * sandbox is gone but the run stays registered, TORN and unfinished, and st
 * says so (UNAVAILABLE for a shortage, INTERNAL otherwise). */
int run_teardown(struct sbx_run *r, Sbx__V1__RunManifest **manifest, struct sbx_rpc_status *st);
/* Tries again what run_teardown could not finish, on a run from
 * run_take_unfinished. */
int run_teardown_unfinished(struct sbx_run *r, Sbx__V1__RunManifest **manifest,
			    struct sbx_rpc_status *st);

#endif
