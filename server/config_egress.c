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
#include "config_rules.h"
#include "hostname.h"
#include "path.h"
#include "policy.h"
#include "strict_json.h"
#include "text.h"

#define DEFAULT_HOSTS_FILE		   "/etc/hosts"
#define DEFAULT_RESOLV_CONF		   "/etc/resolv.conf"
#define DEFAULT_HEAD_SECONDS		   10
#define DEFAULT_LOOKUP_SECONDS		   5
#define DEFAULT_CONNECT_SECONDS		   10
#define DEFAULT_IDLE_SECONDS		   300
#define DEFAULT_CONNECTIONS_PER_RUN	   256
#define DEFAULT_CONNECTIONS_MAX		   4096
#define DEFAULT_RECORDS_PER_RUN		   256
#define DEFAULT_ACCEPTS_PER_RUN_PER_S	   50
#define DEFAULT_ACCEPTS_PER_IDENTITY_PER_S 100
#define PATH_LEN_MAX			   4095
#define CONNECTIONS_MAX			   (1 << 20)
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

int sbx_config_egress_defaults(struct sbx_config_egress *eg, struct sbx_err *err)
{
	*eg = (struct sbx_config_egress){
	    .head_seconds = DEFAULT_HEAD_SECONDS,
	    .lookup_seconds = DEFAULT_LOOKUP_SECONDS,
	    .connect_seconds = DEFAULT_CONNECT_SECONDS,
	    .idle_seconds = DEFAULT_IDLE_SECONDS,
	    .connections_per_run = DEFAULT_CONNECTIONS_PER_RUN,
	    .connections_max = DEFAULT_CONNECTIONS_MAX,
	    .records_per_run = DEFAULT_RECORDS_PER_RUN,
	    .accepts_per_run_per_second = DEFAULT_ACCEPTS_PER_RUN_PER_S,
	    .accepts_per_identity_per_second = DEFAULT_ACCEPTS_PER_IDENTITY_PER_S,
	};
	eg->hosts_file = strdup(DEFAULT_HOSTS_FILE);
	eg->resolv_conf = strdup(DEFAULT_RESOLV_CONF);
	return eg->hosts_file && eg->resolv_conf ? 0 : oom(err);
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
static int set_file(json_t *v, const char *where, char **out, struct sbx_err *err)
{
	const char *s, *problem;
	char *copy;

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

/* Every number of this section is a uint32_t (config_rules.h). */
#define get_u32(obj, where, key, min, max, out, err)                                               \
	config_get_int(obj, where, key, min, max, out, sizeof(uint32_t), err)

/* ---- destinations: "host:port" -> {limits}; 0 turns a limit off ---- */

static const char *const destination_keys[] = {"bytes_per_second", "connections_per_minute",
					       "max_concurrent", NULL};

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
	json_t *f;
	json_int_t n = 0;

	/* The key is the operator's, but it is quoted in a message that
	 * reaches a terminal: escaped, and cut short. */
	snprintf(cut, sizeof(cut), "%s", key);
	sbx_escape(quoted, sizeof(quoted), cut);
	snprintf(where, sizeof(where), "egress.destinations[\"%s\"]", quoted);
	if (!json_is_object(v))
		return sbx_fail(err, "%s: must be an object", where);
	if (sbx_json_check_keys(v, where, destination_keys, err) < 0)
		return -1;
	/* The slot is counted before it is filled, so that a failure below
	 * leaves nothing that sbx_config_egress_free would not free. */
	eg->n_destinations++;
	if (parse_destination_key(d, key, len, where, err) < 0)
		return -1;
	if (get_u32(v, where, "connections_per_minute", 0, SBX_EGRESS_CONNECTIONS_PER_MINUTE_MAX,
		    &d->connections_per_minute, err) < 0 ||
	    get_u32(v, where, "max_concurrent", 0, CONNECTIONS_MAX, &d->max_concurrent, err) < 0)
		return -1;
	if ((f = json_object_get(v, "bytes_per_second"))) {
		char at[WHERE_MAX + 32];

		snprintf(at, sizeof(at), "%s.bytes_per_second", where);
		if (sbx_json_int(f, at, 0, SBX_EGRESS_BYTES_PER_SECOND_MAX, &n, err) < 0)
			return -1;
		d->bytes_per_second = (uint64_t)n;
	}
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

static int parse_destinations(struct sbx_config_egress *eg, json_t *v, struct sbx_err *err)
{
	const char *key;
	size_t len;
	json_t *d;

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

static const char *const egress_keys[] = {"hosts_file",
					  "resolv_conf",
					  "head_seconds",
					  "lookup_seconds",
					  "connect_seconds",
					  "idle_seconds",
					  "connections_per_run",
					  "connections_max",
					  "records_per_run",
					  "accepts_per_run_per_second",
					  "accepts_per_identity_per_second",
					  "destinations",
					  NULL};

static int parse_egress(struct sbx_config_egress *eg, json_t *v, struct sbx_err *err)
{
	const char *w = "egress";
	json_t *f;

	if (!json_is_object(v))
		return sbx_fail(err, "egress: must be an object");
	if (sbx_json_check_keys(v, w, egress_keys, err) < 0)
		return -1;
	if ((f = json_object_get(v, "hosts_file")) &&
	    set_file(f, "egress.hosts_file", &eg->hosts_file, err) < 0)
		return -1;
	if ((f = json_object_get(v, "resolv_conf")) &&
	    set_file(f, "egress.resolv_conf", &eg->resolv_conf, err) < 0)
		return -1;
	if (get_u32(v, w, "head_seconds", 1, 3600, &eg->head_seconds, err) < 0 ||
	    get_u32(v, w, "lookup_seconds", 1, 300, &eg->lookup_seconds, err) < 0 ||
	    get_u32(v, w, "connect_seconds", 1, 300, &eg->connect_seconds, err) < 0 ||
	    get_u32(v, w, "idle_seconds", 1, 86400, &eg->idle_seconds, err) < 0 ||
	    get_u32(v, w, "connections_per_run", 1, CONNECTIONS_MAX, &eg->connections_per_run,
		    err) < 0 ||
	    get_u32(v, w, "connections_max", 1, CONNECTIONS_MAX, &eg->connections_max, err) < 0 ||
	    get_u32(v, w, "records_per_run", 1, RECORDS_PER_RUN_MAX, &eg->records_per_run, err) <
		0 ||
	    get_u32(v, w, "accepts_per_run_per_second", 1, 1000000, &eg->accepts_per_run_per_second,
		    err) < 0 ||
	    get_u32(v, w, "accepts_per_identity_per_second", 1, 1000000,
		    &eg->accepts_per_identity_per_second, err) < 0)
		return -1;
	/* As runs_max_per_identity follows runs_max: an unwritten per-run
	 * bound follows a smaller host-wide one. */
	if (config_follow(v, "connections_per_run", "egress.connections_per_run",
			  &eg->connections_per_run, eg->connections_max, "egress.connections_max",
			  err) < 0)
		return -1;
	if ((f = json_object_get(v, "destinations")) && parse_destinations(eg, f, err) < 0)
		return -1;
	return 0;
}

int sbx_config_parse_egress(struct sbx_config *cfg, void *root, struct sbx_err *err)
{
	json_t *v = json_object_get(root, "egress");

	return v ? parse_egress(&cfg->egress, v, err) : 0;
}
