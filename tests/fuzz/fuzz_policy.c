/* SPDX-License-Identifier: Apache-2.0 */
/* The policy parser: JSON bytes -> SbxPolicy, then what is derived from a
 * policy that parsed. Properties: the effective policy (sbx_policy_to_json)
 * parses again to the same digest, and the canonical protobuf survives a
 * pack/unpack with its digest unchanged. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "policy.h"
#include "util.h"

static void digest_of(const SbxPolicy *p, char hex[65], const char *what)
{
	struct sbx_err err = {0};

	FUZZ_ASSERT(sbx_policy_digest(p, hex, &err) == 0, "%s: %s", what, err.msg);
	FUZZ_ASSERT(strlen(hex) == 64, "%s: digest \"%s\"", what, hex);
}

static void check_repack(const SbxPolicy *p, const char *digest)
{
	size_t len = sbx__v1__policy__get_packed_size(p);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	char again[65];

	FUZZ_ASSERT(buf, "out of memory");
	FUZZ_ASSERT(sbx__v1__policy__pack(p, buf) == len, "pack");
	SbxPolicy *q = sbx__v1__policy__unpack(NULL, len, buf);
	FUZZ_ASSERT(q, "the canonical policy does not unpack");
	digest_of(q, again, "unpacked");
	FUZZ_ASSERT(strcmp(digest, again) == 0, "digest %s became %s after pack/unpack", digest,
		    again);
	sbx_policy_free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbx_err err = {0};
	_cleanup_(sbx_policy_freep) SbxPolicy *p = sbx_policy_parse((const char *)data, size, &err);
	char digest[65], again[65];

	if (!p) {
		FUZZ_ASSERT(err.msg[0], "parse failed without a message");
		return 0;
	}
	digest_of(p, digest, "parsed");
	check_repack(p, digest);

	_cleanup_free_ char *json = sbx_policy_to_json(p);
	FUZZ_ASSERT(json, "to_json");
	_cleanup_(sbx_policy_freep) SbxPolicy *q = sbx_policy_parse(json, strlen(json), &err);
	FUZZ_ASSERT(q, "the effective policy does not parse: %s\n%s", err.msg, json);
	digest_of(q, again, "reparsed");
	FUZZ_ASSERT(strcmp(digest, again) == 0, "digest %s became %s through\n%s", digest, again,
		    json);
	_cleanup_free_ char *json2 = sbx_policy_to_json(q);
	FUZZ_ASSERT(json2 && strcmp(json, json2) == 0, "to_json is not stable:\n%s\n%s", json,
		    json2 ? json2 : "(null)");
	return 0;
}
