/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's egress proxy: the one way out of a sandbox whose policy has an
 * allowlist (DESIGN.md invariant 2).
 *
 * Each exec of such a run has its own network namespace holding only
 * loopback; exec init makes a listening socket on 127.0.0.1:3128 there and
 * it reaches sbxd with ExecStarted (helper.proto). The proxy accepts on it,
 * so the listener a connection arrives on names its run: nothing inside can
 * claim another run's identity. It reads one HTTP/1.1 request head (CONNECT
 * host:port, or an absolute-form plain HTTP request), checks it against the
 * run's allowlist, resolves the name itself (never blocking its loop),
 * vets every address, connects to a vetted one and relays the bytes with
 * splice(2), under the entry's and the host's rate limits. Every connection
 * writes one decision record and (when it was allowed) one close record to
 * the audit log, and is kept for Status.
 *
 * Threads: one, the proxy's own (a libevent loop). Every function below is
 * called from other threads (the run manager's); what they share with the
 * loop is locked inside this room. None of them is ever called with a run's
 * lock held (run.h) and none waits long: sbx_egress_run_close waits for the
 * loop to close the run's sockets, which never blocks on a peer.
 *
 * Records never depend on the audit log's per-identity rate (they are what
 * "what left the box" is answered from): instead a run's listeners stop
 * accepting while its accept budget, its identity's, or its identity's
 * budget of egress line bytes (half its audit rate) is spent, so a sandbox
 * that opens connections in a loop waits in its own backlog, unrecorded
 * bytes never leave, and the lines an identity can cause are bounded per
 * second whatever its number of runs. Host-wide pools (connections_max, a
 * config destination's limits) are shared fairly between identities
 * (egress_limits.c). */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "egress_port.h" /* SBX_EGRESS_PORT */
#include "err.h"
#include "hostname.h"
#include "sbx/v1/policy.pb-c.h" /* Sbx__V1__Egress, the policy's allowlist */

struct sbx_egress;
struct sbx_egress_run;

/* The destination row that sums every host:port past a run's first 1023
 * (port 0); the run manager folds rows that do not fit an answer into it
 * too. */
#define SBX_EGRESS_OTHER_HOST "(other)"

/* Starts the proxy's thread with the config's "egress" settings (copied).
 * -1 with err when the resolver's files cannot be read or the thread cannot
 * start: sbxd then refuses allowlist policies. */
int sbx_egress_start(const struct sbx_config_egress *cfg, struct sbx_egress **out,
		     struct sbx_err *err);
/* The most descriptors the proxy holds at once: 6 per connection
 * (connections_max as lowered to fit at start) and one per exec listener
 * (at most as many listeners as connections fit: past them an exec's
 * listener is refused, its way out closed). It fits in RLIMIT_NOFILE less
 * the config's fd_reserve (or in half of it without one); a limit of
 * RLIM_INFINITY leaves connections_max as written. 0 for NULL. */
size_t sbx_egress_fd_budget(const struct sbx_egress *eg);
/* Closes every run's listeners and connections (close records written),
 * stops the thread and frees. NULL is fine. */
void sbx_egress_stop(struct sbx_egress *eg);

/* Who a run is, for its records. Strings are copied. */
struct sbx_egress_run_info {
	const char *run_id;
	const char *identity;
	const char *policy_digest;
	const Sbx__V1__Egress *policy; /* allowlist, alert_bytes, max_bytes: copied */
};

/* A run's place in the proxy, made by CreateRun before the sandbox starts.
 * NULL with err only when out of memory. */
struct sbx_egress_run *sbx_egress_run_open(struct sbx_egress *eg,
					   const struct sbx_egress_run_info *info,
					   struct sbx_err *err);
/* Hands exec `exec_id`'s listening socket to the proxy, which owns it from
 * here (closed on every path, also on error). Refused (-1) once the run is
 * closed. */
int sbx_egress_run_listen(struct sbx_egress_run *er, uint64_t exec_id, int listen_fd,
			  struct sbx_err *err);
/* The exec ended: its listener is closed (held open it would keep the
 * exec's network namespace alive), and so is every connection that came
 * through it (close reason "exec_ended", records written): their sandbox
 * ends died with the exec's processes, and a relay would otherwise take
 * the dead end's FIN for a half-close and wait for the destination (up to
 * idle_seconds). What the destination is owed and can be moved at once is
 * moved first; nobody is left to read its answer. */
void sbx_egress_run_unlisten(struct sbx_egress_run *er, uint64_t exec_id);
/* Stops the run's egress: when it returns, every listener and every
 * connection of the run is closed and its close record written (reason
 * "torn_down"). Idempotent. */
void sbx_egress_run_close(struct sbx_egress_run *er);
/* Closes (if not yet) and frees. NULL is fine. The proxy keeps no pointer
 * to a closed run (its listeners, connections and lookups are gone), and
 * a run may outlive the proxy: after sbx_egress_stop, sbx_egress_run_close,
 * _report and _free still work (what they share with the
 * proxy is reference counted; listening is refused). */
void sbx_egress_run_free(struct sbx_egress_run *er);

/* One connection as the proxy keeps it. What the records say beyond the
 * proto's comments (EgressRecord, which runs/runs_egress.c fills from
 * this): a connection appears once decided (not while its head, lookup or
 * connect is under way); an allowed plain HTTP request has status 0 (the
 * destination answered, not the proxy); a refused one keeps its refusal as
 * reason (its audit close line says the same). */
struct sbx_egress_record {
	int64_t time_unix_ms;
	char host[SBX_HOSTNAME_BUF];
	uint16_t port;
	bool allowed;
	bool open; /* still relaying: bytes and duration so far */
	uint64_t bytes_out, bytes_in;
	char reason[24];
	uint64_t connection; /* the run's connection number, from 1 */
	char address[INET6_ADDRSTRLEN + 8];
	uint32_t lookup_ms, connect_ms;
	uint64_t duration_ms;
	char method[16];
	uint32_t status;
};

/* A run's totals for one host:port it asked for (allowed or not).
 * Connections whose head was unreadable are summed under host "" port 0,
 * and past 1023 distinct host:port a run's further ones under
 * SBX_EGRESS_OTHER_HOST port 0. */
struct sbx_egress_total {
	char host[SBX_HOSTNAME_BUF];
	uint16_t port;
	uint64_t connections, denied, bytes_out, bytes_in;
};

/* The alert_bytes one and the max_bytes one. */
#define SBX_EGRESS_ALERTS_MAX 2

/* What the proxy knows of a run, in its own records: the run manager puts
 * them on the wire (runs/runs_egress.h), within its byte budgets. */
struct sbx_egress_report {
	/* The newest records (at most the config's records_per_run), oldest
	 * first; older ones only counted in records_dropped. */
	struct sbx_egress_record *records;
	size_t n_records;
	uint64_t records_dropped;
	/* Every host:port the run asked for, in the order first asked, open
	 * connections' bytes so far included. */
	struct sbx_egress_total *totals;
	size_t n_totals;
	char *alerts[SBX_EGRESS_ALERTS_MAX]; /* the run's egress alerts */
	size_t n_alerts;
};

/* Fills *out (freed with sbx_egress_report_free, also after a failure).
 * -1 only when out of memory. */
int sbx_egress_run_report(struct sbx_egress_run *er, struct sbx_egress_report *out,
			  struct sbx_err *err);
void sbx_egress_report_free(struct sbx_egress_report *r);

#endif
