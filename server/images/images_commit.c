/* SPDX-License-Identifier: Apache-2.0 */
/* Stages and what becomes of them: a staging directory in tmp/, its
 * commit (the stage renamed to sha256/<hex> under the store lock, or
 * discarded when that digest is there already), and tags pointed at a
 * digest. The order that keeps refs.json naming only complete trees is
 * images_store.c's (its header comment). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "image_ref.h"
#include "images_internal.h"
#include "images_store_private.h"
#include "tree.h"
#include "util.h"

static void stage_close_fds(struct img_stage *st)
{
	sbx_closep(&st->rootfs_fd);
	sbx_closep(&st->scratch_fd);
	sbx_closep(&st->dir_fd);
	st->rootfs_fd = st->scratch_fd = st->dir_fd = -1;
}

int img_stage_begin(struct img_store *s, struct img_stage *st, struct sbx_err *err)
{
	/* Stale stages, and trees no tag names that no run holds any more. */
	struct img_doomed doomed[2 * IMG_DOOMED_MAX];
	size_t n = 0, swept = 0;
	int rc, lk;

	*st = (struct img_stage)IMG_STAGE_INIT;
	if ((lk = img_store_lock(s, LOCK_EX, err)) < 0)
		return -1;
	rc = img_collect_stale(s, doomed, &n, err);
	if (rc == 0) {
		img_sweep_unnamed(s, &doomed[n], IMG_DOOMED_MAX, &swept);
		n += swept;
		rc = img_tmp_dir_new(s, st->name, &st->lock_fd, err);
	}
	img_store_unlock(lk);
	img_doomed_remove(s, doomed, n);
	if (rc < 0)
		return -1;
	st->dir_fd = openat(s->tmp_fd, st->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st->dir_fd < 0 || mkdirat(st->dir_fd, "rootfs", 0700) < 0 ||
	    mkdirat(st->dir_fd, "scratch", 0700) < 0 ||
	    (st->rootfs_fd = openat(st->dir_fd, "rootfs",
				    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    (st->scratch_fd = openat(st->dir_fd, "scratch",
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		sbx_fail_errno(err, "staging directory %s/tmp/%s", s->dir, st->name);
		img_stage_abort(s, st);
		return -1;
	}
	return 0;
}

void img_stage_abort(struct img_store *s, struct img_stage *st)
{
	struct img_doomed d;

	stage_close_fds(st);
	if (!st->name[0] || st->lock_fd < 0)
		return;
	d.lock_fd = st->lock_fd;
	snprintf(d.name, sizeof(d.name), "%s", st->name);
	img_doomed_remove(s, &d, 1);
	st->lock_fd = -1;
	st->name[0] = '\0';
}

/* Under the exclusive store lock: name_tag -> digest in refs.json. The
 * tree it named before, if no other tag names it and no run holds it, is
 * doomed (*n_doomed 1): an untagged tree is only disk space. */
static int retag_locked(struct img_store *s, const char *name_tag, const char *digest,
			struct img_doomed *d, size_t *n_doomed, struct sbx_err *err)
{
	json_auto_t *refs = NULL;
	char old[IMG_DIGEST_LEN + 1] = "";
	_cleanup_close_ int held = -1;
	struct sbx_err why;
	json_t *v;

	*n_doomed = 0;
	if (img_refs_read(s, &refs, err) < 0)
		return -1;
	v = json_object_get(refs, name_tag);
	if (v && strcmp(json_string_value(v), digest))
		snprintf(old, sizeof(old), "%s", json_string_value(v));
	if (json_object_set_new(refs, name_tag, json_string(digest)) < 0)
		return sbx_fail_errnum(err, ENOMEM, "refs");
	if (img_refs_write(s, refs, err) < 0)
		return -1;
	/* Held by a run (or not movable): it stays, untagged, for rm. */
	if (old[0] && !img_refs_name(refs, old, NULL) && img_tree_present(s, old + 7) &&
	    (held = img_take_tree(s, old + 7, &why)) >= 0 &&
	    img_doom_tree(s, old + 7, d, &why) == 0)
		*n_doomed = 1;
	return 0;
}

static int check_name_tag(const char *name_tag, struct sbx_err *err)
{
	struct sbx_image_ref r;

	if (sbx_image_ref_parse(name_tag, false, &r, err) < 0)
		return -1;
	if (r.digest[0])
		return sbx_fail(err, "%s: must be name:tag without @sha256:", name_tag);
	return 0;
}

int img_store_tag(struct img_store *s, const char *name_tag, const char *digest,
		  struct sbx_err *err)
{
	struct img_doomed d;
	size_t n_doomed = 0;
	int rc, lk;

	if (check_name_tag(name_tag, err) < 0)
		return -1;
	if (!img_digest_hex(digest))
		return sbx_fail(err, "%.80s: not a sha256:<hex> digest", digest);
	if ((lk = img_store_lock(s, LOCK_EX, err)) < 0)
		return -1;
	if (!img_store_has(s, digest))
		rc = sbx_fail(err, "%s: not in the image store %s", digest, s->dir);
	else
		rc = retag_locked(s, name_tag, digest, &d, &n_doomed, err);
	img_store_unlock(lk);
	img_doomed_remove(s, &d, n_doomed);
	return rc;
}

/* image.json: what the import said (meta) and the store's own fields. */
static int write_image_json(struct img_stage *st, const char *digest, json_t *meta,
			    struct sbx_err *err)
{
	json_t *doc = meta ? json_deep_copy(meta) : json_object();
	int rc;

	if (!doc || !json_is_object(doc) ||
	    json_object_set_new(doc, "digest", json_string(digest)) < 0 ||
	    json_object_set_new(doc, "imported_unix_ms", json_integer(sbx_unix_ms())) < 0) {
		json_decref(doc);
		return sbx_fail_errnum(err, ENOMEM, "image.json");
	}
	rc = img_json_write_at(st->dir_fd, "image.json", doc, err);
	json_decref(doc);
	return rc;
}

/* Before the store lock: the stage made ready to become sha256/<hex>. */
static int stage_ready(struct img_store *s, struct img_stage *st, const char *digest, json_t *meta,
		       struct sbx_err *err)
{
	/* The stage becomes sha256/<hex> itself: rootfs/ is never moved (a
	 * read-only rootfs directory could not be), only its parent. */
	sbx_closep(&st->scratch_fd);
	sbx_closep(&st->rootfs_fd);
	st->scratch_fd = st->rootfs_fd = -1;
	if (sbx_remove_tree_at(st->dir_fd, "scratch", err) < 0 ||
	    write_image_json(st, digest, meta, err) < 0)
		return sbx_err_prefix(err, "%s/tmp/%s", s->dir, st->name);
	/* The tree's data on disk before a ref can name it (a crash of the
	 * host, not only of this process, keeps the invariant). */
	if (syncfs(st->dir_fd) < 0)
		return sbx_fail_errno(err, "syncfs %s/tmp/%s", s->dir, st->name);
	return 0;
}

int img_stage_commit(struct img_store *s, struct img_stage *st, const char *digest,
		     const char *name_tag, json_t *meta, bool *reused, struct sbx_err *err)
{
	const char *hex = img_digest_hex(digest);
	struct img_doomed d[1 + IMG_DOOMED_MAX];
	size_t n_doomed = 0;
	int rc = 0, lk = -1;

	*reused = false;
	if (!hex)
		rc = sbx_fail(err, "%.80s: not a sha256:<hex> digest", digest);
	else if (check_name_tag(name_tag, err) < 0 || stage_ready(s, st, digest, meta, err) < 0 ||
		 (lk = img_store_lock(s, LOCK_EX, err)) < 0)
		rc = -1;
	if (rc < 0) {
		img_stage_abort(s, st);
		return -1;
	}
	if (img_tree_present(s, hex))
		*reused = true;
	else if (renameat(s->tmp_fd, st->name, s->sha_fd, hex) < 0 || fsync(s->sha_fd) < 0)
		rc = sbx_fail_errno(err, "move %s/tmp/%s to sha256/%s", s->dir, st->name, hex);
	if (rc == 0 && !*reused) {
		/* The stage is the image's directory now: its flock goes before
		 * the store lock does, or the first run's hold would find it
		 * taken. */
		stage_close_fds(st);
		sbx_closep(&st->lock_fd);
		st->lock_fd = -1;
		st->name[0] = '\0';
	}
	if (rc == 0) {
		rc = retag_locked(s, name_tag, digest, d, &n_doomed, err);
		/* The tag refused (refs.json would pass its bound): the tree
		 * just moved in goes again, so that nothing changed. The sweep
		 * goes by refs.json as it is on disk, so a write that failed
		 * after its rename keeps the tree it names. */
		if (rc < 0 && !*reused)
			img_sweep_unnamed(s, d, IMG_DOOMED_MAX, &n_doomed);
	}
	img_store_unlock(lk);
	img_doomed_remove(s, d, n_doomed);
	img_stage_abort(s, st); /* the reused (or failed) case's stage; else nothing is left */
	return rc;
}
