/* SPDX-License-Identifier: Apache-2.0 */
/* The administrator's ceilings on a run's limits (runs_ceilings.c). */
#ifndef SBX_RUNS_CEILINGS_H
#define SBX_RUNS_CEILINGS_H

#include "config.h"
#include "policy.h"
#include "rpc_status.h"

/* CreateRun: every limit of the effective policy, and the inputs' count
 * and bytes, within the config's limits_max; FAILED_PRECONDITION naming
 * the limit and the ceiling otherwise. */
int ceilings_check(const struct sbx_limits_max *max, const SbxPolicy *p,
		   const Sbx__V1__CreateRunRequest *req, struct sbx_rpc_status *st);

#endif
