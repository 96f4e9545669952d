/* SPDX-License-Identifier: Apache-2.0 */
/* A run's life cycle, owned by run_state.c: the only file that assigns
 * r->state, through run_state_move(), which aborts on any move the table
 * below does not allow.
 *
 *   STARTING --publish--> CREATED --first exec--> ACTIVE
 *                            |                      |
 *                            +--sandbox ended-------+--> EXPIRED (run_seconds, idle_seconds)
 *                            |                      +--> FAILED  (it ended on its own)
 *                            |                      |
 *   CREATED, ACTIVE, EXPIRED, FAILED --claimed by a Teardown--> TEARING --> TORN
 *
 * A STARTING run whose CreateRun fails is unregistered and freed without a
 * move: it was never anyone else's.
 *
 * What became a state, and what stayed a fact beside it:
 * - `visible` was STARTING versus the rest: a run nobody else can find yet
 *   is a stage of its life, not a flag.
 * - `tearing` (registry lock) and `stop` (run lock) said one thing twice, that
 *   a Teardown owns the run: from then on lookups miss it, PutInput and Exec
 *   answer NOT_FOUND and the monitor returns. That is TEARING. The state the
 *   run was in when it was claimed is kept: Status still reports it until
 *   TORN, and its manifest records what the run ended as (run_final_state:
 *   EXPIRED or FAILED as it was, TORN for a run still live when claimed).
 * - `reaped` (the helper was waited for) and `killed` (sbxd SIGKILLed its
 *   process group, so its cgroups need `sbx-helper cleanup`) stay facts
 *   about the helper process: either can be true in several states (a
 *   sandbox killed by the watchdog is EXPIRED, one killed at teardown was
 *   ACTIVE), and neither decides what a caller may do with the run.
 *
 * Locking: r->state is guarded by the run's lock; the moves that change
 * what the registry shows (publish, claim) take the registry lock first. */
#ifndef SBX_RUN_STATE_H
#define SBX_RUN_STATE_H

#include <stdbool.h>

#include "sbx/v1/sandbox.pb-c.h"

struct sbx_run;

enum run_state {
	RUN_STARTING, /* registered by CreateRun, its sandbox being built */
	RUN_CREATED,  /* ready: takes inputs and execs */
	RUN_ACTIVE,   /* an exec started: new inputs only, each appearing whole */
	RUN_EXPIRED,  /* run_seconds or idle_seconds ran out; artifacts readable
		       * until teardown or expired_keep_seconds (runs_sweeper.c) */
	RUN_FAILED,   /* the sandbox ended on its own; kept as EXPIRED is */
	RUN_TEARING,  /* a Teardown owns it */
	RUN_TORN,     /* torn down: nothing of it is left but the record */
	RUN_STATES
};

/* A new run is STARTING. */
void run_state_init(struct sbx_run *r);
/* The runs in memory by state (the metrics' sbx_runs): d to state s's
 * count; init and each move do it, run_free takes a run's state away. */
void run_state_count(enum run_state s, int d);
/* Whether the table allows from -> to. */
bool run_state_allowed(enum run_state from, enum run_state to);
/* Run lock held (and the registry lock for CREATED and TEARING): moves r
 * to `to`, or aborts with a message if the table does not allow it. */
void run_state_move(struct sbx_run *r, enum run_state to);

const char *run_state_name(enum run_state s);
/* What the API calls the state (Status, ListRuns, manifests). */
Sbx__V1__RunState run_state_public(const struct sbx_run *r);
const char *run_public_state_name(Sbx__V1__RunState s);
/* Run lock held: what the run ended as, for its manifest (see above). */
Sbx__V1__RunState run_final_state(const struct sbx_run *r);

/* Run lock held, each of them. */
bool run_is_listed(const struct sbx_run *r);	/* lookups find it */
bool run_is_claimed(const struct sbx_run *r);	/* a Teardown owns it */
bool run_sandbox_live(const struct sbx_run *r); /* CREATED or ACTIVE */

#endif
