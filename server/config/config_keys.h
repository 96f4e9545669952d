/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config keys as tables, one per section, as systemd's
 * load-fragment-gperf tables are: each row says a key's type, range,
 * default, field and one line of doc. The parser's key check, the numeric
 * range checks and the defaults are read from the rows, and so is
 * docs/reference/config.md (sbxd-config-reference prints it; the
 * docs.config_reference test fails when the committed page drifts). A key
 * added to a table is parsed, defaulted and documented; a key that is not
 * in one is refused as unknown.
 *
 * What a row cannot say (a listen URL's rules, a token's hash, a bound
 * that follows another) is a parse or check callback of the row.
 *
 * A new key: its field in config.h's struct, a row in its section's table
 * (in the order keys are read: a check may use the rows above it), then
 * tests/docs/generated.py --write config BUILD_DIR and commit the page. */
#ifndef SBX_CONFIG_KEYS_H
#define SBX_CONFIG_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "config.h"
#include "err.h"

enum sbx_config_type {
	SBX_CONFIG_U32,	     /* an integer min..max into a uint32_t */
	SBX_CONFIG_U64,	     /* an integer min..max into a uint64_t */
	SBX_CONFIG_BOOL,     /* true or false into a bool */
	SBX_CONFIG_PATH,     /* a non-empty string into a malloc'd char * */
	SBX_CONFIG_ABS_PATH, /* the same, absolute and spelled one way (path.h) */
	SBX_CONFIG_SUB_PATH, /* the same, relative or absolute, without ".." */
	SBX_CONFIG_OBJECT,   /* a nested section (.section), at .offset */
	SBX_CONFIG_OTHER,    /* .parse alone knows it (arrays, lists) */
};

struct sbx_config_section;

struct sbx_config_key {
	const char *key;
	enum sbx_config_type type;
	long long min, max;  /* integers */
	long long def;	     /* integers and booleans */
	const char *def_str; /* a path's default, copied; NULL: none */
	size_t offset;	     /* of the field in the section's struct */
	/* SBX_CONFIG_OBJECT's rows; an SBX_CONFIG_OTHER's entries' (documented) */
	const struct sbx_config_section *section;
	/* A default that depends on the host: given def, the one to use. */
	long long (*host_def)(long long def);
	/* Instead of the type's parser, for a value the type alone does not
	 * check; field is the row's field, where the key's JSON path. */
	int (*parse)(struct sbx_config *cfg, void *field, json_t *v, const char *where,
		     struct sbx_err *err);
	/* After the key's turn, written or not, in the section's object obj:
	 * a rule across keys (one bound following another). */
	int (*check)(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err);
	/* The doc's words where the row's numbers do not say it (NULL: from
	 * the numbers): the type, the range and the default. */
	const char *type_doc, *range_doc, *def_doc;
	/* Said after the row's own range or default, in parentheses: when
	 * the number is not the whole story (the host may lower it). */
	const char *range_note, *def_note;
	const char *doc; /* one line */
};

struct sbx_config_section {
	const char *name; /* its JSON path: "" for the document's root */
	const char *doc;  /* a paragraph of the reference page */
	const struct sbx_config_key *keys;
	size_t n_keys;
};

#define SBX_CONFIG_N(keys) (sizeof(keys) / sizeof((keys)[0]))

/* The sections, the root's first, in the reference page's order. */
extern const struct sbx_config_section sbx_config_root_section, sbx_config_tls_section,
    sbx_config_token_section, sbx_config_limits_section, sbx_config_quotas_section,
    sbx_config_connections_section, sbx_config_egress_section, sbx_config_destination_section,
    sbx_config_images_section, sbx_config_metrics_section, sbx_config_capacity_section,
    sbx_config_pool_section;

/* config_pool.c: the "pool" list (a row's parse). */
int sbx_config_parse_pool(struct sbx_config *cfg, void *field, json_t *v, const char *where,
			  struct sbx_err *err);

/* obj must be an object whose keys are all the section's ("<where>: must
 * be an object", "<where>.<key>: unknown key"). */
int sbx_config_check_section(const struct sbx_config_section *s, json_t *obj, const char *where,
			     struct sbx_err *err);
/* Each row in turn: its key, if obj has it, into base + offset, then its
 * check. */
int sbx_config_parse_keys(const struct sbx_config_section *s, struct sbx_config *cfg, void *base,
			  json_t *obj, const char *where, struct sbx_err *err);
/* Both of the above. */
int sbx_config_parse_section(const struct sbx_config_section *s, struct sbx_config *cfg, void *base,
			     json_t *obj, const char *where, struct sbx_err *err);
/* Each row's default into base + offset (nested sections too). */
int sbx_config_section_defaults(const struct sbx_config_section *s, void *base,
				struct sbx_err *err);
/* docs/reference/config.md from the tables. */
void sbx_config_print_reference(FILE *out);

/* config_limits.c: limits_max's rows checked together against the host
 * (fs.file-max, pid_max), whether limits_max was written or not. */
int sbx_config_limits_check(struct sbx_config *cfg, void *base, json_t *root, struct sbx_err *err);

/* The path rules (common/path.h) of a path setting, from the file or from a
 * command-line flag: the one check, then a copy into *out. */
int sbx_config_set_path(const char *s, const char *where, enum sbx_config_type rule, char **out,
			struct sbx_err *err);

#endif
