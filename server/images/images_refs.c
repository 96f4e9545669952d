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

/* buf (len bytes of the file `name`) parsed: it must be one JSON object. */
static int json_object_parse(const char *buf, size_t len, const char *name, json_t **out,
			     struct sbx_err *err)
{
	json_error_t jerr;

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

int img_json_read_at(int dirfd, const char *name, json_t **out, struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;

	*out = NULL;
	/* The file is replaced by rename, never rewritten in place: what is
	 * read is one whole version of it. */
	if (img_read_file(dirfd, name, IMG_STORE_JSON_MAX, &buf, &len, err) < 0)
		return -1;
	return json_object_parse(buf, len, name, out, err);
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

void img_refs_cache_free(struct img_refs_cache *c)
{
	json_decref(c->refs);
	json_decref(c->named);
	free(c->keys);
	*c = (struct img_refs_cache){0};
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* c->refs checked (only the store writes it, but a run trusts what it
 * names: held to the same rules as a policy's reference), with its index
 * of digests and its sorted keys. */
static int refs_index(struct img_store *s, struct img_refs_cache *c, struct sbx_err *err)
{
	struct sbx_image_ref r;
	const char *key;
	json_t *v;

	c->named = json_object();
	c->keys = calloc(json_object_size(c->refs) + 1, sizeof(*c->keys));
	if (!c->named || !c->keys)
		return sbx_fail_errnum(err, ENOMEM, "%s/refs.json", s->dir);
	json_object_foreach(c->refs, key, v)
	{
		if (sbx_image_ref_parse(key, false, &r, err) < 0 || r.digest[0] ||
		    !json_is_string(v) || !sbx_image_digest_valid(json_string_value(v)))
			return sbx_fail(err,
					"%s/refs.json: entry \"%.200s\" is not "
					"\"name:tag\": \"sha256:<hex>\"",
					s->dir, key);
		if (json_object_set_new(c->named, json_string_value(v), json_true()) < 0)
			return sbx_fail_errnum(err, ENOMEM, "%s/refs.json", s->dir);
		c->keys[c->n++] = key;
	}
	if (c->n)
		qsort(c->keys, c->n, sizeof(*c->keys), cmp_key);
	return 0;
}

/* The version of refs.json fd is (fstat'ed into st): parsed into c. */
static int refs_parse(struct img_store *s, int fd, const struct stat *st, struct img_refs_cache *c,
		      struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;

	if ((uint64_t)st->st_size > IMG_REFS_JSON_MAX)
		return sbx_fail(err,
				"%s/refs.json: %lld bytes, more than the store's bound of %u "
				"bytes (4 MiB) for it",
				s->dir, (long long)st->st_size, IMG_REFS_JSON_MAX);
	if (img_read_fd(fd, "refs.json", IMG_REFS_JSON_MAX, &buf, &len, err) < 0 ||
	    json_object_parse(buf, len, "refs.json", &c->refs, err) < 0)
		return sbx_err_prefix(err, "%s", s->dir);
	return refs_index(s, c, err);
}

static bool same_version(const struct img_refs_cache *c, const struct stat *st)
{
	return c->present && c->dev == st->st_dev && c->ino == st->st_ino &&
	       c->size == st->st_size && c->mtim.tv_sec == st->st_mtim.tv_sec &&
	       c->mtim.tv_nsec == st->st_mtim.tv_nsec && c->ctim.tv_sec == st->st_ctim.tv_sec &&
	       c->ctim.tv_nsec == st->st_ctim.tv_nsec;
}

int img_refs_load(struct img_store *s, struct sbx_err *err)
{
	struct img_refs_cache *c = &s->refs, fresh = {0};
	_cleanup_close_ int fd =
	    openat(s->dir_fd, "refs.json", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	/* None yet: an empty store (refs.json is only ever replaced, never
	 * removed). */
	if (fd < 0 && errno == ENOENT) {
		if (c->loaded && !c->present)
			return 0;
		img_refs_cache_free(c);
		if (!(fresh.refs = json_object()) || refs_index(s, &fresh, err) < 0) {
			img_refs_cache_free(&fresh);
			return sbx_fail_errnum(err, ENOMEM, "%s/refs.json", s->dir);
		}
		fresh.loaded = true;
		*c = fresh;
		return 0;
	}
	if (fd < 0 || fstat(fd, &st) < 0) {
		img_refs_cache_free(c);
		return sbx_fail_errno(err, "%s/refs.json", s->dir);
	}
	/* The version read: what fd is, whatever the name points at now. */
	if (c->loaded && S_ISREG(st.st_mode) && same_version(c, &st))
		return 0;
	/* The old version goes first (two parsed copies at once would double
	 * the peak), and on a failure too: the caller sees no refs. */
	img_refs_cache_free(c);
	if (!S_ISREG(st.st_mode))
		return sbx_fail(err, "%s/refs.json: not a regular file", s->dir);
	if (refs_parse(s, fd, &st, &fresh, err) < 0) {
		img_refs_cache_free(&fresh);
		return -1;
	}
	fresh.loaded = fresh.present = true;
	fresh.dev = st.st_dev;
	fresh.ino = st.st_ino;
	fresh.size = st.st_size;
	fresh.mtim = st.st_mtim;
	fresh.ctim = st.st_ctim;
	*c = fresh;
	return 0;
}

int img_refs_read(struct img_store *s, json_t **refs, struct sbx_err *err)
{
	int rc;

	*refs = NULL;
	pthread_mutex_lock(&s->refs_mu);
	rc = img_refs_load(s, err);
	if (rc == 0 && !(*refs = json_deep_copy(s->refs.refs)))
		rc = sbx_fail_errnum(err, ENOMEM, "%s/refs.json", s->dir);
	pthread_mutex_unlock(&s->refs_mu);
	return rc;
}

int img_refs_write(struct img_store *s, json_t *refs, struct sbx_err *err)
{
	/* What img_json_write_at writes: the dump and its newline. */
	size_t need = json_dumpb(refs, NULL, 0, JSON_INDENT(2) | JSON_SORT_KEYS) + 1;

	/* Every reader (sbxd's Health and CreateRun among them) would refuse
	 * a larger file: refuse to write it, and say what would help. */
	if (need > IMG_REFS_JSON_MAX)
		return sbx_fail(err,
				"%s/refs.json: %zu tags would take %zu bytes, more than the "
				"store's bound of %u bytes (4 MiB); nothing was changed: remove "
				"tags no policy pins (sbxd image rm NAME:TAG) first",
				s->dir, json_object_size(refs), need, IMG_REFS_JSON_MAX);
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
