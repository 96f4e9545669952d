/* SPDX-License-Identifier: Apache-2.0 */
/* Several hosts: the host list (endpoints, SRV discovery re-resolved on
 * its TTL), Health cached per host, placement, and creates that go to
 * another host only when this one gave a definite refusal or cannot be
 * reached (sbxclient.h, "Several hosts"). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "client_internal.h"
#include "clock.h"
#include "fleet_internal.h"
#include "sleep.h"
#include "util.h"

#define FLEET_MAX_KNOWN	     (4 * SBX_FLEET_MAX_HOSTS)
#define FLEET_MAX_ENDPOINTS  SBX_FLEET_MAX_HOSTS
#define FLEET_BACKOFF_MAX_MS 60000
#define TIMEOUT_RETRIES	     3 /* one host's tries while it times out */
/* The pauses before asking again a host whose earlier attempt still runs. */
#define IN_PROGRESS_FIRST_MS 50
#define IN_PROGRESS_MAX_MS   1000
#define SRV_RETRY_MS	     5000
#define HEALTH_TIMEOUT_MS    5000

struct host {
	struct sbx_resolved r;
	sbx_client *client; /* opened at first use */
	bool listed;	    /* in the endpoints or the last SRV answer */
	bool have_health;
	char health_error[SBX_ERR_MAX / 2];
	int64_t health_at, excluded_until;
	uint32_t backoff_ms;
	struct sbx_host_load load;
	unsigned inflight, made; /* creates going on now; made since health_at */
};

struct sbx_fleet {
	pthread_mutex_t mu;
	struct sbx_client_opts copts;
	struct sbx_fleet_opts fo;
	char *endpoints[FLEET_MAX_ENDPOINTS];
	size_t n_endpoints;
	int64_t resolve_at; /* when the SRV answers expire; 0: no SRV endpoint */
	struct host *hosts[FLEET_MAX_KNOWN];
	size_t n_hosts;
	sbx_client *retired[FLEET_MAX_KNOWN]; /* of hosts that moved */
	size_t n_retired;
	char *tls_cert, *tls_key, *tls_ca, *tls_server_name, *token;
	/* sbx_fleet_set_interrupt's flag: every host client gets it, and the
	 * pauses of a create look at it. */
	volatile sig_atomic_t *interrupt;
};

/* ---- pure parts ---- */

int sbx_run_ref_parse(const char *handle, struct sbx_run_ref *ref, struct sbx_err *err)
{
	const char *at = strchr(handle, '@');
	size_t idlen = at ? (size_t)(at - handle) : strlen(handle);

	memset(ref, 0, sizeof(*ref));
	if (idlen == 0 || idlen >= sizeof(ref->run_id))
		return sbx_fail(err, "run %s: the run id must be 1..%zu bytes", handle,
				sizeof(ref->run_id) - 1);
	memcpy(ref->run_id, handle, idlen);
	if (at) {
		if (!at[1] || strlen(at + 1) >= sizeof(ref->host) || strchr(at + 1, '@'))
			return sbx_fail(err, "run %s: RUN_ID@HOST:PORT expected", handle);
		snprintf(ref->host, sizeof(ref->host), "%s", at + 1);
	}
	return 0;
}

static double frac(uint64_t used, uint64_t of)
{
	return of ? (double)used / (double)of : 0.0;
}

double sbx_placement_score(const struct sbx_host_load *l)
{
	uint32_t slots = l->run_slots_free < l->identity_run_slots_free
			     ? l->run_slots_free
			     : l->identity_run_slots_free;

	if (!l->serving || l->pending >= slots)
		return -1;
	/* Each pending create counts as one run of the host's average cost. */
	uint32_t used = l->runs_max > l->run_slots_free ? l->runs_max - l->run_slots_free : 0;
	double per_cpu = used ? (double)l->committed_cpu_millis / used : 0;
	double per_mem = used ? (double)l->committed_memory_mb / used : 0;
	double s = frac(used + l->pending + 1, l->runs_max);
	double cpu = l->allowed_cpu_millis
			 ? (l->committed_cpu_millis + per_cpu * l->pending) / l->allowed_cpu_millis
			 : 0;
	double mem = l->allowed_memory_mb
			 ? (l->committed_memory_mb + per_mem * l->pending) / l->allowed_memory_mb
			 : 0;
	if (cpu > s)
		s = cpu;
	if (mem > s)
		s = mem;
	return s;
}

/* ---- the host list ---- */

static void host_free(struct host *h)
{
	if (h)
		sbx_client_close(h->client);
	free(h);
}

void sbx_fleet_close(sbx_fleet *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n_hosts; i++)
		host_free(f->hosts[i]);
	for (size_t i = 0; i < f->n_retired; i++)
		sbx_client_close(f->retired[i]);
	sbx_endpoints_free(f->endpoints, f->n_endpoints);
	if (f->token)
		explicit_bzero(f->token, strlen(f->token));
	free(f->token);
	free(f->tls_cert);
	free(f->tls_key);
	free(f->tls_ca);
	free(f->tls_server_name);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

static void fleet_closep(sbx_fleet **f)
{
	sbx_fleet_close(*f);
}

static struct host *find_host(sbx_fleet *f, const char *name)
{
	for (size_t i = 0; i < f->n_hosts; i++)
		if (!strcmp(f->hosts[i]->r.name, name))
			return f->hosts[i];
	return NULL;
}

/* Adds (or updates the address of) a host, with f->mu held. */
static struct host *add_host(sbx_fleet *f, const struct sbx_resolved *r, struct sbx_err *err)
{
	struct host *h = find_host(f, r->name);

	if (h) {
		if (strcmp(h->r.url, r->url) || strcmp(h->r.server_name, r->server_name)) {
			/* Moved to another address: a new client for it. The old one
			 * may be in a caller's hands (sbx_fleet_client's): it stays
			 * open until sbx_fleet_close. */
			if (h->client && f->n_retired < FLEET_MAX_KNOWN)
				f->retired[f->n_retired++] = h->client;
			else
				sbx_client_close(h->client);
			h->client = NULL;
			h->r = *r;
		}
		h->listed = true;
		return h;
	}
	if (f->n_hosts >= FLEET_MAX_KNOWN) {
		sbx_fail(err, "more than %d hosts known", FLEET_MAX_KNOWN);
		return NULL;
	}
	if (!(h = calloc(1, sizeof(*h)))) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	h->r = *r;
	h->listed = true;
	f->hosts[f->n_hosts++] = h;
	return h;
}

static void resolved_of_url(const char *url, struct sbx_resolved *r)
{
	memset(r, 0, sizeof(*r));
	sbx_host_name_of(url, r->name, sizeof(r->name));
	snprintf(r->url, sizeof(r->url), "%s", url);
}

/* Looks the SRV endpoints up again when their TTL has passed, with f->mu
 * held. A failed lookup keeps the hosts of the last answer (and tries
 * again after SRV_RETRY_MS); with none yet, it is the error. */
static int refresh_locked(sbx_fleet *f, struct sbx_err *err)
{
	int64_t now = sbx_mono_ms();
	bool any_ok = false, had = false;
	uint32_t ttl_min = UINT32_MAX;
	struct sbx_err last = {0};

	if (!f->resolve_at || now < f->resolve_at)
		return 0;
	for (size_t i = 0; i < f->n_hosts; i++) {
		had = had || f->hosts[i]->listed;
		if (f->hosts[i]->r.server_name[0]) /* SRV's; plain URLs stay listed */
			f->hosts[i]->listed = false;
	}
	for (size_t i = 0; i < f->n_endpoints; i++) {
		if (strncmp(f->endpoints[i], SBX_SRV_SCHEME, strlen(SBX_SRV_SCHEME)))
			continue;
		struct sbx_resolved rs[SBX_FLEET_MAX_HOSTS];
		size_t n = 0;
		uint32_t ttl;
		if (sbx_srv_resolve(f->endpoints[i], rs, SBX_ARRAY_SIZE(rs), &n, &ttl, &last) < 0)
			continue;
		any_ok = true;
		ttl_min = ttl < ttl_min ? ttl : ttl_min;
		for (size_t j = 0; j < n; j++)
			if (!add_host(f, &rs[j], err))
				return -1;
	}
	if (!any_ok) {
		for (size_t i = 0; i < f->n_hosts; i++)
			if (f->hosts[i]->r.server_name[0])
				f->hosts[i]->listed = had;
		f->resolve_at = now + SRV_RETRY_MS;
		if (!had) {
			*err = last;
			return -1;
		}
		return 0;
	}
	f->resolve_at = now + 1000 * (int64_t)(ttl_min < 1 ? 1 : ttl_min > 3600 ? 3600 : ttl_min);
	return 0;
}

static char *dup_opt(const char *s, bool *oom)
{
	char *d = s ? strdup(s) : NULL;

	if (s && !d)
		*oom = true;
	return d;
}

sbx_fleet *sbx_fleet_open(const char *const *endpoints, size_t n,
			  const struct sbx_client_opts *opts, const struct sbx_fleet_opts *fo,
			  struct sbx_err *err)
{
	static const struct sbx_client_opts none;
	bool oom = false;

	if (!opts)
		opts = &none;
	_cleanup_(fleet_closep) sbx_fleet *f = calloc(1, sizeof(*f));
	if (!f) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&f->mu, NULL);
	f->copts = *opts;
	f->copts.tls_cert = f->tls_cert = dup_opt(opts->tls_cert, &oom);
	f->copts.tls_key = f->tls_key = dup_opt(opts->tls_key, &oom);
	f->copts.tls_ca = f->tls_ca = dup_opt(opts->tls_ca, &oom);
	f->copts.tls_server_name = f->tls_server_name = dup_opt(opts->tls_server_name, &oom);
	f->copts.token = f->token = dup_opt(opts->token, &oom);
	if (oom) {
		sbx_fail(err, "out of memory");
		return NULL;
	}
	if (fo)
		f->fo = *fo;
	f->fo.sample = f->fo.sample ? f->fo.sample : SBX_FLEET_DEFAULT_SAMPLE;
	f->fo.attempts = f->fo.attempts ? f->fo.attempts : SBX_FLEET_DEFAULT_ATTEMPTS;
	f->fo.health_ttl_ms =
	    f->fo.health_ttl_ms ? f->fo.health_ttl_ms : SBX_FLEET_DEFAULT_HEALTH_TTL_MS;
	f->fo.backoff_ms = f->fo.backoff_ms ? f->fo.backoff_ms : SBX_FLEET_DEFAULT_BACKOFF_MS;
	for (size_t i = 0; i < n; i++)
		if (sbx_endpoints_split(endpoints[i], f->endpoints, FLEET_MAX_ENDPOINTS,
					&f->n_endpoints, err) < 0)
			return NULL;
	if (!f->n_endpoints) {
		sbx_fail(err, "no endpoint");
		return NULL;
	}
	for (size_t i = 0; i < f->n_endpoints; i++) {
		struct sbx_resolved r;
		if (!strncmp(f->endpoints[i], SBX_SRV_SCHEME, strlen(SBX_SRV_SCHEME))) {
			f->resolve_at = 1; /* at first use */
			continue;
		}
		resolved_of_url(f->endpoints[i], &r);
		if (!add_host(f, &r, err))
			return NULL;
	}
	return sbx_steal_ptr(f);
}

/* A new client of h (its own connection, dialed at its first call), with
 * f->mu held. */
static sbx_client *open_host_client(sbx_fleet *f, struct host *h, struct sbx_rpc_status *st)
{
	struct sbx_client_opts o = f->copts;
	sbx_client *c;

	o.endpoint = h->r.url;
	if (h->r.server_name[0] && !f->copts.tls_server_name)
		o.tls_server_name = h->r.server_name;
	if (!(c = sbx_client_open(&o, &st->err))) {
		sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
		sbx_rpc_prefix(st, "host %s", h->r.name);
	} else if (f->interrupt) {
		sbx_client_set_interrupt(c, f->interrupt);
	}
	return c;
}

void sbx_fleet_set_interrupt(sbx_fleet *f, volatile sig_atomic_t *flag)
{
	pthread_mutex_lock(&f->mu);
	f->interrupt = flag;
	for (size_t i = 0; i < f->n_hosts; i++)
		if (f->hosts[i]->client)
			sbx_client_set_interrupt(f->hosts[i]->client, flag);
	pthread_mutex_unlock(&f->mu);
}

/* Sleeps ms unless the fleet's interrupt flag is set meanwhile; false then. */
static bool pause_unless_interrupted(sbx_fleet *f, unsigned ms)
{
	pthread_mutex_lock(&f->mu);
	volatile sig_atomic_t *flag = f->interrupt;
	pthread_mutex_unlock(&f->mu);

	for (unsigned slept = 0; slept < ms; slept += 20) {
		if (flag && *flag)
			return false;
		sbx_sleep_ms(ms - slept < 20 ? ms - slept : 20);
	}
	return !(flag && *flag);
}

static void client_closep(sbx_client **c)
{
	sbx_client_close(*c);
}

/* The host's client, opened now if need be, with f->mu held. */
static sbx_client *host_client(sbx_fleet *f, struct host *h, struct sbx_rpc_status *st)
{
	if (!h->client)
		h->client = open_host_client(f, h, st);
	return h->client;
}

sbx_client *sbx_fleet_client(sbx_fleet *f, const char *host, struct sbx_rpc_status *st)
{
	struct sbx_resolved r;
	sbx_client *c = NULL;

	pthread_mutex_lock(&f->mu);
	struct host *h = find_host(f, host);
	if (!h) {
		/* Not known yet: maybe a target of the SRV records, to be
		 * dialed at its address. A known host's calls do not wait on
		 * DNS (a silent server costs a lookup's timeout). */
		(void)refresh_locked(f, &st->err); /* failed: the hosts known so far */
		h = find_host(f, host);
	}
	if (!h) {
		char url[SBX_HOST_MAX + 16];
		snprintf(url, sizeof(url), "%s%s", strstr(host, "://") ? "" : "tls+tcp://", host);
		resolved_of_url(url, &r);
		snprintf(r.name, sizeof(r.name), "%s", host);
		if (sbx_endpoint_check(url, &st->err) < 0 || !(h = add_host(f, &r, &st->err)))
			sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
		else
			h->listed = false; /* reached by a handle, not placed on */
	}
	if (h)
		c = host_client(f, h, st);
	pthread_mutex_unlock(&f->mu);
	return c;
}

bool sbx_fleet_owns(sbx_fleet *f, const sbx_client *c)
{
	bool owns = false;

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->n_hosts && !owns; i++)
		owns = f->hosts[i]->client == c;
	for (size_t i = 0; i < f->n_retired && !owns; i++)
		owns = f->retired[i] == c;
	pthread_mutex_unlock(&f->mu);
	return owns;
}

size_t sbx_fleet_hosts(sbx_fleet *f, const char **names, size_t max, struct sbx_rpc_status *st)
{
	size_t n = 0;

	sbx_rpc_ok(st);
	pthread_mutex_lock(&f->mu);
	if (refresh_locked(f, &st->err) < 0)
		sbx_rpc_code(st, SBX__V1__CODE__UNAVAILABLE);
	for (size_t i = 0; i < f->n_hosts && n < max; i++)
		if (f->hosts[i]->listed)
			names[n++] = f->hosts[i]->r.name;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* ---- health and placement ---- */

static void exclude(sbx_fleet *f, struct host *h)
{
	h->backoff_ms = h->backoff_ms ? h->backoff_ms * 2 : f->fo.backoff_ms;
	if (h->backoff_ms > FLEET_BACKOFF_MAX_MS)
		h->backoff_ms = FLEET_BACKOFF_MAX_MS;
	h->excluded_until = sbx_mono_ms() + h->backoff_ms;
	h->have_health = false;
}

/* Makes h's cached Health fresh, with f->mu held (released for the call).
 * false: the host could not be asked (and is excluded for a while). */
static bool fresh_health(sbx_fleet *f, struct host *h)
{
	Sbx__V1__HealthRequest req = SBX__V1__HEALTH_REQUEST__INIT;
	struct sbx_call_opts o = {.timeout_ms = HEALTH_TIMEOUT_MS};
	struct sbx_rpc_status st;
	ProtobufCMessage *m = NULL;

	if (h->have_health && sbx_mono_ms() - h->health_at < f->fo.health_ttl_ms)
		return true;
	sbx_client *c = host_client(f, h, &st);
	if (!c) {
		snprintf(h->health_error, sizeof(h->health_error), "%.*s",
			 (int)sizeof(h->health_error) - 1, st.err.msg);
		exclude(f, h);
		return false;
	}
	pthread_mutex_unlock(&f->mu);
	int rc = sbx_client_call_opts(c, SBX_METHOD_PREFIX "Health", &req.base,
				      &sbx__v1__health_response__descriptor, &m, &o, &st);
	pthread_mutex_lock(&f->mu);
	if (rc < 0) {
		snprintf(h->health_error, sizeof(h->health_error), "%s: %.*s",
			 sbx_code_name(st.code), (int)sizeof(h->health_error) - 40, st.err.msg);
		if (st.code == SBX__V1__CODE__UNAVAILABLE ||
		    st.code == SBX__V1__CODE__DEADLINE_EXCEEDED)
			exclude(f, h);
		return false;
	}
	Sbx__V1__HealthResponse *r = (Sbx__V1__HealthResponse *)m;
	h->load = (struct sbx_host_load){
	    .serving = r->state == SBX__V1__SERVING_STATE__SERVING,
	    .committed_cpu_millis = r->committed_cpu_millis,
	    .allowed_cpu_millis = r->allowed_cpu_millis,
	    .committed_memory_mb = r->committed_memory_mb,
	    .allowed_memory_mb = r->allowed_memory_mb,
	    .runs_max = r->runs_max,
	    .run_slots_free = r->run_slots_free,
	    .identity_run_slots_free = r->identity_run_slots_free,
	};
	protobuf_c_message_free_unpacked(m, NULL);
	snprintf(h->health_error, sizeof(h->health_error), "%s", h->load.serving ? "" : "draining");
	h->have_health = true;
	h->health_at = sbx_mono_ms();
	h->made = 0;
	h->backoff_ms = 0;
	return true;
}

static unsigned rand_below(unsigned n)
{
	unsigned v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (unsigned)sbx_mono_ms();
	return n ? v % n : 0;
}

/* Appends "[; ]a: b" to a bounded summary (cut where it ends). */
static void note(char *buf, size_t size, const char *a, const char *b)
{
	size_t len = strlen(buf);

	if (len + 3 >= size)
		return;
	snprintf(buf + len, size - len, "%s%.*s: %.*s", len ? "; " : "", 200, a, 300, b);
}

/* Chooses the host for the next attempt, with f->mu held: up to `sample`
 * SERVING hosts, picked at random among those not excluded and, while
 * there are any, not tried yet by this create; the least full. NULL when
 * none serves (why in `why`). */
static struct host *place(sbx_fleet *f, const bool *tried, char *why, size_t why_size)
{
	struct host *cand[FLEET_MAX_KNOWN];
	size_t n = 0, found = 0;
	struct host *best = NULL;
	double best_score = 0;
	int64_t now = sbx_mono_ms();

	for (int pass = 0; pass < 2 && !best; pass++) {
		n = 0;
		for (size_t i = 0; i < f->n_hosts; i++)
			if (f->hosts[i]->listed && now >= f->hosts[i]->excluded_until &&
			    (pass == 1 || !tried[i]))
				cand[n++] = f->hosts[i];
		/* Fisher-Yates: the sample is a random one. */
		for (size_t i = n; i > 1; i--) {
			size_t j = rand_below((unsigned)i);
			struct host *t = cand[i - 1];
			cand[i - 1] = cand[j];
			cand[j] = t;
		}
		found = 0;
		for (size_t i = 0; i < n && found < f->fo.sample; i++) {
			struct host *h = cand[i];
			if (!fresh_health(f, h) || !h->load.serving) {
				note(why, why_size, h->r.name,
				     h->health_error[0] ? h->health_error : "not serving");
				continue;
			}
			found++;
			struct sbx_host_load l = h->load;
			l.pending = h->inflight + h->made;
			double s = sbx_placement_score(&l);
			if (s < 0)
				s = 1e9; /* looks full: only if nothing else; sbxd decides */
			if (!best || s < best_score) {
				best = h;
				best_score = s;
			}
		}
	}
	return best;
}

static size_t host_index(sbx_fleet *f, struct host *h)
{
	for (size_t i = 0; i < f->n_hosts; i++)
		if (f->hosts[i] == h)
			return i;
	return 0;
}

/* An earlier attempt of the create ran or runs on the host that said so:
 * only that host may be asked again. */
static bool in_progress_there(const struct sbx_rpc_status *st)
{
	return st->code == SBX__V1__CODE__UNAVAILABLE && st->in_progress;
}

/* A refusal that another host may not give: try elsewhere, keep this one. */
static bool refused_for_now(const struct sbx_rpc_status *st)
{
	return st->code == SBX__V1__CODE__RESOURCE_EXHAUSTED ||
	       (st->code == SBX__V1__CODE__UNAVAILABLE && strstr(st->err.msg, "draining"));
}

/* CreateRun on h, one request id (its tries are one call to sbxd) and the
 * request's idempotency key, until h answers, cannot be connected
 * (UNAVAILABLE: unreachable, only then another host), or TIMEOUT_RETRIES
 * more tries timed out. After a timeout the tries go on a connection of
 * their own, not behind the one the network may have left stuck (a reply
 * lost in a partition, TCP backing off its retransmissions). An answer
 * that an earlier attempt ran or runs there (in_progress) is asked again,
 * backing off, until four call timeouts have passed: that host may yet
 * make the run, so its answer is waited for, and never sought elsewhere.
 * (A refusal is taken at its word: a resend whose first ran there is
 * parked, replayed or answered in_progress by sbxd; calls.md says where
 * that cannot hold.) */
static int create_on_host(sbx_fleet *f, struct host *h, sbx_client *c,
			  const Sbx__V1__CreateRunRequest *req, ProtobufCMessage **m,
			  struct sbx_rpc_status *st)
{
	char rid[33];
	struct sbx_call_opts o = {.request_id = rid};
	_cleanup_(client_closep) sbx_client *fresh = NULL;
	uint32_t call_ms = f->copts.timeout_ms ? f->copts.timeout_ms : SBX_DEFAULT_TIMEOUT_MS;
	int64_t give_up = sbx_mono_ms() + (int64_t)call_ms * (TIMEOUT_RETRIES + 1);
	unsigned pause = IN_PROGRESS_FIRST_MS;

	if (sbx_request_id(rid, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	for (int t = 0;;) {
		if (sbx_client_call_opts(fresh ? fresh : c, SBX_METHOD_PREFIX "CreateRun",
					 &req->base, &sbx__v1__create_run_response__descriptor, m,
					 &o, st) == 0)
			return 0;
		if (in_progress_there(st)) {
			if (sbx_mono_ms() + pause > give_up)
				return -1;
			if (!pause_unless_interrupted(f, pause))
				return sbx_rpc_fail(st, SBX__V1__CODE__CANCELLED, "interrupted");
			pause = pause * 2 < IN_PROGRESS_MAX_MS ? pause * 2 : IN_PROGRESS_MAX_MS;
			continue;
		}
		if (st->code != SBX__V1__CODE__DEADLINE_EXCEEDED || t++ == TIMEOUT_RETRIES)
			return -1;
		if (!fresh) {
			struct sbx_rpc_status ost;
			pthread_mutex_lock(&f->mu);
			fresh = open_host_client(f, h, &ost);
			pthread_mutex_unlock(&f->mu);
			if (!fresh)
				return -1; /* st: the timeout */
		}
	}
}

Sbx__V1__CreateRunResponse *sbx_fleet_create_run(sbx_fleet *f, const Sbx__V1__CreateRunRequest *req,
						 struct sbx_run_ref *ref, struct sbx_rpc_status *st)
{
	Sbx__V1__CreateRunRequest copy = *req;
	char key[33], why[SBX_ERR_MAX / 2] = "", tries[SBX_ERR_MAX / 2] = "";
	bool tried[FLEET_MAX_KNOWN] = {false};
	bool any_exhausted = false;
	Sbx__V1__Code last = SBX__V1__CODE__UNAVAILABLE;

	memset(ref, 0, sizeof(*ref));
	if (!copy.idempotency_key || !*copy.idempotency_key) {
		if (sbx_request_id(key, &st->err) < 0) {
			sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
			return NULL;
		}
		copy.idempotency_key = key;
	}
	pthread_mutex_lock(&f->mu);
	if (refresh_locked(f, &st->err) < 0) {
		pthread_mutex_unlock(&f->mu);
		sbx_rpc_code(st, SBX__V1__CODE__UNAVAILABLE);
		sbx_rpc_prefix(st, "CreateRun: discovery");
		return NULL;
	}
	for (unsigned attempt = 0; attempt < f->fo.attempts; attempt++) {
		struct host *h = place(f, tried, why, sizeof(why));
		if (!h)
			break;
		tried[host_index(f, h)] = true;
		sbx_client *c = host_client(f, h, st);
		if (!c)
			break;
		h->inflight++;
		pthread_mutex_unlock(&f->mu);
		ProtobufCMessage *m = NULL;
		int rc = create_on_host(f, h, c, &copy, &m, st);
		pthread_mutex_lock(&f->mu);
		h->inflight--;
		if (rc == 0) {
			h->made++;
			pthread_mutex_unlock(&f->mu);
			Sbx__V1__CreateRunResponse *r = (Sbx__V1__CreateRunResponse *)m;
			snprintf(ref->run_id, sizeof(ref->run_id), "%s", r->run_id);
			snprintf(ref->host, sizeof(ref->host), "%s", h->r.name);
			return r;
		}
		char what[SBX_ERR_MAX / 4];
		snprintf(what, sizeof(what), "%s: %.*s", sbx_code_name(st->code),
			 (int)sizeof(what) - 40, st->err.msg);
		note(tries, sizeof(tries), h->r.name, what);
		last = st->code;
		if (in_progress_there(st)) {
			/* h may still make the run: another host could make a
			 * second one. The caller may retry there with the key;
			 * the next creates go elsewhere for a while. */
			exclude(f, h);
			pthread_mutex_unlock(&f->mu);
			sbx_rpc_prefix(st,
				       "CreateRun on %s, still in progress there with "
				       "idempotency_key %s (not tried on another host, where it "
				       "could make a second run)",
				       h->r.name, copy.idempotency_key);
			return NULL;
		}
		if (refused_for_now(st)) {
			any_exhausted =
			    any_exhausted || st->code == SBX__V1__CODE__RESOURCE_EXHAUSTED;
			h->have_health = false; /* ask again before placing there */
		} else if (st->code == SBX__V1__CODE__UNAVAILABLE ||
			   st->code == SBX__V1__CODE__DEADLINE_EXCEEDED) {
			exclude(f, h);
		} else {
			/* A definite answer about the request (INVALID_ARGUMENT,
			 * PERMISSION_DENIED...): every host would say it. An
			 * interrupt names the key: h may still make the run. */
			pthread_mutex_unlock(&f->mu);
			if (st->code == SBX__V1__CODE__CANCELLED)
				sbx_rpc_prefix(st, "CreateRun on %s (idempotency_key %s)",
					       h->r.name, copy.idempotency_key);
			else
				sbx_rpc_prefix(st, "CreateRun on %s", h->r.name);
			return NULL;
		}
	}
	pthread_mutex_unlock(&f->mu);
	if (!tries[0])
		sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE, "CreateRun: no host is serving (%s)",
			     why[0] ? why : "none listed");
	else
		sbx_rpc_fail(st, any_exhausted ? SBX__V1__CODE__RESOURCE_EXHAUSTED : last,
			     "CreateRun: no host took the run: %s%s%s", tries,
			     why[0] ? "; not tried: " : "", why);
	return NULL;
}
