/* SPDX-License-Identifier: Apache-2.0 */
/* Authentication: every request gets an identity before it touches anything.
 *
 * The scheme:
 * - ipc://: the kernel says which uid connected (SO_PEERCRED); the socket's
 *   mode (ipc_mode, default 0660) and directory decide who may connect at
 *   all. Identity "uid:<uid>". A caller may still present a token, which must
 *   then be valid and wins ("token:<name>"), so one service can keep one
 *   identity on every transport.
 * - tls+tcp://: mutual TLS proves the client holds a key whose certificate
 *   chains to tls.client_ca, and keeps the bytes private. nng 1.5.2 cannot
 *   tell the server which certificate that was, so the identity comes from a
 *   bearer token in every Request.credentials: sbxd keeps only sha256(token)
 *   per name, hashes what it is given and compares against every entry in
 *   constant time. Identity "token:<name>". No token, or a wrong one:
 *   UNAUTHENTICATED.
 * - tcp:// (insecure: true only): the token alone, in clear text.
 *
 * Threat model. Holds against: a network attacker (no connection without a
 *   certificate from client_ca; tokens never cross the network unencrypted
 *   on tls+tcp); one caller posing as another (it needs the other's token);
 *   a leaked config file (it holds hashes of random tokens: generate them
 *   with `openssl rand -hex 32`, and sha256 of 256 random bits cannot be
 *   reversed, salt or not); timing (the comparison reads every entry).
 * Does not hold against: someone with both a client certificate and a
 *   stolen token (that is the identity; rotate the token: remove it from
 *   the config and reload sbxd, SIGHUP); low-entropy tokens (their unsalted hash
 *   can be brute-forced from a leaked config); anyone who can read traffic
 *   on tcp://, or a TLS-terminating proxy in between (both see tokens);
 *   revoked client certificates (no CRL is configured: rotate client_ca;
 *   a reload then ends the connections the old CA verified).
 *   Tokens are per caller and not bound to a request, so a captured one can
 *   be replayed for as long as it is configured. */
#include "rpc_auth.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "audit.h"
#include "clock.h"
#include "rpc_ratelimit.h"

/* An unauthenticated flood must not become an audit-log flood: at most this
 * many auth_failure lines per second, the rest counted in the next one. */
#define AUDIT_FAILURES_PER_SECOND 20

static struct rpc_ratelimit failures = RPC_RATELIMIT_INIT(AUDIT_FAILURES_PER_SECOND);

static void audit_failure(const struct rpc_peer *peer, const char *method, const char *reason)
{
	unsigned long suppressed;

	if (!rpc_ratelimit_take(&failures, sbx_mono_ms(), &suppressed))
		return;
	sbx_audit("auth_failure", NULL, NULL, NULL,
		  json_pack("{s:s, s:s, s:s, s:s, s:I}", "listener",
			    sbx_listen_scheme_name(peer->scheme), "peer", peer->addr, "method",
			    method, "reason", reason, "suppressed_before", (json_int_t)suppressed));
}

/* The index of the token whose hash matches, or -1. Every entry is compared
 * whatever the outcome, and without branching on any single comparison. */
static long find_token(const struct rpc_auth_table *cfg, const char *token)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	size_t found = 0, any = 0;

	if (!EVP_Digest(token, strlen(token), md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return -1;
	for (size_t i = 0; i < cfg->n_tokens; i++) {
		size_t eq = (size_t)(CRYPTO_memcmp(md, cfg->tokens[i].sha256, 32) == 0);
		size_t mask = (size_t)0 - eq;

		found = (found & ~mask) | (i & mask);
		any |= eq;
	}
	OPENSSL_cleanse(md, sizeof(md));
	return any ? (long)found : -1;
}

/* The operators are in the same table as the tokens, so a reload swaps
 * both at once. */
static bool is_operator(const struct rpc_auth_table *tab, const char *name)
{
	for (size_t i = 0; i < tab->n_operators; i++)
		if (!strcmp(tab->operators[i], name))
			return true;
	return false;
}

struct rpc_auth_table *rpc_auth_table_new(const struct sbx_config *cfg)
{
	struct rpc_auth_table *tab = calloc(1, sizeof(*tab));

	if (!tab)
		return NULL;
	tab->n_tokens = cfg->n_tokens;
	memcpy(tab->tokens, cfg->tokens, cfg->n_tokens * sizeof(cfg->tokens[0]));
	tab->n_operators = cfg->n_operators;
	memcpy(tab->operators, cfg->operators, cfg->n_operators * sizeof(cfg->operators[0]));
	return tab;
}

static bool has_token(const struct rpc_auth_table *tab, const struct sbx_token *t)
{
	for (size_t i = 0; i < tab->n_tokens; i++)
		if (!strcmp(tab->tokens[i].name, t->name) &&
		    !memcmp(tab->tokens[i].sha256, t->sha256, sizeof(t->sha256)))
			return true;
	return false;
}

size_t rpc_auth_table_changes(const struct rpc_auth_table *a, const struct rpc_auth_table *b)
{
	size_t n = 0;

	for (size_t i = 0; i < a->n_tokens; i++)
		n += !has_token(b, &a->tokens[i]);
	for (size_t i = 0; i < b->n_tokens; i++)
		n += !has_token(a, &b->tokens[i]);
	for (size_t i = 0; i < a->n_operators; i++)
		n += !is_operator(b, a->operators[i]);
	for (size_t i = 0; i < b->n_operators; i++)
		n += !is_operator(a, b->operators[i]);
	return n;
}

int rpc_auth(const struct rpc_auth_table *cfg, const struct rpc_peer *peer, const char *credentials,
	     const char *method, struct sbx_identity *who, struct sbx_rpc_status *st)
{
	const char *scheme = sbx_listen_scheme_name(peer->scheme);
	long t;

	who->name[0] = '\0';
	who->operator= false;
	/* Set before the token decides the name: a token caller on ipc is
	 * still the uid the kernel saw. */
	who->local = peer->scheme == SBX_SCHEME_IPC && peer->have_uid && peer->uid <= UINT32_MAX;
	who->local_uid = who->local ? (uint32_t)peer->uid : 0;
	if (peer->scheme == SBX_SCHEME_TLS_TCP && !peer->tls_verified) {
		/* The handshake already requires it; this is the belt to those
		 * braces, should the TLS configuration ever be loosened. */
		audit_failure(peer, method, "client certificate not verified");
		return sbx_rpc_fail(st, SBX__V1__CODE__UNAUTHENTICATED,
				    "client certificate not verified");
	}
	if (credentials && *credentials) {
		t = find_token(cfg, credentials);
		if (t < 0) {
			audit_failure(peer, method, "invalid token");
			return sbx_rpc_fail(st, SBX__V1__CODE__UNAUTHENTICATED,
					    "invalid token in Request.credentials");
		}
		snprintf(who->name, sizeof(who->name), "token:%s", cfg->tokens[t].name);
		who->operator= is_operator(cfg, who->name);
		return 0;
	}
	if (peer->scheme == SBX_SCHEME_IPC && peer->have_uid) {
		snprintf(who->name, sizeof(who->name), "uid:%llu", (unsigned long long)peer->uid);
		who->operator= is_operator(cfg, who->name);
		return 0;
	}
	audit_failure(peer, method, "missing token");
	return sbx_rpc_fail(st, SBX__V1__CODE__UNAUTHENTICATED,
			    "missing token: %s callers must present a bearer token in "
			    "Request.credentials",
			    scheme);
}
