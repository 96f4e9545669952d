/* The strict-JSON helpers that policies (common/policy.c) and sbxd's
 * configuration (server/config.c) share: errors name the JSON path. */
#ifndef SBX_STRICT_JSON_H
#define SBX_STRICT_JSON_H

#include <jansson.h>

#include "err.h"

/* Rejects the first key (in document order) of obj that is not in the
 * NULL-terminated keys: "<where>.<key>: unknown key" (where "" for the top
 * level). A key with an embedded NUL never matches. */
int sbx_json_check_keys(json_t *obj, const char *where, const char *const *keys,
			struct sbx_err *err);

#endif
