/* SPDX-License-Identifier: Apache-2.0 */
#include "strict_json.h"

#include <stdbool.h>
#include <string.h>

static bool key_known(const char *key, size_t len, const char *const *keys)
{
	/* A key with an embedded NUL would compare equal to its prefix. */
	if (strlen(key) != len)
		return false;
	for (; *keys; keys++)
		if (strcmp(key, *keys) == 0)
			return true;
	return false;
}

int sbx_json_check_keys(json_t *obj, const char *where, const char *const *keys,
			struct sbx_err *err)
{
	for (void *it = json_object_iter(obj); it; it = json_object_iter_next(obj, it)) {
		const char *key = json_object_iter_key(it);

		if (!key_known(key, json_object_iter_key_len(it), keys))
			return sbx_fail(err, "%s%s%s: unknown key", where, *where ? "." : "", key);
	}
	return 0;
}

int sbx_json_string(json_t *v, const char *where, const char **s, size_t *len, struct sbx_err *err)
{
	*s = NULL;
	if (len)
		*len = 0;
	if (!json_is_string(v))
		return sbx_fail(err, "%s: must be a string", where);
	*s = json_string_value(v);
	if (len)
		*len = json_string_length(v);
	if (strlen(*s) != json_string_length(v))
		return sbx_fail(err, "%s: must not contain NUL", where);
	return 0;
}

int sbx_json_bool(json_t *v, const char *where, bool *out, struct sbx_err *err)
{
	if (!json_is_boolean(v))
		return sbx_fail(err, "%s: must be true or false", where);
	*out = json_is_true(v);
	return 0;
}

int sbx_json_int(json_t *v, const char *where, json_int_t min, json_int_t max, json_int_t *out,
		 struct sbx_err *err)
{
	json_int_t n;

	if (!json_is_integer(v))
		return sbx_fail(err, "%s: must be an integer", where);
	n = json_integer_value(v);
	if (n < min || n > max)
		return sbx_fail(err, "%s: must be %" JSON_INTEGER_FORMAT "..%" JSON_INTEGER_FORMAT,
				where, min, max);
	*out = n;
	return 0;
}
