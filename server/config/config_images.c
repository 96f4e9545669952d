/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config: the image store's section ("images"): where the store
 * is, whether a policy may name an image by name:tag alone, and what one
 * `sbxd image import` may write.
 *
 * An unwritten bound stays 0, which means img_limits_default's value
 * (server/images/images.h): the defaults are the store's, said once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config.h"
#include "config_keys.h"
#include "config_rules.h"
#include "path.h"
#include "strict_json.h"

#define PATH_LEN_MAX 4095
/* Far above any real image (a Debian rootfs is ~10^4 entries and a few
 * hundred MiB) and far below what would overflow a counter. */
#define ENTRIES_MAX (100 * 1000 * 1000)
#define BYTES_MAX   ((json_int_t)1 << 44) /* 16 TiB */

static int set_dir(struct sbx_config *cfg, void *field, json_t *v, const char *where,
		   struct sbx_err *err)
{
	char **dir = field;
	const char *s, *problem;
	char *copy;

	(void)cfg, (void)where;
	if (sbx_json_string(v, "images.dir", &s, NULL, err) < 0)
		return -1;
	/* The store is trusted by every run: one spelling, no "..", so that
	 * what the operator reads in the file is where the trees are. */
	if ((problem = sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_ABSOLUTE)))
		return sbx_fail(err, "images.dir: %s", problem);
	if (!strcmp(s, "/"))
		return sbx_fail(err, "images.dir: must not be /");
	if (!(copy = strdup(s)))
		return sbx_fail_errnum(err, ENOMEM, "config");
	free(*dir);
	*dir = copy;
	return 0;
}

/* Both written: one file larger than all of them together is a typo. One
 * of them left to its default is the store's business (the total bound
 * still holds). */
static int check_file_bytes(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err)
{
	const struct sbx_config_images *im = base;

	(void)cfg, (void)obj;
	if (im->max_bytes && im->max_file_bytes > im->max_bytes)
		return sbx_fail(err,
				"images.max_file_bytes: must not exceed images.max_bytes (%llu)",
				(unsigned long long)im->max_bytes);
	return 0;
}

#define IM(field) .offset = offsetof(struct sbx_config_images, field)
static const struct sbx_config_key images_keys[] = {
    {"dir", SBX_CONFIG_ABS_PATH, IM(dir), .parse = set_dir, .range_doc = "not `/`",
     .def_doc = "`<state_dir>/images`", .doc = "the image store"},
    {"allow_unpinned", SBX_CONFIG_BOOL, IM(allow_unpinned),
     .doc = "a policy's `name:tag` without `@sha256:` may run"},
    {"max_entries", SBX_CONFIG_U64, 1, ENTRIES_MAX, 0, IM(max_entries),
     .def_doc = "the store's (server/images/)",
     .doc = "files, directories and links one import may write"},
    {"max_bytes", SBX_CONFIG_U64, 1, BYTES_MAX, 0, IM(max_bytes),
     .def_doc = "the store's (server/images/)", .doc = "bytes one import may write"},
    {"max_file_bytes", SBX_CONFIG_U64, 1, BYTES_MAX, 0, IM(max_file_bytes),
     .check = check_file_bytes, .def_doc = "the store's (server/images/)",
     .doc = "one file of an import; at most `max_bytes`"},
};
#undef IM

const struct sbx_config_section sbx_config_images_section = {
    "images",
    "The image store ([images](../operator/images.md)): where it is, whether a policy may "
    "name an image by name:tag alone, and what one `sbxd image import` may write.",
    images_keys,
    SBX_CONFIG_N(images_keys),
};

char *sbx_config_images_dir(const struct sbx_config *cfg)
{
	char *s = NULL;

	if (cfg->images.dir)
		return strdup(cfg->images.dir);
	if (asprintf(&s, "%s/images", cfg->state_dir ? cfg->state_dir : "/var/lib/sbx") < 0)
		return NULL;
	return s;
}

void sbx_config_images_free(struct sbx_config_images *im)
{
	free(im->dir);
	memset(im, 0, sizeof(*im));
}
