/* SPDX-License-Identifier: Apache-2.0 */
/* Listener URLs: ipc://PATH, tls+tcp://HOST:PORT, tcp://HOST:PORT.
 *
 * nng would accept more (ws://, abstract sockets, ...) but every scheme here
 * has an answer to "who is calling", and nothing else does. */
#include "listen_url.h"

#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "util.h"

/* clang-format off */
static const struct {
	const char *prefix;
	enum sbx_scheme scheme;
	const char *name;
} schemes[] = {
	{"ipc://", SBX_SCHEME_IPC, "ipc"},
	{"tls+tcp://", SBX_SCHEME_TLS_TCP, "tls+tcp"},
	{"tcp://", SBX_SCHEME_TCP, "tcp"},
};
/* clang-format on */

enum sbx_scheme sbx_listen_url_scheme(const char *url, const char **rest)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schemes); i++) {
		size_t n = strlen(schemes[i].prefix);

		if (strncmp(url, schemes[i].prefix, n) == 0) {
			if (rest)
				*rest = url + n;
			return schemes[i].scheme;
		}
	}
	return SBX_SCHEME_BAD;
}

const char *sbx_listen_scheme_name(enum sbx_scheme s)
{
	for (size_t i = 0; i < SBX_ARRAY_SIZE(schemes); i++)
		if (schemes[i].scheme == s)
			return schemes[i].name;
	return "unknown";
}

/* HOST:PORT with HOST possibly empty (every address) or [v6]; PORT 0..65535
 * (0: the kernel picks one, and sbxd prints which). */
static bool is_host_port(const char *s)
{
	const char *colon = strrchr(s, ':');
	const char *p;
	long port;

	if (!colon || !colon[1] || strlen(colon + 1) > 5)
		return false;
	for (p = colon + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	port = strtol(colon + 1, NULL, 10);
	if (port > 65535)
		return false;
	/* A bare IPv6 address without brackets would have its last group
	 * taken for the port. */
	if (s[0] == '[')
		return colon > s && colon[-1] == ']';
	return memchr(s, ':', (size_t)(colon - s)) == NULL && !strpbrk(s, "/?#@ ");
}

static int check_ipc(const char *path, const char *where, struct sbx_err *err)
{
	if (!*path)
		return sbx_fail(err, "%s: ipc:// needs a socket path", where);
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return sbx_fail(err, "%s: socket path longer than %zu bytes", where,
				sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	return 0;
}

int sbx_listen_url_check(const char *url, const struct sbx_listen_have *have, const char *where,
			 struct sbx_err *err)
{
	const char *rest;

	if (strlen(url) > SBX_LISTEN_URL_MAX)
		return sbx_fail(err, "%s: longer than %d bytes", where, SBX_LISTEN_URL_MAX);
	switch (sbx_listen_url_scheme(url, &rest)) {
	case SBX_SCHEME_IPC:
		return check_ipc(rest, where, err);
	case SBX_SCHEME_TLS_TCP:
		if (!is_host_port(rest))
			return sbx_fail(err, "%s: tls+tcp:// needs HOST:PORT", where);
		if (!have->tls_files)
			return sbx_fail(err,
					"%s: tls+tcp:// needs tls.cert, tls.key and "
					"tls.client_ca",
					where);
		/* nng 1.5.2 cannot say which client certificate was shown, so
		 * without tokens nobody could be told apart, or let in. */
		if (!have->tokens)
			return sbx_fail(err, "%s: tls+tcp:// needs at least one entry in tokens",
					where);
		return 0;
	case SBX_SCHEME_TCP:
		if (!is_host_port(rest))
			return sbx_fail(err, "%s: tcp:// needs HOST:PORT", where);
		if (!have->insecure)
			return sbx_fail(err,
					"%s: tcp:// needs insecure: true (plain TCP is "
					"neither encrypted nor authenticated)",
					where);
		if (!have->tokens)
			return sbx_fail(err, "%s: tcp:// needs at least one entry in tokens",
					where);
		return 0;
	default:
		return sbx_fail(err, "%s: must start with ipc://, tls+tcp:// or tcp://", where);
	}
}
