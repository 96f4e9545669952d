/* SPDX-License-Identifier: Apache-2.0 */
/* Health, Status and ListRuns, and the response pieces that describe a run
 * (also used by CreateRun, Wait and Teardown). Every member of a response is malloc'd: the
 * RPC layer frees it with the message's free_unpacked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "host_files.h"
#include "images.h"
#include "metrics.h"
#include "run_files.h"
#include "runs_artifacts.h"
#include "runs_egress.h"
#include "runs_manager.h"
#include "runs_operator.h"
#include "runs_output.h"
#include "runs_pool.h"
#include "runs_registry.h"
#include "runs_status.h"
#include "util.h"

#define HEALTH_IMAGES_MAX 256

char *xstrdup(const char *s)
{
	return strdup(s ? s : "");
}

size_t egress_reply_bytes(const struct sbx_runs *runs)
{
	return artifacts_reply_bytes(runs) / 8;
}

Sbx__V1__Policy *policy_copy(const SbxPolicy *p)
{
	size_t len = sbx__v1__policy__get_packed_size(p);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);

	if (!buf)
		return NULL;
	sbx__v1__policy__pack(p, buf);
	/* Unpacked with the default allocator: freed by free_unpacked. */
	return sbx__v1__policy__unpack(NULL, len, buf);
}

/* The env the exec's request set, as EnvVar entries. */
static int exec_status_env(Sbx__V1__ExecStatus *s, const struct run_exec *e)
{
	s->env = calloc(e->n_env ? e->n_env : 1, sizeof(*s->env));
	if (!s->env)
		return -1;
	for (size_t i = 0; i < e->n_env; i++) {
		const char *eq = strchr(e->env[i], '=');
		Sbx__V1__EnvVar *v = malloc(sizeof(*v));

		if (!v)
			return -1;
		sbx__v1__env_var__init(v);
		s->env[s->n_env++] = v;
		v->name = strndup(e->env[i], eq ? (size_t)(eq - e->env[i]) : strlen(e->env[i]));
		v->value = strdup(eq ? eq + 1 : "");
		if (!v->name || !v->value)
			return -1;
	}
	return 0;
}

Sbx__V1__ExecStatus *exec_status_new(struct run_exec *e)
{
	Sbx__V1__ExecStatus *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	sbx__v1__exec_status__init(s);
	if (asprintf(&s->exec_id, "exec-%llu", (unsigned long long)e->num) < 0) {
		free(s);
		return NULL;
	}
	s->argv = calloc(e->argc ? e->argc : 1, sizeof(char *));
	if (!s->argv)
		goto oom;
	for (size_t i = 0; i < e->argc; i++) {
		if (!(s->argv[i] = strdup(e->argv[i])))
			goto oom;
		s->n_argv = i + 1;
	}
	s->reason = e->ended ? e->reason : SBX__V1__EXIT_REASON__RUNNING;
	s->exit_code = e->exit_code;
	s->signal = e->signal;
	s->started_unix_ms = e->started_ms;
	s->ended_unix_ms = e->ended ? e->ended_ms : 0;
	s->cpu_ms = e->cpu_ms;
	s->peak_memory_bytes = e->peak_memory_bytes;
	s->stdout_bytes = e->out[RUN_STDOUT].total;
	s->stderr_bytes = e->out[RUN_STDERR].total;
	s->stdout_truncated = e->out[RUN_STDOUT].truncated;
	s->stderr_truncated = e->out[RUN_STDERR].truncated;
	if (e->message && !(s->message = strdup(e->message)))
		goto oom;
	s->network_denied_attempts = e->denied_attempts;
	if (e->n_denied_names &&
	    !(s->network_denied_names = calloc(e->n_denied_names, sizeof(char *))))
		goto oom;
	for (size_t i = 0; i < e->n_denied_names; i++) {
		if (!(s->network_denied_names[i] = strdup(e->denied_names[i])))
			goto oom;
		s->n_network_denied_names = i + 1;
	}
	if ((e->out[RUN_STDOUT].cut[0] && !(s->stdout_cut = strdup(e->out[RUN_STDOUT].cut))) ||
	    (e->out[RUN_STDERR].cut[0] && !(s->stderr_cut = strdup(e->out[RUN_STDERR].cut))))
		goto oom;
	s->stdout_dropped = stream_dropped(&e->out[RUN_STDOUT]);
	s->stderr_dropped = stream_dropped(&e->out[RUN_STDERR]);
	s->timeout_seconds = e->timeout_seconds;
	if (e->cwd && !(s->cwd = strdup(e->cwd)))
		goto oom;
	if (exec_status_env(s, e) < 0)
		goto oom;
	return s;
oom:
	sbx__v1__exec_status__free_unpacked(s, NULL);
	return NULL;
}

/* At least what a repeated message field's element takes on the wire (tag,
 * length, body; the length counted as one byte), so that trimming by it
 * never leaves more than it thinks. */
static size_t element_len(const ProtobufCMessage *m)
{
	return 2 + protobuf_c_message_get_packed_size(m);
}

size_t exec_records_fit(const ProtobufCMessage *whole, Sbx__V1__ExecStatus ***execs, size_t *n,
			size_t budget, uint32_t *not_listed)
{
	Sbx__V1__ExecStatus **e = *execs;
	size_t total = protobuf_c_message_get_packed_size(whole);
	size_t lo, hi;

	if (total <= budget || *n == 0)
		return total;
	/* Drop e[lo..hi) growing outwards from the middle. */
	lo = hi = *n / 2;
	while (total > budget && (lo > 1 || hi + 1 < *n)) {
		if (hi + 1 < *n && (lo <= 1 || hi - *n / 2 <= *n / 2 - lo)) {
			total -= element_len(&e[hi]->base);
			hi++;
		} else {
			lo--;
			total -= element_len(&e[lo]->base);
		}
	}
	/* Then the last and the first, when even they do not fit beside the
	 * rest of the answer (a record holds up to ~34 KiB of argv, env, cwd
	 * and denied names; the answer may take 32 KiB): an answer that
	 * lists fewer execs, never one sbxd cannot send. */
	if (total > budget && hi < *n) {
		total -= element_len(&e[hi]->base);
		hi++;
	}
	if (total > budget && lo > 0) {
		lo--;
		total -= element_len(&e[lo]->base);
	}
	for (size_t i = lo; i < hi; i++)
		sbx__v1__exec_status__free_unpacked(e[i], NULL);
	memmove(e + lo, e + hi, (*n - hi) * sizeof(*e));
	*n -= hi - lo;
	*not_listed = (uint32_t)(hi - lo);
	return protobuf_c_message_get_packed_size(whole);
}

/* mu held. */
static int all_exec_status(struct sbx_run *r, Sbx__V1__ExecStatus ***out, size_t *n) REQUIRES(r->mu)
{
	size_t count = 0;

	for (struct run_exec *e = r->execs; e; e = e->next)
		count++;
	*n = 0;
	*out = calloc(count ? count : 1, sizeof(**out));
	if (!*out)
		return -1;
	for (struct run_exec *e = r->execs; e; e = e->next) {
		if (!((*out)[*n] = exec_status_new(e)))
			return -1;
		(*n)++;
	}
	return 0;
}

/* The three map types of labels share their layout but not their type. */
#define COPY_LABELS(r, msg, entry_t, entry_init)                                                   \
	({                                                                                         \
		int _rc = 0;                                                                       \
		(msg)->labels = calloc((r)->n_labels ? (r)->n_labels : 1, sizeof(entry_t *));      \
		if (!(msg)->labels)                                                                \
			_rc = -1;                                                                  \
		for (size_t _i = 0; _rc == 0 && _i < (r)->n_labels; _i++) {                        \
			entry_t *_e = malloc(sizeof(*_e));                                         \
			if (!_e) {                                                                 \
				_rc = -1;                                                          \
				break;                                                             \
			}                                                                          \
			entry_init(_e);                                                            \
			(msg)->labels[_i] = _e;                                                    \
			(msg)->n_labels = _i + 1;                                                  \
			_e->key = strdup((r)->label_keys[_i]);                                     \
			_e->value = strdup((r)->label_values[_i]);                                 \
			if (!_e->key || !_e->value)                                                \
				_rc = -1;                                                          \
		}                                                                                  \
		_rc;                                                                               \
	})

static int fill_status(struct sbx_run *r, Sbx__V1__StatusResponse *s)
{
	struct sbx_err err;

	if (!(s->run_id = xstrdup(r->id)) || !(s->policy_digest = xstrdup(r->policy_digest)) ||
	    !(s->image_digest = xstrdup(r->image_digest)) || !(s->policy = policy_copy(r->policy)))
		return -1;
	s->created_unix_ms = r->created_ms;
	s->launch = r->launch;
	s->deadline_unix_ms = r->deadline_ms;
	if (COPY_LABELS(r, s, Sbx__V1__StatusResponse__LabelsEntry,
			sbx__v1__status_response__labels_entry__init) < 0)
		return -1;

	run_lock(r);
	s->state = run_state_public(r);
	int rc = all_exec_status(r, &s->execs, &s->n_execs);
	size_t n = r->n_alerts + (r->alerts_dropped ? 1 : 0);

	if (rc == 0 && !(s->alerts = calloc(n ? n : 1, sizeof(char *))))
		rc = -1;
	for (size_t i = 0; rc == 0 && i < r->n_alerts; i++) {
		if (!(s->alerts[i] = strdup(r->alerts[i])))
			rc = -1;
		else
			s->n_alerts = i + 1;
	}
	if (rc == 0 && r->alerts_dropped) {
		if (asprintf(&s->alerts[s->n_alerts], "sbxd: %llu more alerts were dropped",
			     (unsigned long long)r->alerts_dropped) < 0)
			rc = -1;
		else
			s->n_alerts++;
	}
	run_unlock(r);
	/* Records, destinations and egress alerts: the proxy's, asked
	 * outside the run's lock (runs_egress.h), in their share of the answer. */
	if (rc == 0 && r->egress &&
	    runs_egress_status(r->egress, s, 2 * egress_reply_bytes(r->runs), &err) < 0)
		rc = -1;
	/* The execs take what is left of the answer, as the manifest's do. */
	if (rc == 0)
		exec_records_fit(&s->base, &s->execs, &s->n_execs, artifacts_reply_bytes(r->runs),
				 &s->execs_not_listed);
	return rc;
}

SBX_HANDLER(status, Sbx__V1__StatusRequest, Sbx__V1__StatusResponse)
{
	struct sbx_run *r = run_lookup_operator(runs, who, req->run_id, st);
	Sbx__V1__StatusResponse *s;
	int rc;

	if (!r)
		return -1;
	operator_audit(who, r, "status", false);
	s = malloc(sizeof(*s));
	if (!s) {
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	sbx__v1__status_response__init(s);
	rc = fill_status(r, s);
	run_unref(r);
	if (rc < 0) {
		sbx__v1__status_response__free_unpacked(s, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	*resp = s;
	return 0;
}

static Sbx__V1__RunSummary *summary_new(struct sbx_run *r)
{
	Sbx__V1__RunSummary *s = malloc(sizeof(*s));

	if (!s)
		return NULL;
	sbx__v1__run_summary__init(s);
	s->created_unix_ms = r->created_ms;
	s->launch = r->launch;
	s->age_ms = sbx_unix_ms() - r->created_ms;
	run_lock(r);
	s->state = run_state_public(r);
	s->execs = (uint32_t)r->n_execs;
	s->execs_running = r->running;
	/* The helper's word on each ended exec (ExecStatus): sbxd does not
	 * read the run's cgroup, whose path only the helper knows. */
	for (const struct run_exec *e = r->execs; e; e = e->next)
		if (e->ended) {
			s->cpu_ms += e->cpu_ms;
			if (e->peak_memory_bytes > s->peak_memory_bytes)
				s->peak_memory_bytes = e->peak_memory_bytes;
		}
	run_unlock(r);
	if (!(s->run_id = xstrdup(r->id)) || !(s->policy_digest = xstrdup(r->policy_digest)) ||
	    !(s->owner = xstrdup(r->identity)) ||
	    COPY_LABELS(r, s, Sbx__V1__RunSummary__LabelsEntry,
			sbx__v1__run_summary__labels_entry__init) < 0) {
		sbx__v1__run_summary__free_unpacked(s, NULL);
		return NULL;
	}
	return s;
}

SBX_HANDLER(list_runs, Sbx__V1__ListRunsRequest, Sbx__V1__ListRunsResponse)
{
	Sbx__V1__ListRunsResponse *l;
	struct sbx_run **v = NULL;
	size_t n;
	int rc;

	if (req->all && !who->operator)
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "ListRuns.all: %s is not an operator (config operators); "
				    "without all, ListRuns lists the caller's own runs",
				    who->name);
	l = malloc(sizeof(*l));
	n = runs_of(runs, req->all ? NULL : who->name, &v);
	rc = l ? 0 : -1;
	if (req->all)
		sbx_audit("operator_list_runs", NULL, who->name, NULL,
			  json_pack("{s:s, s:i}", "operator", who->name, "runs", (int)n));

	if (l) {
		sbx__v1__list_runs_response__init(l);
		l->runs = calloc(n ? n : 1, sizeof(*l->runs));
		if (!l->runs)
			rc = -1;
	}
	/* Every run of the host can be more than an answer holds (64
	 * labels of 256-byte keys and values each): the newest that do not
	 * fit are counted instead. */
	for (size_t i = 0, used = 0; i < n; i++) {
		Sbx__V1__RunSummary *sum = rc == 0 ? summary_new(v[i]) : NULL;
		size_t size = sum ? protobuf_c_message_get_packed_size(&sum->base) + 6 : 0;

		if (rc == 0 && !sum) {
			rc = -1;
		} else if (sum && used + size > artifacts_reply_bytes(runs)) {
			sbx__v1__run_summary__free_unpacked(sum, NULL);
			l->runs_not_listed++;
		} else if (sum) {
			l->runs[l->n_runs++] = sum;
			used += size;
		}
		run_unref(v[i]);
	}
	free(v);
	if (rc < 0) {
		if (l)
			sbx__v1__list_runs_response__free_unpacked(l, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	*resp = l;
	return 0;
}

/* The store's pins, as many as HEALTH_IMAGES_MAX and a quarter of an
 * answer hold (a pin is up to ~520 bytes: 256 of them would not fit the
 * smallest max_message_bytes), and how many more there are. */
static int health_images(struct sbx_runs *runs, Sbx__V1__HealthResponse *h,
			 struct sbx_rpc_status *st)
{
	size_t budget = runs->cfg.max_message_bytes / 4, used = 0, n = 0, total = 0;
	char **pins = NULL;
	int rc = 0;

	if (!runs->images) {
		if (runs->images_down[0] && !(h->images_error = strdup(runs->images_down)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		return 0;
	}
	/* The store's trouble (a damaged refs.json, a lock kept by a stopped
	 * `sbxd image`) is the list's, said in images_error: Health still
	 * tells a parent that sbxd lives and what it enforces. */
	if (img_store_pins(runs->images, HEALTH_IMAGES_MAX, &pins, &n, &total, &st->err) < 0) {
		if (!(h->images_error = strdup(st->err.msg)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		st->err.msg[0] = '\0';
		return 0;
	}
	if (!(h->images = calloc(n ? n : 1, sizeof(char *))))
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		/* Each costs its bytes and a tag and length on the wire. */
		size_t len = strlen(pins[i]) + 3;

		if (used + len > budget)
			break;
		if (!(h->images[i] = strdup(pins[i]))) {
			rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
			break;
		}
		h->n_images = i + 1;
		used += len;
	}
	img_pins_free(pins, n);
	sbx_metrics_set(SBX_M_IMAGES, 0, (int64_t)total);
	h->images_not_listed = total > h->n_images ? (uint32_t)(total - h->n_images) : 0;
	return rc;
}

SBX_HANDLER(health, Sbx__V1__HealthRequest, Sbx__V1__HealthResponse)
{
	Sbx__V1__HealthResponse *h = malloc(sizeof(*h));
	const struct runs_live live = runs_live(runs);

	if (!h)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__health_response__init(h);
	h->version = xstrdup(SBX_VERSION);
	h->cgroup = xstrdup(runs->host.cgroup);
	h->identity = xstrdup(who->name);
	h->runs_active = runs_listed(runs);
	h->runs_max = runs->cfg.runs_max;
	h->runs_max_per_identity = live.runs_max_per_identity;
	h->userns = runs->host.userns;
	h->seccomp = runs->host.seccomp;
	h->audit_lines_lost = sbx_audit_lost();
	/* Read now: an administrator may have raised it since sbxd started. */
	h->file_max = sbx_host_file_max();
	h->run_files = live.limits_max.files;
	h->run_pinned_files = live.limits_max.pinned_files;
	h->runs_fit = sbx_runs_fit(h->file_max, h->run_files, h->run_pinned_files);
	h->host_uids = xstrdup(runs->cfg.host_uids_shared ? "shared" : "subordinate");
	h->host_uid_slots = runs->cfg.host_uid_slots;
	if (!h->version || !h->cgroup || !h->identity || !h->host_uids) {
		sbx__v1__health_response__free_unpacked(h, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (operator_health(runs, who, h) < 0) {
		sbx__v1__health_response__free_unpacked(h, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (pool_health(runs, who->operator, h) < 0) {
		sbx__v1__health_response__free_unpacked(h, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (health_images(runs, h, st) < 0) {
		sbx__v1__health_response__free_unpacked(h, NULL);
		return -1;
	}
	*resp = h;
	return 0;
}
