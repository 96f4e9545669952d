/* SPDX-License-Identifier: Apache-2.0 */
/* What a listener URL may be, and what each kind needs from the rest of the
 * configuration. One place, because the config file, the --listen flags and
 * the listeners all go by it. It knows nothing of struct sbx_config (the
 * config hands it a struct sbx_listen_have), so config.c and the RPC layer
 * both depend on it and it on neither. */
#ifndef SBX_LISTEN_URL_H
#define SBX_LISTEN_URL_H

#include <stdbool.h>

#include "err.h"

#define SBX_LISTEN_URL_MAX 300

enum sbx_scheme {
	SBX_SCHEME_BAD = 0,
	SBX_SCHEME_IPC,	    /* identity: the peer's uid (or a token) */
	SBX_SCHEME_TLS_TCP, /* mutual TLS + bearer token */
	SBX_SCHEME_TCP,	    /* insecure: true only; bearer token */
};

/* What the rest of the configuration offers a listener. */
struct sbx_listen_have {
	bool tls_files; /* tls.cert, tls.key and tls.client_ca are all set */
	bool tokens;	/* at least one entry in tokens */
	bool insecure;	/* insecure: true */
};

/* The scheme of url; *rest (if non-NULL) points just past "://". */
enum sbx_scheme sbx_listen_url_scheme(const char *url, const char **rest);
/* "ipc", "tls+tcp", "tcp" (for logs and the audit). */
const char *sbx_listen_scheme_name(enum sbx_scheme s);
/* Checks url's syntax and that have offers what its scheme needs. where
 * names it in the error ("listen[1]"). */
int sbx_listen_url_check(const char *url, const struct sbx_listen_have *have, const char *where,
			 struct sbx_err *err);

#endif
