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
