/* SPDX-License-Identifier: Apache-2.0 */
/* The run life cycle: the table of allowed moves and the one function that
 * makes them (run_state.h draws it). */
#include "run_state.h"

#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "metrics.h"
#include "run.h"
#include "util.h"

#define BIT(s) (1u << (s))

/* allowed[from]: the states a run may move to from `from`. */
static const unsigned allowed[RUN_STATES] = {
    [RUN_STARTING] = BIT(RUN_CREATED),
    [RUN_CREATED] = BIT(RUN_ACTIVE) | BIT(RUN_EXPIRED) | BIT(RUN_FAILED) | BIT(RUN_TEARING),
    [RUN_ACTIVE] = BIT(RUN_EXPIRED) | BIT(RUN_FAILED) | BIT(RUN_TEARING),
    [RUN_EXPIRED] = BIT(RUN_TEARING),
    [RUN_FAILED] = BIT(RUN_TEARING),
    [RUN_TEARING] = BIT(RUN_TORN),
    [RUN_TORN] = 0,
};

bool run_state_allowed(enum run_state from, enum run_state to)
{
	return (unsigned)from < RUN_STATES && (unsigned)to < RUN_STATES &&
	       (allowed[from] & BIT(to)) != 0;
}

/* sbx_runs{state}: the metrics' state list is run_state's order up to
 * TEARING; a TORN run is gone and counts nowhere. */
_Static_assert(RUN_TEARING == (int)SBX_RUNS_TEARING && RUN_TORN == RUN_TEARING + 1,
	       "metrics.h's run states follow enum run_state");

void run_state_count(enum run_state s, int d)
{
	if (s < RUN_TORN)
		sbx_metrics_gauge_add(SBX_M_RUNS, s, d);
}

void run_state_init(struct sbx_run *r)
{
	r->state = r->claimed_from = RUN_STARTING;
	run_state_count(RUN_STARTING, 1);
}

void run_state_move(struct sbx_run *r, enum run_state to)
{
	if (!run_state_allowed(r->state, to)) {
		/* A move outside the life cycle is a bug in sbxd: going on would
		 * act on a run in a state nobody designed for. */
		fprintf(stderr, "sbxd: run %s: no move from %s to %s in the run life cycle\n",
			r->id, run_state_name(r->state), run_state_name(to));
		abort();
	}
	if (to == RUN_TEARING)
		r->claimed_from = r->state;
	if (to == RUN_EXPIRED || to == RUN_FAILED)
		r->stopped_at = sbx_mono_ms(); /* expired_keep_seconds count from here */
	run_state_count(r->state, -1);
	run_state_count(to, 1);
	r->state = to;
}

const char *run_state_name(enum run_state s)
{
	static const char *const names[RUN_STATES] = {
	    [RUN_STARTING] = "starting", [RUN_CREATED] = "created", [RUN_ACTIVE] = "active",
	    [RUN_EXPIRED] = "expired",	 [RUN_FAILED] = "failed",   [RUN_TEARING] = "tearing",
	    [RUN_TORN] = "torn",
	};

	return (unsigned)s < RUN_STATES ? names[s] : "unspecified";
}

static Sbx__V1__RunState public_of(enum run_state s)
{
	switch (s) {
	case RUN_STARTING:
	case RUN_CREATED:
		return SBX__V1__RUN_STATE__CREATED;
	case RUN_ACTIVE:
		return SBX__V1__RUN_STATE__ACTIVE;
	case RUN_EXPIRED:
		return SBX__V1__RUN_STATE__EXPIRED;
	case RUN_FAILED:
		return SBX__V1__RUN_STATE__FAILED;
	case RUN_TORN:
		return SBX__V1__RUN_STATE__TORN;
	default:
		return SBX__V1__RUN_STATE__RUN_STATE_UNSPECIFIED;
	}
}

const char *run_public_state_name(Sbx__V1__RunState s)
{
	static const char *const names[] = {
	    [SBX__V1__RUN_STATE__CREATED] = "created", [SBX__V1__RUN_STATE__ACTIVE] = "active",
	    [SBX__V1__RUN_STATE__EXPIRED] = "expired", [SBX__V1__RUN_STATE__TORN] = "torn",
	    [SBX__V1__RUN_STATE__FAILED] = "failed",
	};

	return (unsigned)s < SBX_ARRAY_SIZE(names) && names[s] ? names[s] : "unspecified";
}

Sbx__V1__RunState run_state_public(const struct sbx_run *r)
{
	return public_of(r->state == RUN_TEARING ? r->claimed_from : r->state);
}

Sbx__V1__RunState run_final_state(const struct sbx_run *r)
{
	Sbx__V1__RunState s =
	    public_of(r->state == RUN_TEARING || r->state == RUN_TORN ? r->claimed_from : r->state);

	/* What the run ended as: a live run claimed by a Teardown (the
	 * caller's, the sweeper's, a drain's) ended torn down; one that had
	 * already expired or failed ended so. */
	if (run_is_claimed(r) &&
	    (s == SBX__V1__RUN_STATE__CREATED || s == SBX__V1__RUN_STATE__ACTIVE))
		return SBX__V1__RUN_STATE__TORN;
	return s;
}

bool run_is_listed(const struct sbx_run *r)
{
	return r->state >= RUN_CREATED && r->state <= RUN_FAILED;
}

bool run_is_claimed(const struct sbx_run *r)
{
	return r->state == RUN_TEARING || r->state == RUN_TORN;
}

bool run_sandbox_live(const struct sbx_run *r)
{
	return r->state == RUN_CREATED || r->state == RUN_ACTIVE;
}
