/* SPDX-License-Identifier: Apache-2.0 */
/* The sweeper: what is left of runs that stopped, removed without anyone
 * asking. A run whose caller disappeared ends by its lease (the monitor,
 * runs_monitor.c); what it left (its /out, its directory, its place in the
 * registry) goes expired_keep_seconds later, here, through the same
 * run_teardown a caller's Teardown uses. Stopped runs do not count against
 * runs_max_per_identity (runs_registry.c), so an identity could otherwise
 * pile them up until runs_max: beyond runs_max_per_identity stopped runs
 * of one identity, the oldest go early; and a CreateRun that finds runs_max
 * reached has one stopped run torn down first (sweeper_make_room), so no
 * identity's stopped runs lock another out. A teardown that ran short
 * (unfinished) is tried again here, 5 s later, doubling to 60 s.
 *
 * One thread for the manager, never a handler's: a teardown may wait
 * seconds for a helper. It wakes every SWEEP_TICK_MS, so a run is swept
 * within that of its time. */
#include "runs_sweeper.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clock.h"
#include "run.h"
#include "runs_lease.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "runs_teardown.h"

#define SWEEP_TICK_MS	  500
#define SWEEP_AUDIT_FILES 200

/* A registered run as the sweeper counts it. How a run counts, by state
 * (here and runs_registry.c):
 *   - against runs_max: every registered run, whatever its state, from
 *     run_register to run_unregister (TEARING and TORN-unfinished too);
 *   - against runs_max_per_identity: STARTING, CREATED, ACTIVE (it holds
 *     a sandbox);
 *   - against the stopped runs an identity keeps (runs_max_per_identity
 *     of them): EXPIRED, FAILED, and TORN with its teardown unfinished
 *     (it keeps its slot, directory and disk charge until a retry ends
 *     it), so shortages never let an identity hold more;
 *   - a TEARING run is in neither per-identity count: its teardown is
 *     under way and ends with it unregistered or unfinished.
 * Only EXPIRED and FAILED runs are swept (`sweepable`): the others are
 * already some Teardown's, or retried below. */
struct stopped {
	struct sbx_run *r;
	int64_t at;
	bool stopped;	/* counted as a stopped run of its identity */
	bool sweepable; /* EXPIRED or FAILED */
};

static int cmp_stopped(const void *a, const void *b)
{
	const struct stopped *x = a, *y = b;
	int c = strcmp(x->r->identity, y->r->identity);

	if (c)
		return c;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Registry lock held: every registered run, grouped by identity, oldest
 * stop first; NULL when out of memory (*n 0). */
static struct stopped *collect(struct sbx_runs *runs, size_t *n)
{
	struct stopped *v = calloc(runs->count ? runs->count : 1, sizeof(*v));

	*n = 0;
	if (!v)
		return NULL;
	for (struct sbx_run *r = runs->head; r && *n < runs->count; r = r->next) {
		struct stopped *s = &v[(*n)++];

		run_lock(r);
		s->r = r;
		s->at = r->stopped_at;
		s->sweepable = r->state == RUN_EXPIRED || r->state == RUN_FAILED;
		s->stopped = s->sweepable || (r->state == RUN_TORN && r->unfinished);
		run_unlock(r);
	}
	qsort(v, *n, sizeof(*v), cmp_stopped);
	return v;
}

/* Registry lock held: the run to sweep now, referenced, and why; NULL. */
static struct sbx_run *pick(struct sbx_runs *runs, const char **why)
{
	int64_t now = sbx_mono_ms();
	struct sbx_run *found = NULL;
	size_t n;
	struct stopped *v = collect(runs, &n);
	const struct runs_live live = runs_live(runs);

	if (!v)
		return NULL; /* the next round tries again */
	for (size_t i = 0; i < n && !found; i++)
		if (v[i].sweepable && now >= keep_ends_at(v[i].at, live.expired_keep_seconds)) {
			found = v[i].r;
			*why = "expired_keep";
		}
	/* A group with more stopped runs than the cap gives up its oldest
	 * sweepable one. */
	for (size_t i = 0, j; i < n && !found; i = j) {
		size_t stopped = 0, first = n;

		for (j = i; j < n && !strcmp(v[j].r->identity, v[i].r->identity); j++) {
			stopped += v[j].stopped;
			if (v[j].sweepable && first == n)
				first = j;
		}
		if (stopped > live.runs_max_per_identity && first < n) {
			found = v[first].r;
			*why = "stopped_runs_max";
		}
	}
	if (found)
		run_ref(found);
	free(v);
	return found;
}

/* Registry lock held: for CreateRun at runs_max, the oldest sweepable run
 * of the identity holding the most registry slots (any state) among those
 * that have one, referenced; NULL. */
static struct sbx_run *pick_for_room(struct sbx_runs *runs)
{
	struct sbx_run *found = NULL;
	size_t n, best_slots = 0;
	int64_t best_at = 0;
	struct stopped *v = collect(runs, &n);

	if (!v)
		return NULL;
	for (size_t i = 0, j; i < n; i = j) {
		size_t first = n;

		for (j = i; j < n && !strcmp(v[j].r->identity, v[i].r->identity); j++)
			if (v[j].sweepable && first == n)
				first = j;
		if (first < n &&
		    (j - i > best_slots || (j - i == best_slots && v[first].at < best_at))) {
			found = v[first].r;
			best_slots = j - i;
			best_at = v[first].at;
		}
	}
	if (found)
		run_ref(found);
	free(v);
	return found;
}

static void sweep(struct sbx_run *r, const char *why)
{
	Sbx__V1__RunManifest *m = NULL;
	struct sbx_rpc_status st;

	/* Its owner's Teardown may have claimed it first: then it is theirs. */
	if (run_claim(r, &st) < 0)
		return;
	r->teardown_why = why;
	if (run_teardown(r, &m, &st) < 0) {
		/* Unfinished (a shortage): it stays registered, and is tried
		 * again (take_unfinished) unless its owner's Teardown is first;
		 * the audit log has the teardown_error. */
	}
	sbx__v1__run_manifest__free_unpacked(m, NULL);
}

bool sweeper_make_room(struct sbx_runs *runs)
{
	struct sbx_run *r;

	pthread_mutex_lock(&runs->mu);
	r = pick_for_room(runs);
	pthread_mutex_unlock(&runs->mu);
	if (!r)
		return false;
	sweep(r, "runs_max");
	run_unref(r);
	return true;
}

/* Registry lock held: a run whose teardown ran short and whose next try is
 * due, referenced and taken (as run_take_unfinished takes it); NULL. */
static struct sbx_run *take_unfinished(struct sbx_runs *runs)
{
	int64_t now = sbx_mono_ms();

	for (struct sbx_run *r = runs->head; r; r = r->next)
		if (r->unfinished && now >= r->retry_at) {
			r->unfinished = false;
			run_ref(r);
			return r;
		}
	return NULL;
}

/* Once more, for a teardown that ran short: nobody else may ever call
 * for it (a sweep, or an owner who went away). Ended here, its manifest
 * goes to the audit log; short again, it backs off (runs_teardown.c). */
static void retry(struct sbx_run *r)
{
	Sbx__V1__RunManifest *m = NULL;
	struct sbx_rpc_status st;

	/* [owner]: taking it made this thread the claiming Teardown. */
	if (!r->teardown_why)
		r->teardown_why = "unfinished";
	if (run_teardown_unfinished(r, &m, &st) < 0) {
		/* Short again: unfinished once more, with a longer wait. */
	}
	sbx__v1__run_manifest__free_unpacked(m, NULL);
}

static void *sweeper_main(void *arg)
{
	struct sbx_runs *runs = arg;

	pthread_mutex_lock(&runs->mu);
	while (!runs->sweeper_stop) {
		const char *why = NULL;
		struct sbx_run *r = pick(runs, &why);
		struct timespec ts;

		if (r) {
			pthread_mutex_unlock(&runs->mu);
			sweep(r, why);
			run_unref(r);
			pthread_mutex_lock(&runs->mu);
			continue; /* there may be more */
		}
		if ((r = take_unfinished(runs))) {
			pthread_mutex_unlock(&runs->mu);
			retry(r);
			run_unref(r);
			pthread_mutex_lock(&runs->mu);
			continue;
		}
		ts = sbx_mono_after_ms(SWEEP_TICK_MS);
		pthread_cond_timedwait(&runs->sweeper_cv, &runs->mu, &ts);
	}
	pthread_mutex_unlock(&runs->mu);
	return NULL;
}

int sweeper_start(struct sbx_runs *runs, struct sbx_err *err)
{
	int rc = pthread_create(&runs->sweeper, NULL, sweeper_main, runs);

	if (rc)
		return sbx_fail_errnum(err, rc, "sweeper thread");
	runs->sweeper_started = true;
	return 0;
}

void sweeper_stop(struct sbx_runs *runs)
{
	if (!runs->sweeper_started)
		return;
	pthread_mutex_lock(&runs->mu);
	runs->sweeper_stop = true;
	pthread_cond_broadcast(&runs->sweeper_cv);
	pthread_mutex_unlock(&runs->mu);
	pthread_join(runs->sweeper, NULL);
	runs->sweeper_started = false;
}

static json_t *file_json(const char *path, uint64_t size, const char *sha256, uint32_t mode,
			 int64_t arrived)
{
	json_t *o = json_pack("{s:s, s:I, s:s, s:i}", "path", path, "size", (json_int_t)size,
			      "sha256", sha256 ? sha256 : "", "mode", (int)mode);

	if (o && arrived)
		json_object_set_new(o, "arrived_unix_ms", json_integer(arrived));
	return o;
}

void *manifest_audit_json(const Sbx__V1__RunManifest *m)
{
	json_t *inputs = json_array(), *artifacts = json_array();
	json_t *o;

	for (size_t i = 0; inputs && i < m->n_inputs && i < SWEEP_AUDIT_FILES; i++) {
		const Sbx__V1__InputFile *f = m->inputs[i];

		json_array_append_new(
		    inputs, file_json(f->path, f->size, f->sha256, f->mode, f->arrived_unix_ms));
	}
	for (size_t i = 0; artifacts && i < m->n_artifacts && i < SWEEP_AUDIT_FILES; i++) {
		const Sbx__V1__Artifact *a = m->artifacts[i];

		json_array_append_new(artifacts,
				      file_json(a->path, a->size, a->sha256, a->mode, 0));
	}
	o = json_pack(
	    "{s:s, s:I, s:I, s:o*, s:I, s:o*, s:I, s:b, s:I}", "image_digest",
	    m->image_digest ? m->image_digest : "", "created_unix_ms",
	    (json_int_t)m->created_unix_ms, "ended_unix_ms", (json_int_t)m->ended_unix_ms, "inputs",
	    inputs, "inputs_not_logged",
	    (json_int_t)(m->n_inputs > SWEEP_AUDIT_FILES ? m->n_inputs - SWEEP_AUDIT_FILES : 0),
	    "artifacts", artifacts, "artifacts_not_logged",
	    (json_int_t)(m->n_artifacts > SWEEP_AUDIT_FILES ? m->n_artifacts - SWEEP_AUDIT_FILES
							    : 0) +
		(m->artifacts_listing ? m->artifacts_listing->not_listed : 0),
	    "artifacts_live", m->artifacts_listing && m->artifacts_listing->live, "execs",
	    (json_int_t)m->n_execs + m->execs_not_listed);
	return o;
}
