/* SPDX-License-Identifier: Apache-2.0 */
/* Listeners (see rpc_listen.h).
 *
 * nng 1.5.2 facts this relies on: NNG_OPT_IPC_PERMISSIONS set before start
 * makes nng chmod the socket between bind() and listen(), so nobody can
 * connect while it still has the umask's mode; a stale socket file (nobody
 * listening) is replaced, but a file that is not a socket would be unlinked
 * too, so that is checked first; NNG_OPT_RECVMAXSZ defaults to unlimited and
 * a larger message closes the connection; the server cannot read the client
 * certificate's names, only whether it was verified. */
#include "rpc_listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "conn_guard.h"
#include "nng_err.h"
#include "util.h"

#define PEM_BYTES_MAX (1 << 20)

/* ---- TLS ---- */

/* What holds a private key is wiped before it is freed. Every PEM buffer is
 * PEM_BYTES_MAX + 1 bytes, so the whole of it is, NULs and all. */
static void free_pemp(char **pem)
{
	if (*pem) {
		OPENSSL_cleanse(*pem, PEM_BYTES_MAX + 1);
		free(*pem);
	}
}
#define _cleanup_pem_ _cleanup_(free_pemp)

static void tls_config_freep(nng_tls_config **tls)
{
	if (*tls)
		nng_tls_config_free(*tls);
}

/* A whole PEM file as a C string (nng wants NUL-terminated PEM). */
static char *read_pem(const char *path, const char *key, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	_cleanup_pem_ char *buf = NULL;
	size_t len = 0;

	if (fd < 0) {
		sbx_fail_errno(err, "%s %s", key, path);
		return NULL;
	}
	buf = malloc(PEM_BYTES_MAX + 1);
	if (!buf) {
		sbx_fail_errnum(err, ENOMEM, "%s %s", key, path);
		return NULL;
	}
	while (len < PEM_BYTES_MAX) {
		ssize_t n = read(fd, buf + len, PEM_BYTES_MAX - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			sbx_fail_errno(err, "%s %s", key, path);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len == PEM_BYTES_MAX) {
		sbx_fail(err, "%s %s: larger than %d bytes", key, path, PEM_BYTES_MAX);
		return NULL;
	}
	buf[len] = '\0';
	return sbx_steal_ptr(buf);
}

/* The server's TLS config from cfg's files, and the sha256 of what they
 * held (a reload swaps only when it changed). */
static int tls_setup(const struct sbx_config *cfg, nng_tls_config **out, unsigned char digest[32],
		     unsigned char ca_digest[32], struct sbx_err *err)
{
	_cleanup_pem_ char *cert = NULL, *ca = NULL, *key = NULL;
	_cleanup_(tls_config_freep) nng_tls_config *tls = NULL;
	EVP_MD_CTX *md;
	unsigned int mdlen = 0;
	int rv, ok;

	if (!(cert = read_pem(cfg->tls_cert, "tls.cert", err)) ||
	    !(ca = read_pem(cfg->tls_client_ca, "tls.client_ca", err)) ||
	    !(key = read_pem(cfg->tls_key, "tls.key", err)))
		return -1;
	/* Each with its NUL, so that bytes moved between files differ. */
	md = EVP_MD_CTX_new();
	ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(md, cert, strlen(cert) + 1) &&
	     EVP_DigestUpdate(md, ca, strlen(ca) + 1) &&
	     EVP_DigestUpdate(md, key, strlen(key) + 1) && EVP_DigestFinal_ex(md, digest, &mdlen) &&
	     mdlen == 32 && EVP_Digest(ca, strlen(ca), ca_digest, &mdlen, EVP_sha256(), NULL) &&
	     mdlen == 32;
	EVP_MD_CTX_free(md);
	if (!ok)
		return sbx_fail(err, "TLS: sha256 of the tls files failed");
	if ((rv = nng_tls_config_alloc(&tls, NNG_TLS_MODE_SERVER)) != 0)
		return sbx_fail_nng(err, rv, "TLS");
	/* TLS 1.2 at least; 1.3 where the engine has it (mbedTLS 2.28 does
	 * not, and then says so). */
	if (nng_tls_config_version(tls, NNG_TLS_1_2, NNG_TLS_1_3) != 0 &&
	    (rv = nng_tls_config_version(tls, NNG_TLS_1_2, NNG_TLS_1_2)) != 0)
		return sbx_fail_nng(err, rv, "TLS version 1.2");
	if ((rv = nng_tls_config_own_cert(tls, cert, key, NULL)) != 0)
		return sbx_fail_nng(err, rv, "tls.cert %s with tls.key %s", cfg->tls_cert,
				    cfg->tls_key);
	if ((rv = nng_tls_config_ca_chain(tls, ca, NULL)) != 0)
		return sbx_fail_nng(err, rv, "tls.client_ca %s", cfg->tls_client_ca);
	/* Mutual TLS: a client without a certificate from client_ca never
	 * gets a pipe, let alone a request through. */
	if ((rv = nng_tls_config_auth_mode(tls, NNG_TLS_AUTH_MODE_REQUIRED)) != 0)
		return sbx_fail_nng(err, rv, "TLS client authentication");
	*out = sbx_steal_ptr(tls);
	return 0;
}

/* ---- ipc ---- */

/* mkdir -p of the socket's directory (0755: the socket's own mode is what
 * keeps strangers out). An existing non-socket at the path is refused,
 * since nng would unlink it as a stale socket. */
static int ipc_prepare(const char *path, struct sbx_err *err)
{
	char dir[SBX_LISTEN_URL_MAX + 8];
	struct stat st;
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		for (char *c = dir + 1; *c; c++) {
			if (*c != '/')
				continue;
			*c = '\0';
			if (mkdir(dir, 0755) < 0 && errno != EEXIST)
				return sbx_fail_errno(err, "ipc://%s: creating %s", path, dir);
			*c = '/';
		}
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return sbx_fail_errno(err, "ipc://%s: creating %s", path, dir);
	}
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
		return sbx_fail(err, "ipc://%s: exists and is not a socket", path);
	return 0;
}

/* ---- listeners ---- */

static int listen_one(nng_socket sock, const struct sbx_config *cfg, const char *url,
		      struct rpc_listeners *ls, struct sbx_err *err)
{
	struct rpc_listener *li = &ls->items[ls->n];
	const char *rest;
	nng_listener l;
	int rv;

	if (sbx_config_check_listen(cfg, url, url, err) < 0)
		return -1;
	li->scheme = sbx_listen_url_scheme(url, &rest);
	snprintf(li->url, sizeof(li->url), "%s", url);
	if (li->scheme == SBX_SCHEME_IPC && ipc_prepare(rest, err) < 0)
		return -1;
	if (li->scheme == SBX_SCHEME_TLS_TCP && !ls->tls &&
	    tls_setup(cfg, &ls->tls, ls->tls_digest, ls->ca_digest, err) < 0)
		return -1;

	if ((rv = nng_listener_create(&l, sock, url)) != 0)
		return sbx_fail_nng(err, rv, "cannot listen on %s", url);
	/* From here the socket owns l: nng_close(sock) closes it. */
	if ((rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)cfg->max_message_bytes)))
		return sbx_fail_nng(err, rv, "max_message_bytes on %s", url);
	switch (li->scheme) {
	case SBX_SCHEME_IPC:
		rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, (int)cfg->ipc_mode);
		break;
	case SBX_SCHEME_TLS_TCP:
		rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, ls->tls);
		if (rv == 0)
			rv = nng_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
		break;
	default:
		rv = nng_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
		break;
	}
	if (rv)
		return sbx_fail_nng(err, rv, "configuring %s", url);
	/* The guard must know the listener before its first connection. */
	conn_guard_listener(ls->n, li->scheme, li->scheme == SBX_SCHEME_IPC ? rest : NULL,
			    li->scheme == SBX_SCHEME_IPC ? 0 : atoi(strrchr(url, ':') + 1));
	if ((rv = nng_listener_start(l, 0)) != 0)
		return sbx_fail_nng(err, rv, "cannot listen on %s", url);
	li->l = l;
	if (li->scheme != SBX_SCHEME_IPC) {
		int port = 0;

		/* Port 0 asks the kernel for one: say which. */
		if (nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0) {
			const char *colon = strrchr(url, ':');

			conn_guard_listener(ls->n, li->scheme, NULL, port);
			snprintf(li->url, sizeof(li->url), "%.*s:%d", (int)(colon - url), url,
				 port);
		}
	}
	ls->n++;
	return 0;
}

int rpc_listen(nng_socket sock, const struct sbx_config *cfg, struct rpc_listeners *ls,
	       struct sbx_err *err)
{
	for (size_t i = 0; i < cfg->n_listen; i++)
		if (listen_one(sock, cfg, cfg->listen[i], ls, err) < 0)
			return -1;
	return 0;
}

/* nng 1.5.2 (src/supplemental/tls/tls_common.c): nng_tls_config_own_cert
 * and its kin on a config in use are not refused (its `busy` flag is never
 * set) but change what handshakes under way read, so a config is never
 * changed once given. NNG_OPT_TLS_CONFIG on a started listener is allowed:
 * it swaps the listener's config under its lock and drops the listener's
 * hold on the old one; every connection holds its own config from accept
 * to close, so open connections go on with the old certificate and new
 * ones get the new. One race is left: accept reads the listener's config
 * before it takes its hold, without the lock; our own reference to the
 * previous config (tls_prev) keeps it alive across that read until the
 * next reload. A listener is never re-created: its port stays bound. */
int rpc_listen_tls_reload(struct rpc_listeners *ls, const struct sbx_config *cfg, char *changed,
			  size_t size, struct sbx_err *err)
{
	_cleanup_(tls_config_freep) nng_tls_config *tls = NULL;
	unsigned char digest[32], ca_digest[32];
	size_t len;
	int rv;

	if (!ls->tls)
		return 0; /* no tls+tcp listener */
	if (!cfg->tls_cert || !cfg->tls_key || !cfg->tls_client_ca)
		return sbx_fail(err, "tls: the tls+tcp listeners need tls.cert, tls.key and "
				     "tls.client_ca");
	if (tls_setup(cfg, &tls, digest, ca_digest, err) < 0)
		return -1;
	if (!memcmp(digest, ls->tls_digest, sizeof(digest)))
		return 0;
	for (size_t i = 0; i < ls->n; i++)
		if (ls->items[i].scheme == SBX_SCHEME_TLS_TCP &&
		    (rv = nng_listener_set_ptr(ls->items[i].l, NNG_OPT_TLS_CONFIG, tls)) != 0) {
			/* Those before it serve the new one: the file is fine, so
			 * the next reload (with the same bytes) tries again. */
			memset(ls->tls_digest, 0, sizeof(ls->tls_digest));
			return sbx_fail_nng(err, rv, "tls: new certificate on %s",
					    ls->items[i].url);
		}
	if (ls->tls_prev)
		nng_tls_config_free(ls->tls_prev);
	ls->tls_prev = ls->tls;
	ls->tls = sbx_steal_ptr(tls);
	memcpy(ls->tls_digest, digest, sizeof(digest));
	len = strlen(changed);
	if (memcmp(ca_digest, ls->ca_digest, sizeof(ca_digest)) != 0) {
		/* A new client_ca is how a revoked client certificate is shut
		 * out (there is no CRL): connections verified by the old one,
		 * and the accept nng armed with the old config, must not go on
		 * for as long as their clients keep them. */
		memcpy(ls->ca_digest, ca_digest, sizeof(ca_digest));
		conn_guard_tls_revoke();
		if (len < size)
			snprintf(changed + len, size - len,
				 "%stls (client_ca: its connections closed)", len ? ", " : "");
		return 0;
	}
	if (len < size)
		snprintf(changed + len, size - len, "%stls", len ? ", " : "");
	return 0;
}

void rpc_listeners_free(struct rpc_listeners *ls)
{
	if (ls->tls)
		nng_tls_config_free(ls->tls);
	if (ls->tls_prev)
		nng_tls_config_free(ls->tls_prev);
	ls->tls = ls->tls_prev = NULL;
	ls->n = 0;
}

/* ---- peers ---- */

static void format_addr(const nng_sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	switch (sa->s_family) {
	case NNG_AF_INET:
		inet_ntop(AF_INET, &sa->s_in.sa_addr, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(sa->s_in.sa_port));
		break;
	case NNG_AF_INET6:
		inet_ntop(AF_INET6, sa->s_in6.sa_addr, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(sa->s_in6.sa_port));
		break;
	default:
		snprintf(buf, len, "unknown");
		break;
	}
}

bool rpc_peer_of(const struct rpc_listeners *ls, nng_msg *msg, struct rpc_peer *peer)
{
	nng_pipe p = nng_msg_get_pipe(msg);
	int lid = nng_listener_id(nng_pipe_listener(p));
	nng_sockaddr sa;

	memset(peer, 0, sizeof(*peer));
	for (size_t i = 0; i < ls->n; i++)
		if (lid > 0 && nng_listener_id(ls->items[i].l) == lid)
			peer->scheme = ls->items[i].scheme;
	if (peer->scheme == SBX_SCHEME_BAD)
		return false;
	if (peer->scheme == SBX_SCHEME_IPC) {
		uint64_t pid = 0;

		/* A uint64 option in 1.5.2: nng_pipe_get_int says EBADTYPE. */
		if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &peer->uid) != 0)
			return false;
		peer->have_uid = true;
		nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid);
		snprintf(peer->addr, sizeof(peer->addr), "uid %llu pid %llu",
			 (unsigned long long)peer->uid, (unsigned long long)pid);
		return true;
	}
	if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) == 0)
		format_addr(&sa, peer->addr, sizeof(peer->addr));
	else
		snprintf(peer->addr, sizeof(peer->addr), "unknown");
	if (peer->scheme == SBX_SCHEME_TLS_TCP &&
	    nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &peer->tls_verified) != 0)
		peer->tls_verified = false;
	return true;
}
