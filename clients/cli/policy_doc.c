/* SPDX-License-Identifier: Apache-2.0 */
/* The policy of `sbxctl run` and `sbxctl create`: the --policy file (or the
 * minimal document {"image": "host"}, whose every other key the parser
 * fills with its documented default), with the container-style flags
 * (policy_args.c) written over it. The result is still a policy document,
 * so that sbxd's strict parser is the one that judges it and names what is
 * wrong by its JSON path, and --print-policy shows exactly what is sent. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "policy.h"
#include "util.h"

/* jansson's own json_auto_t frees at scope exit. */

/* doc[key], an object, made if missing. */
static json_t *object_at(json_t *doc, const char *key, const char *flag, struct sbx_err *err)
{
	json_t *o = json_object_get(doc, key);

	if (!o) {
		if (json_object_set_new(doc, key, json_object()) < 0) {
			sbx_fail(err, "out of memory");
			return NULL;
		}
		o = json_object_get(doc, key);
	}
	if (!json_is_object(o)) {
		sbx_fail(err, "%s: the policy's %s is not an object", flag, key);
		return NULL;
	}
	return o;
}

static int set_new(json_t *o, const char *key, json_t *v, struct sbx_err *err)
{
	return !v || json_object_set_new(o, key, v) < 0 ? sbx_fail(err, "out of memory") : 0;
}

/* One NAME=VALUE, or NAME alone: the caller's value, left out when the
 * caller has none (as docker does). */
static int put_env(json_t *env, const char *what, const char *def, size_t len, struct sbx_err *err)
{
	const char *eq = memchr(def, '=', len);
	size_t name_len = eq ? (size_t)(eq - def) : len;
	_cleanup_free_ char *name = strndup(def, name_len);

	if (!name)
		return sbx_fail(err, "out of memory");
	if (!*name)
		return sbx_fail(err, "%s: an empty variable name", what);
	if (eq)
		return set_new(env, name, json_stringn(eq + 1, len - name_len - 1), err);
	const char *value = getenv(name);
	return value ? set_new(env, name, json_string(value), err) : 0;
}

/* docker's --env-file: NAME=VALUE lines taken as written (no quotes, no
 * expansion), NAME alone takes the caller's value, blank lines and lines
 * starting with # are skipped, leading white space is dropped. */
static int put_env_file(json_t *env, const char *path, struct sbx_err *err)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	char what[512];

	if (!f)
		return sbx_fail_errno(err, "--env-file %s", path);
	for (unsigned no = 1; (n = getline(&line, &cap, f)) >= 0; no++) {
		char *s = line;
		size_t len = (size_t)n;
		if (len && s[len - 1] == '\n')
			s[--len] = '\0';
		if (len && s[len - 1] == '\r')
			s[--len] = '\0';
		if (no == 1 && len >= 3 && !memcmp(s, "\xef\xbb\xbf", 3)) /* a BOM */
			s += 3, len -= 3;
		while (len && isspace((unsigned char)*s))
			s++, len--;
		if (!len || *s == '#')
			continue;
		snprintf(what, sizeof(what), "--env-file %s:%u", path, no);
		if (strlen(s) != len)
			return sbx_fail(err, "%s: a NUL byte", what);
		size_t name_len = strcspn(s, "=");
		for (size_t i = 0; i < name_len; i++)
			if (isspace((unsigned char)s[i]))
				return sbx_fail(err, "%s: the name '%.*s' contains white space",
						what, (int)name_len, s);
		if (put_env(env, what, s, len, err) < 0)
			return -1;
	}
	if (ferror(f))
		return sbx_fail_errno(err, "--env-file %s", path);
	return 0;
}

static int put_limits(json_t *doc, const struct cli_policy_flags *f, struct sbx_err *err)
{
	const struct {
		const char *key;
		uint32_t v;
	} counts[] = {
	    {"memory_mb", f->memory_mb},
	    {"script_seconds", f->script_seconds},
	    {"run_seconds", f->run_seconds},
	    {"idle_seconds", f->idle_seconds},
	    {"pids", f->pids},
	    {"out_mb", f->out_mb},
	    {"tmp_mb", f->tmp_mb},
	};
	bool any = f->cpus > 0;
	json_t *limits;

	for (size_t i = 0; i < SBX_ARRAY_SIZE(counts); i++)
		any |= counts[i].v != 0;
	if (!any)
		return 0;
	if (!(limits = object_at(doc, "limits", "limits flags", err)))
		return -1;
	for (size_t i = 0; i < SBX_ARRAY_SIZE(counts); i++)
		if (counts[i].v &&
		    set_new(limits, counts[i].key, json_integer(counts[i].v), err) < 0)
			return -1;
	if (f->cpus > 0)
		return set_new(limits, "cpu",
			       f->cpus == floor(f->cpus) && f->cpus < 1e9
				   ? json_integer((json_int_t)f->cpus)
				   : json_real(f->cpus),
			       err);
	return 0;
}

static int put_allow(json_t *doc, const struct cli_policy_flags *f, struct sbx_err *err)
{
	json_t *egress, *allow;

	if (!f->n_allow)
		return 0;
	if (!(egress = object_at(doc, "egress", "--allow", err)))
		return -1;
	if (set_new(egress, "policy", json_string("allowlist"), err) < 0)
		return -1;
	if (!(allow = json_object_get(egress, "allow"))) {
		if (set_new(egress, "allow", json_array(), err) < 0)
			return -1;
		allow = json_object_get(egress, "allow");
	}
	if (!json_is_array(allow))
		return sbx_fail(err, "--allow: the policy's egress.allow is not an array");
	for (unsigned i = 0; i < f->n_allow; i++)
		if (json_array_append_new(allow, json_string(f->allow[i])) < 0)
			return sbx_fail(err, "out of memory");
	return 0;
}

static int apply_flags(json_t *doc, const struct cli_policy_flags *f, struct sbx_err *err)
{
	if (f->image && set_new(doc, "image", json_string(f->image), err) < 0)
		return -1;
	if (f->n_env || f->n_env_files) {
		json_t *env = object_at(doc, "env", "--env", err);
		if (!env)
			return -1;
		/* As docker: the files first, then -e, each later one winning. */
		for (unsigned i = 0; i < f->n_env_files; i++)
			if (put_env_file(env, f->env_files[i], err) < 0)
				return -1;
		for (unsigned i = 0; i < f->n_env; i++)
			if (put_env(env, "--env", f->env[i], strlen(f->env[i]), err) < 0)
				return -1;
	}
	if (put_limits(doc, f, err) < 0)
		return -1;
	return put_allow(doc, f, err);
}

char *cli_policy_document(const struct cli *cli, size_t *len, struct sbx_rpc_status *st)
{
	static const char minimal[] = "{\"image\": \"host\"}";
	_cleanup_free_ char *text = NULL;
	json_error_t jerr;

	if (cli->policy &&
	    !(text = cli_read_file("--policy", cli->policy, SBX_POLICY_BYTES_MAX, len, st)))
		return NULL;
	/* A file with no flag over it goes as written: sbxd's parser is the
	 * one that counts, and its errors name the JSON path in it. */
	if (text && !cli->pf.any)
		return sbx_steal_ptr(text);
	json_auto_t *doc = json_loads(text ? text : minimal, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "--policy %s: line %d: %s",
			     cli->policy, jerr.line, jerr.text);
		return NULL;
	}
	if (!json_is_object(doc)) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "--policy %s: not a JSON object",
			     cli->policy);
		return NULL;
	}
	if (apply_flags(doc, &cli->pf, &st->err) < 0) {
		sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
		return NULL;
	}
	char *out = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
	if (!out) {
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	*len = strlen(out);
	return out;
}

int cli_print_policy(const struct cli *cli)
{
	struct sbx_rpc_status st;
	char digest[65];
	size_t len;
	_cleanup_free_ char *doc = cli_policy_document(cli, &len, &st);

	if (!doc)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	_cleanup_(sbx_policy_freep) SbxPolicy *p = sbx_policy_parse(doc, len, &st.err);
	if (!p) {
		sbx_err_prefix(&st.err, "policy");
		return cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &st.err), EXIT_FAILURE_RPC;
	}
	_cleanup_free_ char *json = sbx_policy_to_json(p);
	if (!json)
		return cli_error(SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory"),
		       EXIT_FAILURE_RPC;
	if (sbx_policy_digest(p, digest, &st.err) < 0)
		return cli_err_error(SBX__V1__CODE__INTERNAL, &st.err), EXIT_FAILURE_RPC;
	/* The document alone on stdout, so that it can be saved and given to
	 * --policy or `policy check`; the digest beside it, as check says it. */
	printf("%s\n", json);
	fflush(stdout);
	fprintf(stderr, "digest sha256:%s\n", digest);
	return 0;
}
