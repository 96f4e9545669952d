/* SPDX-License-Identifier: Apache-2.0 */
/* A run's lease and what is left of a stopped run (runs_lease.c): the
 * arithmetic the monitor (idle_seconds) and the sweeper
 * (expired_keep_seconds) share. Pure: times are monotonic milliseconds. */
#ifndef SBX_RUNS_LEASE_H
#define SBX_RUNS_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"

/* When the lease of a run whose owner last called at last_call runs out;
 * INT64_MAX while a long poll is waiting (it is a call in progress) or
 * without a lease (idle_seconds 0, which CreateRun never leaves). */
int64_t lease_ends_at(int64_t last_call, unsigned pollers, uint32_t idle_seconds);
/* Whether it ran out at now. */
bool lease_ran_out(int64_t now, int64_t last_call, unsigned pollers, uint32_t idle_seconds);
/* When a run that stopped at stopped_at is torn down by the sweeper. */
int64_t keep_ends_at(int64_t stopped_at, uint32_t keep_seconds);
/* CreateRun: a policy's idle_seconds 0 (left out) becomes sbxd's default,
 * so the effective policy, its digest and the manifest say the real one. */
void lease_fill_default(SbxPolicy *p, uint32_t idle_seconds_default);

#endif
