/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's connection guard: caps on the connections nng holds, applied to
 * each connection before nng negotiates it (conn_guard.c says how). */
#ifndef SBX_CONN_GUARD_H
#define SBX_CONN_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <nng/nng.h>

#include "config.h"
#include "err.h"
#include "listen_url.h"

/* Who is at the other end, as the caps count it: the uid on ipc, the IP
 * address (no port; IPv6: its /64) on tcp and tls+tcp. */
struct conn_peer_key {
	uint8_t b[17]; /* family byte, then the uid or the address */
};

/* Arms the guard for nlisteners listeners and hands it libnng's accept,
 * readv and close (common/nngfix); until then (and in programs that never
 * call it) they pass straight through. Fails unless libnng's calls bind to
 * the interposers, and unless the caps on every listener, plus reserve
 * descriptors that connections never take (runs, files), fit under
 * RLIMIT_NOFILE. */
int conn_guard_start(const struct sbx_config_connections *lim, size_t nlisteners, size_t reserve,
		     struct sbx_err *err);
/* conn_guard_start without the interposers: the accounting alone, which
 * a unit test then drives through the three calls below. */
int conn_guard_arm(const struct sbx_config_connections *lim, size_t nlisteners, size_t reserve,
		   struct sbx_err *err);
/* What the interposers report of libnng's own calls: a connection it
 * accepted (false: refuse it), n >= 0 bytes it read into iov (true: fail
 * the read with ECONNRESET, so that nng drops the pipe before it acts on
 * them), an fd it is about to close (its counts are given back). */
bool conn_guard_accepted(int fd);
bool conn_guard_read(int fd, const struct iovec *iov, int iovcnt, ssize_t n);
void conn_guard_closing(int fd);
/* The descriptors nlisteners listeners with caps lim may hold at once (what
 * conn_guard_start checks beside its reserve). */
size_t conn_guard_fds(const struct sbx_config_connections *lim, size_t nlisteners);
/* Listener i: its scheme and local address (the ipc socket's path; the tcp
 * port, 0 until it is bound). Before nng_listener_start and again once the
 * port is known; a connection to an address not registered is refused. */
void conn_guard_listener(size_t i, enum sbx_scheme scheme, const char *ipc_path, int port);
/* The RPC layer saw a pipe added whose peer is at sa: its connection is
 * past its handshake (a tls+tcp connection closed before this is logged
 * as a failed handshake). */
void conn_guard_pipe_added(const nng_sockaddr *sa);
/* Shuts down connections whose message has been arriving for longer than
 * message_seconds, and (ipc, tcp) those with no whole request
 * first_request_seconds after accept; nng then closes them as a peer that
 * hung up. */
void conn_guard_sweep(int64_t now_ms);
/* The tls+tcp listeners' client CA was replaced (a reload): every tls+tcp
 * connection open now is shut down, and so is the next one each tls+tcp
 * listener accepts (nng 1.5.2 arms each accept ahead with the config of
 * that moment: that one was verified by the old CA). Clients of the new
 * CA redial; those of the old one are refused at their handshake. */
void conn_guard_tls_revoke(void);
/* The metrics listener (server/metrics/metrics_http.c, nng's HTTP server)
 * on tcp port `port` (0: none): at most CONN_GUARD_HTTP_MAX connections
 * at once, over them refused at accept, each shut down
 * CONN_GUARD_HTTP_SECONDS after it was accepted (nng's HTTP server has no
 * bound of its own on either). They count against no RPC listener and no
 * peer. */
#define CONN_GUARD_HTTP_MAX	8
#define CONN_GUARD_HTTP_SECONDS 30
int conn_guard_http_listener(int port); /* -1: an RPC listener has that port */

/* Back to passing everything through (after the listeners are closed). */
void conn_guard_stop(void);

/* The key of the peer at the other end of an nng pipe; false if unknown. */
bool conn_peer_key_of_pipe(nng_pipe p, struct conn_peer_key *key);

#endif
