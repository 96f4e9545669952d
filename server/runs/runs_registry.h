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
struct runs_live;

/* CreateRun: checks the caps and the drain flag and adds the STARTING run;
 * the caller's reference becomes the registry's. live is the CreateRun's
 * one copy of the reloadable settings (runs_live), the same it validated
 * the policy by. RUN_REGISTER_REPEAT (and nothing added, st untouched)
 * when r's idempotency key is taken by then: idem_repeat has the answer. */
#define RUN_REGISTER_REPEAT 1
int run_register(struct sbx_run *r, const struct runs_live *live, struct sbx_rpc_status *st);
/* Whether run_register would take r as far as its caller decides: no
 * drain, no earlier run of its idempotency key, its identity below its
 * cap and disk_bytes of inputs within the identity's and the host's disk
 * quotas. A CreateRun asks before it takes a warm pool member, so that a
 * caller whose create is refused anyway costs the pool nothing (one that
 * loops refused creates emptied it for everyone); the host-wide checks
 * a member passes by its own reservation are run_register's. */
bool run_register_likely(struct sbx_run *r, const struct runs_live *live, uint64_t disk_bytes);
/* STARTING -> CREATED: lookups find it from now on. */
void run_publish(struct sbx_run *r);
/* Drops the registry's reference: the run is gone for every caller. */
void run_unregister(struct sbx_run *r);
/* The caller's run, referenced; NULL with NOT_FOUND otherwise (the same
 * answer for someone else's run as for none, so existence is not revealed),
 * or FAILED_PRECONDITION saying who tore the caller's run down when it was
 * not the caller (a tombstone, runs_tombstone). */
struct sbx_run *run_lookup(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			   struct sbx_rpc_status *st);
/* The same, but an operator (who->operator) finds any identity's run; it
 * renews the run's lease only for its owner. */
struct sbx_run *run_lookup_operator(struct sbx_runs *runs, const struct sbx_identity *who,
				    const char *id, struct sbx_rpc_status *st);
/* r was torn down by someone other than its owner (why: "torn down by
 * operator token:ops"): for RUNS_TOMBSTONE_MS its owner's lookups say so
 * rather than NOT_FOUND (at most RUNS_TOMBSTONES kept, oldest dropped). */
void runs_tombstone(struct sbx_run *r, const char *why);
/* Registry slots free host-wide (runs_max less every registered run) and
 * for identity (runs_max_per_identity less its live runs). */
void runs_slots(struct sbx_runs *runs, const char *identity, unsigned *host, unsigned *own);
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
/* owner's listed runs (every identity's with owner NULL), each referenced,
 * oldest first; *out is the caller's to free (and each run to unref). */
size_t runs_of(struct sbx_runs *runs, const char *owner, struct sbx_run ***out);
/* How many runs callers can find now. */
unsigned runs_listed(struct sbx_runs *runs);
/* Stops taking runs, waits (until the monotonic deadline_ms) for every
 * CreateRun in flight, and claims every listed run; *out as runs_of. */
size_t runs_claim_all(struct sbx_runs *runs, int64_t deadline_ms, struct sbx_run ***out);
void runs_stop_taking(struct sbx_runs *runs);

#endif
