/* SPDX-License-Identifier: Apache-2.0 */
/* The sweeper (runs_sweeper.c): the manager's one thread that tears down
 * the runs that stopped (EXPIRED, by run_seconds or idle_seconds, or
 * FAILED) once expired_keep_seconds passed, and an identity's oldest
 * stopped runs beyond runs_max_per_identity, writing each one's manifest
 * to the audit log since nobody may be there to take it. */
#ifndef SBX_RUNS_SWEEPER_H
#define SBX_RUNS_SWEEPER_H

#include <stdbool.h>

#include "err.h"
#include "sbx/v1/sandbox.pb-c.h"

struct sbx_runs;

int sweeper_start(struct sbx_runs *runs, struct sbx_err *err);
/* Returns once the thread did: before the manager tears every run down. */
void sweeper_stop(struct sbx_runs *runs);
/* CreateRun at runs_max (registry lock not held): tears down the oldest
 * stopped run (EXPIRED or FAILED, not claimed) of the identity holding the
 * most registry slots, at once, in the caller's thread, its manifest to
 * the audit log (reason "runs_max"). One at most; never a live run. False
 * when there was none. */
bool sweeper_make_room(struct sbx_runs *runs);
/* The manifest's digest-relevant part for an audit line (json_t *): the
 * image digest, the final state, every input and artifact (path, size,
 * sha256, mode; at most SWEEP_AUDIT_FILES of each, the rest counted). */
void *manifest_audit_json(const Sbx__V1__RunManifest *m);

#endif
