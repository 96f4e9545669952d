/* SPDX-License-Identifier: Apache-2.0 */
#include "config_rules.h"

#include <stdio.h>

#include "strict_json.h"

int config_get_int(json_t *obj, const char *where, const char *key, json_int_t min, json_int_t max,
		   void *out, size_t size, struct sbx_err *err)
{
	json_t *v = json_object_get(obj, key);
	char path[160];
	json_int_t n = 0;

	if (!v)
		return 0;
	snprintf(path, sizeof(path), "%s%s%s", where, where[0] ? "." : "", key);
	if (sbx_json_int(v, path, min, max, &n, err) < 0)
		return -1;
	if (size == sizeof(uint32_t))
		*(uint32_t *)out = (uint32_t)n;
	else
		*(uint64_t *)out = (uint64_t)n;
	return 0;
}

int config_follow(json_t *obj, const char *key, const char *name, uint32_t *value, uint32_t bound,
		  const char *bound_name, struct sbx_err *err)
{
	if (*value <= bound)
		return 0;
	if (json_object_get(obj, key))
		return sbx_fail(err, "%s: must not exceed %s (%u)", name, bound_name, bound);
	*value = bound;
	return 0;
}
