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
#include "config_rules.h"
#include "path.h"
#include "strict_json.h"

#define PATH_LEN_MAX 4095
/* Far above any real image (a Debian rootfs is ~10^4 entries and a few
 * hundred MiB) and far below what would overflow a counter. */
#define ENTRIES_MAX (100 * 1000 * 1000)
#define BYTES_MAX   ((json_int_t)1 << 44) /* 16 TiB */

static const char *const images_keys[] = {"dir",       "allow_unpinned", "max_entries",
					  "max_bytes", "max_file_bytes", NULL};

static int set_dir(struct sbx_config_images *im, json_t *v, struct sbx_err *err)
{
	const char *s, *problem;
	char *copy;

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
	free(im->dir);
	im->dir = copy;
	return 0;
}

static int parse_images(struct sbx_config_images *im, json_t *v, struct sbx_err *err)
{
	const char *w = "images";
	json_t *f;

	if (!json_is_object(v))
		return sbx_fail(err, "images: must be an object");
	if (sbx_json_check_keys(v, w, images_keys, err) < 0)
		return -1;
	if ((f = json_object_get(v, "dir")) && set_dir(im, f, err) < 0)
		return -1;
	if ((f = json_object_get(v, "allow_unpinned")) &&
	    sbx_json_bool(f, "images.allow_unpinned", &im->allow_unpinned, err) < 0)
		return -1;
	if (CONFIG_GET(v, w, "max_entries", 1, ENTRIES_MAX, im->max_entries, err) < 0 ||
	    CONFIG_GET(v, w, "max_bytes", 1, BYTES_MAX, im->max_bytes, err) < 0 ||
	    CONFIG_GET(v, w, "max_file_bytes", 1, BYTES_MAX, im->max_file_bytes, err) < 0)
		return -1;
	/* Both written: one file larger than all of them together is a typo.
	 * One of them left to its default is the store's business (the total
	 * bound still holds). */
	if (im->max_bytes && im->max_file_bytes > im->max_bytes)
		return sbx_fail(err,
				"images.max_file_bytes: must not exceed images.max_bytes (%llu)",
				(unsigned long long)im->max_bytes);
	return 0;
}

int sbx_config_parse_images(struct sbx_config *cfg, void *root, struct sbx_err *err)
{
	json_t *v = json_object_get(root, "images");

	return v ? parse_images(&cfg->images, v, err) : 0;
}

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
