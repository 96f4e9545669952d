/* SPDX-License-Identifier: Apache-2.0 */
#include "config_rules.h"

#include <stdio.h>

#include "strict_json.h"

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
