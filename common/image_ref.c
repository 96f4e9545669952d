/* SPDX-License-Identifier: Apache-2.0 */
#include "image_ref.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static bool is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_name_char(char c)
{
	return is_name_start(c) || (c && strchr("._/-", c));
}

/* ctype is locale-bound, but nothing here calls setlocale: ASCII. */
static bool is_tag_char(char c)
{
	return isalnum((unsigned char)c) || (c && strchr("_.-", c));
}

bool sbx_image_digest_valid(const char *s)
{
	static const char algo[] = "sha256:";

	if (strncmp(s, algo, sizeof(algo) - 1) != 0)
		return false;
	s += sizeof(algo) - 1;
	if (strlen(s) != 64)
		return false;
	for (size_t i = 0; i < 64; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

int sbx_image_ref_parse(const char *s, bool allow_bare_digest, struct sbx_image_ref *out,
			struct sbx_err *err)
{
	const char *colon, *at, *tag_end;
	size_t name_len, tag_len;

	memset(out, 0, sizeof(*out));
	if (allow_bare_digest && !strncmp(s, "sha256:", 7)) {
		if (!sbx_image_digest_valid(s))
			return sbx_fail(err, "%.80s: a digest is sha256:<64 lowercase hex>", s);
		snprintf(out->digest, sizeof(out->digest), "%s", s);
		return 0;
	}
	colon = strchr(s, ':');
	if (!colon)
		return sbx_fail(err, "%.200s: must be name:tag or name:tag@sha256:<64 hex>", s);
	name_len = (size_t)(colon - s);
	if (name_len == 0 || name_len > SBX_IMAGE_NAME_MAX || !is_name_start(s[0]))
		return sbx_fail(err,
				"%.200s: the name must be 1..%d characters starting with "
				"[a-z0-9]",
				s, SBX_IMAGE_NAME_MAX);
	for (const char *c = s; c < colon; c++)
		if (!is_name_char(*c))
			return sbx_fail(err, "%.200s: the name may hold only [a-z0-9._/-]", s);
	at = strchr(colon + 1, '@');
	tag_end = at ? at : colon + 1 + strlen(colon + 1);
	tag_len = (size_t)(tag_end - colon - 1);
	if (tag_len == 0 || tag_len > SBX_IMAGE_TAG_MAX)
		return sbx_fail(err, "%.200s: the tag must be 1..%d characters", s,
				SBX_IMAGE_TAG_MAX);
	for (const char *c = colon + 1; c < tag_end; c++)
		if (!is_tag_char(*c))
			return sbx_fail(err, "%.200s: the tag may hold only [A-Za-z0-9_.-]", s);
	if (at && !sbx_image_digest_valid(at + 1))
		return sbx_fail(err, "%.200s: the pin must be @sha256:<64 lowercase hex>", s);
	memcpy(out->name, s, name_len);
	memcpy(out->tag, colon + 1, tag_len);
	if (at)
		snprintf(out->digest, sizeof(out->digest), "%s", at + 1);
	return 0;
}
