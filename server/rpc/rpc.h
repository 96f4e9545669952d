/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's RPC layer as main sees it: start serving the Sandbox service on
 * the configured listeners, stop. Everything else about it is internal
 * (rpc_*.h). */
#ifndef SBX_RPC_H
#define SBX_RPC_H

#include <stddef.h>

#include "config.h"
#include "err.h"

struct sbx_rpc;
struct sbx_runs;

/* Opens the REP socket, starts the worker pools and listeners, and begins
 * answering. cfg must outlive the server. */
struct sbx_rpc *sbx_rpc_start(const struct sbx_config *cfg, struct sbx_runs *runs,
			      struct sbx_err *err);
/* The descriptors sbxd's RPC side and runs need (RLIMIT_NOFILE's part that
 * the egress proxy leaves alone, config egress fd_reserve): FD_RESERVE
 * (sbxd's own, each run's helper and its execs' share, each worker's files)
 * plus every listener's connection caps as configured (conn_guard_fds).
 * The proxy takes at most what is left (egress.c); the guard then sizes
 * the listeners' caps beside FD_RESERVE alone, which fits by construction
 * (and shrinks them, leaving the proxy nothing, when even they do not). */
size_t sbx_rpc_fd_need(const struct sbx_config *cfg);
/* Sets cfg->exec_fds_share, each run's share of FD_RESERVE for its execs:
 * exec_fds_per_run as written, or (0) what fits RLIMIT_NOFILE, said on
 * stderr when it is less than 64 execs' worth. Before sbx_rpc_fd_need
 * and sbx_runs_init, which size by it. */
void sbx_rpc_fit_exec_fds(struct sbx_config *cfg);
/* A metrics collector (server/metrics/metrics.h): the worker pools' use. */
void sbx_rpc_collect(void *rpc);
/* The metrics listener's tcp port, for the connection guard's bounds on
 * it (conn_guard.h, CONN_GUARD_HTTP_MAX); 0: none. Until it is called a
 * connection to that port is refused as one to an unknown listener. -1
 * (naming metrics.listen) when an RPC listener has that port too, on
 * another address: the guard tells listeners apart by their port. */
int sbx_rpc_guard_metrics(int port, struct sbx_err *err);
/* Listener i's URL as bound (a tcp port 0 replaced by the real one), or
 * NULL past the last. */
const char *sbx_rpc_listener_url(const struct sbx_rpc *rpc, size_t i);
/* A reload (SIGHUP) with next, a config already checked whole: swaps the
 * auth table (tokens) as one, and gives tls+tcp listeners a TLS config
 * read anew from next's tls files when their bytes changed (new
 * connections get it; open ones keep the session they have). Names what
 * changed in changed (appended, ", "-separated). -1 (nothing changed): a
 * TLS file could not be read or used. Listeners, connection caps, sizes
 * and workers stay as started. */
int sbx_rpc_reload(struct sbx_rpc *rpc, const struct sbx_config *next, char *changed, size_t size,
		   struct sbx_err *err);
/* Closes the listeners (removing ipc socket files), lets running handlers
 * finish and send their answers, closes the socket and frees everything,
 * nng's globals included. NULL is fine. -1: nng_close did not return in
 * time (nng 1.5.2 can hang there with connections busy); the RPC layer was
 * left as it is and the process should just exit. */
int sbx_rpc_stop(struct sbx_rpc *rpc);

#endif
