/* SPDX-License-Identifier: Apache-2.0 */
/* The store's layout (images.h): opening it, its lock, staging directories,
 * commit by rename, tags, and removal. Every change to refs.json or to
 * what sha256/ holds happens under the exclusive store lock and is one
 * rename, in an order that keeps the invariant a run relies on: refs.json
 * names only complete trees. A tree appears in sha256/ (complete, renamed
 * from its stage) before a ref names it; a ref goes before its tree is
 * renamed away into tmp/ to be deleted. A SIGKILL between the two steps
 * leaves a tree no ref names (list shows it as sha256:<hex>), never a ref
 * without its tree. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "image_ref.h"
#include "images_internal.h"
#include "images_store_private.h"
#include "tree.h"
#include "util.h"

void img_limits_default(struct img_limits *lim)
{
	lim->max_entries = 1000000;
	lim->max_bytes = 16ull << 30;
	lim->max_file_bytes = 4ull << 30;
	lim->max_blob_bytes = 4u << 20;
}

int img_store_lock(struct img_store *s, int op, struct sbx_err *err)
{
	while (flock(s->lock_fd, op) < 0)
		if (errno != EINTR)
			return sbx_fail_errno(err, "%s/lock", s->dir);
	return 0;
}

void img_store_unlock(struct img_store *s)
{
	/* Closing the store releases it anyway; an unlock cannot fail on a
	 * valid fd we locked. */
	(void)flock(s->lock_fd, LOCK_UN);
}

/* ---- opening ---- */

/* The store's trees are mounted into every run that names them: a
 * directory someone else may write into (or that is someone else's) is
 * not a store sbxd may trust. */
static int check_owned(int fd, const char *path, struct sbx_err *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return sbx_fail_errno(err, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return sbx_fail(err, "%s: not a directory", path);
	if (st.st_uid != geteuid())
		return sbx_fail(err,
				"%s: owned by uid %u, not by this user (uid %u): the image store "
				"is used only by its owner, the user sbxd runs as (run sbxd image "
				"as that user)",
				path, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 022)
		return sbx_fail(err,
				"%s: mode %04o lets group or others write it; the image store must "
				"be writable by its owner alone (chmod 0700 %s)",
				path, (unsigned)(st.st_mode & 07777), path);
	return 0;
}

/* Root making a store inside a directory of another user would leave one
 * that user's sbxd refuses; say so before making it. */
static int check_parent_for_root(const char *dir, struct sbx_err *err)
{
	_cleanup_free_ char *parent = strdup(dir);
	char *slash;
	struct stat st;

	if (!parent)
		return sbx_fail_errnum(err, ENOMEM, "%s", dir);
	slash = strrchr(parent, '/');
	if (!slash)
		return 0;
	*(slash == parent ? slash + 1 : slash) = '\0';
	if (stat(parent, &st) < 0)
		return 0; /* made below, by root */
	if (geteuid() == 0 && st.st_uid != 0)
		return sbx_fail(err,
				"%s: refusing to make the image store as root in %s, which uid %u "
				"owns: run sbxd image as the user sbxd runs as",
				dir, parent, (unsigned)st.st_uid);
	return 0;
}

/* Makes dir (0700), and its parent when that is missing too (a fresh
 * state_dir holding <state_dir>/images). */
static int make_store_dir(const char *dir, struct sbx_err *err)
{
	if (check_parent_for_root(dir, err) < 0)
		return -1;
	if (mkdir(dir, 0700) == 0 || errno == EEXIST)
		return 0;
	if (errno == ENOENT) {
		_cleanup_free_ char *parent = strdup(dir);
		char *slash = parent ? strrchr(parent, '/') : NULL;

		if (slash && slash != parent) {
			*slash = '\0';
			if (mkdir(parent, 0700) < 0 && errno != EEXIST)
				return sbx_fail_errno(err, "mkdir %s", parent);
			if (mkdir(dir, 0700) == 0 || errno == EEXIST)
				return 0;
		}
	}
	return sbx_fail_errno(err, "mkdir %s", dir);
}

static int open_subdir(int dir_fd, const char *dir, const char *name, struct sbx_err *err)
{
	char path[4096];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (mkdirat(dir_fd, name, 0700) < 0 && errno != EEXIST)
		return sbx_fail_errno(err, "mkdir %s", path);
	fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "%s", path);
	if (check_owned(fd, path, err) < 0)
		return -1;
	return sbx_steal_fd(fd);
}

int img_store_open(const char *dir, bool create, struct img_store **out, struct sbx_err *err)
{
	_cleanup_img_store_ struct img_store *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s || !(s->dir = strdup(dir)))
		return sbx_fail_errnum(err, ENOMEM, "image store");
	s->dir_fd = s->lock_fd = s->sha_fd = s->tmp_fd = -1;
	if (create && make_store_dir(dir, err) < 0)
		return -1;
	s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dir_fd < 0)
		return sbx_fail_errno(err, "image store %s", dir);
	if (check_owned(s->dir_fd, dir, err) < 0)
		return -1;
	if ((s->sha_fd = open_subdir(s->dir_fd, dir, "sha256", err)) < 0 ||
	    (s->tmp_fd = open_subdir(s->dir_fd, dir, "tmp", err)) < 0)
		return -1;
	s->lock_fd = openat(s->dir_fd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (s->lock_fd < 0)
		return sbx_fail_errno(err, "%s/lock", dir);
	*out = sbx_steal_ptr(s);
	return 0;
}

void img_store_close(struct img_store *s)
{
	if (!s)
		return;
	sbx_closep(&s->dir_fd);
	sbx_closep(&s->lock_fd);
	sbx_closep(&s->sha_fd);
	sbx_closep(&s->tmp_fd);
	free(s->dir);
	free(s);
}

void img_store_closep(struct img_store **s)
{
	img_store_close(*s);
}

const char *img_store_dir(const struct img_store *s)
{
	return s->dir;
}

bool img_tree_present(struct img_store *s, const char *hex)
{
	struct stat st;

	return fstatat(s->sha_fd, hex, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

bool img_store_has(struct img_store *s, const char *digest)
{
	const char *hex = img_digest_hex(digest);

	return hex && img_tree_present(s, hex);
}

/* ---- directories of tmp/: stages, and trees on their way out ---- */

/* A directory of tmp/ this process holds (its flock), to be removed once
 * the store lock is released: removing a tree takes as long as the tree
 * is big, and nobody else touches a tmp/ entry whose flock is held. */
struct doomed {
	int lock_fd;
	char name[64];
};
#define DOOMED_MAX 16

static void doomed_remove(struct img_store *s, struct doomed *d, size_t n)
{
	struct sbx_err ignored;

	for (size_t i = 0; i < n; i++) {
		/* A failure leaves a tmp/ entry without a holder: the next
		 * import or rm tries again. */
		(void)sbx_remove_tree_at(s->tmp_fd, d[i].name, &ignored);
		sbx_closep(&d[i].lock_fd);
	}
}

/* Under the exclusive store lock (so that no cleaner can see it before its
 * flock is taken): a new tmp/<random>/, flock'ed. */
static int new_tmp_dir(struct img_store *s, char name[64], int *lock_fd, struct sbx_err *err)
{
	unsigned char rnd[8];
	_cleanup_close_ int fd = -1;

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return sbx_fail_errno(err, "getrandom");
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(name + 2 * i, 3, "%02x", rnd[i]);
	if (mkdirat(s->tmp_fd, name, 0700) < 0)
		return sbx_fail_errno(err, "mkdir %s/tmp/%s", s->dir, name);
	fd = openat(s->tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
		return sbx_fail_errno(err, "%s/tmp/%s", s->dir, name);
	*lock_fd = sbx_steal_fd(fd);
	return 0;
}

/* Under the exclusive store lock: every tmp/ entry whose holder is gone (an
 * import or rm that died), taken over (its flock) for doomed_remove. */
static int collect_stale(struct img_store *s, struct doomed *d, size_t *n, struct sbx_err *err)
{
	_cleanup_close_ int list_fd = fcntl(s->tmp_fd, F_DUPFD_CLOEXEC, 3);
	_cleanup_closedir_ DIR *dir = NULL;
	struct dirent *de;

	*n = 0;
	if (list_fd < 0 || !(dir = fdopendir(list_fd)))
		return sbx_fail_errno(err, "%s/tmp", s->dir);
	list_fd = -1; /* the DIR's now */
	rewinddir(dir);
	while (*n < DOOMED_MAX && (de = readdir(dir))) {
		_cleanup_close_ int fd = -1;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (strlen(de->d_name) >= sizeof(d->name)) {
			struct sbx_err ignored;

			(void)sbx_remove_tree_at(s->tmp_fd, de->d_name, &ignored); /* not ours */
			continue;
		}
		fd = openat(s->tmp_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			/* Not a directory: nothing of ours, and no holder. */
			(void)unlinkat(s->tmp_fd, de->d_name, 0);
			continue;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0)
			continue; /* a live import or rm */
		d[*n].lock_fd = sbx_steal_fd(fd);
		snprintf(d[*n].name, sizeof(d->name), "%s", de->d_name);
		(*n)++;
	}
	return 0;
}

/* Under the exclusive store lock: sha256/<hex> open with an exclusive
 * flock, or IMG_REFUSED when a run holds it (its shared flock). Runs take
 * theirs under the shared store lock, so none can come while this is kept
 * and the store lock is. */
static int take_tree(struct img_store *s, const char *hex, const char *ref, struct sbx_err *err)
{
	_cleanup_close_ int fd =
	    openat(s->sha_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return sbx_fail_errno(err, "%s/sha256/%s", s->dir, hex);
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return sbx_steal_fd(fd);
	if (errno != EWOULDBLOCK)
		return sbx_fail_errno(err, "%s/sha256/%s: flock", s->dir, hex);
	sbx_fail(err, "%s: sha256:%s is in use by a live run (sbxd holds it); nothing was removed",
		 ref, hex);
	return IMG_REFUSED;
}

/* Under the exclusive store lock, with take_tree's fd held: sha256/<hex>
 * renamed into a new tmp/ entry, for doomed_remove. */
static int doom_tree(struct img_store *s, const char *hex, struct doomed *d, struct sbx_err *err)
{
	_cleanup_close_ int lock_fd = -1, dir_fd = -1;
	char name[64];

	if (new_tmp_dir(s, name, &lock_fd, err) < 0)
		return -1;
	dir_fd = openat(s->tmp_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir_fd < 0 || renameat(s->sha_fd, hex, dir_fd, "tree") < 0) {
		sbx_fail_errno(err, "move %s/sha256/%s into tmp/", s->dir, hex);
		(void)unlinkat(s->tmp_fd, name, AT_REMOVEDIR); /* empty: ours, just made */
		return -1;
	}
	if (fsync(s->sha_fd) < 0)
		return sbx_fail_errno(err, "fsync %s/sha256", s->dir);
	d->lock_fd = sbx_steal_fd(lock_fd);
	snprintf(d->name, sizeof(d->name), "%s", name);
	return 0;
}

/* ---- stages ---- */

static void stage_close_fds(struct img_stage *st)
{
	sbx_closep(&st->rootfs_fd);
	sbx_closep(&st->scratch_fd);
	sbx_closep(&st->dir_fd);
	st->rootfs_fd = st->scratch_fd = st->dir_fd = -1;
}

int img_stage_begin(struct img_store *s, struct img_stage *st, struct sbx_err *err)
{
	struct doomed stale[DOOMED_MAX];
	size_t n_stale = 0;
	int rc;

	*st = (struct img_stage)IMG_STAGE_INIT;
	if (img_store_lock(s, LOCK_EX, err) < 0)
		return -1;
	rc = collect_stale(s, stale, &n_stale, err);
	if (rc == 0)
		rc = new_tmp_dir(s, st->name, &st->lock_fd, err);
	img_store_unlock(s);
	doomed_remove(s, stale, n_stale);
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
	struct doomed d;

	stage_close_fds(st);
	if (!st->name[0] || st->lock_fd < 0)
		return;
	d.lock_fd = st->lock_fd;
	snprintf(d.name, sizeof(d.name), "%s", st->name);
	doomed_remove(s, &d, 1);
	st->lock_fd = -1;
	st->name[0] = '\0';
}

/* Under the exclusive store lock: name_tag -> digest in refs.json. The
 * tree it named before, if no other tag names it and no run holds it, is
 * doomed (*n_doomed 1): an untagged tree is only disk space. */
static int retag_locked(struct img_store *s, const char *name_tag, const char *digest,
			struct doomed *d, size_t *n_doomed, struct sbx_err *err)
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
	    (held = take_tree(s, old + 7, old, &why)) >= 0 && doom_tree(s, old + 7, d, &why) == 0)
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
	struct doomed d;
	size_t n_doomed = 0;
	int rc;

	if (check_name_tag(name_tag, err) < 0)
		return -1;
	if (!img_digest_hex(digest))
		return sbx_fail(err, "%.80s: not a sha256:<hex> digest", digest);
	if (img_store_lock(s, LOCK_EX, err) < 0)
		return -1;
	if (!img_store_has(s, digest))
		rc = sbx_fail(err, "%s: not in the image store %s", digest, s->dir);
	else
		rc = retag_locked(s, name_tag, digest, &d, &n_doomed, err);
	img_store_unlock(s);
	doomed_remove(s, &d, n_doomed);
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
	struct doomed d;
	size_t n_doomed = 0;
	int rc = 0;

	*reused = false;
	if (!hex)
		rc = sbx_fail(err, "%.80s: not a sha256:<hex> digest", digest);
	else if (check_name_tag(name_tag, err) < 0 || stage_ready(s, st, digest, meta, err) < 0 ||
		 img_store_lock(s, LOCK_EX, err) < 0)
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
	if (rc == 0)
		rc = retag_locked(s, name_tag, digest, &d, &n_doomed, err);
	img_store_unlock(s);
	doomed_remove(s, &d, n_doomed);
	img_stage_abort(s, st); /* the reused (or failed) case's stage; else nothing is left */
	return rc;
}

/* ---- rm ---- */

/* Under the exclusive store lock: removes ref from refs.json (and the
 * tree once no ref names it, *n_doomed 1). */
static int rm_locked(struct img_store *s, const char *ref, struct doomed *d, size_t *n_doomed,
		     struct sbx_err *err)
{
	json_auto_t *refs = NULL;
	struct sbx_image_ref r;
	char digest[IMG_DIGEST_LEN + 1];
	_cleanup_close_ int held = -1;
	const char *key;
	json_t *v, *tmp;

	*n_doomed = 0;
	if (sbx_image_ref_parse(ref, true, &r, err) < 0 || img_refs_read(s, &refs, err) < 0)
		return -1;
	if (r.name[0]) {
		char name_tag[SBX_IMAGE_NAME_MAX + SBX_IMAGE_TAG_MAX + 2];

		snprintf(name_tag, sizeof(name_tag), "%s:%s", r.name, r.tag);
		v = json_object_get(refs, name_tag);
		if (!v)
			return sbx_fail(err, "%s: not in the image store %s", name_tag, s->dir);
		if (r.digest[0] && strcmp(r.digest, json_string_value(v)))
			return sbx_fail(err, "%s: the store's %s is %s; nothing was removed", ref,
					name_tag, json_string_value(v));
		snprintf(digest, sizeof(digest), "%s", json_string_value(v));
		/* Another tag keeps the tree: only this name goes. */
		if (img_refs_name(refs, digest, name_tag)) {
			json_object_del(refs, name_tag);
			return img_refs_write(s, refs, err);
		}
	} else
		snprintf(digest, sizeof(digest), "%s", r.digest);
	if (!img_refs_name(refs, digest, NULL) && !img_tree_present(s, digest + 7))
		return sbx_fail(err, "%s: not in the image store %s", ref, s->dir);
	/* The tree goes with its last ref: a run's hold refuses it before
	 * anything changes, and none can be taken while `held` is. */
	if (img_tree_present(s, digest + 7) && (held = take_tree(s, digest + 7, ref, err)) < 0)
		return held;
	json_object_foreach_safe(refs, tmp, key, v) if (!strcmp(json_string_value(v), digest))
	    json_object_del(refs, key);
	if (img_refs_write(s, refs, err) < 0)
		return -1;
	if (held >= 0) {
		if (doom_tree(s, digest + 7, d, err) < 0)
			return -1;
		*n_doomed = 1;
	}
	return 0;
}

int img_store_rm(struct img_store *s, const char *ref, struct sbx_err *err)
{
	struct doomed stale[DOOMED_MAX + 1];
	size_t n_stale = 0, n_doomed = 0;
	int rc;

	if (img_store_lock(s, LOCK_EX, err) < 0)
		return -1;
	rc = collect_stale(s, stale, &n_stale, err);
	if (rc == 0)
		rc = rm_locked(s, ref, &stale[n_stale], &n_doomed, err);
	img_store_unlock(s);
	doomed_remove(s, stale, n_stale + n_doomed);
	return rc;
}
