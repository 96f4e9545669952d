/* SPDX-License-Identifier: Apache-2.0 */
/* The engine of config_keys.h: one loop over a section's rows parses,
 * defaults and documents its keys, so that the three cannot disagree. */
#include "config_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "path.h"
#include "strict_json.h"

#define PATH_LEN_MAX 4095
#define KEYS_MAX     40 /* rows in the largest section, and room */
/* A JSON path in an error: a quoted destination key is the longest. */
#define WHERE_MAX 1536

int sbx_config_set_path(const char *s, const char *where, enum sbx_config_type rule, char **out,
			struct sbx_err *err)
{
	const char *problem = NULL;
	char *copy;

	if (!*s)
		return sbx_fail(err, "%s: must not be empty", where);
	if (strlen(s) > PATH_LEN_MAX)
		return sbx_fail(err, "%s: longer than %d bytes", where, PATH_LEN_MAX);
	/* Absolute paths are compared by prefix by the run manager, so they
	 * are spelled one way; the cgroup root is joined under /sys/fs/cgroup. */
	if (rule == SBX_CONFIG_ABS_PATH)
		problem = sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_ABSOLUTE);
	else if (rule == SBX_CONFIG_SUB_PATH)
		problem = sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_NO_DOTDOT);
	if (problem)
		return sbx_fail(err, "%s: %s", where, problem);
	if (!(copy = strdup(s)))
		return sbx_fail_errnum(err, ENOMEM, "config");
	free(*out);
	*out = copy;
	return 0;
}

int sbx_config_check_section(const struct sbx_config_section *s, json_t *obj, const char *where,
			     struct sbx_err *err)
{
	const char *keys[KEYS_MAX + 1];
	size_t n = 0;

	if (!json_is_object(obj))
		return sbx_fail(err, "%s: must be an object", where);
	/* A table outgrowing the list would refuse its last keys as unknown. */
	if (s->n_keys > KEYS_MAX)
		return sbx_fail(err, "%s: %zu keys, more than config_keys.c's %d", where, s->n_keys,
				KEYS_MAX);
	for (; n < s->n_keys; n++)
		keys[n] = s->keys[n].key;
	keys[n] = NULL;
	return sbx_json_check_keys(obj, where, keys, err);
}

static int parse_value(const struct sbx_config_key *k, struct sbx_config *cfg, void *field,
		       json_t *v, const char *where, struct sbx_err *err)
{
	json_int_t n = 0;
	const char *s;

	if (k->parse)
		return k->parse(cfg, field, v, where, err);
	switch (k->type) {
	case SBX_CONFIG_U32:
	case SBX_CONFIG_U64:
		if (sbx_json_int(v, where, k->min, k->max, &n, err) < 0)
			return -1;
		if (k->type == SBX_CONFIG_U32)
			*(uint32_t *)field = (uint32_t)n;
		else
			*(uint64_t *)field = (uint64_t)n;
		return 0;
	case SBX_CONFIG_BOOL:
		return sbx_json_bool(v, where, field, err);
	case SBX_CONFIG_PATH:
	case SBX_CONFIG_ABS_PATH:
	case SBX_CONFIG_SUB_PATH:
		/* Every string setting is a name or a path: empty is a typo. */
		if (sbx_json_string(v, where, &s, NULL, err) < 0)
			return -1;
		return sbx_config_set_path(s, where, k->type, field, err);
	case SBX_CONFIG_OBJECT:
		return sbx_config_parse_section(k->section, cfg, field, v, where, err);
	default:
		/* A row of this type without a parser is a bug of the table. */
		return sbx_fail(err, "%s: no parser", where);
	}
}

int sbx_config_parse_keys(const struct sbx_config_section *s, struct sbx_config *cfg, void *base,
			  json_t *obj, const char *where, struct sbx_err *err)
{
	char path[WHERE_MAX];

	for (size_t i = 0; i < s->n_keys; i++) {
		const struct sbx_config_key *k = &s->keys[i];
		json_t *v = json_object_get(obj, k->key);

		snprintf(path, sizeof(path), "%s%s%s", where, *where ? "." : "", k->key);
		if (v && parse_value(k, cfg, (char *)base + k->offset, v, path, err) < 0)
			return -1;
		if (k->check && k->check(cfg, base, obj, err) < 0)
			return -1;
	}
	return 0;
}

int sbx_config_parse_section(const struct sbx_config_section *s, struct sbx_config *cfg, void *base,
			     json_t *obj, const char *where, struct sbx_err *err)
{
	if (sbx_config_check_section(s, obj, where, err) < 0)
		return -1;
	return sbx_config_parse_keys(s, cfg, base, obj, where, err);
}

int sbx_config_section_defaults(const struct sbx_config_section *s, void *base, struct sbx_err *err)
{
	for (size_t i = 0; i < s->n_keys; i++) {
		const struct sbx_config_key *k = &s->keys[i];
		void *field = (char *)base + k->offset;
		long long def = k->host_def ? k->host_def(k->def) : k->def;

		switch (k->type) {
		case SBX_CONFIG_U32:
			*(uint32_t *)field = (uint32_t)def;
			break;
		case SBX_CONFIG_U64:
			*(uint64_t *)field = (uint64_t)def;
			break;
		case SBX_CONFIG_BOOL:
			*(bool *)field = k->def != 0;
			break;
		case SBX_CONFIG_PATH:
		case SBX_CONFIG_ABS_PATH:
		case SBX_CONFIG_SUB_PATH:
			if (!k->def_str)
				break;
			free(*(char **)field);
			if (!(*(char **)field = strdup(k->def_str)))
				return sbx_fail_errnum(err, ENOMEM, "config");
			break;
		case SBX_CONFIG_OBJECT:
			if (sbx_config_section_defaults(k->section, field, err) < 0)
				return -1;
			break;
		default:
			break;
		}
	}
	return 0;
}

/* ---- the reference page ---- */

/* GitHub's anchor of a heading (tests/docs/links.py computes the same). */
static void print_anchor(FILE *out, const char *name)
{
	for (; *name; name++)
		if ((*name >= 'a' && *name <= 'z') || (*name >= '0' && *name <= '9') ||
		    *name == '_' || *name == '-')
			fputc(*name, out);
		else if (*name >= 'A' && *name <= 'Z')
			fputc(*name - 'A' + 'a', out);
		else if (*name == ' ')
			fputc('-', out);
}

static const char *type_word(const struct sbx_config_key *k)
{
	switch (k->type) {
	case SBX_CONFIG_U32:
	case SBX_CONFIG_U64:
		return "integer";
	case SBX_CONFIG_BOOL:
		return "boolean";
	case SBX_CONFIG_PATH:
		return "string";
	case SBX_CONFIG_ABS_PATH:
		return "absolute path";
	case SBX_CONFIG_SUB_PATH:
		return "path without `..`";
	case SBX_CONFIG_OBJECT:
		return "object";
	default:
		return "?";
	}
}

static void print_range(FILE *out, const struct sbx_config_key *k)
{
	if (k->range_doc)
		fputs(k->range_doc, out);
	else if (k->type == SBX_CONFIG_U32 || k->type == SBX_CONFIG_U64)
		fprintf(out, "%lld..%lld", k->min, k->max);
	else if (k->section) {
		fprintf(out, "[below](#");
		print_anchor(out, k->section->name);
		fputc(')', out);
	} else
		fputs("any", out);
	if (k->range_note)
		fprintf(out, " (%s)", k->range_note);
}

static void print_default(FILE *out, const struct sbx_config_key *k)
{
	if (k->def_doc)
		fputs(k->def_doc, out);
	else if (k->type == SBX_CONFIG_U32 || k->type == SBX_CONFIG_U64) {
		fprintf(out, "%lld", k->def);
		if (k->def_note)
			fprintf(out, " (%s)", k->def_note);
	} else if (k->type == SBX_CONFIG_BOOL)
		fputs(k->def ? "true" : "false", out);
	else if (k->def_str)
		fprintf(out, "`\"%s\"`", k->def_str);
	else if (k->type == SBX_CONFIG_OBJECT)
		fputs("its keys'", out);
	else
		fputs("none", out);
}

static void print_section(FILE *out, const struct sbx_config_section *s)
{
	fprintf(out, "\n## %s\n\n%s\n\n", *s->name ? s->name : "The document's root", s->doc);
	fprintf(out, "| key | type | range | default | meaning |\n|---|---|---|---|---|\n");
	for (size_t i = 0; i < s->n_keys; i++) {
		const struct sbx_config_key *k = &s->keys[i];

		fprintf(out, "| `%s` | %s | ", k->key, k->type_doc ? k->type_doc : type_word(k));
		print_range(out, k);
		fputs(" | ", out);
		print_default(out, k);
		fprintf(out, " | %s |\n", k->doc);
	}
}

void sbx_config_print_reference(FILE *out)
{
	const struct sbx_config_section *sections[] = {
	    &sbx_config_root_section,	  &sbx_config_tls_section,
	    &sbx_config_token_section,	  &sbx_config_limits_section,
	    &sbx_config_quotas_section,	  &sbx_config_connections_section,
	    &sbx_config_egress_section,	  &sbx_config_destination_section,
	    &sbx_config_images_section,	  &sbx_config_metrics_section,
	    &sbx_config_capacity_section, &sbx_config_pool_section,
	};

	fputs("<!-- Generated by sbxd-config-reference from the key tables in server/config/;\n"
	      "     edit the tables, then regenerate: tests/docs/generated.py --write config -->\n"
	      "# sbxd.json: every key\n\n"
	      "Every key of sbxd's configuration file, section by section: its type, the\n"
	      "values it takes, its default and what it does. sbxd refuses a key that is\n"
	      "not here and a value out of its range, naming the key's JSON path. How to\n"
	      "use them: [sbxd and its config](../operator/sbxd.md); the page as a man\n"
	      "page: [sbxd.json(5)](../man/sbxd.json.5.md).\n",
	      out);
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		print_section(out, sections[i]);
}
