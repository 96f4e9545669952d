/* SPDX-License-Identifier: Apache-2.0 */
/* The warm pool (runs_pool.h says what it promises). One thread builds,
 * rebuilds and destroys members; CreateRun only takes a ready one out of
 * the list (a few pointer moves and two polls) and hands the thread
 * anything it finds dead. */
#include "runs_pool.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "helper_client.h"
#include "metrics.h"
#include "runs_capacity.h"
#include "runs_create.h"
#include "runs_manager.h"
#include "runs_quota.h"
#include "util.h"

#define POOL_WAIT_MAX_MS    1000  /* the thread looks again at least this often */
#define POOL_BACKOFF_MIN_MS 1000  /* after a failed build, doubling ... */
#define POOL_BACKOFF_MAX_MS 60000 /* ... up to this */
#define POOL_RUN_DIR_INODES 5	  /* runs_create.c's RUN_DIR_INODES */
/* A refill waits this long after the last claim, so that it does not take
 * the CPU from the run that was just claimed (its first execs), unless
 * the shape has been short for POOL_SHORT_MAX_MS: under a steady stream of
 * claims the pool still refills. */
#define POOL_QUIET_MS	  200
#define POOL_SHORT_MAX_MS 1000

struct pool_shape {
	char name[64];
	char *policy_json;
	uint32_t size;
	char digest[72]; /* of the last member prepared: what a CreateRun must match */
	unsigned ready, building;
	uint64_t built, failed, claimed;
	unsigned failures_in_row;
	int64_t short_since; /* monotonic: ready + building fell below size; 0: full */
	int64_t retry_at;    /* monotonic: no build before (backoff, or no room) */
	char error[SBX_ERR_MAX];
};

struct pool_member {
	struct pool_member *next;
	struct sbx_run *r;
	size_t shape;
	int64_t expires; /* monotonic: rebuilt after */
};

struct runs_pool {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC: the thread's wake-up */
	struct pool_shape *shapes;
	size_t n_shapes;
	struct pool_member *ready; /* newest first */
	/* Members to destroy (dead, expired, surplus, a failed claim, a
	 * shape a reload dropped): the thread's work, never a caller's. A
	 * list, never full: a member must never stay on `ready` with the
	 * index of a shape that is gone. */
	struct pool_member *doomed;
	uint32_t max_age_s, rate;
	double tokens;
	int64_t tokens_at;
	int64_t last_claim; /* monotonic */
	pthread_t thread;
	bool started, stop;
	/* Set by a reload: the thread compares every member's digest with
	 * what a CreateRun of its shape has now (idle_seconds_default and
	 * limits_max are part of it). */
	bool recheck;
};

/* ---- accounting (registry lock) ---- */

void pool_unreserve_locked(struct sbx_run *r)
{
	struct sbx_runs *runs = r->runs;
	struct run_cost c;

	if (!r->pool_reserved)
		return;
	c = capacity_cost(r->policy);
	runs->pool_members--;
	runs->pool_cpu_millis -= c.cpu_millis;
	runs->pool_memory_mb -= c.memory_mb;
	r->pool_reserved = false;
}

/* A run slot and the capacity for m, if the host has them beside every
 * run and member (and is not draining): false leaves the shape waiting. */
static bool reserve(struct sbx_run *m, char *why, size_t why_size)
{
	struct sbx_runs *runs = m->runs;
	const struct runs_live live = runs_live(runs);
	struct capacity_view cap = capacity_view_of(&live.capacity, &runs->host);
	struct run_cost c = capacity_cost(m->policy);
	struct sbx_rpc_status st = {0};
	bool ok = false;

	if (quota_reserve_check(runs, 0, POOL_RUN_DIR_INODES, "a pool member", &st) < 0) {
		snprintf(why, why_size, "%s", st.err.msg);
		return false;
	}
	pthread_mutex_lock(&runs->mu);
	if (runs->draining || runs->operator_drain)
		snprintf(why, why_size, "sbxd is draining");
	else if (runs->count + runs->pool_members >= runs->cfg.runs_max)
		snprintf(why, why_size, "no run slot free (runs_max)");
	else if (capacity_check_now(&cap, capacity_committed(runs), c, &st) < 0)
		snprintf(why, why_size, "%s", st.err.msg);
	else
		ok = true;
	if (ok) {
		runs->pool_members++;
		runs->pool_cpu_millis += c.cpu_millis;
		runs->pool_memory_mb += c.memory_mb;
		m->pool_reserved = true;
	}
	pthread_mutex_unlock(&runs->mu);
	return ok;
}

static void unreserve(struct sbx_run *m)
{
	pthread_mutex_lock(&m->runs->mu);
	pool_unreserve_locked(m);
	pthread_mutex_unlock(&m->runs->mu);
}

/* Outside every lock: the sandbox ends (its control socket closes: pid 1
 * leaves and the kernel ends the rest), its directory and hold go. */
static void destroy(struct sbx_run *m)
{
	create_destroy_sandbox(m);
	unreserve(m);
	run_unref(m);
}

/* ---- the pool's lock held ---- */

static void publish_ready(struct runs_pool *p, size_t i)
{
	if (i < SBX_METRICS_POOL_SHAPES)
		sbx_metrics_set(SBX_M_POOL_READY, i, p->shapes[i].ready);
}

static void fail_shape(struct runs_pool *p, size_t i, const char *why)
{
	struct pool_shape *sh = &p->shapes[i];
	int64_t wait = POOL_BACKOFF_MIN_MS;

	sh->failed++;
	if (i < SBX_METRICS_POOL_SHAPES)
		sbx_metrics_add(SBX_M_POOL_FAILED, i, 1);
	snprintf(sh->error, sizeof(sh->error), "%s", why);
	for (unsigned k = 0; k < sh->failures_in_row && wait < POOL_BACKOFF_MAX_MS; k++)
		wait *= 2;
	sh->failures_in_row++;
	sh->retry_at = sbx_mono_ms() + (wait < POOL_BACKOFF_MAX_MS ? wait : POOL_BACKOFF_MAX_MS);
}

/* Hands m to the thread; with no room left (or no thread), false: the
 * caller destroys it itself. */
static bool doom(struct runs_pool *p, struct sbx_run *m)
{
	struct pool_member *d;

	if (!p->started || p->stop || !(d = calloc(1, sizeof(*d))))
		return false;
	d->r = m;
	d->next = p->doomed;
	p->doomed = d;
	pthread_cond_broadcast(&p->cv);
	return true;
}

/* Destroys every member of the list and frees it (no lock held). */
static void destroy_all(struct pool_member *list)
{
	while (list) {
		struct pool_member *mb = list;

		list = mb->next;
		destroy(mb->r);
		free(mb);
	}
}

/* pid 1 still waits for its claim: no exit, nothing said on the socket
 * (a Ready's sandbox says nothing until asked). */
static bool alive(const struct sbx_run *m)
{
	struct pollfd pfd[2] = {{.fd = m->ctl, .events = POLLIN},
				{.fd = m->pidfd, .events = POLLIN}};

	return poll(pfd, m->pidfd >= 0 ? 2 : 1, 0) == 0;
}

/* Takes out the members the thread must destroy: dead ones (counted as
 * failed), expired ones and those past their shape's size. */
static struct pool_member *take_stale(struct runs_pool *p, int64_t now)
{
	struct pool_member *out = NULL;

	for (struct pool_member **pp = &p->ready; *pp;) {
		struct pool_member *mb = *pp;
		struct pool_shape *sh = &p->shapes[mb->shape];
		bool dead = !alive(mb->r);

		if (!dead && now < mb->expires && sh->ready <= sh->size) {
			pp = &mb->next;
			continue;
		}
		if (dead)
			fail_shape(p, mb->shape, "a ready member's sandbox ended while it waited");
		*pp = mb->next;
		sh->ready--;
		publish_ready(p, mb->shape);
		mb->next = out;
		out = mb;
	}
	return out;
}

static void refill(struct runs_pool *p, int64_t now)
{
	p->tokens += (double)(now - p->tokens_at) * p->rate / 1000.0;
	if (p->tokens > p->rate)
		p->tokens = p->rate;
	p->tokens_at = now;
}

/* The first shape short of its size and not waiting; SIZE_MAX: none. */
static size_t wanted(struct runs_pool *p, int64_t now, int64_t *next)
{
	for (size_t i = 0; i < p->n_shapes; i++) {
		struct pool_shape *sh = &p->shapes[i];
		int64_t at;

		if (sh->ready + sh->building >= sh->size) {
			sh->short_since = 0;
			continue;
		}
		if (!sh->short_since)
			sh->short_since = now;
		at = sh->retry_at;
		/* Quiet after a claim, unless short for long. */
		if (at < p->last_claim + POOL_QUIET_MS) {
			at = p->last_claim + POOL_QUIET_MS;
			if (at > sh->short_since + POOL_SHORT_MAX_MS)
				at = sh->short_since + POOL_SHORT_MAX_MS;
			if (at < sh->retry_at)
				at = sh->retry_at;
		}
		if (now >= at)
			return i;
		if (at < *next)
			*next = at;
	}
	return SIZE_MAX;
}

/* ---- building (no lock held) ---- */

static uint64_t max_age_ms(const struct runs_pool *p, const SbxPolicy *policy)
{
	/* pid 1's own clock runs from the build until the claim restarts it:
	 * a member never waits more than half of it. */
	uint64_t age = (uint64_t)p->max_age_s * 1000, half = policy->limits->run_seconds * 500ull;

	return age < half ? age : half;
}

static void audit_failure(const char *shape, const char *why)
{
	fprintf(stderr, "sbxd: pool %s: a member failed: %s\n", shape, why);
	sbx_audit("pool_member_failed", NULL, NULL, NULL,
		  json_pack("{s:s, s:s}", "shape", shape, "error", why));
}

/* One member of shape i (its policy json copied under the lock). */
static void build_one(struct sbx_runs *runs, size_t i, const char *name, const char *json)
{
	struct runs_pool *p = runs->pool;
	const struct runs_live live = runs_live(runs);
	struct sbx_run *m = run_alloc(runs);
	struct sbx_rpc_status st = {0};
	char why[SBX_ERR_MAX] = "";
	struct pool_member *mb = NULL;
	enum { BUILT, NO_ROOM, FAILED } how = FAILED;

	if (!m) {
		snprintf(why, sizeof(why), "out of memory");
	} else if (create_prepare(m, json, &live, &st) < 0) {
		snprintf(why, sizeof(why), "%s", st.err.msg);
	} else if (!reserve(m, why, sizeof(why))) {
		how = NO_ROOM;
	} else if (create_build(m, live.limits_max.files, &st) < 0) {
		snprintf(why, sizeof(why), "%s", st.err.msg);
	} else if (!(mb = calloc(1, sizeof(*mb)))) {
		snprintf(why, sizeof(why), "out of memory");
	} else {
		how = BUILT;
	}
	if (how != BUILT && m) {
		destroy(m);
		m = NULL;
	}
	if (how == FAILED)
		audit_failure(name, why);
	pthread_mutex_lock(&p->mu);
	/* A reload may have moved or dropped the shape meanwhile. */
	for (i = 0; i < p->n_shapes && strcmp(p->shapes[i].name, name); i++)
		;
	if (i == p->n_shapes || strcmp(p->shapes[i].policy_json, json) != 0) {
		pthread_mutex_unlock(&p->mu);
		if (m)
			destroy(m);
		free(mb);
		return;
	}
	p->shapes[i].building--;
	if (how == FAILED) {
		fail_shape(p, i, why);
	} else if (how == NO_ROOM) {
		/* Not a failure: the host is full; look again later. */
		p->shapes[i].retry_at = sbx_mono_ms() + POOL_BACKOFF_MIN_MS;
	} else {
		struct pool_shape *sh = &p->shapes[i];

		mb->r = m;
		mb->shape = i;
		mb->expires = sbx_mono_ms() + (int64_t)max_age_ms(p, m->policy);
		mb->next = p->ready;
		p->ready = mb;
		snprintf(sh->digest, sizeof(sh->digest), "%s", m->policy_digest);
		sh->ready++;
		sh->built++;
		sh->failures_in_row = 0;
		sh->error[0] = '\0';
		publish_ready(p, i);
	}
	pthread_mutex_unlock(&p->mu);
}

/* The effective digest a CreateRun of json has under the settings now
 * ("" when it is refused: the shape's next build says why). */
static void digest_now(struct sbx_runs *runs, const char *json, char *out, size_t size)
{
	const struct runs_live live = runs_live(runs);
	struct sbx_run *m = run_alloc(runs);
	struct sbx_rpc_status st = {0};

	out[0] = '\0';
	if (m && create_prepare(m, json, &live, &st) == 0)
		snprintf(out, size, "%s", m->policy_digest);
	if (m)
		destroy(m);
}

/* The pool's lock held, dropped while digests are computed: members whose
 * digest a reload changed (no CreateRun would match them) go to the
 * doomed list, and their shape builds anew. */
static void recheck_digests(struct sbx_runs *runs)
{
	struct runs_pool *p = runs->pool;

	p->recheck = false;
	for (size_t i = 0; i < p->n_shapes && !p->stop && !p->recheck; i++) {
		_cleanup_free_ char *json = strdup(p->shapes[i].policy_json);
		char name[sizeof(p->shapes[i].name)], digest[sizeof(p->shapes[i].digest)];

		if (!json || !p->shapes[i].ready)
			continue;
		memcpy(name, p->shapes[i].name, sizeof(name));
		pthread_mutex_unlock(&p->mu);
		digest_now(runs, json, digest, sizeof(digest));
		pthread_mutex_lock(&p->mu);
		/* A reload meanwhile moved or dropped it: it is rechecked again. */
		if (i >= p->n_shapes || strcmp(p->shapes[i].name, name) ||
		    strcmp(p->shapes[i].policy_json, json) || !digest[0])
			continue;
		snprintf(p->shapes[i].digest, sizeof(p->shapes[i].digest), "%s", digest);
		for (struct pool_member **pp = &p->ready; *pp;) {
			struct pool_member *mb = *pp;

			if (mb->shape != i || !strcmp(mb->r->policy_digest, digest)) {
				pp = &mb->next;
				continue;
			}
			*pp = mb->next;
			p->shapes[i].ready--;
			publish_ready(p, i);
			mb->next = p->doomed;
			p->doomed = mb;
		}
	}
}

static void *pool_thread(void *arg)
{
	struct sbx_runs *runs = arg;
	struct runs_pool *p = runs->pool;

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		int64_t now = sbx_mono_ms(), next = now + POOL_WAIT_MAX_MS;
		struct pool_member *stale = take_stale(p, now);
		size_t i;

		if (stale || p->doomed) {
			struct pool_member *doomed = p->doomed;

			p->doomed = NULL;
			pthread_mutex_unlock(&p->mu);
			destroy_all(doomed);
			while (stale) {
				struct pool_member *mb = stale;

				stale = mb->next;
				destroy(mb->r);
				free(mb);
			}
			pthread_mutex_lock(&p->mu);
			continue;
		}
		if (p->recheck) {
			recheck_digests(runs);
			continue;
		}
		refill(p, now);
		i = wanted(p, now, &next);
		if (i != SIZE_MAX && p->tokens >= 1) {
			_cleanup_free_ char *json = strdup(p->shapes[i].policy_json);
			char name[sizeof(p->shapes[i].name)];

			memcpy(name, p->shapes[i].name, sizeof(name));
			if (json) {
				p->tokens -= 1;
				p->shapes[i].building++;
				pthread_mutex_unlock(&p->mu);
				build_one(runs, i, name, json);
				pthread_mutex_lock(&p->mu);
				continue;
			}
		} else if (i != SIZE_MAX) {
			int64_t token_at = now + (int64_t)((1 - p->tokens) * 1000 / p->rate) + 1;

			if (token_at < next)
				next = token_at;
		}
		for (struct pool_member *mb = p->ready; mb; mb = mb->next)
			if (mb->expires < next)
				next = mb->expires;
		if (next > now) {
			struct timespec ts = sbx_mono_after_ms(next - now);

			pthread_cond_timedwait(&p->cv, &p->mu, &ts);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* ---- shapes ---- */

static void shapes_free(struct pool_shape *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].policy_json);
	free(v);
}

static struct pool_shape *shapes_from(const struct sbx_config *cfg, struct sbx_err *err)
{
	struct pool_shape *v = calloc(cfg->n_pool ? cfg->n_pool : 1, sizeof(*v));

	if (!v) {
		sbx_fail_errno(err, "pool");
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_pool; i++) {
		snprintf(v[i].name, sizeof(v[i].name), "%s", cfg->pool[i].name);
		v[i].size = cfg->pool[i].size;
		if (!(v[i].policy_json = strdup(cfg->pool[i].policy_json))) {
			shapes_free(v, i);
			sbx_fail_errno(err, "pool");
			return NULL;
		}
	}
	return v;
}

int pool_init(struct sbx_runs *runs, const struct sbx_config *cfg, struct sbx_err *err)
{
	struct runs_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return sbx_fail_errno(err, "pool");
	if (!(p->shapes = shapes_from(cfg, err))) {
		free(p);
		return -1;
	}
	p->n_shapes = cfg->n_pool;
	p->max_age_s = cfg->pool_max_age_seconds ? cfg->pool_max_age_seconds : 600;
	p->rate = cfg->pool_builds_per_second ? cfg->pool_builds_per_second : 4;
	p->tokens = p->rate;
	p->tokens_at = sbx_mono_ms();
	pthread_mutex_init(&p->mu, NULL);
	cond_init_monotonic(&p->cv);
	runs->pool = p;
	return 0;
}

static void start_locked(struct sbx_runs *runs)
{
	struct runs_pool *p = runs->pool;
	bool any = false;

	for (size_t i = 0; i < p->n_shapes; i++)
		any |= p->shapes[i].size > 0;
	/* Size 0 everywhere: no thread, nothing built. */
	if (!any || p->started || p->stop)
		return;
	if (pthread_create(&p->thread, NULL, pool_thread, runs) == 0)
		p->started = true;
	else
		fprintf(stderr, "sbxd: pool: could not start its thread; every create is cold\n");
}

void pool_start(struct sbx_runs *runs)
{
	if (!runs->pool)
		return;
	pthread_mutex_lock(&runs->pool->mu);
	start_locked(runs);
	pthread_mutex_unlock(&runs->pool->mu);
}

bool pool_reload(struct sbx_runs *runs, const struct sbx_config *cfg)
{
	struct runs_pool *p = runs->pool;
	struct pool_shape *next;
	struct sbx_err err;
	bool changed;

	if (!p || !(next = shapes_from(cfg, &err)))
		return false;
	pthread_mutex_lock(&p->mu);
	changed = cfg->n_pool != p->n_shapes || cfg->pool_max_age_seconds != p->max_age_s ||
		  cfg->pool_builds_per_second != p->rate;
	/* A shape of the same name and policy keeps its members and counts;
	 * any other's members go (they were built for a policy no longer
	 * kept). */
	for (size_t i = 0; i < cfg->n_pool; i++)
		for (size_t j = 0; j < p->n_shapes; j++)
			if (!strcmp(next[i].name, p->shapes[j].name) &&
			    !strcmp(next[i].policy_json, p->shapes[j].policy_json)) {
				uint32_t size = next[i].size;
				char *json = next[i].policy_json;

				changed |= size != p->shapes[j].size || i != j;
				next[i] = p->shapes[j];
				next[i].size = size;
				next[i].policy_json = json;
				p->shapes[j].name[0] = '\0'; /* taken */
				for (struct pool_member *mb = p->ready; mb; mb = mb->next)
					if (mb->shape == j)
						mb->shape = i + SBX_CONFIG_MAX_POOL; /* remapped */
			}
	for (struct pool_member **pp = &p->ready; *pp;) {
		struct pool_member *mb = *pp;

		if (mb->shape >= SBX_CONFIG_MAX_POOL) {
			mb->shape -= SBX_CONFIG_MAX_POOL;
			pp = &mb->next;
		} else {
			/* Its shape is gone: onto the doomed list as it is (the
			 * thread, or pool_stop, destroys it), never left here. */
			changed = true;
			*pp = mb->next;
			mb->next = p->doomed;
			p->doomed = mb;
			pthread_cond_broadcast(&p->cv);
		}
	}
	for (size_t j = 0; j < p->n_shapes; j++) {
		changed |= p->shapes[j].name[0] != '\0';
		free(p->shapes[j].policy_json);
		p->shapes[j].policy_json = NULL;
	}
	free(p->shapes);
	p->shapes = next;
	p->n_shapes = cfg->n_pool;
	p->max_age_s = cfg->pool_max_age_seconds;
	p->rate = cfg->pool_builds_per_second;
	p->recheck = p->ready != NULL;
	for (size_t i = 0; i < SBX_METRICS_POOL_SHAPES; i++)
		sbx_metrics_set(SBX_M_POOL_READY, i, i < p->n_shapes ? p->shapes[i].ready : 0);
	start_locked(runs);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return changed;
}

void pool_stop(struct sbx_runs *runs)
{
	struct runs_pool *p = runs->pool;
	struct pool_member *left;
	struct pool_member *doomed;
	bool join;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	join = p->started && !p->stop;
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (join)
		pthread_join(p->thread, NULL);
	/* The thread is gone: what it left is ours, taken under the lock (a
	 * CreateRun already past its checks may still be claiming). */
	pthread_mutex_lock(&p->mu);
	left = p->ready;
	p->ready = NULL;
	for (struct pool_member *mb = left; mb; mb = mb->next) {
		p->shapes[mb->shape].ready--;
		publish_ready(p, mb->shape);
	}
	doomed = p->doomed;
	p->doomed = NULL;
	pthread_mutex_unlock(&p->mu);
	while (left) {
		struct pool_member *mb = left;

		left = mb->next;
		destroy(mb->r);
		free(mb);
	}
	destroy_all(doomed);
}

void pool_free(struct sbx_runs *runs)
{
	struct runs_pool *p = runs->pool;

	if (!p)
		return;
	pool_stop(runs);
	shapes_free(p->shapes, p->n_shapes);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
	runs->pool = NULL;
}

/* ---- claims ---- */

/* r's per-run parts (what the CreateRun request brought) move into m. */
static void adopt(struct sbx_run *m, struct sbx_run *r)
{
	memcpy(m->identity, r->identity, sizeof(m->identity));
	memcpy(m->idem_key, r->idem_key, sizeof(m->idem_key));
	memcpy(m->idem_digest, r->idem_digest, sizeof(m->idem_digest));
	m->n_labels = r->n_labels;
	m->label_keys = r->label_keys;
	m->label_values = r->label_values;
	r->n_labels = 0;
	r->label_keys = r->label_values = NULL;
	m->inputs = r->inputs;
	m->n_inputs = r->n_inputs;
	m->n_input_dirs = r->n_input_dirs;
	r->inputs = NULL;
	r->n_inputs = r->n_input_dirs = 0;
	m->record_bytes = r->record_bytes;
	m->created_ms = r->created_ms;
	m->launch = SBX__V1__LAUNCH__LAUNCH_WARM;
	atomic_store(&m->last_call, sbx_mono_ms());
}

struct sbx_run *pool_claim(struct sbx_runs *runs, struct sbx_run *r)
{
	struct runs_pool *p = runs->pool;
	struct sbx_run *m = NULL;
	int64_t now = sbx_mono_ms();

	if (!p)
		return r;
	pthread_mutex_lock(&p->mu);
	for (struct pool_member **pp = &p->ready; *pp && !m;) {
		struct pool_member *mb = *pp;
		struct pool_shape *sh = &p->shapes[mb->shape];
		bool dead;

		if (strcmp(mb->r->policy_digest, r->policy_digest) != 0) {
			pp = &mb->next;
			continue;
		}
		dead = !alive(mb->r);
		if (!dead && now < mb->expires) {
			m = mb->r;
			sh->claimed++;
			p->last_claim = now;
		} else {
			if (dead)
				fail_shape(p, mb->shape,
					   "a ready member's sandbox ended while it waited");
			if (!doom(p, mb->r)) {
				pp = &mb->next; /* left for the thread's next look */
				continue;
			}
		}
		*pp = mb->next;
		sh->ready--;
		publish_ready(p, mb->shape);
		free(mb);
	}
	/* The thread refills (or destroys what was found stale). */
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (!m)
		return r;
	adopt(m, r);
	run_unref(r);
	return m;
}

void pool_discard(struct sbx_run *m)
{
	struct runs_pool *p = m->runs->pool;
	bool handed;

	pthread_mutex_lock(&p->mu);
	handed = doom(p, m);
	pthread_mutex_unlock(&p->mu);
	if (!handed)
		destroy(m);
}

int pool_start_run(struct sbx_run *r, struct sbx_rpc_status *st)
{
	if (sbx_ctl_send_claim(r->ctl, &st->err) < 0) {
		sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		return sbx_rpc_prefix(st, "the warm pool's sandbox");
	}
	return 0;
}

int pool_health(struct sbx_runs *runs, bool operator_, Sbx__V1__HealthResponse *h)
{
	struct runs_pool *p = runs->pool;
	int rc = 0;

	if (!p || !p->n_shapes)
		return 0;
	pthread_mutex_lock(&p->mu);
	h->pool = calloc(p->n_shapes, sizeof(*h->pool));
	for (size_t i = 0; h->pool && i < p->n_shapes; i++) {
		const struct pool_shape *sh = &p->shapes[i];
		Sbx__V1__PoolShape *row = malloc(sizeof(*row));

		if (!row)
			break;
		sbx__v1__pool_shape__init(row);
		h->pool[i] = row;
		h->n_pool = i + 1;
		row->name = strdup(sh->name);
		row->shape_digest = strdup(sh->digest);
		/* The counts over time and the last error (which may name
		 * this host's ceilings) are operators': claimed would tell
		 * another identity, by timing, when others create runs. */
		row->error = strdup(operator_ ? sh->error : "");
		row->ready = sh->ready;
		row->size = sh->size;
		row->built = operator_ ? sh->built : 0;
		row->failed = operator_ ? sh->failed : 0;
		row->claimed = operator_ ? sh->claimed : 0;
		if (!row->name || !row->shape_digest || !row->error)
			break;
	}
	if (!h->pool || h->n_pool != p->n_shapes || !h->pool[h->n_pool - 1]->error)
		rc = -1;
	pthread_mutex_unlock(&p->mu);
	return rc;
}
