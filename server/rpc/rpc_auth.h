/* SPDX-License-Identifier: Apache-2.0 */
/* Who is calling: the transport's word plus, across hosts, a bearer token.
 * See rpc_auth.c for the scheme and its threat model. */
#ifndef SBX_RPC_AUTH_H
#define SBX_RPC_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "listen_url.h"
#include "service.h"

/* What the transport says about the connection a request came on. */
struct rpc_peer {
	enum sbx_scheme scheme;
	bool have_uid; /* ipc: SO_PEERCRED of the connecting process */
	uint64_t uid;
	bool tls_verified; /* tls+tcp: the client certificate chained to client_ca */
	char addr[96];	   /* for the audit: "192.0.2.7:41234", "uid 1000 pid 42" */
};

/* Everything authentication decides by, from one config: what a reload
 * (SIGHUP) swaps as one (rpc_server.c), so that a call is judged wholly by
 * the old table or wholly by the new: the tokens and the operators. */
struct rpc_auth_table {
	struct sbx_token tokens[SBX_CONFIG_MAX_TOKENS];
	size_t n_tokens;
	char operators[SBX_CONFIG_MAX_OPERATORS][SBX_CONFIG_IDENTITY_MAX];
	size_t n_operators;
};

/* A table of cfg's, or NULL (out of memory); free() it. */
struct rpc_auth_table *rpc_auth_table_new(const struct sbx_config *cfg);
/* The names of the tokens and operators that differ between the tables
 * (added, removed, or a token's name with another hash): 0 when none. */
size_t rpc_auth_table_changes(const struct rpc_auth_table *a, const struct rpc_auth_table *b);

/* Fills who, or sets st to UNAUTHENTICATED and writes an "auth_failure"
 * audit event (rate-limited) and returns -1. credentials is the envelope's
 * bearer token ("" when absent); method is only for the audit. */
int rpc_auth(const struct rpc_auth_table *tab, const struct rpc_peer *peer, const char *credentials,
	     const char *method, struct sbx_identity *who, struct sbx_rpc_status *st);

#endif
