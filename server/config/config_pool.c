/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config: the warm pool ("pool"): for each shape, a policy and how
 * many sandboxes built from it sbxd keeps ready (server/runs/runs_pool.c,
 * docs/operator/pool.md). The policy is checked here by the very parser a
 * CreateRun's goes through, so a typo fails the start (or the reload)
 * naming the entry, not every build later. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_keys.h"
#include "config_rules.h"
#include "path.h"
#include "policy.h"
#include "strict_json.h"
#include "util.h"

#define WHERE_MAX 64

static const struct sbx_config_key pool_keys[] = {
    {"name", SBX_CONFIG_OTHER, .type_doc = "string", .range_doc = "1..63 of `A-Z a-z 0-9 . _ -`",
     .def_doc = "required", .doc = "the shape's name in Health and the metrics; unique"},
    {"policy", SBX_CONFIG_OTHER, .type_doc = "object", .range_doc = "a policy document",
     .def_doc = "one of `policy`, `policy_file`",
     .doc = "the policy whose shape the members have ([policy.md](policy.md))"},
    {"policy_file", SBX_CONFIG_OTHER, .type_doc = "absolute path",
     .range_doc = "a policy document of at most 1 MiB", .def_doc = "one of `policy`, `policy_file`",
     .doc = "the same, read from a file at start and at each reload"},
    {"size", SBX_CONFIG_OTHER, .type_doc = "integer", .range_doc = "0..256", .def_doc = "0",
     .doc = "members kept ready; 0 builds nothing"},
};

_Static_assert(sizeof(((struct sbx_config_pool_shape *)0)->name) == 64,
	       "pool[].name's range_doc says 63");

/* parse_shape reads the rows itself (the table checks the keys and
 * documents them). */
const struct sbx_config_section sbx_config_pool_section = {
    "pool[]",
    "Each entry of `pool`: a shape of the warm pool "
    "([pool.md](../operator/pool.md)). A CreateRun whose effective policy has "
    "the same digest as the entry's gets one of its ready members.",
    pool_keys,
    SBX_CONFIG_N(pool_keys),
};

/* The policy's text, inline or from its file, checked by the policy's own
 * parser (every problem on one line). */
static int shape_policy(struct sbx_config_pool_shape *sh, json_t *v, const char *where,
			struct sbx_err *err)
{
	json_t *inline_doc = json_object_get(v, "policy"),
	       *file = json_object_get(v, "policy_file");
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	SbxPolicy *p;

	if ((inline_doc != NULL) == (file != NULL))
		return sbx_fail(err, "%s: give exactly one of policy and policy_file", where);
	if (inline_doc) {
		if (!json_is_object(inline_doc))
			return sbx_fail(err, "%s.policy: must be an object", where);
		text = json_dumps(inline_doc, JSON_COMPACT);
		if (!text)
			return sbx_fail_errnum(err, ENOMEM, "%s.policy", where);
		len = strlen(text);
	} else {
		const char *path, *why;
		char *raw = NULL;

		if (sbx_json_string(file, where, &path, NULL, err) < 0)
			return -1;
		if ((why = sbx_path_problem(path, 4095, SBX_PATH_ABSOLUTE)))
			return sbx_fail(err, "%s.policy_file: %s", where, why);
		if (config_read_file(path, SBX_POLICY_BYTES_MAX, &raw, &len, err) < 0)
			return sbx_err_prefix(err, "%s.policy_file", where);
		text = malloc(len + 1);
		if (text) {
			memcpy(text, raw, len);
			text[len] = '\0';
		}
		free(raw);
		if (!text || !(sh->policy_file = strdup(path)))
			return sbx_fail_errnum(err, ENOMEM, "%s.policy_file", where);
	}
	p = sbx_policy_parse(text, len, err);
	if (!p) {
		sbx_policy_problems_one_line(err);
		return sbx_err_prefix(err, "%s", where);
	}
	sbx_policy_free(p);
	sh->policy_json = sbx_steal_ptr(text);
	return 0;
}

static int parse_shape(struct sbx_config *cfg, json_t *v, size_t i, struct sbx_err *err)
{
	struct sbx_config_pool_shape *sh = &cfg->pool[i];
	char where[WHERE_MAX];
	json_t *f;
	const char *s;

	snprintf(where, sizeof(where), "pool[%zu]", i);
	if (sbx_config_check_section(&sbx_config_pool_section, v, where, err) < 0)
		return -1;
	cfg->n_pool = i + 1; /* freed with the config from here on */
	if (!(f = json_object_get(v, "name")))
		return sbx_fail(err, "%s.name: missing", where);
	if (sbx_json_string(f, where, &s, NULL, err) < 0)
		return -1;
	if (!config_is_name(s, sizeof(sh->name) - 1))
		return sbx_fail(err, "%s.name: must be 1..63 characters of A-Z a-z 0-9 . _ -",
				where);
	for (size_t j = 0; j < i; j++)
		if (!strcmp(cfg->pool[j].name, s))
			return sbx_fail(err, "%s.name: duplicate of pool[%zu].name", where, j);
	snprintf(sh->name, sizeof(sh->name), "%s", s);
	f = json_object_get(v, "size");
	if (f && (!json_is_integer(f) || json_integer_value(f) < 0 ||
		  json_integer_value(f) > SBX_CONFIG_POOL_SIZE_MAX))
		return sbx_fail(err, "%s.size: must be an integer 0..%d", where,
				SBX_CONFIG_POOL_SIZE_MAX);
	sh->size = f ? (uint32_t)json_integer_value(f) : 0;
	return shape_policy(sh, v, where, err);
}

int sbx_config_parse_pool(struct sbx_config *cfg, void *field, json_t *v, const char *where,
			  struct sbx_err *err)
{
	uint64_t total = 0;

	(void)field, (void)where;
	if (!json_is_array(v))
		return sbx_fail(err, "pool: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_POOL)
		return sbx_fail(err, "pool: at most %d entries", SBX_CONFIG_MAX_POOL);
	for (size_t i = 0; i < json_array_size(v); i++) {
		if (parse_shape(cfg, json_array_get(v, i), i, err) < 0)
			return -1;
		total += cfg->pool[i].size;
	}
	/* Members hold run slots as runs do: a pool that fills every slot
	 * would leave none for a cold create. */
	if (total > cfg->runs_max)
		return sbx_fail(err, "pool: sizes add up to %llu, more than runs_max (%u)",
				(unsigned long long)total, cfg->runs_max);
	return 0;
}

void sbx_config_pool_free(struct sbx_config *cfg)
{
	for (size_t i = 0; i < cfg->n_pool; i++) {
		free(cfg->pool[i].policy_json);
		free(cfg->pool[i].policy_file);
		cfg->pool[i] = (struct sbx_config_pool_shape){0};
	}
	cfg->n_pool = 0;
}
