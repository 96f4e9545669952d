/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's metrics (a floor room): counters, gauges and fixed-bucket
 * histograms, declared in one table (metrics.c: name, help, type, labels)
 * that also prints docs/operator/metrics.md's table, kept in C11 atomics
 * so that any thread bumps them without a lock, and rendered as the
 * Prometheus text exposition format 0.0.4 (metrics_http.c serves it).
 *
 * A label's values are a small fixed list (the table's, or a proto enum's
 * names, or sandbox.proto's methods): never a run id, a caller's name or
 * anything else a caller chooses, so a scrape's size is bounded by the
 * table alone. A value outside the list is counted under its first value
 * ("unknown", or the enum's 0). */
#ifndef SBX_METRICS_H
#define SBX_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

enum sbx_metric {
	SBX_M_BUILD_INFO,     /* gauge 1 {version} */
	SBX_M_START_TIME,     /* gauge: unix seconds sbxd started */
	SBX_M_RUNS,	      /* gauge {state}: runs in memory (run_state.c) */
	SBX_M_RUNS_MAX,	      /* gauge: config runs_max */
	SBX_M_RPC_CALLS,      /* counter {method, code}: answers sent */
	SBX_M_RPC_SECONDS,    /* histogram {method}: request received to answer */
	SBX_M_EXEC_ENDS,      /* counter {reason}: execs that ended */
	SBX_M_EXEC_SECONDS,   /* histogram: an exec's start to its end */
	SBX_M_CONN_REFUSED,   /* counter {reason}: the connection guard's refusals */
	SBX_M_EGRESS_CONNS,   /* counter {decision} */
	SBX_M_EGRESS_BYTES,   /* counter {direction}: bytes relayed */
	SBX_M_DISK_CHARGED,   /* gauge: state_dir bytes charged to runs */
	SBX_M_DISK_QUOTA,     /* gauge: quotas.host_mb in bytes; 0: off */
	SBX_M_WORKERS,	      /* gauge {pool}: worker threads */
	SBX_M_WORKERS_BUSY,   /* gauge {pool}: running a call */
	SBX_M_WORKERS_QUEUED, /* gauge {pool}: calls waiting for a worker */
	SBX_M_HOST_UID_SLOTS, /* gauge: runs that can have a host uid at once */
	SBX_M_IMAGES,	      /* gauge: pinned images in the store */
	SBX_M_AUDIT_LOST,     /* counter: audit lines lost */
	SBX_M_SCRAPE_REFUSED, /* counter: scrapes answered 503 (render failed) */
	SBX_M_CREATES,	      /* counter {launch}: runs created, warm or cold */
	SBX_M_POOL_READY,     /* gauge {shape}: ready members of the warm pool */
	SBX_M_POOL_FAILED,    /* counter {shape}: members that failed or died waiting */
	SBX_M_RPC_REPEATS,    /* counter {outcome}: requests whose request id was seen */
	SBX_M_COUNT
};

/* Label lists with values of their own (the others come from the proto). */
enum sbx_metrics_refusal {
	SBX_REFUSED_UNKNOWN,	   /* a listener sbxd did not register */
	SBX_REFUSED_PEER_CONNS,	   /* connections.per_peer */
	SBX_REFUSED_PEER_RATE,	   /* connections.new_per_peer_per_second */
	SBX_REFUSED_LISTENER_FULL, /* connections.per_listener, none to evict */
	SBX_REFUSED_PEERS_FULL,	   /* the table of peers */
	SBX_REFUSED_PENDING_BYTES, /* connections.pending_bytes_*_mb */
	SBX_REFUSED_BAD_HEADER,	   /* an SP header nng would refuse */
	SBX_REFUSED_SLOW_MESSAGE,  /* connections.message_seconds */
	SBX_REFUSED_NO_REQUEST,	   /* connections.first_request_seconds */
	SBX_REFUSED_EVICTED,	   /* shut for a newcomer on a full listener */
	SBX_REFUSED_METRICS_FULL,  /* the metrics listener's connections */
};

enum sbx_metrics_egress {
	SBX_EGRESS_ALLOWED,
	SBX_EGRESS_DENIED,  /* the policy: not allowed, a private address, max_bytes */
	SBX_EGRESS_LIMITED, /* a rate or a cap on connections */
	SBX_EGRESS_FAILED,  /* lookup, connect, a bad or slow request head */
};

enum sbx_metrics_direction { SBX_EGRESS_OUT, SBX_EGRESS_IN };
/* What became of a request whose request id an earlier one had (rpc_dedupe.h). */
enum sbx_metrics_repeat {
	SBX_REPEAT_REPLAYED,   /* the first had answered: its answer again */
	SBX_REPEAT_PARKED,     /* the first was running: this one waited for its answer */
	SBX_REPEAT_MISMATCHED, /* the id came with another method or body: refused */
	SBX_REPEAT_DROPPED,    /* a long transfer's, first running or queued, no room:
				  left unanswered */
};
enum sbx_metrics_pool { SBX_POOL_SHORT, SBX_POOL_LONG };
/* The shape label: the pool entry's index in the config, "0".."15". */
#define SBX_METRICS_POOL_SHAPES 16

/* The run states as sbx_runs counts them (run_state.h's order, TORN not
 * counted: a torn run is gone). */
enum sbx_metrics_run_state {
	SBX_RUNS_STARTING,
	SBX_RUNS_CREATED,
	SBX_RUNS_ACTIVE,
	SBX_RUNS_EXPIRED,
	SBX_RUNS_FAILED,
	SBX_RUNS_TEARING,
};

/* ---- bumps: lock-free, from any thread ---- */

/* Adds n to series `label` (the label's value index; 0 without labels). */
void sbx_metrics_add(enum sbx_metric m, size_t label, uint64_t n);
/* Sets a gauge, or a counter sampled from a monotonic source. */
void sbx_metrics_set(enum sbx_metric m, size_t label, int64_t v);
/* A gauge's series up or down by one. */
void sbx_metrics_gauge_add(enum sbx_metric m, size_t label, int64_t d);
/* One observation of a histogram (seconds). */
void sbx_metrics_observe(enum sbx_metric m, size_t label, double seconds);

/* An RPC answer: its method ("/sbx.v1.Sandbox/CreateRun"; NULL or unknown:
 * "unknown"), its Code, and how long since the request arrived (< 0: not
 * timed). */
void sbx_metrics_rpc(const char *method, int code, double seconds);
/* An exec ended: its ExitReason and how long it ran. */
void sbx_metrics_exec_ended(int exit_reason, double seconds);

/* ---- scraping ---- */

/* Called at each scrape, before rendering, one scrape at a time: a
 * collector sets the gauges it samples (quickly: it runs on nng's thread).
 * At most 8; registered before the HTTP server starts. */
int sbx_metrics_collector(void (*fn)(void *arg), void *arg);
void sbx_metrics_collectors_clear(void);

/* The build's version and the process's start time (main, once). */
void sbx_metrics_init(const char *version);

/* The exposition (text format 0.0.4) in a malloc'd buffer, at most
 * SBX_METRICS_TEXT_MAX bytes; NULL when out of memory. */
#define SBX_METRICS_TEXT_MAX (1u << 20)
char *sbx_metrics_render(size_t *len);

/* Helpers the renderer uses, exported for the unit test: the escaping of
 * a HELP text (backslash, newline) and a label value (also '"') appended
 * to out (size cap, NUL-terminated); the bytes written. */
size_t sbx_metrics_escape(char *out, size_t cap, const char *s, bool label_value);

/* docs/operator/metrics.md's table of metrics (sbxd-metrics-reference). */
void sbx_metrics_print_reference(FILE *out);

/* For tests: every series back to zero. */
void sbx_metrics_reset(void);

/* ---- the listener (metrics_http.c) ---- */

struct sbx_metrics_http;

/* Serves GET /metrics on listen ("127.0.0.1:9464", "[::1]:9464"; port 0:
 * any free one) with nng's HTTP server; 404 for another path, 405 for
 * another method. */
int sbx_metrics_http_start(const char *listen, struct sbx_metrics_http **out, struct sbx_err *err);
/* The bound port; the URL to scrape ("http://127.0.0.1:9464/metrics"). */
int sbx_metrics_http_port(const struct sbx_metrics_http *h);
const char *sbx_metrics_http_url(const struct sbx_metrics_http *h);
/* Closes the listener and every connection; NULL is fine. */
void sbx_metrics_http_stop(struct sbx_metrics_http *h);

#endif
