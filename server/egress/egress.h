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
 * accepting while its accept budget is spent, so a sandbox that opens
 * connections in a loop waits in its own backlog, unrecorded bytes never
 * leave, and the lines it can cause are bounded per second. */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "egress_port.h" /* SBX_EGRESS_PORT */
#include "err.h"
#include "sbx/v1/sandbox.pb-c.h"

struct sbx_egress;
struct sbx_egress_run;

/* Starts the proxy's thread with the config's "egress" settings (copied).
 * -1 with err when the resolver's files cannot be read or the thread cannot
 * start: sbxd then refuses allowlist policies. */
int sbx_egress_start(const struct sbx_config_egress *cfg, struct sbx_egress **out,
		     struct sbx_err *err);
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
 * exec's network namespace alive). Its relayed connections end by
 * themselves: their sandbox ends died with the exec's processes. */
void sbx_egress_run_unlisten(struct sbx_egress_run *er, uint64_t exec_id);
/* Stops the run's egress: when it returns, every listener and every
 * connection of the run is closed and its close record written (reason
 * "torn_down"). Idempotent. */
void sbx_egress_run_close(struct sbx_egress_run *er);
/* Closes (if not yet) and frees. NULL is fine. The proxy keeps no pointer
 * to a closed run (its listeners, connections and lookups are gone), and
 * a run may outlive the proxy: after sbx_egress_stop, sbx_egress_run_close,
 * _status, _destinations and _free still work (what they share with the
 * proxy is reference counted; listening is refused). */
void sbx_egress_run_free(struct sbx_egress_run *er);

/* Status: fills resp->egress (the newest records, at most the config's
 * records_per_run), resp->egress_records_dropped, resp->egress_destinations,
 * and appends the run's egress alerts to resp->alerts. Every member is
 * malloc'd (the response is freed with free_unpacked). -1 only when out of
 * memory (err says so; resp may hold part, which free_unpacked frees).
 *
 * What the records say beyond the proto's comments: a connection appears
 * once decided (not while its head, lookup or connect is under way); an
 * allowed plain HTTP request has status 0 (the destination answered, not
 * the proxy); a refused one keeps its refusal as reason (its audit close
 * line says the same); connections whose head was unreadable are summed
 * under host "" port 0, and past 1023 distinct host:port a run's further
 * ones under host "(other)" port 0. */
int sbx_egress_run_status(struct sbx_egress_run *er, Sbx__V1__StatusResponse *resp,
			  struct sbx_err *err);
/* The manifest: one EgressDestination per host:port the run asked for
 * (allowed or not), malloc'd into *out (n in *n). -1 only when out of
 * memory. */
int sbx_egress_run_destinations(struct sbx_egress_run *er, Sbx__V1__EgressDestination ***out,
				size_t *n, struct sbx_err *err);

#endif
