/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config: the metrics listener's section ("metrics"): where
 * Prometheus scrapes sbxd (server/metrics/metrics_http.c), and whether
 * that may be an address other machines reach.
 *
 * The listener is plain HTTP with no authentication (what a scraper
 * expects): on a loopback address only a local process reads it; any
 * other address must be asked for in writing (allow_remote), and then a
 * firewall is the operator's (docs/operator/metrics.md). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_keys.h"
#include "strict_json.h"

/* "[ffff:...:ffff]:65535" and a little. */
#define LISTEN_LEN_MAX 64

int sbx_config_metrics_address(const char *s, bool *loopback, struct sbx_err *err)
{
	char host[LISTEN_LEN_MAX + 1];
	const char *colon = strrchr(s, ':'), *p;
	unsigned char a[16];
	size_t hl;
	long port = 0;

	if (strlen(s) > LISTEN_LEN_MAX || !colon || !colon[1])
		goto bad;
	for (p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9' || port > 65535)
			goto bad;
		port = port * 10 + (*p - '0');
	}
	if (port > 65535 || (colon[1] == '0' && colon[2]))
		goto bad;
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		memcpy(host, s + 1, hl - 2);
		host[hl - 2] = '\0';
		if (inet_pton(AF_INET6, host, a) != 1)
			goto bad;
		*loopback = !memcmp(a, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16);
		return 0;
	}
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (inet_pton(AF_INET, host, a) != 1)
		goto bad;
	*loopback = a[0] == 127;
	return 0;
bad:
	return sbx_fail(err,
			"metrics.listen: \"%.*s\" is not an IP address and port, as "
			"\"127.0.0.1:9464\" or \"[::1]:9464\" (port 0..65535; 0: any free one)",
			LISTEN_LEN_MAX, s);
}

static int set_listen(struct sbx_config *cfg, void *field, json_t *v, const char *where,
		      struct sbx_err *err)
{
	char **listen = field;
	const char *s;
	bool loopback;
	char *copy;

	(void)cfg, (void)where;
	if (sbx_json_string(v, "metrics.listen", &s, NULL, err) < 0)
		return -1;
	if (sbx_config_metrics_address(s, &loopback, err) < 0)
		return -1;
	if (!(copy = strdup(s)))
		return sbx_fail_errnum(err, ENOMEM, "config");
	free(*listen);
	*listen = copy;
	return 0;
}

/* After allow_remote's turn: an address other hosts can reach only when
 * the file says so. */
static int check_remote(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err)
{
	const struct sbx_config_metrics *m = base;
	bool loopback = true;

	(void)cfg, (void)obj;
	if (!m->listen || m->allow_remote)
		return 0;
	if (sbx_config_metrics_address(m->listen, &loopback, err) < 0)
		return -1;
	if (!loopback)
		return sbx_fail(
		    err,
		    "metrics.listen: \"%s\" is not a loopback address (127.0.0.0/8, "
		    "::1); the metrics are plain HTTP without authentication, so another "
		    "address needs \"metrics.allow_remote\": true",
		    m->listen);
	return 0;
}

#define ME(field) .offset = offsetof(struct sbx_config_metrics, field)
static const struct sbx_config_key metrics_keys[] = {
    {"listen", SBX_CONFIG_OTHER, ME(listen), .parse = set_listen, .type_doc = "string",
     .range_doc = "`IPv4:port` or `[IPv6]:port`; loopback unless `allow_remote`",
     .def_doc = "none: no metrics listener",
     .doc = "where Prometheus scrapes `GET /metrics` (plain HTTP, no authentication)"},
    {"allow_remote", SBX_CONFIG_BOOL, ME(allow_remote), .check = check_remote,
     .doc = "`listen` may be an address other than loopback"},
};
#undef ME

const struct sbx_config_section sbx_config_metrics_section = {
    "metrics",
    "The metrics listener ([metrics](../operator/metrics.md)): Prometheus text on `GET "
    "/metrics`, off unless `listen` is set. A reload does not move it: a change needs a "
    "restart.",
    metrics_keys,
    SBX_CONFIG_N(metrics_keys),
};

void sbx_config_metrics_free(struct sbx_config_metrics *m)
{
	free(m->listen);
	memset(m, 0, sizeof(*m));
}
