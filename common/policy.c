/* SPDX-License-Identifier: Apache-2.0 */
/* The run policy codec: strict JSON in, canonical protobuf out.
 *
 * The JSON is a security document, so nothing in it is guessed at: every key
 * is known, every value has one type and one range, and every error names the
 * JSON path a reviewer would point at. The protobuf message is built by hand
 * from malloc'd pieces so that protobuf-c's free_unpacked can release it, and
 * its repeated fields are sorted so that equal policies digest equally. */
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "hostname.h"
#include "image_ref.h"
#include "path.h"
#include "policy_ranges.h"
#include "sha256.h"
#include "strict_json.h"
#include "util.h"

#define IMAGE_PATH_MAX 4096
#define ENV_NAME_MAX   256
#define ENV_VALUE_MAX  32768

/* Paths we build: "egress.allow[255]" (WHERE_MAX) and one key below it. */
#define WHERE_MAX	64
#define FIELD_WHERE_MAX (WHERE_MAX + 32)
/* A row of the range table (policy_ranges.h). */
#define RANGE(id) (&sbx_policy_ranges[SBX_RANGE_##id])

/* Every problem of a document is reported, one line each with its JSON
 * path, up to PROBLEMS_MAX lines and what fits an sbx_err; a section (or an
 * item of a list) that fails is recorded and parsing goes on with the
 * next. A section's parser returns RECORDED when it recorded its items'
 * problems itself. */
#define PROBLEMS_MAX 20
#define RECORDED     (-2)

struct problems {
	struct sbx_err *err; /* the report so far */
	unsigned n, left_out;
};

static void problem(struct problems *pr, const struct sbx_err *one)
{
	size_t used = strlen(pr->err->msg), len = strlen(one->msg);

	if (pr->n == 0) {
		*pr->err = *one;
	} else if (pr->n < PROBLEMS_MAX && used + 1 + len < sizeof(pr->err->msg)) {
		pr->err->msg[used] = '\n';
		memcpy(pr->err->msg + used + 1, one->msg, len + 1);
	} else {
		pr->left_out++;
	}
	pr->n++;
}

/* A section's outcome into pr: -1 (its one problem in one), RECORDED or 0. */
static void section(struct problems *pr, int rc, const struct sbx_err *one)
{
	if (rc == -1)
		problem(pr, one);
}

/* More than one: a first line that says how many, and how many were left out. */
static int problems_done(struct problems *pr)
{
	char head[64], tail[64] = "";
	size_t hl, tl, used;

	if (pr->n <= 1)
		return pr->n ? -1 : 0;
	snprintf(head, sizeof(head), "policy: %u problems:\n", pr->n);
	if (pr->left_out)
		snprintf(tail, sizeof(tail), "\n(%u more not listed)", pr->left_out);
	hl = strlen(head);
	tl = strlen(tail);
	used = strlen(pr->err->msg);
	/* The lines that fit beside the head and tail: whole ones. */
	while (used + hl + tl >= sizeof(pr->err->msg)) {
		char *nl = strrchr(pr->err->msg, '\n');

		if (!nl)
			break;
		*nl = '\0';
		used = strlen(pr->err->msg);
		pr->left_out++;
		snprintf(tail, sizeof(tail), "\n(%u more not listed)", pr->left_out);
		tl = strlen(tail);
	}
	if (used + hl >= sizeof(pr->err->msg)) { /* one long line: cut */
		used = sizeof(pr->err->msg) - hl - 1;
		pr->err->msg[used] = '\0';
	}
	memmove(pr->err->msg + hl, pr->err->msg, used + 1);
	memcpy(pr->err->msg, head, hl);
	if (hl + used + tl < sizeof(pr->err->msg))
		memcpy(pr->err->msg + hl + used, tail, tl + 1);
	pr->err->errnum = 0;
	return -1;
}

void sbx_policy_problems_one_line(struct sbx_err *err)
{
	char out[sizeof(err->msg)];
	size_t o = 0;

	for (const char *s = err->msg; *s && o + 2 < sizeof(out); s++) {
		if (*s != '\n') {
			out[o++] = *s;
			continue;
		}
		if (o && out[o - 1] != ':')
			out[o++] = ';';
		out[o++] = ' ';
	}
	out[o] = '\0';
	memcpy(err->msg, out, o + 1);
}

void sbx_policy_freep(SbxPolicy **p)
{
	sbx_policy_free(*p);
}

static int oom(struct sbx_err *err)
{
	return sbx_fail_errnum(err, ENOMEM, "policy");
}

/* ---- image ---- */

/* A rootfs directory: absolute, and no ".." component (it is opened as
 * given, so "." or "//" are harmless spellings). */
static bool is_rootfs_path(const char *s)
{
	return s[0] == '/' && !sbx_path_problem(s, IMAGE_PATH_MAX, SBX_PATH_NO_DOTDOT);
}

static int parse_image(SbxPolicy *p, json_t *v, struct sbx_err *err)
{
	const char *s;

	if (!v)
		return sbx_fail(err, "image: missing");
	if (sbx_json_string(v, "image", &s, NULL, err) < 0)
		return -1;
	/* name:tag without a pin parses: whether it may run is the store's
	 * rule (sbxd's images.allow_unpinned), not the document's. */
	struct sbx_image_ref ref;
	if (strcmp(s, "host") != 0 && !is_rootfs_path(s) &&
	    sbx_image_ref_parse(s, false, &ref, err) < 0)
		return sbx_err_prefix(err, "image: must be \"host\", an absolute rootfs path, "
					   "name:tag or name:tag@sha256:<64 hex>");
	p->image = strdup(s);
	return p->image ? 0 : oom(err);
}

/* ---- mounts ---- */

static const char *const mount_keys[] = {"path", "mode", NULL};

static Sbx__V1__Mount *mount_new(const char *path, Sbx__V1__Mount__Mode mode)
{
	Sbx__V1__Mount *m = malloc(sizeof(*m));

	if (!m)
		return NULL;
	sbx__v1__mount__init(m);
	m->path = strdup(path);
	if (!m->path) {
		free(m);
		return NULL;
	}
	m->mode = mode;
	return m;
}

static int parse_mount_mode(json_t *m, size_t i, const char *path, Sbx__V1__Mount__Mode *mode,
			    struct sbx_err *err)
{
	Sbx__V1__Mount__Mode want =
	    strcmp(path, "/data") == 0 ? SBX__V1__MOUNT__MODE__RO : SBX__V1__MOUNT__MODE__RW;
	char where[WHERE_MAX];
	json_t *v = json_object_get(m, "mode");
	const char *s;

	snprintf(where, sizeof(where), "mounts[%zu].mode", i);
	if (!v)
		return sbx_fail(err, "%s: missing", where);
	if (sbx_json_string(v, where, &s, NULL, err) < 0)
		return -1;
	if (strcmp(s, "ro") == 0)
		*mode = SBX__V1__MOUNT__MODE__RO;
	else if (strcmp(s, "rw") == 0)
		*mode = SBX__V1__MOUNT__MODE__RW;
	else
		return sbx_fail(err, "%s: must be \"ro\" or \"rw\"", where);
	if (*mode != want)
		return sbx_fail(err, "%s: %s must be %s", where, path,
				want == SBX__V1__MOUNT__MODE__RO ? "ro" : "rw");
	return 0;
}

static int parse_mount(SbxPolicy *p, json_t *m, size_t i, struct sbx_err *err)
{
	char where[WHERE_MAX];
	Sbx__V1__Mount__Mode mode = SBX__V1__MOUNT__MODE__MODE_UNSPECIFIED;
	const char *path;
	json_t *v;

	snprintf(where, sizeof(where), "mounts[%zu]", i);
	if (!json_is_object(m))
		return sbx_fail(err, "%s: must be an object", where);
	if (sbx_json_check_keys(m, where, mount_keys, err) < 0)
		return -1;

	snprintf(where, sizeof(where), "mounts[%zu].path", i);
	v = json_object_get(m, "path");
	if (!v)
		return sbx_fail(err, "%s: missing", where);
	if (sbx_json_string(v, where, &path, NULL, err) < 0)
		return -1;
	if (path[0] != '/')
		return sbx_fail(err, "%s: must be an absolute path", where);
	if (sbx_path_problem(path, SIZE_MAX, SBX_PATH_ABSOLUTE))
		return sbx_fail(err, "%s: must be normalised (no trailing '/', '//', '.' or '..')",
				where);
	if (strcmp(path, "/data") != 0 && strcmp(path, "/out") != 0)
		return sbx_fail(err, "%s: only /data (ro) and /out (rw) can be mounted", where);
	for (size_t j = 0; j < p->n_mounts; j++)
		if (strcmp(p->mounts[j]->path, path) == 0)
			return sbx_fail(err, "%s: duplicate mount path %s", where, path);

	if (parse_mount_mode(m, i, path, &mode, err) < 0)
		return -1;
	p->mounts[p->n_mounts] = mount_new(path, mode);
	if (!p->mounts[p->n_mounts])
		return oom(err);
	p->n_mounts++;
	return 0;
}

static int cmp_mount(const void *a, const void *b)
{
	const Sbx__V1__Mount *const *x = a, *const *y = b;

	return strcmp((*x)->path, (*y)->path);
}

static int default_mounts(SbxPolicy *p, struct sbx_err *err)
{
	p->mounts = calloc(2, sizeof(*p->mounts));
	if (!p->mounts)
		return oom(err);
	p->mounts[0] = mount_new("/data", SBX__V1__MOUNT__MODE__RO);
	if (!p->mounts[0])
		return oom(err);
	p->n_mounts = 1;
	p->mounts[1] = mount_new("/out", SBX__V1__MOUNT__MODE__RW);
	if (!p->mounts[1])
		return oom(err);
	p->n_mounts = 2;
	return 0;
}

static int parse_mounts(SbxPolicy *p, json_t *v, struct problems *pr, struct sbx_err *err)
{
	size_t n;
	int rc = 0;

	if (!v)
		return default_mounts(p, err);
	if (!json_is_array(v))
		return sbx_fail(err, "mounts: must be an array");
	n = json_array_size(v);
	if (n == 0)
		return 0;
	/* Only two paths exist and duplicates fail, so a third entry always
	 * fails before it needs a slot. */
	p->mounts = calloc(n < 2 ? n : 2, sizeof(*p->mounts));
	if (!p->mounts)
		return oom(err);
	for (size_t i = 0; i < n; i++)
		if (parse_mount(p, json_array_get(v, i), i, err) < 0) {
			problem(pr, err);
			rc = RECORDED;
		}
	qsort(p->mounts, p->n_mounts, sizeof(*p->mounts), cmp_mount);
	return rc;
}

/* ---- env ---- */

static int check_env_name(const char *name, size_t len, struct sbx_err *err)
{
	if (len == 0)
		return sbx_fail(err, "env.: name must not be empty");
	if (strlen(name) != len)
		return sbx_fail(err, "env.%s: name must not contain NUL", name);
	if (len > ENV_NAME_MAX)
		return sbx_fail(err, "env.%s: name must be at most %d bytes", name, ENV_NAME_MAX);
	if (strchr(name, '='))
		return sbx_fail(err, "env.%s: name must not contain '='", name);
	return 0;
}

static int check_env_value(const char *name, json_t *v, struct sbx_err *err)
{
	if (!json_is_string(v))
		return sbx_fail(err, "env.%s: must be a string", name);
	if (strlen(json_string_value(v)) != json_string_length(v))
		return sbx_fail(err, "env.%s: value must not contain NUL", name);
	if (json_string_length(v) > ENV_VALUE_MAX)
		return sbx_fail(err, "env.%s: value must be at most %d bytes", name, ENV_VALUE_MAX);
	return 0;
}

int sbx_policy_env_check(const char *name, size_t name_len, const char *value, size_t value_len,
			 struct sbx_err *err)
{
	if (check_env_name(name, name_len, err) < 0)
		return -1;
	if (strlen(value) != value_len)
		return sbx_fail(err, "env.%s: value must not contain NUL", name);
	if (value_len > ENV_VALUE_MAX)
		return sbx_fail(err, "env.%s: value must be at most %d bytes", name, ENV_VALUE_MAX);
	return 0;
}

static int add_env(SbxPolicy *p, const char *name, const char *value, struct sbx_err *err)
{
	Sbx__V1__EnvVar *e = malloc(sizeof(*e));

	if (!e)
		return oom(err);
	sbx__v1__env_var__init(e);
	e->name = strdup(name);
	e->value = strdup(value);
	if (!e->name || !e->value) {
		sbx__v1__env_var__free_unpacked(e, NULL);
		return oom(err);
	}
	p->env[p->n_env++] = e;
	return 0;
}

static int cmp_env(const void *a, const void *b)
{
	const Sbx__V1__EnvVar *const *x = a, *const *y = b;

	return strcmp((*x)->name, (*y)->name);
}

static int parse_env(SbxPolicy *p, json_t *v, struct problems *pr, struct sbx_err *err)
{
	int rc = 0;

	if (!v)
		return 0;
	if (!json_is_object(v))
		return sbx_fail(err, "env: must be an object");
	if ((long long)json_object_size(v) > RANGE(ENV)->max)
		return sbx_fail(err, "env: at most %lld entries", RANGE(ENV)->max);
	if (json_object_size(v) == 0)
		return 0;
	p->env = calloc(json_object_size(v), sizeof(*p->env));
	if (!p->env)
		return oom(err);
	for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
		const char *name = json_object_iter_key(it);
		json_t *val = json_object_iter_value(it);

		if (check_env_name(name, json_object_iter_key_len(it), err) < 0 ||
		    check_env_value(name, val, err) < 0 ||
		    add_env(p, name, json_string_value(val), err) < 0) {
			problem(pr, err);
			rc = RECORDED;
		}
	}
	/* Duplicate names were already refused by the parser. */
	qsort(p->env, p->n_env, sizeof(*p->env), cmp_env);
	return rc;
}

/* ---- egress ---- */

static const char *const egress_keys[] = {"policy", "allow", "alert_bytes", "max_bytes", NULL};
static const char *const rule_keys[] = {
    "host",	     "port", "connections_per_minute", "bytes_per_second", "max_concurrent",
    "allow_private", NULL};

static bool is_digits(const char *s, size_t len)
{
	if (len == 0)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* The host in the one normal form the proxy compares requests in
 * (common/hostname.h): a name, "*." + a name or a dotted quad; IPv6
 * literals have no place in a policy. at is the JSON path of the host. */
static int set_rule_host(Sbx__V1__EgressRule *r, const char *host, size_t len, const char *at,
			 struct sbx_err *err)
{
	char norm[SBX_HOSTNAME_BUF];
	enum sbx_host_kind kind;

	if (sbx_hostname_normalize(host, len, true, false, norm, &kind, err) < 0)
		return sbx_err_prefix(err, "%s", at);
	r->host = strdup(norm);
	return r->host ? 0 : oom(err);
}

/* "host:port". The host part never holds ':', so the last one splits. */
static int parse_rule_string(Sbx__V1__EgressRule *r, const char *s, size_t len, const char *where,
			     struct sbx_err *err)
{
	const char *colon = memrchr(s, ':', len);
	const char *port = colon ? colon + 1 : NULL;
	size_t plen = port ? len - (size_t)(port - s) : 0;
	char at[FIELD_WHERE_MAX];
	unsigned long n;

	if (!colon)
		return sbx_fail(err, "%s: must be \"host:port\"", where);
	snprintf(at, sizeof(at), "%s: host", where);
	if (set_rule_host(r, s, (size_t)(colon - s), at, err) < 0)
		return -1;
	n = is_digits(port, plen) && plen <= 5 ? strtoul(port, NULL, 10) : 0;
	if ((long long)n < RANGE(RULE_PORT)->min || (long long)n > RANGE(RULE_PORT)->max)
		return sbx_fail(err, "%s: port must be %lld..%lld", where, RANGE(RULE_PORT)->min,
				RANGE(RULE_PORT)->max);
	r->port = (uint32_t)n;
	r->connections_per_minute = (uint32_t)RANGE(RULE_CONNECTIONS_PER_MINUTE)->def;
	r->max_concurrent = (uint32_t)RANGE(RULE_MAX_CONCURRENT)->def;
	return 0;
}

/* An integer field of an entry object: the row's min..max when written,
 * its default when not (required: no default). */
static int rule_field_int(json_t *o, const struct sbx_policy_range *row, const char *where,
			  bool required, json_int_t *out, struct sbx_err *err)
{
	const char *key = sbx_policy_range_key(row);
	char at[FIELD_WHERE_MAX];
	json_t *v = json_object_get(o, key);

	snprintf(at, sizeof(at), "%s.%s", where, key);
	*out = row->def;
	if (!v && required)
		return sbx_fail(err, "%s: missing", at);
	if (!v)
		return 0;
	return sbx_json_int(v, at, row->min, row->max, out, err);
}

static int parse_rule_object(Sbx__V1__EgressRule *r, json_t *o, const char *where,
			     struct sbx_err *err)
{
	char at[FIELD_WHERE_MAX];
	json_int_t port, cpm, bps, conc;
	const char *host;
	size_t len;
	json_t *v;

	if (sbx_json_check_keys(o, where, rule_keys, err) < 0)
		return -1;
	snprintf(at, sizeof(at), "%s.host", where);
	v = json_object_get(o, "host");
	if (!v)
		return sbx_fail(err, "%s: missing", at);
	if (sbx_json_string(v, at, &host, &len, err) < 0 ||
	    set_rule_host(r, host, len, at, err) < 0)
		return -1;
	if (rule_field_int(o, RANGE(RULE_PORT), where, true, &port, err) < 0 ||
	    rule_field_int(o, RANGE(RULE_CONNECTIONS_PER_MINUTE), where, false, &cpm, err) < 0 ||
	    rule_field_int(o, RANGE(RULE_BYTES_PER_SECOND), where, false, &bps, err) < 0 ||
	    rule_field_int(o, RANGE(RULE_MAX_CONCURRENT), where, false, &conc, err) < 0)
		return -1;
	v = json_object_get(o, "allow_private");
	if (v && !json_is_boolean(v))
		return sbx_fail(err, "%s.allow_private: must be a boolean", where);
	r->allow_private = v && json_is_true(v);
	r->port = (uint32_t)port;
	r->connections_per_minute = (uint32_t)cpm;
	r->bytes_per_second = (uint64_t)bps;
	r->max_concurrent = (uint32_t)conc;
	return 0;
}

static int parse_rule(Sbx__V1__Egress *eg, json_t *v, size_t i, struct sbx_err *err)
{
	char where[WHERE_MAX];
	Sbx__V1__EgressRule *r;
	const char *s;
	size_t len;
	int rc;

	snprintf(where, sizeof(where), "egress.allow[%zu]", i);
	if (!json_is_string(v) && !json_is_object(v))
		return sbx_fail(err, "%s: must be \"host:port\" or an object", where);
	r = malloc(sizeof(*r));
	if (!r)
		return oom(err);
	sbx__v1__egress_rule__init(r);
	if (json_is_object(v))
		rc = parse_rule_object(r, v, where, err);
	else
		rc = sbx_json_string(v, where, &s, &len, err) < 0
			 ? -1
			 : parse_rule_string(r, s, len, where, err);
	if (rc < 0) {
		sbx__v1__egress_rule__free_unpacked(r, NULL);
		return -1;
	}
	eg->allow[eg->n_allow++] = r;
	/* n is at most SBX_EGRESS_RULES_MAX: quadratic is cheaper than
	 * remembering document order across a sort. */
	for (size_t j = 0; j + 1 < eg->n_allow; j++)
		if (eg->allow[j]->port == r->port && strcmp(eg->allow[j]->host, r->host) == 0)
			return sbx_fail(err, "%s: duplicate rule %s:%u", where, r->host, r->port);
	return 0;
}

static int cmp_rule(const void *a, const void *b)
{
	const Sbx__V1__EgressRule *const *x = a, *const *y = b;
	int c = strcmp((*x)->host, (*y)->host);

	if (c)
		return c;
	return ((*x)->port > (*y)->port) - ((*x)->port < (*y)->port);
}

static int parse_egress_policy(Sbx__V1__Egress *eg, json_t *v, struct sbx_err *err)
{
	const char *s;

	/* Required once egress is written at all: an allow list under a
	 * defaulted "deny" would only be refused with a puzzling message. */
	if (!v)
		return sbx_fail(err, "egress.policy: missing");
	if (sbx_json_string(v, "egress.policy", &s, NULL, err) < 0)
		return -1;
	if (strcmp(s, "deny") == 0)
		eg->policy = SBX__V1__EGRESS__POLICY__DENY;
	else if (strcmp(s, "allowlist") == 0)
		eg->policy = SBX__V1__EGRESS__POLICY__ALLOWLIST;
	else
		return sbx_fail(err, "egress.policy: must be \"deny\" or \"allowlist\"");
	return 0;
}

/* A run's byte budget through the proxy (0: none). Only a proxy counts
 * bytes, so a non-zero budget under "deny" would promise what nothing
 * enforces; 0 stays valid there, as the effective policy prints it. */
static int parse_egress_bytes(json_t *eg_obj, const struct sbx_policy_range *row,
			      Sbx__V1__Egress__Policy pol, uint64_t *out, struct sbx_err *err)
{
	const char *at = row->field;
	json_t *v = json_object_get(eg_obj, sbx_policy_range_key(row));
	json_int_t n = row->def;

	if (v && sbx_json_int(v, at, row->min, row->max, &n, err) < 0)
		return -1;
	if (n > 0 && pol != SBX__V1__EGRESS__POLICY__ALLOWLIST)
		return sbx_fail(err, "%s: only with policy allowlist", at);
	*out = (uint64_t)n;
	return 0;
}

static int parse_egress(SbxPolicy *p, json_t *v, struct problems *pr, struct sbx_err *err)
{
	Sbx__V1__Egress *eg = p->egress;
	json_t *allow;
	size_t n;
	int rc = 0;

	eg->policy = SBX__V1__EGRESS__POLICY__DENY;
	if (!v)
		return 0;
	if (!json_is_object(v))
		return sbx_fail(err, "egress: must be an object");
	if (sbx_json_check_keys(v, "egress", egress_keys, err) < 0 ||
	    parse_egress_policy(eg, json_object_get(v, "policy"), err) < 0)
		return -1;
	allow = json_object_get(v, "allow");
	if (allow && !json_is_array(allow))
		return sbx_fail(err, "egress.allow: must be an array");
	n = json_array_size(allow);
	if (eg->policy == SBX__V1__EGRESS__POLICY__DENY && n > 0)
		return sbx_fail(err, "egress.allow: must be empty when policy is deny");
	if (eg->policy == SBX__V1__EGRESS__POLICY__ALLOWLIST && n == 0)
		return sbx_fail(err, "egress.allow: must not be empty when policy is allowlist");
	if ((long long)n > RANGE(EGRESS_ALLOW)->max)
		return sbx_fail(err, "egress.allow: at most %lld entries",
				RANGE(EGRESS_ALLOW)->max);
	if (parse_egress_bytes(v, RANGE(EGRESS_ALERT_BYTES), eg->policy, &eg->alert_bytes, err) <
		0 ||
	    parse_egress_bytes(v, RANGE(EGRESS_MAX_BYTES), eg->policy, &eg->max_bytes, err) < 0)
		return -1;
	if (n == 0)
		return 0;
	eg->allow = calloc(n, sizeof(*eg->allow));
	if (!eg->allow)
		return oom(err);
	for (size_t i = 0; i < n; i++)
		if (parse_rule(eg, json_array_get(allow, i), i, err) < 0) {
			problem(pr, err);
			rc = RECORDED;
		}
	qsort(eg->allow, eg->n_allow, sizeof(*eg->allow), cmp_rule);
	return rc;
}

/* ---- limits ---- */

/* The integer rows of the range table, SBX_RANGE_LIMITS_FIRST..LAST, each
 * a field of Sbx__V1__Limits. */
static void limit_set(Sbx__V1__Limits *l, const struct sbx_policy_range *row, json_int_t v)
{
	char *field = (char *)l + row->offset;

	if (row->size == sizeof(uint32_t))
		*(uint32_t *)(void *)field = (uint32_t)v;
	else
		*(uint64_t *)(void *)field = (uint64_t)v;
}

/* cpu is in CPUs and may be fractional; the message holds thousandths. */
static int parse_cpu(Sbx__V1__Limits *l, json_t *v, struct sbx_err *err)
{
	double m;

	const struct sbx_policy_range *row = RANGE(CPU);

	if (!v) {
		l->cpu_millis = (uint32_t)row->def;
		return 0;
	}
	if (!json_is_number(v))
		return sbx_fail(err, "limits.cpu: must be a number");
	m = json_number_value(v) * row->scale;
	/* Rounds half up without libm; m is known non-negative below. */
	if (!(m >= (double)row->min - 0.5 && m < (double)row->max + 0.5))
		return sbx_fail(err, "limits.cpu: must be %g..%g", (double)row->min / row->scale,
				(double)row->max / row->scale);
	l->cpu_millis = (uint32_t)(m + 0.5);
	return 0;
}

static int parse_limits(SbxPolicy *p, json_t *v, struct problems *pr, struct sbx_err *err)
{
	int rc = 0;

	Sbx__V1__Limits *l = p->limits;
	/* The keys are the rows': "cpu" and the integer ones. */
	const char *keys[SBX_RANGE_LIMITS_LAST - SBX_RANGE_LIMITS_FIRST + 3] = {
	    sbx_policy_range_key(RANGE(CPU))};
	size_t n_keys = 1;
	json_int_t n;

	for (int i = SBX_RANGE_LIMITS_FIRST; i <= SBX_RANGE_LIMITS_LAST; i++)
		keys[n_keys++] = sbx_policy_range_key(&sbx_policy_ranges[i]);
	if (v && !json_is_object(v))
		return sbx_fail(err, "limits: must be an object");
	if (v && sbx_json_check_keys(v, "limits", keys, err) < 0)
		return -1;
	if (parse_cpu(l, v ? json_object_get(v, "cpu") : NULL, err) < 0) {
		problem(pr, err);
		rc = RECORDED;
	}
	for (int i = SBX_RANGE_LIMITS_FIRST; i <= SBX_RANGE_LIMITS_LAST; i++) {
		const struct sbx_policy_range *row = &sbx_policy_ranges[i];
		json_t *f = v ? json_object_get(v, sbx_policy_range_key(row)) : NULL;

		n = row->def;
		if (f && sbx_json_int(f, row->field, row->min, row->max, &n, err) < 0) {
			problem(pr, err);
			rc = RECORDED;
		}
		limit_set(l, row, n);
	}
	/* The limits' relation only between values that parsed. */
	if (rc)
		return rc;
	/* An unwritten script_seconds follows a shorter run_seconds instead
	 * of failing on a number the author never wrote. */
	if (!(v && json_object_get(v, "script_seconds")) && l->script_seconds > l->run_seconds)
		l->script_seconds = l->run_seconds;
	if (l->script_seconds > l->run_seconds)
		return sbx_fail(err,
				"limits.script_seconds: must not exceed limits.run_seconds (%u)",
				l->run_seconds);
	return 0;
}

/* ---- lifetime ---- */

static int parse_lifetime(SbxPolicy *p, json_t *v, struct sbx_err *err)
{
	const char *s;

	p->lifetime = SBX__V1__POLICY__LIFETIME__PER_RUN;
	if (!v)
		return 0;
	if (sbx_json_string(v, "lifetime", &s, NULL, err) < 0)
		return -1;
	if (strcmp(s, "per_run") != 0)
		return sbx_fail(err, "lifetime: must be \"per_run\"");
	return 0;
}

/* ---- the document ---- */

static const char *const top_keys[] = {"image",	 "mounts",   "env", "egress",
				       "limits", "lifetime", NULL};

/* Submessages always present, so a parsed policy never has a NULL to check. */
static SbxPolicy *policy_new(void)
{
	SbxPolicy *p = malloc(sizeof(*p));

	if (!p)
		return NULL;
	sbx__v1__policy__init(p);
	p->egress = malloc(sizeof(*p->egress));
	p->limits = malloc(sizeof(*p->limits));
	if (!p->egress || !p->limits) {
		free(p->egress);
		free(p->limits);
		free(p);
		return NULL;
	}
	sbx__v1__egress__init(p->egress);
	sbx__v1__limits__init(p->limits);
	return p;
}

static int parse_root(SbxPolicy *p, json_t *root, struct sbx_err *err)
{
	struct problems pr = {.err = err};
	struct sbx_err one = {0};

	if (!json_is_object(root))
		return sbx_fail(err, "policy: must be a JSON object");
	/* Each section on its own: every problem is listed at once. */
	section(&pr, sbx_json_check_keys(root, "", top_keys, &one), &one);
	section(&pr, parse_image(p, json_object_get(root, "image"), &one), &one);
	section(&pr, parse_mounts(p, json_object_get(root, "mounts"), &pr, &one), &one);
	section(&pr, parse_env(p, json_object_get(root, "env"), &pr, &one), &one);
	section(&pr, parse_egress(p, json_object_get(root, "egress"), &pr, &one), &one);
	section(&pr, parse_limits(p, json_object_get(root, "limits"), &pr, &one), &one);
	section(&pr, parse_lifetime(p, json_object_get(root, "lifetime"), &one), &one);
	return problems_done(&pr);
}

SbxPolicy *sbx_policy_parse(const char *json, size_t len, struct sbx_err *err)
{
	_cleanup_(sbx_policy_freep) SbxPolicy *p = NULL;
	json_auto_t *root = NULL;
	json_error_t jerr;

	if ((long long)len > RANGE(POLICY_BYTES)->max) {
		sbx_fail(err, "policy: larger than %lld bytes", RANGE(POLICY_BYTES)->max);
		return NULL;
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root) {
		sbx_fail(err, "policy: line %d column %d: %s", jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	p = policy_new();
	if (!p) {
		oom(err);
		return NULL;
	}
	if (parse_root(p, root, err) < 0)
		return NULL;
	return sbx_steal_ptr(p);
}

SbxPolicy *sbx_policy_load(const char *path, struct sbx_err *err)
{
	_cleanup_free_ char *buf = malloc(SBX_POLICY_BYTES_MAX + 1);
	_cleanup_close_ int fd = -1;
	size_t len = 0;
	SbxPolicy *p;

	if (!buf) {
		oom(err);
		sbx_err_prefix(err, "%s", path);
		return NULL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		sbx_fail_errno(err, "%s", path);
		return NULL;
	}
	/* One byte past the limit is enough to know the file is too large. */
	while (len < SBX_POLICY_BYTES_MAX + 1) {
		ssize_t n = read(fd, buf + len, SBX_POLICY_BYTES_MAX + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			sbx_fail_errno(err, "%s: read", path);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	p = sbx_policy_parse(buf, len, err);
	if (!p)
		sbx_err_prefix(err, "%s", path);
	return p;
}

void sbx_policy_free(SbxPolicy *p)
{
	if (p)
		sbx__v1__policy__free_unpacked(p, NULL);
}

int sbx_policy_digest(const SbxPolicy *p, char hex[65], struct sbx_err *err)
{
	size_t len = sbx__v1__policy__get_packed_size(p);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	unsigned char md[32];

	if (!buf)
		return oom(err);
	if (sbx__v1__policy__pack(p, buf) != len)
		return sbx_fail(err, "policy: protobuf serialization is inconsistent");
	if (sbx_sha256_buf(buf, len, md, err) < 0)
		return sbx_err_prefix(err, "policy");
	/* Not sbx_sha256_hex: sbx-helper links this file without sha256.c. */
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* ---- back to JSON ---- */

static const char *mode_name(Sbx__V1__Mount__Mode m)
{
	switch (m) {
	case SBX__V1__MOUNT__MODE__RO:
		return "ro";
	case SBX__V1__MOUNT__MODE__RW:
		return "rw";
	default:
		return "unspecified";
	}
}

static const char *egress_policy_name(Sbx__V1__Egress__Policy pol)
{
	switch (pol) {
	case SBX__V1__EGRESS__POLICY__DENY:
		return "deny";
	case SBX__V1__EGRESS__POLICY__ALLOWLIST:
		return "allowlist";
	default:
		return "unspecified";
	}
}

/* The json_* constructors below return NULL when out of memory, and json_pack
 * fails on a NULL "o" argument while releasing the others, so a failure
 * anywhere surfaces as NULL at the top without leaking. */
static json_t *append_all(json_t *arr, json_t *item)
{
	if (!arr || json_array_append_new(arr, item) < 0) {
		json_decref(arr);
		return NULL;
	}
	return arr;
}

static json_t *mounts_json(const SbxPolicy *p)
{
	json_t *a = json_array();

	for (size_t i = 0; i < p->n_mounts && a; i++)
		a = append_all(a, json_pack("{s:s, s:s}", "path", p->mounts[i]->path, "mode",
					    mode_name(p->mounts[i]->mode)));
	return a;
}

static json_t *env_json(const SbxPolicy *p)
{
	json_t *o = json_object();

	for (size_t i = 0; i < p->n_env && o; i++) {
		if (json_object_set_new(o, p->env[i]->name, json_string(p->env[i]->value)) < 0) {
			json_decref(o);
			o = NULL;
		}
	}
	return o;
}

static json_t *egress_json(const Sbx__V1__Egress *eg)
{
	json_t *a = json_array();

	for (size_t i = 0; eg && i < eg->n_allow && a; i++) {
		const Sbx__V1__EgressRule *r = eg->allow[i];

		a = append_all(a, json_pack("{s:s, s:I, s:I, s:I, s:I, s:b}", "host", r->host,
					    "port", (json_int_t)r->port, "connections_per_minute",
					    (json_int_t)r->connections_per_minute,
					    "bytes_per_second", (json_int_t)r->bytes_per_second,
					    "max_concurrent", (json_int_t)r->max_concurrent,
					    "allow_private", (int)r->allow_private));
	}
	/* The ranges keep every uint64 here below 2^62: json_int_t holds it. */
	return json_pack("{s:s, s:o, s:I, s:I}", "policy",
			 egress_policy_name(eg ? eg->policy : SBX__V1__EGRESS__POLICY__DENY),
			 "allow", a, "alert_bytes", (json_int_t)(eg ? eg->alert_bytes : 0),
			 "max_bytes", (json_int_t)(eg ? eg->max_bytes : 0));
}

static json_t *limits_json(const Sbx__V1__Limits *l)
{
	static const Sbx__V1__Limits zero = SBX__V1__LIMITS__INIT;
	json_t *o, *cpu;

	if (!l)
		l = &zero;
	/* Whole CPUs print as integers; the rest as the shortest real that
	 * parses back to the same thousandths. */
	cpu = l->cpu_millis % 1000 ? json_real(l->cpu_millis / 1000.0)
				   : json_integer(l->cpu_millis / 1000);
	o = json_pack("{s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "cpu", cpu, "memory_mb",
		      (json_int_t)l->memory_mb, "script_seconds", (json_int_t)l->script_seconds,
		      "run_seconds", (json_int_t)l->run_seconds, "pids", (json_int_t)l->pids,
		      "out_mb", (json_int_t)l->out_mb, "tmp_mb", (json_int_t)l->tmp_mb, "output_kb",
		      (json_int_t)l->output_kb, "idle_seconds", (json_int_t)l->idle_seconds);
	return o;
}

char *sbx_policy_to_json(const SbxPolicy *p)
{
	json_auto_t *root = NULL;

	root = json_pack("{s:s, s:o, s:o, s:o, s:o, s:s}", "image", p->image, "mounts",
			 mounts_json(p), "env", env_json(p), "egress", egress_json(p->egress),
			 "limits", limits_json(p->limits), "lifetime",
			 p->lifetime == SBX__V1__POLICY__LIFETIME__PER_RUN ? "per_run"
									   : "unspecified");
	if (!root)
		return NULL;
	return json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
}

const Sbx__V1__Mount *sbx_policy_mount(const SbxPolicy *p, const char *path)
{
	for (size_t i = 0; i < p->n_mounts; i++)
		if (strcmp(p->mounts[i]->path, path) == 0)
			return p->mounts[i];
	return NULL;
}
