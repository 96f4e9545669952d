/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of runs (runs_registry.c): the caps, lookups by owner, the
 * moves of the life cycle that change what callers can find (publish,
 * claim), and draining. Under the registry lock, each run's lock is taken
 * after it where a run's state is read or moved. */
#ifndef SBX_RUNS_REGISTRY_H
#define SBX_RUNS_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "rpc_status.h"
#include "run.h"

struct sbx_runs;

/* CreateRun: checks the caps and the drain flag and adds the STARTING run;
 * the caller's reference becomes the registry's. */
int run_register(struct sbx_run *r, struct sbx_rpc_status *st);
/* STARTING -> CREATED: lookups find it from now on. */
void run_publish(struct sbx_run *r);
/* Drops the registry's reference: the run is gone for every caller. */
void run_unregister(struct sbx_run *r);
/* The caller's run, referenced; NULL with NOT_FOUND otherwise (the same
 * answer for someone else's run as for none, so existence is not revealed). */
struct sbx_run *run_lookup(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			   struct sbx_rpc_status *st);
/* The answer for a run id its caller (identity) cannot reach: NOT_FOUND
 * ("run ID not found"), or, for a run of that identity's that the SIGTERM
 * drain tore down, FAILED_PRECONDITION saying so (nobody else learns that
 * the id existed). Returns -1. Takes only a leaf lock: callable under a
 * run's lock. */
int runs_not_found(struct sbx_runs *runs, const char *identity, const char *id,
		   struct sbx_rpc_status *st);
/* A TORN run of who's (any run, with who NULL) whose teardown could not
 * finish, referenced and taken (one retry at a time), or NULL. */
struct sbx_run *run_take_unfinished(struct sbx_runs *runs, const struct sbx_identity *who,
				    const char *id);
/* Teardown: moves the run to TEARING (0), or answers NOT_FOUND when another
 * Teardown already owns it. */
int run_claim(struct sbx_run *r, struct sbx_rpc_status *st);
/* The caller's listed runs, each referenced, oldest first; *out is the
 * caller's to free (and each run to unref). */
size_t runs_of(struct sbx_runs *runs, const struct sbx_identity *who, struct sbx_run ***out);
/* How many runs callers can find now. */
unsigned runs_listed(struct sbx_runs *runs);
/* Stops taking runs, waits (until the monotonic deadline_ms) for every
 * CreateRun in flight, and claims every listed run; *out as runs_of. */
size_t runs_claim_all(struct sbx_runs *runs, int64_t deadline_ms, struct sbx_run ***out);
void runs_stop_taking(struct sbx_runs *runs);

#endif
