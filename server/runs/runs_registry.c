/* SPDX-License-Identifier: Apache-2.0 */
/* The registry: every run of a manager, the caps on them, lookups by
 * owner, and the moves of the life cycle that change what callers find.
 *
 * Lock order: the registry lock, then a run's lock (to read or move its
 * state), never the other way round. */
#include "runs_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "runs_capacity.h"
#include "runs_idem.h"
#include "runs_manager.h"
#include "runs_pool.h"
#include "runs_quota.h"
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

/* Registry lock held: whether r's cost fits beside what the runs commit. */
static bool capacity_fits(struct sbx_runs *runs, struct sbx_run *r, const struct capacity_view *cap,
			  struct sbx_rpc_status *st)
{
	return capacity_check_now(cap, capacity_committed(runs), capacity_cost(r->policy), st) == 0;
}

/* Registry lock held: whether sweeping a stopped run could let r in: the
 * registry is full, or r's memory does not fit beside what the runs commit
 * while its CPU does (a stopped run commits its memory, its /out, until
 * its teardown, never CPU: sweeping for CPU would end runs for nothing). */
static bool room_helps(struct sbx_runs *runs, struct sbx_run *r, const struct capacity_view *cap)
{
	struct capacity_view cpu_only = *cap;
	struct sbx_rpc_status probe = {0};
	struct run_cost committed;

	if (runs->count + runs->pool_members >= runs->cfg.runs_max)
		return true;
	committed = capacity_committed(runs);
	cpu_only.capacity.memory_mb = 0; /* a row without capacity is not checked */
	return capacity_check_now(&cpu_only, committed, capacity_cost(r->policy), &probe) == 0 &&
	       capacity_check_now(cap, committed, capacity_cost(r->policy), &probe) < 0;
}

bool run_register_likely(struct sbx_run *r, const struct runs_live *live, uint64_t disk_bytes)
{
	struct sbx_runs *runs = r->runs;
	bool ok;

	pthread_mutex_lock(&runs->mu);
	ok = !runs->draining && !runs->operator_drain &&
	     !idem_taken_locked(runs, r->identity, r->idem_key) &&
	     count_identity(runs, r->identity) < live->runs_max_per_identity &&
	     quota_fits_locked(runs, r->identity, disk_bytes, &live->quotas);
	pthread_mutex_unlock(&runs->mu);
	return ok;
}

int run_register(struct sbx_run *r, const struct runs_live *live, struct sbx_rpc_status *st)
{
	struct sbx_runs *runs = r->runs;
	/* The CreateRun's copy of what a reload may change, not a second
	 * one: a reload between the two would have judged one run by old
	 * limits_max and new caps and capacity. */
	uint32_t per_identity = live->runs_max_per_identity;
	struct capacity_view cap = capacity_view_of(&live->capacity, &runs->host);
	int rc = 0;

	/* What the host can never give is the policy's fault, whatever runs. */
	if (capacity_check_ever(&cap, &live->capacity, capacity_cost(r->policy), st) < 0)
		return -1;
	pthread_mutex_lock(&runs->mu);
	/* A warm pool member's slot and capacity become the run's: checked
	 * below as the run's, and never given back to the pool. */
	pool_unreserve_locked(r);
	/* Stopped runs hold registry slots (and their memory, capacity) that
	 * no live run needs: they go now, in this thread, so that one
	 * identity's stopped runs never lock another out; never for a caller
	 * its own cap refuses anyway. One is enough for a slot; memory may
	 * take several (each stopped run holds its own), so sweeping goes on
	 * while it helps and a stopped run is left, at most runs_max of them
	 * (a CreateRun that swept one only was refused "place it elsewhere"
	 * while dead runs held the memory). Then the checks as before:
	 * another CreateRun may have taken the room. */
	for (uint32_t swept = 0;
	     swept < runs->cfg.runs_max && !runs->draining && !runs->operator_drain &&
	     count_identity(runs, r->identity) < per_identity && room_helps(runs, r, &cap);
	     swept++) {
		bool any;

		pthread_mutex_unlock(&runs->mu);
		any = sweeper_make_room(runs);
		pthread_mutex_lock(&runs->mu);
		if (!any)
			break; /* none stopped: refused below */
	}
	/* A key taken meanwhile (a concurrent repeat registered first): its
	 * run is the answer, drained or full host or not (runs_idem.c). */
	if (idem_taken_locked(runs, r->identity, r->idem_key))
		rc = RUN_REGISTER_REPEAT;
	else if (runs->draining)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE,
				  "sbxd is draining: it takes no new runs");
	else if (runs->operator_drain)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE,
				  "sbxd is draining (an operator's drain): it takes no new runs; "
				  "place the run on another host");
	else if (runs->count + runs->pool_members >= runs->cfg.runs_max)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				  "this host already has %u runs and %u warm pool members, the "
				  "maximum (runs_max); tear one down first",
				  runs->count, runs->pool_members);
	else if (count_identity(runs, r->identity) >= per_identity)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				  "%s already has %u runs, the maximum per identity "
				  "(runs_max_per_identity); tear one down first",
				  r->identity, per_identity);
	else if (!capacity_fits(runs, r, &cap, st))
		rc = -1; /* charged with the count, under this lock: never past it */
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
			idem_remember_locked(r); /* as it leaves: no repeat in between */
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

/* tomb_mu held: why who's run id is gone, when someone else tore
 * it down lately (a tombstone); NULL. */
static const struct runs_tombstone *tombstone_of(struct sbx_runs *runs, const char *owner,
						 const char *id)
{
	int64_t now = sbx_mono_ms();

	for (size_t i = 0; i < RUNS_TOMBSTONES; i++) {
		const struct runs_tombstone *t = &runs->tombstones[i];

		if (t->at && now - t->at < RUNS_TOMBSTONE_MS && !strcmp(t->id, id) &&
		    !strcmp(t->owner, owner))
			return t;
	}
	return NULL;
}

void runs_tombstone(struct sbx_run *r, const char *why)
{
	struct sbx_runs *runs = r->runs;
	struct runs_tombstone *t;

	pthread_mutex_lock(&runs->tomb_mu);
	t = &runs->tombstones[runs->tombstone_next];
	runs->tombstone_next = (runs->tombstone_next + 1) % RUNS_TOMBSTONES;
	snprintf(t->id, sizeof(t->id), "%s", r->id);
	snprintf(t->owner, sizeof(t->owner), "%s", r->identity);
	snprintf(t->why, sizeof(t->why), "%s", why);
	t->at = sbx_mono_ms();
	t->at_unix_ms = sbx_unix_ms();
	pthread_mutex_unlock(&runs->tomb_mu);
}

static struct sbx_run *lookup(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			      bool any_owner, struct sbx_rpc_status *st)
{
	struct sbx_run *found = NULL;

	if (!id)
		id = "";
	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r; r = r->next) {
		bool own = strcmp(r->identity, who->name) == 0;

		if (strcmp(r->id, id) == 0 && (own || any_owner) && listed(r)) {
			/* Every call of its owner on a run renews its lease
			 * (an operator's does not). */
			if (own)
				atomic_store(&r->last_call, sbx_mono_ms());
			run_ref(r);
			found = r;
			break;
		}
	}
	pthread_mutex_unlock(&runs->mu);
	if (!found)
		runs_not_found(runs, who->name, id, st);
	return found;
}

struct sbx_run *run_lookup(struct sbx_runs *runs, const struct sbx_identity *who, const char *id,
			   struct sbx_rpc_status *st)
{
	return lookup(runs, who, id, false, st);
}

struct sbx_run *run_lookup_operator(struct sbx_runs *runs, const struct sbx_identity *who,
				    const char *id, struct sbx_rpc_status *st)
{
	return lookup(runs, who, id, who->operator, st);
}

int runs_not_found(struct sbx_runs *runs, const char *identity, const char *id,
		   struct sbx_rpc_status *st)
{
	const struct runs_tombstone *t;
	char why[sizeof(t->why)];
	int64_t at_unix_ms = 0;

	pthread_mutex_lock(&runs->tomb_mu);
	t = tombstone_of(runs, identity, id);
	if (t) {
		memcpy(why, t->why, sizeof(why));
		at_unix_ms = t->at_unix_ms;
	}
	pthread_mutex_unlock(&runs->tomb_mu);
	if (t)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %.64s was %s at unix ms %lld; it is gone (its manifest is "
				    "in the audit log)",
				    id, why, (long long)at_unix_ms);
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
	if (ok) {
		run_state_move(r, RUN_TEARING);
		/* What is said from now on goes to the teardown's audit line. */
		r->claim_marked = true;
		r->alerts_at_teardown = r->n_alerts;
		r->dropped_at_teardown = r->alerts_dropped;
	}
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

size_t runs_of(struct sbx_runs *runs, const char *owner, struct sbx_run ***out)
{
	size_t n = 0, cap = 0;
	struct sbx_run **v = NULL;

	pthread_mutex_lock(&runs->mu);
	for (struct sbx_run *r = runs->head; r; r = r->next) {
		if ((owner && strcmp(r->identity, owner) != 0) || !listed(r))
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

void runs_slots(struct sbx_runs *runs, const char *identity, unsigned *host, unsigned *own)
{
	uint32_t per_identity = runs_live(runs).runs_max_per_identity;

	pthread_mutex_lock(&runs->mu);
	*host = runs->count + runs->pool_members < runs->cfg.runs_max
		    ? runs->cfg.runs_max - runs->count - runs->pool_members
		    : 0;
	*own = count_identity(runs, identity);
	*own = *own < per_identity ? per_identity - *own : 0;
	pthread_mutex_unlock(&runs->mu);
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
