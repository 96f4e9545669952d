/* SPDX-License-Identifier: Apache-2.0 */
/* The listeners of sbxd's one REP socket, and what they say about the
 * connection a request came on. */
#ifndef SBX_RPC_LISTEN_H
#define SBX_RPC_LISTEN_H

#include <stddef.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "config.h"
#include "err.h"
#include "listen_url.h"
#include "rpc_auth.h"

struct rpc_listener {
	nng_listener l;
	enum sbx_scheme scheme;
	char url[SBX_LISTEN_URL_MAX + 8]; /* as bound: a tcp port 0 is the real one */
};

struct rpc_listeners {
	struct rpc_listener items[SBX_CONFIG_MAX_LISTEN];
	size_t n;
	nng_tls_config *tls; /* shared by every tls+tcp listener */
	/* The one a reload replaced: kept until the next replaces it, because
	 * nng 1.5.2's accept reads the listener's config without its lock
	 * before taking a hold on it (rpc_listen_tls_reload). */
	nng_tls_config *tls_prev;
	unsigned char tls_digest[32]; /* sha256 of cert, client CA and key as read */
	unsigned char ca_digest[32];  /* sha256 of the client CA alone */
};

/* Starts one listener per cfg->listen URL on sock: RECVMAXSZ on each; ipc:
 * parent directory created, socket mode ipc_mode before it accepts anyone;
 * tls+tcp: server certificate, client certificate required. */
int rpc_listen(nng_socket sock, const struct sbx_config *cfg, struct rpc_listeners *ls,
	       struct sbx_err *err);
/* SIGHUP: when cfg's tls files (read now) differ from what the tls+tcp
 * listeners serve, a new TLS config for every one of them; appends "tls"
 * to changed. When the client CA changed, every connection made under
 * the old one is ended (conn_guard_tls_revoke). Nothing changes on an
 * error. */
int rpc_listen_tls_reload(struct rpc_listeners *ls, const struct sbx_config *cfg, char *changed,
			  size_t size, struct sbx_err *err);
/* After nng_close of the socket (which closes the listeners). */
void rpc_listeners_free(struct rpc_listeners *ls);

/* What the transport says about the pipe msg came on. false: the pipe is
 * gone or not one of ours; drop the request. */
bool rpc_peer_of(const struct rpc_listeners *ls, nng_msg *msg, struct rpc_peer *peer);

#endif
