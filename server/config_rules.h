/* SPDX-License-Identifier: Apache-2.0 */
/* Two rules every section of sbxd's config file follows (config.c,
 * config_limits.c, config_egress.c), written once. */
#ifndef SBX_CONFIG_RULES_H
#define SBX_CONFIG_RULES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"

/* One integer key of obj ("<where>.<key>" in errors; where "" at the top),
 * min..max, into a uint32_t or uint64_t (size). An absent key leaves *out. */
int config_get_int(json_t *obj, const char *where, const char *key, json_int_t min, json_int_t max,
		   void *out, size_t size, struct sbx_err *err);
#define CONFIG_GET(obj, where, key, min, max, field, err)                                          \
	config_get_int(obj, where, key, min, max, &(field), sizeof(field), err)

/* A bound that must not exceed another: written, past it is an error
 * naming both ("<name>: must not exceed <bound_name> (N)"); unwritten (key
 * absent from obj), it follows the smaller bound instead of failing on a
 * number the operator never wrote. */
int config_follow(json_t *obj, const char *key, const char *name, uint32_t *value, uint32_t bound,
		  const char *bound_name, struct sbx_err *err);

#endif
