/* SPDX-License-Identifier: Apache-2.0 */
/* Image references as policies, the store and `sbxd image` spell them:
 * NAME:TAG, NAME:TAG@sha256:<64 lowercase hex>, or (for the store's rm and
 * inspect) sha256:<64 hex> alone. NAME starts with [a-z0-9] and holds
 * [a-z0-9._/-] (at most 128); TAG holds [A-Za-z0-9_.-] (at most 128).
 * Neither holds ':' or '@', so the first of each is the separator. */
#ifndef SBX_IMAGE_REF_H
#define SBX_IMAGE_REF_H

#include <stdbool.h>

#include "err.h"

#define SBX_IMAGE_NAME_MAX 128
#define SBX_IMAGE_TAG_MAX  128

struct sbx_image_ref {
	char name[SBX_IMAGE_NAME_MAX + 1]; /* "" for a bare digest */
	char tag[SBX_IMAGE_TAG_MAX + 1];   /* "" for a bare digest */
	char digest[72];		   /* "sha256:<hex>", "" when unpinned */
};

/* Parses s; allow_bare_digest admits "sha256:<hex>" alone. The error says
 * which part is wrong. */
int sbx_image_ref_parse(const char *s, bool allow_bare_digest, struct sbx_image_ref *out,
			struct sbx_err *err);
/* "sha256:" + 64 lowercase hex digits, nothing else. */
bool sbx_image_digest_valid(const char *s);

#endif
