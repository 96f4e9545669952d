/* What a listener URL may be, and what each kind needs from the rest of the
 * configuration. One place, because both the config file and --listen flags
 * are checked against it, and the listeners rely on it. No nng here, so the
 * config's unit test can use it. */
#ifndef SBX_RPC_URL_H
#define SBX_RPC_URL_H

#include "config.h"
#include "err.h"

#define SBX_RPC_URL_MAX 300

enum sbx_scheme {
	SBX_SCHEME_BAD = 0,
	SBX_SCHEME_IPC,	    /* identity: the peer's uid (or a token) */
	SBX_SCHEME_TLS_TCP, /* mutual TLS + bearer token */
	SBX_SCHEME_TCP,	    /* insecure: true only; bearer token */
};

/* The scheme of url; *rest (if non-NULL) points just past "://". */
enum sbx_scheme sbx_rpc_url_scheme(const char *url, const char **rest);
/* "ipc", "tls+tcp", "tcp" (for logs and the audit). */
const char *sbx_rpc_scheme_name(enum sbx_scheme s);
/* Checks url's syntax and that cfg has what its scheme needs (TLS files,
 * tokens, insecure). where names it in the error ("listen[1]"). */
int sbx_rpc_url_check(const struct sbx_config *cfg, const char *url, const char *where,
		      struct sbx_err *err);

#endif
