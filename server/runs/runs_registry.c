/* SPDX-License-Identifier: Apache-2.0 */
/* The registry: every run of a manager, the caps on them, lookups by
 * owner, and the moves of the life cycle that change what callers find.
 *
 * Lock order: the registry lock, then a run's lock (to read or move its
 * state), never the other way round. */
#include "runs_registry.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "runs_manager.h"
#include "runs_sweeper.h"

/* Registry lock held: the identity's runs that still hold a sandbox (or
 * are building one). A run that stopped (EXPIRED, FAILED, being torn down,
 * torn with its teardown unfinished) no longer counts against
 * runs_max_per_identity: its caller may have died, and the sweeper
 * (runs_sweeper.c, which says how each state counts) bounds how many
 * stopped runs an identity keeps. Every registered run still counts
 * against runs_max, and a CreateRun that finds it reached has a stopped
 * run torn down first (run_register). */
static unsigned count_identity(struct sbx_runs *runs, const char *identity)
{
	unsigned n = 0;

	for (struct sbx_run *r = runs->head; r; r = r->next) {
		bool live;

		if (strcmp(r->identity, identity) != 0)
			continue;
		run_lock(r);
		live = r->state == RUN_STARTING || run_sandbox_live(r);
		run_unlock(r);
		n += live;
	}
	return n;
}

/* Registry lock held. */
static bool listed(struct sbx_run *r)
{
	bool yes;

	run_lock(r);
	yes = run_is_listed(r);
	run_unlock(r);
	return yes;
}

int run_register(struct sbx_run *r, struct sbx_rpc_status *st)
{
	struct sbx_runs *runs = r->runs;
	uint32_t per_identity = runs_live(runs).runs_max_per_identity;
	int rc = 0;

	pthread_mutex_lock(&runs->mu);
	if (!runs->draining && runs->count >= runs->cfg.runs_max &&
	    count_identity(runs, r->identity) < per_identity) {
		/* Stopped runs hold registry slots that no live run needs: one
		 * goes now (one teardown at most, in this thread), so that one
		 * identity's stopped runs never lock another out; never for a
		 * caller its own cap refuses anyway. Then the checks as before:
		 * another CreateRun may have taken the slot. */
		pthread_mutex_unlock(&runs->mu);
		(void)sweeper_make_room(runs); /* none stopped: refused below */
		pthread_mutex_lock(&runs->mu);
	}
	if (runs->draining)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE,
				  "sbxd is draining: it takes no new runs");
	else if (runs->count >= runs->cfg.runs_max)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				  "this host already has %u runs, the maximum (runs_max); tear "
				  "one down first",
				  runs->count);
	else if (count_identity(runs, r->identity) >= per_identity)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				  "%s already has %u runs, the maximum per identity "
				  "(runs_max_per_identity); tear one down first",
				  r->identity, per_identity);
	if (rc == 0) {
		r->next = runs->head;
		runs->head = r;
		runs->count++;
		runs->creating++;
	}
	pthread_mutex_unlock(&runs->mu);
	return rc;
}

void run_publish(struct sbx_run *r)
{
	struct sbx_runs *runs = r->runs;

	pthread_mutex_lock(&runs->mu);
	/* The lease starts before the monitor can see the run live. */
	atomic_store(&r->last_call, sbx_mono_ms());
	run_lock(r);
	run_state_move(r, RUN_CREATED);
	run_unlock(r);
	runs->creating--;
	pthread_cond_broadcast(&runs->cv);
	pthread_mutex_unlock(&runs->mu);
}

void run_unregister(struct sbx_run *r)
{
	struct sbx_runs *runs = r->runs;

	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run **p = &runs->head; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			runs->count--;
			run_lock(r);
			if (r->state == RUN_STARTING) {
				runs->creating--;
				pthread_cond_broadcast(&runs->cv);
			}
			run_unlock(r);
			break;
		}
	pthread_mutex_unlock(&runs->mu);
	run_unref(r);
}

struct sbx_run *run_lookup(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			   struct sbx_rpc_status *st)
{
	struct sbx_run *found = NULL;

	if (!id)
		id = "";
	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r; r = r->next)
		if (strcmp(r->id, id) == 0 && strcmp(r->identity, who->name) == 0 && listed(r)) {
			/* Every call of its owner on a run renews its lease. */
			atomic_store(&r->last_call, sbx_mono_ms());
			run_ref(r);
			found = r;
			break;
		}
	pthread_mutex_unlock(&runs->mu);
	if (!found)
		runs_not_found(runs, who->name, id, st);
	return found;
}

int runs_not_found(struct sbx_runs *runs, const char *identity, const char *id,
		   struct sbx_rpc_status *st)
{
	bool drained = false;

	pthread_mutex_lock(&runs->drained_mu);
	for (size_t i = 0; i < runs->n_drained && !drained; i++)
		drained = !strcmp(runs->drained[i].id, id) &&
			  !strcmp(runs->drained[i].identity, identity);
	pthread_mutex_unlock(&runs->drained_mu);
	if (drained)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s was torn down by sbxd's drain: sbxd is stopping and "
				    "its drain_seconds passed; the run's manifest is in sbxd's "
				    "audit log",
				    id);
	return sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "run %.64s not found", id);
}

struct sbx_run *run_take_unfinished(struct sbx_runs *runs, const struct sbx_identity *who,
				    const char *id)
{
	struct sbx_run *found = NULL;

	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r && !found; r = r->next)
		if (r->unfinished && (!who || (id && strcmp(r->id, id) == 0 &&
					       strcmp(r->identity, who->name) == 0))) {
			r->unfinished = false;
			run_ref(r);
			found = r;
		}
	pthread_mutex_unlock(&runs->mu);
	return found;
}

/* Both locks held. */
static bool claim(struct sbx_run *r)
{
	bool ok;

	run_lock(r);
	ok = run_is_listed(r);
	if (ok)
		run_state_move(r, RUN_TEARING);
	run_unlock(r);
	if (ok)
		run_wake(r); /* the monitor returns */
	return ok;
}

int run_claim(struct sbx_run *r, struct sbx_rpc_status *st)
{
	struct sbx_runs *runs = r->runs;
	bool ok;

	pthread_mutex_lock(&runs->mu);
	ok = claim(r);
	pthread_mutex_unlock(&runs->mu);
	if (!ok)
		return runs_not_found(runs, r->identity, r->id, st);
	return 0;
}

static void reverse(struct sbx_run **v, size_t n)
{
	for (size_t i = 0; i < n / 2; i++) {
		struct sbx_run *t = v[i];

		v[i] = v[n - 1 - i];
		v[n - 1 - i] = t;
	}
}

size_t runs_of(struct sbx_runs *runs, const struct sbx_identity *who, struct sbx_run ***out)
{
	size_t n = 0, cap = 0;
	struct sbx_run **v = NULL;

	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r; r = r->next) {
		if (strcmp(r->identity, who->name) != 0 || !listed(r))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct sbx_run **nv = realloc(v, ncap * sizeof(*v));

			if (!nv)
				break;
			v = nv;
			cap = ncap;
		}
		run_ref(r);
		v[n++] = r;
	}
	pthread_mutex_unlock(&runs->mu);
	reverse(v, n);
	*out = v;
	return n;
}

unsigned runs_listed(struct sbx_runs *runs)
{
	unsigned n = 0;

	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r; r = r->next)
		n += listed(r);
	pthread_mutex_unlock(&runs->mu);
	return n;
}

void runs_stop_taking(struct sbx_runs *runs)
{
	pthread_mutex_lock(&runs->mu);
	runs->draining = true;
	pthread_mutex_unlock(&runs->mu);
}

size_t runs_claim_all(struct sbx_runs *runs, int64_t deadline_ms, struct sbx_run ***out)
{
	struct sbx_run **v;
	size_t n = 0;

	pthread_mutex_lock(&runs->mu);
	runs->draining = true;
	/* A CreateRun in flight ends within its Ready timeout; wait for it so
	 * its run is torn down too. */
	while (runs->creating > 0 && sbx_mono_ms() < deadline_ms) {
		struct timespec ts = sbx_mono_after_ms(1000);

		pthread_cond_timedwait(&runs->cv, &runs->mu, &ts);
	}
	v = calloc(runs->count ? runs->count : 1, sizeof(*v));
	for (struct sbx_run *r = runs->head; r && v; r = r->next)
		if (claim(r)) {
			run_ref(r);
			v[n++] = r;
		}
	pthread_mutex_unlock(&runs->mu);
	*out = v;
	return n;
}
