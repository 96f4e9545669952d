/* SPDX-License-Identifier: Apache-2.0 */
/* A rule every section of sbxd's config file follows (config.c,
 * config_limits.c, config_egress.c), written once. */
#ifndef SBX_CONFIG_RULES_H
#define SBX_CONFIG_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"

/* A bound that must not exceed another: written, past it is an error
 * naming both ("<name>: must not exceed <bound_name> (N)"); unwritten (key
 * absent from obj), it follows the smaller bound instead of failing on a
 * number the operator never wrote. */
int config_follow(json_t *obj, const char *key, const char *name, uint32_t *value, uint32_t bound,
		  const char *bound_name, struct sbx_err *err);

/* A name of 1..max characters of A-Z a-z 0-9 . _ - (tokens[].name,
 * pool[].name). */
bool config_is_name(const char *s, size_t max);

/* A file of at most max bytes, whole, into *out (malloc'd, not
 * terminated) and *len; an error names the path. */
int config_read_file(const char *path, size_t max, char **out, size_t *len, struct sbx_err *err);

#endif
