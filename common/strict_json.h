/* SPDX-License-Identifier: Apache-2.0 */
/* The strict-JSON helpers that policies (common/policy.c) and sbxd's
 * configuration (server/config/config.c) share: errors name the JSON path. */
#ifndef SBX_STRICT_JSON_H
#define SBX_STRICT_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "err.h"

/* Rejects the first key (in document order) of obj that is not in the
 * NULL-terminated keys: "<where>.<key>: unknown key" (where "" for the top
 * level). A key with an embedded NUL never matches. */
int sbx_json_check_keys(json_t *obj, const char *where, const char *const *keys,
			struct sbx_err *err);

/* Typed access: each failure is "<where>: must be ..." and returns -1. */
/* A string without embedded NUL (documents are parsed with JSON_ALLOW_NUL so
 * that this, not the parser, names the field); *len may be NULL. */
int sbx_json_string(json_t *v, const char *where, const char **s, size_t *len, struct sbx_err *err);
int sbx_json_bool(json_t *v, const char *where, bool *out, struct sbx_err *err);
/* An integer in min..max. */
int sbx_json_int(json_t *v, const char *where, json_int_t min, json_int_t max, json_int_t *out,
		 struct sbx_err *err);

#endif
