/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config: the egress proxy's section ("egress"): where names are
 * looked up, its timers, its bounds per run and host-wide, and the
 * host-wide limits on destinations that every run's allowlist shares.
 *
 * A policy says what one run may reach; these numbers say what the host
 * can afford for all of them together (a destination's rate limit across
 * every run, the connections sbxd holds open at once). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_keys.h"
#include "config_rules.h"
#include "hostname.h"
#include "path.h"
#include "policy.h"
#include "strict_json.h"
#include "text.h"

#define PATH_LEN_MAX	4095
#define CONNECTIONS_MAX (1 << 20)
/* Every kept record goes out in each Status: 4096 of them (a host name of
 * up to 253 bytes each) stay well inside a default 4 MiB message. */
#define RECORDS_PER_RUN_MAX 4096
/* The quoted "host:port" key in an error, cut short: the message has
 * room for the path and the reason after it. */
#define KEY_QUOTE_MAX 300
#define WHERE_MAX     (SBX_ESCAPE_SIZE(KEY_QUOTE_MAX) + 64)

static int oom(struct sbx_err *err)
{
	return sbx_fail_errnum(err, ENOMEM, "config");
}

void sbx_config_egress_free(struct sbx_config_egress *eg)
{
	free(eg->hosts_file);
	free(eg->resolv_conf);
	for (size_t i = 0; i < eg->n_destinations; i++)
		free(eg->destinations[i].host);
	memset(eg, 0, sizeof(*eg));
}

/* An absolute path, or "" for none (no hosts file: every name goes to the
 * nameservers; no resolv.conf: no nameserver, only the hosts file). */
static int set_file(struct sbx_config *cfg, void *field, json_t *v, const char *where,
		    struct sbx_err *err)
{
	char **out = field;
	const char *s, *problem;
	char *copy;

	(void)cfg;

	if (sbx_json_string(v, where, &s, NULL, err) < 0)
		return -1;
	if (*s && strlen(s) > PATH_LEN_MAX)
		return sbx_fail(err, "%s: longer than %d bytes", where, PATH_LEN_MAX);
	if (*s && (problem = sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_ABSOLUTE)))
		return sbx_fail(err, "%s: %s (or \"\" for none)", where, problem);
	if (!(copy = strdup(s)))
		return oom(err);
	free(*out);
	*out = copy;
	return 0;
}

/* ---- destinations: "host:port" -> {limits}; 0 turns a limit off ---- */

#define DEST(field) .offset = offsetof(struct sbx_egress_destination, field)
static const struct sbx_config_key destination_keys[] = {
    {"connections_per_minute", SBX_CONFIG_U32, 0, SBX_EGRESS_CONNECTIONS_PER_MINUTE_MAX, 0,
     DEST(connections_per_minute), .doc = "new connections a minute, every run together"},
    {"max_concurrent", SBX_CONFIG_U32, 0, CONNECTIONS_MAX, 0, DEST(max_concurrent),
     .doc = "connections open at once, every run together"},
    {"bytes_per_second", SBX_CONFIG_U64, 0, SBX_EGRESS_BYTES_PER_SECOND_MAX, 0,
     DEST(bytes_per_second), .doc = "both directions together, every run together"},
};
#undef DEST

const struct sbx_config_section sbx_config_destination_section = {
    "egress.destinations[\"host:port\"]",
    "`egress.destinations` maps \"host:port\" (normalized as a policy's allowlist "
    "entry, a wildcard `*.suffix` allowed; at most 256) to host-wide limits on that "
    "destination, across every run; 0 turns a limit off.",
    destination_keys,
    SBX_CONFIG_N(destination_keys),
};

/* "host:port" as an allowlist entry is written (a wildcard allowed); the
 * key's len bytes, since a JSON key may hold a NUL. */
static int parse_destination_key(struct sbx_egress_destination *d, const char *key, size_t len,
				 const char *where, struct sbx_err *err)
{
	const char *colon = memrchr(key, ':', len), *port = colon ? colon + 1 : NULL;
	size_t plen = port ? len - (size_t)(port - key) : 0;
	char host[SBX_HOSTNAME_BUF];
	enum sbx_host_kind kind;
	unsigned long n = 0;

	if (!colon)
		return sbx_fail(err, "%s: must be \"host:port\"", where);
	if (sbx_hostname_normalize(key, (size_t)(colon - key), true, false, host, &kind, err) < 0)
		return sbx_err_prefix(err, "%s: host", where);
	if (plen >= 1 && plen <= 5 && strspn(port, "0123456789") == plen)
		n = strtoul(port, NULL, 10);
	if (n < 1 || n > 65535)
		return sbx_fail(err, "%s: port must be 1..65535", where);
	d->port = (uint32_t)n;
	d->host = strdup(host);
	return d->host ? 0 : oom(err);
}

static int parse_destination(struct sbx_config_egress *eg, const char *key, size_t len, json_t *v,
			     struct sbx_err *err)
{
	struct sbx_egress_destination *d = &eg->destinations[eg->n_destinations];
	char quoted[SBX_ESCAPE_SIZE(KEY_QUOTE_MAX)], cut[KEY_QUOTE_MAX + 1], where[WHERE_MAX];

	/* The key is the operator's, but it is quoted in a message that
	 * reaches a terminal: escaped, and cut short. */
	snprintf(cut, sizeof(cut), "%s", key);
	sbx_escape(quoted, sizeof(quoted), cut);
	snprintf(where, sizeof(where), "egress.destinations[\"%s\"]", quoted);
	if (sbx_config_check_section(&sbx_config_destination_section, v, where, err) < 0)
		return -1;
	/* The slot is counted before it is filled, so that a failure below
	 * leaves nothing that sbx_config_egress_free would not free. */
	eg->n_destinations++;
	if (parse_destination_key(d, key, len, where, err) < 0)
		return -1;
	if (sbx_config_parse_keys(&sbx_config_destination_section, NULL, d, v, where, err) < 0)
		return -1;
	/* Two spellings of one destination ("A.example:443" and
	 * "a.example.:443") would give it two host-wide budgets. */
	for (size_t j = 0; j + 1 < eg->n_destinations; j++)
		if (eg->destinations[j].port == d->port &&
		    strcmp(eg->destinations[j].host, d->host) == 0)
			return sbx_fail(err, "%s: duplicate destination %s:%u", where, d->host,
					d->port);
	return 0;
}

static int cmp_destination(const void *a, const void *b)
{
	const struct sbx_egress_destination *x = a, *y = b;
	int c = strcmp(x->host, y->host);

	if (c)
		return c;
	return (x->port > y->port) - (x->port < y->port);
}

static int parse_destinations(struct sbx_config *cfg, void *field, json_t *v, const char *where,
			      struct sbx_err *err)
{
	struct sbx_config_egress *eg = &cfg->egress;
	const char *key;
	size_t len;
	json_t *d;

	(void)field, (void)where;
	if (!json_is_object(v))
		return sbx_fail(err, "egress.destinations: must be an object");
	if (json_object_size(v) > SBX_CONFIG_MAX_EGRESS_DESTINATIONS)
		return sbx_fail(err, "egress.destinations: at most %d entries",
				SBX_CONFIG_MAX_EGRESS_DESTINATIONS);
	json_object_keylen_foreach(v, key, len, d)
	{
		if (parse_destination(eg, key, len, d, err) < 0)
			return -1;
	}
	/* The order allowlist entries are matched in (policy.c's sort): the
	 * same destination covers a request whatever order the file has. */
	qsort(eg->destinations, eg->n_destinations, sizeof(eg->destinations[0]), cmp_destination);
	return 0;
}

/* ---- the section ---- */

/* As runs_max_per_identity follows runs_max: an unwritten per-run bound
 * follows a smaller host-wide one. */
static int follow_connections_max(struct sbx_config *cfg, void *base, json_t *obj,
				  struct sbx_err *err)
{
	struct sbx_config_egress *eg = base;

	(void)cfg;
	return config_follow(obj, "connections_per_run", "egress.connections_per_run",
			     &eg->connections_per_run, eg->connections_max,
			     "egress.connections_max", err);
}

#define EG(field) .offset = offsetof(struct sbx_config_egress, field)
static const struct sbx_config_key egress_keys[] = {
    {"hosts_file", SBX_CONFIG_ABS_PATH, EG(hosts_file), .def_str = "/etc/hosts", .parse = set_file,
     .type_doc = "absolute path or `\"\"`",
     .doc = "names are looked up here first; `\"\"`: no hosts file"},
    {"resolv_conf", SBX_CONFIG_ABS_PATH, EG(resolv_conf), .def_str = "/etc/resolv.conf",
     .parse = set_file, .type_doc = "absolute path or `\"\"`",
     .doc = "the nameservers; `\"\"`: none, the hosts file alone"},
    {"head_seconds", SBX_CONFIG_U32, 1, 3600, 10, EG(head_seconds),
     .doc = "from accept to a whole request head"},
    {"lookup_seconds", SBX_CONFIG_U32, 1, 300, 5, EG(lookup_seconds), .doc = "a name lookup"},
    {"connect_seconds", SBX_CONFIG_U32, 1, 300, 10, EG(connect_seconds),
     .doc = "a TCP connect to the destination"},
    {"idle_seconds", SBX_CONFIG_U32, 1, 86400, 300, EG(idle_seconds),
     .doc = "a relayed connection with no byte either way is closed after this"},
    {"connections_per_run", SBX_CONFIG_U32, 1, CONNECTIONS_MAX, 256, EG(connections_per_run),
     .doc = "open at once per run, heads included; at most `connections_max`"},
    {"connections_max", SBX_CONFIG_U32, 1, CONNECTIONS_MAX, 4096, EG(connections_max),
     .check = follow_connections_max, .doc = "open at once, every run together"},
    {"records_per_run", SBX_CONFIG_U32, 1, RECORDS_PER_RUN_MAX, 256, EG(records_per_run),
     .doc = "connection records kept for Status, the oldest summarized"},
    {"accepts_per_run_per_second", SBX_CONFIG_U32, 1, 1000000, 50, EG(accepts_per_run_per_second),
     .doc = "a run's new connections, bursts of twice as many"},
    {"accepts_per_identity_per_second", SBX_CONFIG_U32, 1, 1000000, 100,
     EG(accepts_per_identity_per_second),
     .doc = "an identity's runs' new connections together, bursts of twice as many"},
    {"destinations", SBX_CONFIG_OTHER, .parse = parse_destinations,
     .section = &sbx_config_destination_section, .type_doc = "object", .def_doc = "none",
     .doc = "host-wide limits on destinations"},
};
#undef EG

const struct sbx_config_section sbx_config_egress_section = {
    "egress",
    "sbxd's egress proxy (server/egress/, [egress](../operator/egress.md)): where names "
    "are looked up, its timers, its bounds per run and host-wide.",
    egress_keys,
    SBX_CONFIG_N(egress_keys),
};
