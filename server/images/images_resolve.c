/* SPDX-License-Identifier: Apache-2.0 */
/* The store's readers: a policy's reference resolved and held for a run,
 * Health's pins, and `sbxd image list` / `inspect`. Each reads under the
 * shared store lock, so that no rm or retag moves a tree between the ref
 * that names it and the open (and the flock) that holds it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_ref.h"
#include "images_internal.h"
#include "images_store_private.h"
#include "util.h"

void img_hold_release(struct img_hold *h)
{
	sbx_closep(&h->lock_fd);
	free(h->rootfs);
	*h = (struct img_hold)IMG_HOLD_INIT;
}

/* Under the shared store lock: the run's shared flock on sha256/<hex>. rm
 * takes the exclusive one only under the exclusive store lock, so it cannot
 * be taken now: non-blocking, and a failure is the store's. */
static int hold_tree(struct img_store *s, const char *name_tag, const char *digest,
		     struct img_hold *out, struct sbx_err *err)
{
	const char *hex = digest + 7;
	_cleanup_close_ int fd =
	    openat(s->sha_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int root = -1;
	struct stat st;
	size_t len;

	if (fd < 0)
		return sbx_fail_errno(err, "%s/sha256/%s", s->dir, hex);
	if (flock(fd, LOCK_SH | LOCK_NB) < 0)
		return sbx_fail_errno(err, "%s/sha256/%s: flock", s->dir, hex);
	/* The tree this flock holds, by fd beneath the held directory (not by
	 * path): its identity is what the helper must find at the path. */
	root = openat(fd, "rootfs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0 || fstat(root, &st) < 0)
		return sbx_fail(err, "%s/sha256/%s/rootfs: missing or not a directory", s->dir,
				hex);
	out->rootfs_dev = st.st_dev;
	out->rootfs_ino = st.st_ino;
	len = strlen(s->dir) + strlen("/sha256//rootfs") + 64 + 1;
	if (!(out->rootfs = malloc(len)))
		return sbx_fail_errnum(err, ENOMEM, "image hold");
	snprintf(out->rootfs, len, "%s/sha256/%s/rootfs", s->dir, hex);
	snprintf(out->digest, sizeof(out->digest), "%s", digest);
	snprintf(out->pinned, sizeof(out->pinned), "%s@%s", name_tag, digest);
	out->lock_fd = sbx_steal_fd(fd);
	return 0;
}

/* The reasons a well-formed reference cannot run here: IMG_REFUSED. */
static int refuse(struct sbx_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct sbx_err *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sbx_failv(err, 0, fmt, ap);
	va_end(ap);
	return IMG_REFUSED;
}

/* Under the shared store lock: what refs.json says of name_tag (tagged: its
 * digest, "" for none) and of digest (whether a tag names it), from the
 * parsed copy sbxd keeps while the file is unchanged. */
static int refs_lookup(struct img_store *s, const char *name_tag, const char *digest,
		       char tagged[IMG_DIGEST_LEN + 1], bool *named, struct sbx_err *err)
{
	int rc;

	pthread_mutex_lock(&s->refs_mu);
	rc = img_refs_load(s, err);
	if (rc == 0) {
		const char *t = json_string_value(json_object_get(s->refs.refs, name_tag));

		snprintf(tagged, IMG_DIGEST_LEN + 1, "%s", t ? t : "");
		*named = digest[0] && json_object_get(s->refs.named, digest);
	}
	pthread_mutex_unlock(&s->refs_mu);
	return rc;
}

static int resolve_locked(struct img_store *s, const struct sbx_image_ref *r, const char *ref,
			  bool allow_unpinned, struct img_hold *out, struct sbx_err *err)
{
	char name_tag[SBX_IMAGE_NAME_MAX + SBX_IMAGE_TAG_MAX + 2], tag_digest[IMG_DIGEST_LEN + 1];
	const char *tagged;
	bool named = false;

	snprintf(name_tag, sizeof(name_tag), "%s:%s", r->name, r->tag);
	if (refs_lookup(s, name_tag, r->digest, tag_digest, &named, err) < 0)
		return -1;
	tagged = tag_digest[0] ? tag_digest : NULL; /* NULL: no such tag */
	if (!r->digest[0]) {
		if (!allow_unpinned)
			return tagged
				   ? refuse(err,
					    "image: %s: unpinned references are refused here; pin "
					    "it (%s@%s) or set images.allow_unpinned",
					    ref, name_tag, tagged)
				   : refuse(err,
					    "image: %s: unpinned references are refused here, "
					    "and it is not in this host's image store",
					    ref);
		if (!tagged)
			return refuse(err, "image: %s: not in this host's image store", ref);
		return hold_tree(s, name_tag, tagged, out, err);
	}
	/* A tree no ref names is one a live run still holds (an rm or a retag
	 * found it held): every caller may ask, so its presence must not show,
	 * or any identity could learn that someone still runs an old pin.
	 * Only what Health lists (trees a ref names) counts as present. */
	bool listed = named && img_tree_present(s, r->digest + 7);

	if (tagged && strcmp(tagged, r->digest))
		return refuse(err, "image: %s: the store's %s is %s (re-import or fix the pin)%s",
			      ref, name_tag, tagged,
			      listed ? ""
				     : "; the pinned digest is not in this host's image store");
	if (!listed)
		return refuse(err, "image: %s: not in this host's image store", ref);
	if (!tagged)
		return refuse(err,
			      "image: %s: the store has %s but no %s names it (import it as %s)",
			      ref, r->digest, name_tag, name_tag);
	return hold_tree(s, name_tag, r->digest, out, err);
}

int img_store_resolve(struct img_store *s, const char *ref, bool allow_unpinned,
		      struct img_hold *out, struct sbx_err *err)
{
	struct sbx_image_ref r;
	int rc, lk;

	*out = (struct img_hold)IMG_HOLD_INIT;
	if (sbx_image_ref_parse(ref, false, &r, err) < 0) {
		sbx_err_prefix(err, "image");
		return IMG_REFUSED;
	}
	if ((lk = img_store_lock_read(s, err)) < 0)
		return lk;
	rc = resolve_locked(s, &r, ref, allow_unpinned, out, err);
	img_store_unlock(lk);
	if (rc < 0)
		img_hold_release(out);
	return rc;
}

/* ---- pins (Health) ---- */

void img_pins_free(char **pins, size_t n)
{
	for (size_t i = 0; pins && i < n; i++)
		free(pins[i]);
	free(pins);
}

/* With refs_mu held and s->refs loaded: the first max pins (the keys are
 * sorted already), so that Health costs what it answers, not the store. */
static int pins_copy(struct img_store *s, size_t max, char ***pins, size_t *n, struct sbx_err *err)
{
	size_t want = s->refs.n < max ? s->refs.n : max;
	char **all = calloc(want + 1, sizeof(*all));

	if (!all)
		return sbx_fail_errnum(err, ENOMEM, "image pins");
	for (size_t i = 0; i < want; i++) {
		const char *key = s->refs.keys[i];
		const char *digest = json_string_value(json_object_get(s->refs.refs, key));

		if (asprintf(&all[i], "%s@%s", key, digest) < 0) {
			all[i] = NULL;
			img_pins_free(all, i);
			return sbx_fail_errnum(err, ENOMEM, "image pins");
		}
	}
	*pins = all;
	*n = want;
	return 0;
}

int img_store_pins(struct img_store *s, size_t max, char ***pins, size_t *n, size_t *total,
		   struct sbx_err *err)
{
	int rc, lk;

	*pins = NULL;
	*n = *total = 0;
	if ((lk = img_store_lock_read(s, err)) < 0)
		return -1;
	pthread_mutex_lock(&s->refs_mu);
	rc = img_refs_load(s, err);
	if (rc == 0)
		rc = pins_copy(s, max, pins, n, err);
	if (rc == 0)
		*total = s->refs.n;
	pthread_mutex_unlock(&s->refs_mu);
	img_store_unlock(lk);
	return rc;
}

/* ---- list, inspect ---- */

/* What list shows of sha256/<hex>: from its image.json, with "ref". A
 * missing or damaged image.json shows as what the store knows. */
static json_t *list_entry(struct img_store *s, const char *ref, const char *hex)
{
	_cleanup_close_ int fd =
	    openat(s->sha_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	json_auto_t *meta = NULL;
	struct sbx_err ignored;
	json_t *e;

	if (fd >= 0 && img_json_read_at(fd, "image.json", &meta, &ignored) < 0)
		meta = NULL;
	e = json_pack("{s:s, s:s+}", "ref", ref, "digest", "sha256:", hex);
	if (e && meta)
		for (const char *const *k =
			 (const char *const[]){"size_bytes", "imported_unix_ms", "kind", NULL};
		     *k; k++)
			if (json_object_get(meta, *k))
				json_object_set(e, *k, json_object_get(meta, *k));
	return e;
}

/* Under the shared store lock, with refs_mu held: every tag's entry in
 * order, then the trees no tag names (an rm --untag or retag that found one
 * held, until the sweep takes it, or an import killed between its rename
 * and its tag) as "sha256:<hex>", sorted. */
static int list_locked(struct img_store *s, json_t *list, struct sbx_err *err)
{
	_cleanup_free_ char *names = NULL;
	size_t n = 0;

	if (img_refs_load(s, err) < 0)
		return -1;
	for (size_t i = 0; i < s->refs.n; i++) {
		const char *key = s->refs.keys[i];
		const char *digest = json_string_value(json_object_get(s->refs.refs, key));
		char pinned[512];

		snprintf(pinned, sizeof(pinned), "%s@%s", key, digest);
		json_array_append_new(list, list_entry(s, pinned, digest + 7));
	}
	if (img_unnamed_trees(s, &names, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		const char *digest = names + i * (IMG_DIGEST_LEN + 1);

		json_array_append_new(list, list_entry(s, digest, digest + 7));
	}
	return 0;
}

int img_store_list(struct img_store *s, json_t **out, struct sbx_err *err)
{
	json_auto_t *list = json_array();
	int rc, lk;

	*out = NULL;
	if (!list)
		return sbx_fail_errnum(err, ENOMEM, "image list");
	if ((lk = img_store_lock(s, LOCK_SH, err)) < 0)
		return -1;
	pthread_mutex_lock(&s->refs_mu);
	rc = list_locked(s, list, err);
	pthread_mutex_unlock(&s->refs_mu);
	img_store_unlock(lk);
	if (rc == 0)
		*out = sbx_steal_ptr(list);
	return rc;
}

/* Under the shared store lock: the digest ref stands for (name:tag's,
 * checked against its pin if it has one, or a bare sha256:<hex>). */
static int ref_digest(struct img_store *s, json_t *refs, const char *ref,
		      char digest[IMG_DIGEST_LEN + 1], struct sbx_err *err)
{
	struct sbx_image_ref r;

	if (sbx_image_ref_parse(ref, true, &r, err) < 0)
		return -1;
	if (r.name[0]) {
		char name_tag[SBX_IMAGE_NAME_MAX + SBX_IMAGE_TAG_MAX + 2];
		const char *tagged;

		snprintf(name_tag, sizeof(name_tag), "%s:%s", r.name, r.tag);
		tagged = json_string_value(json_object_get(refs, name_tag));
		if (!tagged)
			return sbx_fail(err, "%s: not in the image store %s", name_tag, s->dir);
		if (r.digest[0] && strcmp(r.digest, tagged))
			return sbx_fail(err, "%s: the store's %s is %s", ref, name_tag, tagged);
		snprintf(digest, IMG_DIGEST_LEN + 1, "%s", tagged);
	} else
		snprintf(digest, IMG_DIGEST_LEN + 1, "%s", r.digest);
	if (!img_tree_present(s, digest + 7))
		return sbx_fail(err, "%s: not in the image store %s", ref, s->dir);
	return 0;
}

static int inspect_locked(struct img_store *s, const char *ref, json_t **out, struct sbx_err *err)
{
	char digest[IMG_DIGEST_LEN + 1], path[4096];
	_cleanup_close_ int fd = -1;
	json_auto_t *refs = NULL, *meta = NULL, *names = json_array();
	const char *key;
	json_t *v;

	if (!names)
		return sbx_fail_errnum(err, ENOMEM, "inspect");
	if (img_refs_read(s, &refs, err) < 0 || ref_digest(s, refs, ref, digest, err) < 0)
		return -1;
	fd = openat(s->sha_fd, digest + 7, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "%s/sha256/%s", s->dir, digest + 7);
	if (img_json_read_at(fd, "image.json", &meta, err) < 0)
		return sbx_err_prefix(err, "%s/sha256/%s", s->dir, digest + 7);
	json_object_foreach(refs, key, v) if (!strcmp(json_string_value(v), digest))
	    json_array_append_new(names, json_string(key));
	snprintf(path, sizeof(path), "%s/sha256/%s/rootfs", s->dir, digest + 7);
	if (json_object_set(meta, "refs", names) < 0 ||
	    json_object_set_new(meta, "rootfs", json_string(path)) < 0)
		return sbx_fail_errnum(err, ENOMEM, "inspect");
	*out = sbx_steal_ptr(meta);
	return 0;
}

int img_store_inspect(struct img_store *s, const char *ref, json_t **out, struct sbx_err *err)
{
	int rc, lk;

	*out = NULL;
	if ((lk = img_store_lock(s, LOCK_SH, err)) < 0)
		return -1;
	rc = inspect_locked(s, ref, out, err);
	img_store_unlock(lk);
	return rc;
}
