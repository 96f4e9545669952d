/* SPDX-License-Identifier: Apache-2.0 */
/* refs.json and the store's other JSON files (image.json): read bounded and
 * strictly, written beside and renamed into place, so that a reader (or
 * the store after a SIGKILL) sees the old file or the new one, never half
 * of one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_ref.h"
#include "images_source.h"
#include "images_store_private.h"
#include "util.h"

const char *img_digest_hex(const char *digest)
{
	return digest && sbx_image_digest_valid(digest) ? digest + 7 : NULL;
}

int img_json_read_at(int dirfd, const char *name, json_t **out, struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	json_error_t jerr;
	size_t len = 0;

	*out = NULL;
	/* The file is replaced by rename, never rewritten in place: what is
	 * read is one whole version of it. */
	if (img_read_file(dirfd, name, IMG_STORE_JSON_MAX, &buf, &len, err) < 0)
		return -1;
	*out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!*out)
		return sbx_fail(err, "%s: line %d: %s", name, jerr.line, jerr.text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return sbx_fail(err, "%s: must be a JSON object", name);
	}
	return 0;
}

int img_json_write_at(int dirfd, const char *name, json_t *v, struct sbx_err *err)
{
	char tmp[256];
	_cleanup_close_ int fd = -1;

	if (snprintf(tmp, sizeof(tmp), "%s.new", name) >= (int)sizeof(tmp))
		return sbx_fail(err, "%s: name too long", name);
	/* A writer killed before its rename left this; the exclusive store
	 * lock (or the stage's own flock) says nobody else is writing it. */
	if (unlinkat(dirfd, tmp, 0) < 0 && errno != ENOENT)
		return sbx_fail_errno(err, "remove %s", tmp);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return sbx_fail_errno(err, "create %s", tmp);
	if (json_dumpfd(v, fd, JSON_INDENT(2) | JSON_SORT_KEYS) < 0 || write(fd, "\n", 1) != 1)
		return sbx_fail_errno(err, "write %s", tmp);
	if (fsync(fd) < 0)
		return sbx_fail_errno(err, "fsync %s", tmp);
	if (renameat(dirfd, tmp, dirfd, name) < 0)
		return sbx_fail_errno(err, "rename %s to %s", tmp, name);
	if (fsync(dirfd) < 0)
		return sbx_fail_errno(err, "fsync the directory of %s", name);
	return 0;
}

int img_refs_read(struct img_store *s, json_t **refs, struct sbx_err *err)
{
	struct sbx_image_ref r;
	const char *key;
	json_t *v;

	struct stat st;

	/* None yet: an empty store (refs.json is only ever replaced, never
	 * removed, so it cannot go between this and the read). */
	if (fstatat(s->dir_fd, "refs.json", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		*refs = json_object();
		return *refs ? 0 : sbx_fail_errnum(err, ENOMEM, "%s/refs.json", s->dir);
	}
	if (img_json_read_at(s->dir_fd, "refs.json", refs, err) < 0)
		return sbx_err_prefix(err, "%s", s->dir);
	/* Only the store writes it, but a run trusts what it names: hold it
	 * to the same rules as a policy's reference. */
	json_object_foreach(*refs, key, v)
	{
		if (sbx_image_ref_parse(key, false, &r, err) < 0 || r.digest[0] ||
		    !json_is_string(v) || !sbx_image_digest_valid(json_string_value(v))) {
			json_decref(*refs);
			*refs = NULL;
			return sbx_fail(err,
					"%s/refs.json: entry \"%.200s\" is not "
					"\"name:tag\": \"sha256:<hex>\"",
					s->dir, key);
		}
	}
	return 0;
}

int img_refs_write(struct img_store *s, json_t *refs, struct sbx_err *err)
{
	if (img_json_write_at(s->dir_fd, "refs.json", refs, err) < 0)
		return sbx_err_prefix(err, "%s", s->dir);
	return 0;
}

bool img_refs_name(json_t *refs, const char *digest, const char *except)
{
	const char *key;
	json_t *v;

	json_object_foreach(refs, key, v) if ((!except || strcmp(key, except)) &&
					      !strcmp(json_string_value(v), digest)) return true;
	return false;
}
