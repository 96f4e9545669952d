/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the listener URL rules (server/config/listen_url.c), which the
 * config file, the --listen flags and the RPC layer's listeners all follow:
 * schemes, HOST:PORT and socket path syntax, and what each scheme needs
 * from the rest of the configuration. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "listen_url.h"

static const struct sbx_listen_have all = {.tls_files = true, .tokens = true, .insecure = true};

static void good(const char *url, const struct sbx_listen_have *have)
{
	struct sbx_err err = {0};

	if (!check(sbx_listen_url_check(url, have, "listen[0]", &err) == 0, "accepts %s", url))
		printf("#   %s\n", err.msg);
}

static void bad(const char *desc, const char *url, const struct sbx_listen_have *have,
		const char *want)
{
	struct sbx_err err = {0};
	int rc = sbx_listen_url_check(url, have, "listen[0]", &err);

	if (!check(rc < 0 && strcmp(err.msg, want) == 0, "rejects %s", desc))
		printf("#   want: %s\n#    got: %s\n", want, rc < 0 ? err.msg : "(accepted)");
}

static void test_schemes(void)
{
	const char *rest = NULL;

	check(sbx_listen_url_scheme("ipc:///run/sbx.sock", &rest) == SBX_SCHEME_IPC &&
		  strcmp(rest, "/run/sbx.sock") == 0,
	      "ipc:// and what follows it");
	check(sbx_listen_url_scheme("tls+tcp://h:1", &rest) == SBX_SCHEME_TLS_TCP &&
		  strcmp(rest, "h:1") == 0,
	      "tls+tcp://");
	check(sbx_listen_url_scheme("tcp://h:1", NULL) == SBX_SCHEME_TCP, "tcp://");
	check(sbx_listen_url_scheme("ws://h:1", NULL) == SBX_SCHEME_BAD &&
		  sbx_listen_url_scheme("IPC:///x", NULL) == SBX_SCHEME_BAD &&
		  sbx_listen_url_scheme("tls+tcp:/h:1", NULL) == SBX_SCHEME_BAD &&
		  sbx_listen_url_scheme("", NULL) == SBX_SCHEME_BAD,
	      "anything else is no scheme (case matters)");
	check(strcmp(sbx_listen_scheme_name(SBX_SCHEME_IPC), "ipc") == 0 &&
		  strcmp(sbx_listen_scheme_name(SBX_SCHEME_TLS_TCP), "tls+tcp") == 0 &&
		  strcmp(sbx_listen_scheme_name(SBX_SCHEME_TCP), "tcp") == 0 &&
		  strcmp(sbx_listen_scheme_name(SBX_SCHEME_BAD), "unknown") == 0,
	      "scheme names for logs and the audit");
}

static void test_syntax(void)
{
	char url[400];

	good("ipc:///run/sbx/sbxd.sock", &all);
	good("ipc://relative.sock", &all);
	good("tls+tcp://0.0.0.0:7443", &all);
	good("tls+tcp://[::1]:7444", &all);
	good("tls+tcp://:7443", &all);
	good("tcp://127.0.0.1:0", &all);
	good("tcp://host.example:65535", &all);

	bad("ipc:// without a path", "ipc://", &all, "listen[0]: ipc:// needs a socket path");
	snprintf(url, sizeof(url), "ipc:///%0107d", 0);
	bad("a socket path of 108 bytes", url, &all,
	    "listen[0]: socket path longer than 107 bytes");
	snprintf(url, sizeof(url), "ipc:///%0100d", 0);
	good(url, &all);
	snprintf(url, sizeof(url), "ipc:///%0295d", 0);
	bad("a URL of 301 bytes", url, &all, "listen[0]: longer than 300 bytes");
	bad("no port", "tls+tcp://h", &all, "listen[0]: tls+tcp:// needs HOST:PORT");
	bad("an empty port", "tcp://h:", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("port 65536", "tcp://h:65536", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("a port of six digits", "tcp://h:000080", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("a port that is not a number", "tcp://h:8o", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("an unbracketed IPv6 address", "tcp://::1:7000", &all,
	    "listen[0]: tcp:// needs HOST:PORT");
	bad("an unclosed bracket", "tcp://[::1:7000", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("a path after the host", "tcp://h/x:1", &all, "listen[0]: tcp:// needs HOST:PORT");
	bad("user info", "tls+tcp://u@h:1", &all, "listen[0]: tls+tcp:// needs HOST:PORT");
	bad("another scheme", "ws://h:1", &all,
	    "listen[0]: must start with ipc://, tls+tcp:// or tcp://");
}

static void test_needs(void)
{
	const struct sbx_listen_have none = {0};
	const struct sbx_listen_have no_tokens = {.tls_files = true, .insecure = true};
	const struct sbx_listen_have no_insecure = {.tls_files = true, .tokens = true};

	good("ipc:///run/s.sock", &none);
	bad("tls+tcp without the TLS files", "tls+tcp://h:1",
	    &(struct sbx_listen_have){.tokens = true},
	    "listen[0]: tls+tcp:// needs tls.cert, tls.key and tls.client_ca");
	bad("tls+tcp without tokens", "tls+tcp://h:1", &no_tokens,
	    "listen[0]: tls+tcp:// needs at least one entry in tokens");
	good("tls+tcp://h:1", &no_insecure);
	bad("tcp without insecure", "tcp://h:1", &no_insecure,
	    "listen[0]: tcp:// needs insecure: true (plain TCP is neither encrypted nor "
	    "authenticated)");
	bad("tcp without tokens", "tcp://h:1", &no_tokens,
	    "listen[0]: tcp:// needs at least one entry in tokens");
	good("tcp://h:1", &(struct sbx_listen_have){.tokens = true, .insecure = true});
}

int main(void)
{
	test_schemes();
	test_syntax();
	test_needs();
	return check_done();
}
