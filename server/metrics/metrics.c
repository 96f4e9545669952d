/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics table, its series and their exposition (metrics.h).
 *
 * Every series is a cell of `cells`: a metric's cells are the product of
 * its labels' value lists (a histogram's: per label value, its buckets,
 * then its count and its sum in microseconds), each a C11 atomic that a
 * bump changes with one relaxed read-modify-write. A scrape reads them one
 * by one: a histogram read while it is observed may have its count one
 * ahead of its buckets, which Prometheus tolerates (one scrape later they
 * agree). The labels' lists are fixed (below, or a proto enum's names, or
 * the service's methods), so the scrape's size is bounded by the table. */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbx/v1/sandbox.pb-c.h"

enum type { COUNTER, GAUGE, HISTOGRAM };

enum label_kind {
	L_NONE,
	L_VERSION,
	L_STATE,
	L_METHOD,
	L_CODE,
	L_EXIT,
	L_REFUSAL,
	L_DECISION,
	L_DIRECTION,
	L_POOL,
	L_LAUNCH,
	L_SHAPE,
	L_REPEAT,
};

/* At most this many values per label: more of a list are counted under
 * its first value (sandbox.proto has 12 methods and 17 codes). */
#define VALUES_MAX 40

struct label {
	const char *name;
	const char *const *values; /* a list of its own, n of them */
	size_t n;
	const ProtobufCEnumDescriptor *en;     /* or the enum's value names */
	const ProtobufCServiceDescriptor *svc; /* or "unknown" and its methods */
	const char *doc;
};

static char version_value[64] = "unknown";
static const char *const version_values[] = {version_value};
static const char *const state_values[] = {"starting", "created", "active",
					   "expired",  "failed",  "tearing"};
static const char *const refusal_values[] = {
    "unknown_listener", "peer_connections", "peer_rate",    "listener_full",
    "peers_full",	"pending_bytes",    "bad_header",   "slow_message",
    "no_request",	"evicted",	    "metrics_full",
};
static const char *const decision_values[] = {"allowed", "denied", "limited", "failed"};
static const char *const direction_values[] = {"out", "in"};
static const char *const pool_values[] = {"short", "long"};
static const char *const repeat_values[] = {"replayed", "parked", "mismatched", "dropped"};
static const char *const shape_values[] = {"0", "1", "2",  "3",	 "4",  "5",  "6",  "7",
					   "8", "9", "10", "11", "12", "13", "14", "15"};
_Static_assert(sizeof(shape_values) / sizeof(shape_values[0]) == SBX_METRICS_POOL_SHAPES,
	       "one value per pool entry the config allows");

#define LIST(v) .values = (v), .n = sizeof(v) / sizeof((v)[0])
static const struct label labels[] = {
    [L_NONE] = {.name = NULL},
    [L_VERSION] = {"version", LIST(version_values), .doc = "sbxd's version"},
    [L_STATE] = {"state", LIST(state_values),
		 .doc = "a run's life cycle stage (server/runs/run_state.h); a torn run is gone"},
    [L_METHOD] = {"method", .svc = &sbx__v1__sandbox__descriptor,
		  .doc = "a call of `service Sandbox` (docs/reference/api.md), or `unknown`"},
    [L_CODE] = {"code", .en = &sbx__v1__code__descriptor,
		.doc = "the answer's `Code` (docs/reference/api.md)"},
    [L_EXIT] = {"reason", .en = &sbx__v1__exit_reason__descriptor,
		.doc = "the exec's `ExitReason` (docs/reference/api.md)"},
    [L_REFUSAL] = {"reason", LIST(refusal_values),
		   .doc = "which bound of docs/operator/connections.md refused it"},
    [L_DECISION] = {"decision", LIST(decision_values),
		    .doc = "the proxy's decision (docs/operator/egress.md)"},
    [L_DIRECTION] = {"direction", LIST(direction_values),
		     .doc = "`out`: sandbox to destination; `in`: back"},
    [L_POOL] = {"pool", LIST(pool_values),
		.doc = "the RPC workers' pool: `short` calls or `long` ones (Wait, ReadOutput, "
		       "FetchArtifact)"},
    [L_LAUNCH] = {"launch", .en = &sbx__v1__launch__descriptor,
		  .doc = "how the run's sandbox came to be: `LAUNCH_WARM` (the warm pool) or "
			 "`LAUNCH_COLD`"},
    [L_SHAPE] = {"shape", LIST(shape_values),
		 .doc = "the warm pool's entry, by its index in the config's `pool` (Health names "
			"it)"},
    [L_REPEAT] = {"outcome", LIST(repeat_values),
		  .doc = "`replayed`: the first had answered, its answer was sent again; "
			 "`parked`: the first was still running, this one waits for its answer "
			 "(sent when it ends, if the connection is still there); `mismatched`: "
			 "the id came with another method or body, INVALID_ARGUMENT; `dropped`: "
			 "an ExportArtifacts or ImportInputs whose first was still running or "
			 "queued, with no worker for it and no parking place (its first on the "
			 "same connection, whose answer is the caller's; or still queued; or "
			 "the caller's share of parked repeats spent), left unanswered: a "
			 "parked copy, the first's answer or the next resend's replay answers "
			 "the caller"},
};
#undef LIST

static const double rpc_buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
				     0.5,   1,	   2.5,	 5,	10,   30,  60};
static const double exec_buckets[] = {0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600};

struct metric {
	const char *name;
	enum type type;
	enum label_kind l1, l2;
	const double *buckets;
	size_t nb;
	const char *help;
};

#define BUCKETS(b) .buckets = (b), .nb = sizeof(b) / sizeof((b)[0])
static const struct metric table[SBX_M_COUNT] = {
    [SBX_M_BUILD_INFO] = {"sbx_build_info", GAUGE, L_VERSION,
			  .help = "Always 1; its label is sbxd's version."},
    [SBX_M_START_TIME] = {"process_start_time_seconds", GAUGE,
			  .help = "When sbxd started, in seconds since the Unix epoch."},
    [SBX_M_RUNS] = {"sbx_runs", GAUGE, L_STATE,
		    .help = "Runs sbxd holds, by state: starting (CreateRun building it), created, "
			    "active, expired, failed (kept for their artifacts) and tearing."},
    [SBX_M_RUNS_MAX] = {"sbx_runs_max", GAUGE,
			.help = "Runs this host takes at once (config runs_max)."},
    [SBX_M_RPC_CALLS] = {"sbx_rpc_calls_total", COUNTER, L_METHOD, L_CODE,
			 .help = "RPC answers sent, by method and code; a request refused "
				 "before its method was known counts as method unknown."},
    [SBX_M_RPC_SECONDS] = {"sbx_rpc_duration_seconds", HISTOGRAM, L_METHOD, BUCKETS(rpc_buckets),
			   .help = "Seconds from a request's arrival to its answer, by method "
				   "(CreateRun: the sandbox built; Exec: the command started)."},
    [SBX_M_EXEC_ENDS] = {"sbx_exec_ends_total", COUNTER, L_EXIT,
			 .help = "Execs that ended, by exit reason."},
    [SBX_M_EXEC_SECONDS] = {"sbx_exec_duration_seconds", HISTOGRAM, BUCKETS(exec_buckets),
			    .help = "Seconds an exec ran, from its start to its end."},
    [SBX_M_CONN_REFUSED] = {"sbx_connections_refused_total", COUNTER, L_REFUSAL,
			    .help = "Connections the connection guard refused or shut down, by "
				    "the bound that did it."},
    [SBX_M_EGRESS_CONNS] = {"sbx_egress_connections_total", COUNTER, L_DECISION,
			    .help = "Connections of sandboxes through the egress proxy, by "
				    "decision."},
    [SBX_M_EGRESS_BYTES] = {"sbx_egress_bytes_total", COUNTER, L_DIRECTION,
			    .help = "Bytes the egress proxy relayed for connections that "
				    "closed, by direction."},
    [SBX_M_DISK_CHARGED] = {"sbx_state_dir_charged_bytes", GAUGE,
			    .help = "Bytes of state_dir charged to runs (inputs and kept output)."},
    [SBX_M_DISK_QUOTA] = {"sbx_state_dir_quota_bytes", GAUGE,
			  .help = "The host's state_dir quota (config quotas.host_mb) in bytes; "
				  "0: no quota."},
    [SBX_M_WORKERS] = {"sbx_rpc_workers", GAUGE, L_POOL, .help = "RPC worker threads, by pool."},
    [SBX_M_WORKERS_BUSY] = {"sbx_rpc_workers_busy", GAUGE, L_POOL,
			    .help = "RPC worker threads running a call, by pool."},
    [SBX_M_WORKERS_QUEUED] = {"sbx_rpc_queued_calls", GAUGE, L_POOL,
			      .help = "RPC calls waiting for a worker, by pool."},
    [SBX_M_HOST_UID_SLOTS] = {"sbx_host_uid_slots", GAUGE,
			      .help = "Runs that can have a host uid of their own at once "
				      "(config host_uids subordinate); 0: shared."},
    [SBX_M_IMAGES] = {"sbx_store_images", GAUGE,
		      .help = "Pinned images in the store, as of sbxd's start or the last Health "
			      "call."},
    [SBX_M_AUDIT_LOST] = {"sbx_audit_lines_lost_total", COUNTER,
			  .help = "Audit log lines that could not be written."},
    [SBX_M_SCRAPE_REFUSED] = {"sbx_metrics_scrapes_failed_total", COUNTER,
			      .help = "Scrapes answered 503: the exposition could not be made."},
    [SBX_M_CREATES] = {"sbx_runs_created_total", COUNTER, L_LAUNCH,
		       .help = "Runs created, by launch: warm (a pool member) or cold."},
    [SBX_M_POOL_READY] = {"sbx_pool_ready", GAUGE, L_SHAPE,
			  .help = "Members of the warm pool ready to be claimed, by shape."},
    [SBX_M_POOL_FAILED] = {"sbx_pool_failed_total", COUNTER, L_SHAPE,
			   .help = "Warm pool members that failed to become ready or died "
				   "waiting (destroyed), by shape."},
    [SBX_M_RPC_REPEATS] = {"sbx_rpc_repeats_total", COUNTER, L_REPEAT,
			   .help = "Requests that came again with a request id sbxd had seen "
				   "(a client's retry or REQ's resend: CreateRun, PutInput, Exec, "
				   "Signal, Teardown, WriteStdin, ExportArtifacts, ImportInputs), "
				   "by outcome; none acted twice. A repeat "
				   "refused (its caller's share of parked repeats full, or no "
				   "memory) is an UNAVAILABLE of sbx_rpc_calls_total."},
};
#undef BUCKETS

/* Cells per metric: the largest is rpc_calls_total (VALUES_MAX^2). */
#define CELLS_MAX (VALUES_MAX * VALUES_MAX)
static _Atomic uint64_t cells[SBX_M_COUNT][CELLS_MAX];

/* ---- labels ---- */

static size_t label_count(enum label_kind k)
{
	const struct label *l = &labels[k];
	size_t n = k == L_NONE ? 1
		   : l->en     ? l->en->n_values
		   : l->svc    ? 1 + l->svc->n_methods
			       : l->n;

	return n < VALUES_MAX ? n : VALUES_MAX;
}

static const char *label_value(enum label_kind k, size_t i)
{
	const struct label *l = &labels[k];

	if (l->en)
		return l->en->values[i].name;
	if (l->svc)
		return i == 0 ? "unknown" : l->svc->methods[i - 1].name;
	return l->values[i];
}

/* An enum's value as its index in the label's list; 0 if it has none. */
static size_t enum_index(enum label_kind k, int value)
{
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(labels[k].en, value);
	size_t i = v ? (size_t)(v - labels[k].en->values) : 0;

	return i < label_count(k) ? i : 0;
}

static size_t method_index(const char *name)
{
	const char *slash = name ? strrchr(name, '/') : NULL;
	const ProtobufCMethodDescriptor *d;
	size_t i;

	if (!name)
		return 0;
	d = protobuf_c_service_descriptor_get_method_by_name(&sbx__v1__sandbox__descriptor,
							     slash ? slash + 1 : name);
	i = d ? 1 + (size_t)(d - sbx__v1__sandbox__descriptor.methods) : 0;
	return i < label_count(L_METHOD) ? i : 0;
}

/* ---- cells ---- */

static size_t series_count(const struct metric *m)
{
	return label_count(m->l1) * label_count(m->l2);
}

static size_t cells_per_series(const struct metric *m)
{
	return m->type == HISTOGRAM ? m->nb + 2 : 1;
}

/* The first cell of series `label` of m, or NULL when out of range. */
static _Atomic uint64_t *cell(enum sbx_metric id, size_t label)
{
	if ((unsigned)id >= SBX_M_COUNT || label >= series_count(&table[id]))
		return NULL;
	return &cells[id][label * cells_per_series(&table[id])];
}

void sbx_metrics_add(enum sbx_metric m, size_t label, uint64_t n)
{
	_Atomic uint64_t *c = cell(m, label);

	if (c)
		atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

void sbx_metrics_set(enum sbx_metric m, size_t label, int64_t v)
{
	_Atomic uint64_t *c = cell(m, label);

	if (c)
		atomic_store_explicit(c, (uint64_t)v, memory_order_relaxed);
}

void sbx_metrics_gauge_add(enum sbx_metric m, size_t label, int64_t d)
{
	/* Two's complement: adding the uint64 of -1 takes one away. */
	sbx_metrics_add(m, label, (uint64_t)d);
}

void sbx_metrics_observe(enum sbx_metric id, size_t label, double seconds)
{
	_Atomic uint64_t *c = cell(id, label);
	const struct metric *m = c ? &table[id] : NULL;
	size_t b = 0;

	if (!c || m->type != HISTOGRAM || !(seconds >= 0))
		return;
	if (seconds > 1e9) /* a clock gone wrong: +Inf, and a sum that stays exact */
		seconds = 1e9;
	while (b < m->nb && seconds > m->buckets[b])
		b++;
	if (b < m->nb)
		atomic_fetch_add_explicit(&c[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c[m->nb + 1], (uint64_t)llround(seconds * 1e6),
				  memory_order_relaxed);
	/* The count last: a scrape never sees buckets above the count. */
	atomic_fetch_add_explicit(&c[m->nb], 1, memory_order_release);
}

void sbx_metrics_rpc(const char *method, int code, double seconds)
{
	size_t mi = method_index(method);

	sbx_metrics_add(SBX_M_RPC_CALLS, mi * label_count(L_CODE) + enum_index(L_CODE, code), 1);
	if (seconds >= 0)
		sbx_metrics_observe(SBX_M_RPC_SECONDS, mi, seconds);
}

void sbx_metrics_exec_ended(int exit_reason, double seconds)
{
	sbx_metrics_add(SBX_M_EXEC_ENDS, enum_index(L_EXIT, exit_reason), 1);
	sbx_metrics_observe(SBX_M_EXEC_SECONDS, 0, seconds);
}

void sbx_metrics_reset(void)
{
	for (size_t i = 0; i < SBX_M_COUNT; i++)
		for (size_t j = 0; j < CELLS_MAX; j++)
			atomic_store(&cells[i][j], 0);
}

void sbx_metrics_init(const char *version)
{
	snprintf(version_value, sizeof(version_value), "%s", version ? version : "unknown");
	sbx_metrics_set(SBX_M_BUILD_INFO, 0, 1);
	sbx_metrics_set(SBX_M_START_TIME, 0, (int64_t)time(NULL));
}

/* ---- collectors ---- */

#define COLLECTORS_MAX 8
static pthread_mutex_t scrape_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void (*fn)(void *arg);
	void *arg;
} collectors[COLLECTORS_MAX];
static size_t n_collectors;

int sbx_metrics_collector(void (*fn)(void *arg), void *arg)
{
	int rc = -1;

	pthread_mutex_lock(&scrape_mu);
	if (n_collectors < COLLECTORS_MAX) {
		collectors[n_collectors].fn = fn;
		collectors[n_collectors++].arg = arg;
		rc = 0;
	}
	pthread_mutex_unlock(&scrape_mu);
	return rc;
}

void sbx_metrics_collectors_clear(void)
{
	pthread_mutex_lock(&scrape_mu);
	n_collectors = 0;
	pthread_mutex_unlock(&scrape_mu);
}

/* ---- exposition ---- */

size_t sbx_metrics_escape(char *out, size_t cap, const char *s, bool label_value)
{
	size_t n = 0;

	if (!cap)
		return 0;
	for (; *s; s++) {
		const char *rep = *s == '\\'		     ? "\\\\"
				  : *s == '\n'		     ? "\\n"
				  : *s == '"' && label_value ? "\\\""
							     : NULL;
		size_t k = rep ? 2 : 1;

		if (n + k >= cap)
			break;
		if (rep)
			memcpy(out + n, rep, 2);
		else
			out[n] = *s;
		n += k;
	}
	out[n] = '\0';
	return n;
}

struct text {
	char *buf;
	size_t len, cap;
	bool failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->failed = true;
			return;
		}
		if ((size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap * 2;
		char *b;

		if (cap > SBX_METRICS_TEXT_MAX || !(b = realloc(t->buf, cap))) {
			t->failed = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
}

/* `{a="x",b="y"` of series i of m, without the closing brace (a histogram
 * adds le); "" without labels. */
static void label_pairs(char *out, size_t cap, const struct metric *m, size_t i)
{
	char v1[128], v2[128];
	size_t n2 = label_count(m->l2);

	out[0] = '\0';
	if (m->l1 == L_NONE)
		return;
	sbx_metrics_escape(v1, sizeof(v1), label_value(m->l1, i / n2), true);
	if (m->l2 == L_NONE) {
		snprintf(out, cap, "{%s=\"%s\"", labels[m->l1].name, v1);
		return;
	}
	sbx_metrics_escape(v2, sizeof(v2), label_value(m->l2, i % n2), true);
	snprintf(out, cap, "{%s=\"%s\",%s=\"%s\"", labels[m->l1].name, v1, labels[m->l2].name, v2);
}

static uint64_t load(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_acquire);
}

static void render_histogram(struct text *t, const struct metric *m, _Atomic uint64_t *c,
			     const char *pairs)
{
	/* The count first (observe adds it last): then no bucket below
	 * exceeds it. */
	uint64_t count = load(&c[m->nb]), sum_us = load(&c[m->nb + 1]), cum = 0;
	const char *sep = pairs[0] ? "," : "{";

	for (size_t b = 0; b < m->nb; b++) {
		cum += load(&c[b]);
		if (cum > count)
			cum = count;
		put(t, "%s_bucket%s%sle=\"%g\"} %llu\n", m->name, pairs, sep, m->buckets[b],
		    (unsigned long long)cum);
	}
	put(t, "%s_bucket%s%sle=\"+Inf\"} %llu\n", m->name, pairs, sep, (unsigned long long)count);
	put(t, "%s_sum%s%s %llu.%06llu\n", m->name, pairs, pairs[0] ? "}" : "",
	    (unsigned long long)(sum_us / 1000000), (unsigned long long)(sum_us % 1000000));
	put(t, "%s_count%s%s %llu\n", m->name, pairs, pairs[0] ? "}" : "",
	    (unsigned long long)count);
}

static void render_metric(struct text *t, enum sbx_metric id)
{
	static const char *const types[] = {"counter", "gauge", "histogram"};
	const struct metric *m = &table[id];
	size_t n = series_count(m);
	char help[512], pairs[320];

	sbx_metrics_escape(help, sizeof(help), m->help, false);
	put(t, "# HELP %s %s\n# TYPE %s %s\n", m->name, help, m->name, types[m->type]);
	for (size_t i = 0; i < n; i++) {
		_Atomic uint64_t *c = cell(id, i);

		/* Two labels, or a labelled histogram: only the series that
		 * happened (a method x code table is mostly zeros). */
		if ((m->l2 != L_NONE || (m->type == HISTOGRAM && m->l1 != L_NONE)) &&
		    !load(m->type == HISTOGRAM ? &c[m->nb] : c))
			continue;
		label_pairs(pairs, sizeof(pairs), m, i);
		if (m->type == HISTOGRAM)
			render_histogram(t, m, c, pairs);
		else if (m->type == GAUGE)
			put(t, "%s%s%s %lld\n", m->name, pairs, pairs[0] ? "}" : "",
			    (long long)(int64_t)load(c));
		else
			put(t, "%s%s%s %llu\n", m->name, pairs, pairs[0] ? "}" : "",
			    (unsigned long long)load(c));
	}
}

char *sbx_metrics_render(size_t *len)
{
	struct text t = {.cap = 16384};

	if (!(t.buf = malloc(t.cap)))
		return NULL;
	t.buf[0] = '\0';
	pthread_mutex_lock(&scrape_mu);
	for (size_t i = 0; i < n_collectors; i++)
		collectors[i].fn(collectors[i].arg);
	for (size_t i = 0; i < SBX_M_COUNT; i++)
		render_metric(&t, (enum sbx_metric)i);
	pthread_mutex_unlock(&scrape_mu);
	if (t.failed) {
		free(t.buf);
		return NULL;
	}
	*len = t.len;
	return t.buf;
}

/* ---- the reference table ---- */

static void print_values(FILE *out, enum label_kind k)
{
	const struct label *l = &labels[k];

	fprintf(out, "`%s`: ", l->name);
	if (l->en || l->svc) {
		fprintf(out, "%s", l->doc);
		return;
	}
	for (size_t i = 0; i < l->n; i++)
		fprintf(out, "%s`%s`", i ? ", " : "", k == L_VERSION ? "<version>" : l->values[i]);
	fprintf(out, " (%s)", l->doc);
}

void sbx_metrics_print_reference(FILE *out)
{
	static const char *const types[] = {"counter", "gauge", "histogram"};

	fprintf(out, "| metric | type | labels | what it says |\n|---|---|---|---|\n");
	for (size_t i = 0; i < SBX_M_COUNT; i++) {
		const struct metric *m = &table[i];

		fprintf(out, "| `%s` | %s", m->name, types[m->type]);
		if (m->type == HISTOGRAM) {
			fprintf(out, " (le:");
			for (size_t b = 0; b < m->nb; b++)
				fprintf(out, " %g", m->buckets[b]);
			fprintf(out, ")");
		}
		fprintf(out, " | ");
		if (m->l1 == L_NONE)
			fprintf(out, "none");
		else
			print_values(out, m->l1);
		if (m->l2 != L_NONE) {
			fprintf(out, "; ");
			print_values(out, m->l2);
		}
		fprintf(out, " | %s |\n", m->help);
	}
}
