/* The run manager's registry and life cycle: the caps, lookups by owner,
 * draining, tearing everything down, and Health. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "runs.h"
#include "runs_internal.h"
#include "util.h"

#define DRAIN_WAIT_MS (RUN_READY_TIMEOUT_MS + 5000)

struct runs_settings runs_cfg;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv; /* creating dropped to 0 (CLOCK_MONOTONIC) */
static struct sbx_run *reg_head;
static unsigned reg_count; /* every registered run, visible or not */
static unsigned creating;  /* registered but not yet visible */
static bool draining;

/* ---- runs: allocation and references ---- */

struct sbx_run *run_alloc(void)
{
	struct sbx_run *r = calloc(1, sizeof(*r));
	pthread_condattr_t ca;

	if (!r)
		return NULL;
	atomic_init(&r->refs, 1);
	r->dir_fd = r->data_fd = r->spill_fd = -1;
	r->ctl = r->out_fd = r->err_pipe = r->wake = r->pidfd = -1;
	r->pid = -1;
	r->exec_tail = &r->execs;
	r->events_tail = &r->events;
	r->state = SBX__V1__RUN_STATE__CREATED;
	pthread_mutex_init(&r->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
	return r;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void run_free(struct sbx_run *r)
{
	struct run_exec *e, *next;

	if (!r)
		return;
	for (e = r->execs; e; e = next) {
		next = e->next;
		exec_free(e);
	}
	for (size_t i = 0; i < r->n_alerts; i++)
		free(r->alerts[i]);
	for (size_t i = 0; i < r->n_labels; i++) {
		free(r->label_keys[i]);
		free(r->label_values[i]);
	}
	free(r->label_keys);
	free(r->label_values);
	for (struct run_event *ev = r->events, *evn; ev; ev = evn) {
		evn = ev->next;
		json_decref(ev->fields);
		free(ev);
	}
	inputs_free(r);
	artifacts_forget(r);
	sbx_policy_free(r->policy);
	free(r->dir);
	free(r->data_path);
	close_fd(&r->dir_fd);
	close_fd(&r->data_fd);
	close_fd(&r->spill_fd);
	close_fd(&r->ctl);
	close_fd(&r->out_fd);
	close_fd(&r->err_pipe);
	close_fd(&r->wake);
	close_fd(&r->pidfd);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

void run_ref(struct sbx_run *r)
{
	atomic_fetch_add(&r->refs, 1);
}

void run_unref(struct sbx_run *r)
{
	if (r && atomic_fetch_sub(&r->refs, 1) == 1)
		run_free(r);
}

/* ---- the registry ---- */

static unsigned count_identity(const char *identity)
{
	unsigned n = 0;

	for (struct sbx_run *r = reg_head; r; r = r->next)
		n += strcmp(r->identity, identity) == 0;
	return n;
}

int run_register(struct sbx_run *r, struct sbx_rpc_status *st)
{
	int rc = 0;

	pthread_mutex_lock(&reg_mu);
	if (draining)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE,
				    "sbxd is draining: it takes no new runs");
	else if (reg_count >= runs_cfg.runs_max)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				    "this host already has %u runs, the maximum (runs_max); tear "
				    "one down first",
				    reg_count);
	else if (count_identity(r->identity) >= runs_cfg.runs_max_per_identity)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				    "%s already has %u runs, the maximum per identity "
				    "(runs_max_per_identity); tear one down first",
				    r->identity, runs_cfg.runs_max_per_identity);
	if (rc == 0) {
		r->next = reg_head;
		reg_head = r;
		reg_count++;
		creating++;
	}
	pthread_mutex_unlock(&reg_mu);
	return rc;
}

void run_publish(struct sbx_run *r)
{
	pthread_mutex_lock(&reg_mu);
	r->visible = true;
	creating--;
	pthread_cond_broadcast(&reg_cv);
	pthread_mutex_unlock(&reg_mu);
}

/* Drops the registry's reference: the run is gone for every caller. */
void run_unregister(struct sbx_run *r)
{
	pthread_mutex_lock(&reg_mu);
	for (struct sbx_run **p = &reg_head; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			reg_count--;
			if (!r->visible) {
				creating--;
				pthread_cond_broadcast(&reg_cv);
			}
			break;
		}
	pthread_mutex_unlock(&reg_mu);
	run_unref(r);
}

struct sbx_run *run_lookup(const struct sbx_identity *who, const char *id, struct sbx_rpc_status *st)
{
	struct sbx_run *found = NULL;

	if (!id)
		id = "";
	pthread_mutex_lock(&reg_mu);
	for (struct sbx_run *r = reg_head; r; r = r->next)
		if (r->visible && !r->tearing && strcmp(r->id, id) == 0 &&
		    strcmp(r->identity, who->name) == 0) {
			run_ref(r);
			found = r;
			break;
		}
	pthread_mutex_unlock(&reg_mu);
	if (!found)
		sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "run %.64s not found", id);
	return found;
}

int run_claim(struct sbx_run *r, struct sbx_rpc_status *st)
{
	int rc = 0;

	pthread_mutex_lock(&reg_mu);
	if (r->tearing)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "run %s not found", r->id);
	r->tearing = true;
	pthread_mutex_unlock(&reg_mu);
	return rc;
}

/* ---- ListRuns and Health read the registry ---- */

/* The caller's visible runs, each referenced, oldest first; *out is the
 * caller's to free (and each run to unref). */
size_t runs_of(const struct sbx_identity *who, struct sbx_run ***out)
{
	size_t n = 0, cap = 0;
	struct sbx_run **v = NULL;

	pthread_mutex_lock(&reg_mu);
	for (struct sbx_run *r = reg_head; r; r = r->next) {
		if (!r->visible || r->tearing || strcmp(r->identity, who->name) != 0)
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
	pthread_mutex_unlock(&reg_mu);
	for (size_t i = 0; i < n / 2; i++) {
		struct sbx_run *t = v[i];

		v[i] = v[n - 1 - i];
		v[n - 1 - i] = t;
	}
	*out = v;
	return n;
}

SBX_HANDLER(health, Sbx__V1__HealthRequest, Sbx__V1__HealthResponse)
{
	Sbx__V1__HealthResponse *h = malloc(sizeof(*h));
	unsigned active = 0;

	if (!h)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__health_response__init(h);
	pthread_mutex_lock(&reg_mu);
	for (struct sbx_run *r = reg_head; r; r = r->next)
		active += r->visible && !r->tearing;
	pthread_mutex_unlock(&reg_mu);
	h->version = xstrdup(SBX_VERSION);
	h->cgroup = xstrdup(runs_host.cgroup);
	h->identity = xstrdup(who->name);
	h->runs_active = active;
	h->runs_max = runs_cfg.runs_max;
	h->runs_max_per_identity = runs_cfg.runs_max_per_identity;
	h->userns = runs_host.userns;
	h->seccomp = runs_host.seccomp;
	if (!h->version || !h->cgroup || !h->identity) {
		sbx__v1__health_response__free_unpacked(h, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	*resp = h;
	return 0;
}

/* Intermediate: the manager's state still lives in this file's statics;
 * the restructure moves it in here. */
struct sbx_runs {
	bool started;
};
static struct sbx_runs the_runs;

struct sbx_runs *sbx_runs_init(const struct sbx_config *cfg, struct sbx_err *err)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&reg_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (runs_startup(cfg, err) < 0)
		return NULL;
	the_runs.started = true;
	return &the_runs;
}

void sbx_runs_stop_accepting(struct sbx_runs *runs)
{
	pthread_mutex_lock(&reg_mu);
	draining = true;
	pthread_mutex_unlock(&reg_mu);
}

static void *teardown_thread(void *arg)
{
	struct sbx_run *r = arg;
	struct sbx_rpc_status st;

	run_teardown(r, NULL, &st);
	return NULL;
}

void sbx_runs_teardown_all(struct sbx_runs *runs)
{
	struct sbx_run **v = NULL;
	pthread_t *tids = NULL;
	size_t n = 0;
	int64_t deadline = mono_ms() + DRAIN_WAIT_MS;

	pthread_mutex_lock(&reg_mu);
	draining = true;
	/* A CreateRun in flight ends within its Ready timeout; wait for it so
	 * its run is torn down too. */
	while (creating > 0 && mono_ms() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&reg_cv, &reg_mu, &ts);
	}
	v = calloc(reg_count ? reg_count : 1, sizeof(*v));
	tids = calloc(reg_count ? reg_count : 1, sizeof(*tids));
	for (struct sbx_run *r = reg_head; r && v && tids; r = r->next) {
		if (!r->visible || r->tearing)
			continue;
		r->tearing = true;
		run_ref(r);
		v[n++] = r;
	}
	pthread_mutex_unlock(&reg_mu);
	/* In parallel: each may wait seconds for its helper. */
	for (size_t i = 0; i < n; i++)
		if (pthread_create(&tids[i], NULL, teardown_thread, v[i]) != 0) {
			teardown_thread(v[i]);
			run_unref(v[i]);
			v[i] = NULL;
		}
	for (size_t i = 0; i < n; i++)
		if (v[i]) {
			pthread_join(tids[i], NULL);
			run_unref(v[i]);
		}
	free(v);
	free(tids);
}

void sbx_runs_shutdown(struct sbx_runs *runs)
{
	sbx_runs_teardown_all(runs);
	runs_settings_free();
	pthread_cond_destroy(&reg_cv);
}
