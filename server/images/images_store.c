/* SPDX-License-Identifier: Apache-2.0 */
/* The store's layout (images.h): opening it, its lock, staging directories,
 * commit by rename, tags, and removal. Every change to refs.json or to
 * what sha256/ holds happens under the exclusive store lock and is one
 * rename, in an order that keeps the invariant a run relies on: refs.json
 * names only complete trees. A tree appears in sha256/ (complete, renamed
 * from its stage) before a ref names it; a ref goes before its tree is
 * renamed away into tmp/ to be deleted. A SIGKILL between the two steps
 * leaves a tree no ref names (list shows it as sha256:<hex>), never a ref
 * without its tree; such a tree, like one rm --untag or a retag left to
 * the runs holding it, is swept by the next import or rm once no run
 * holds it (img_sweep_unnamed). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
	/* An open file description of its own for every holder: flocks on one
	 * description are one lock, so sbxd's threads sharing the store's fd
	 * would release each other's. */
	_cleanup_close_ int fd = openat(s->dir_fd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return sbx_fail_errno(err, "%s/lock", s->dir);
	while (flock(fd, op) < 0)
		if (errno != EINTR)
			return sbx_fail_errno(err, "%s/lock", s->dir);
	return sbx_steal_fd(fd);
}

int img_store_lock_read(struct img_store *s, struct sbx_err *err)
{
	_cleanup_close_ int fd = openat(s->dir_fd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	int64_t until = sbx_mono_ms() + IMG_READ_WAIT_MS;

	if (fd < 0)
		return sbx_fail_errno(err, "%s/lock", s->dir);
	/* Writers keep it for a rename and an fsync; one that keeps it longer
	 * is stopped or stuck, and sbxd's RPC workers must not wait for it. */
	while (flock(fd, LOCK_SH | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR)
			return sbx_fail_errno(err, "%s/lock", s->dir);
		if (sbx_mono_ms() >= until) {
			sbx_fail(err,
				 "%s/lock: the image store is locked by an sbxd image import or rm "
				 "for over %d ms; try again",
				 s->dir, IMG_READ_WAIT_MS);
			return IMG_BUSY;
		}
		usleep(10 * 1000);
	}
	return sbx_steal_fd(fd);
}

void img_store_unlock(int lock_fd)
{
	sbx_closep(&lock_fd); /* closing the description releases its flock */
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

/* Every directory above the store, as the path resolves: sbx-helper opens a
 * run's tree by its path (<dir>/sha256/<hex>/rootfs), so a directory on
 * the way that another user may write in (without the sticky bit), or
 * that another user owns, would let them rename the store aside and put a
 * tree of theirs where the helper looks, while sbxd holds the real one. */
static int check_parents(const char *dir, struct sbx_err *err)
{
	_cleanup_free_ char *path = realpath(dir, NULL);
	char *slash;

	if (!path)
		return sbx_fail_errno(err, "%s", dir);
	while ((slash = strrchr(path, '/'))) {
		struct stat st;
		bool top = slash == path;

		slash[top] = '\0'; /* "/a/b" -> "/a", "/a" -> "/" */
		if (stat(path, &st) < 0)
			return sbx_fail_errno(err, "%s", path);
		if (st.st_uid != 0 && st.st_uid != geteuid())
			return sbx_fail(
			    err,
			    "%s: the image store %s is inside %s, which uid %u owns: it "
			    "could replace the store's trees",
			    dir, dir, path, (unsigned)st.st_uid);
		if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))
			return sbx_fail(
			    err,
			    "%s: the image store is inside %s (mode %04o), writable by "
			    "group or others without the sticky bit: they could replace "
			    "the store's trees",
			    dir, path, (unsigned)(st.st_mode & 07777));
		if (top)
			break;
	}
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
	if (!s)
		return sbx_fail_errnum(err, ENOMEM, "image store");
	s->dir_fd = s->lock_fd = s->sha_fd = s->tmp_fd = -1;
	pthread_mutex_init(&s->refs_mu, NULL);
	if (!(s->dir = strdup(dir)))
		return sbx_fail_errnum(err, ENOMEM, "image store");
	if (create && make_store_dir(dir, err) < 0)
		return -1;
	s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dir_fd < 0)
		return sbx_fail_errno(err, "image store %s", dir);
	if (check_owned(s->dir_fd, dir, err) < 0 || check_parents(dir, err) < 0)
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
	img_refs_cache_free(&s->refs);
	pthread_mutex_destroy(&s->refs_mu);
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

void img_doomed_remove(struct img_store *s, struct img_doomed *d, size_t n)
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
int img_tmp_dir_new(struct img_store *s, char name[64], int *lock_fd, struct sbx_err *err)
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
int img_collect_stale(struct img_store *s, struct img_doomed *d, size_t *n, struct sbx_err *err)
{
	_cleanup_close_ int list_fd = fcntl(s->tmp_fd, F_DUPFD_CLOEXEC, 3);
	_cleanup_closedir_ DIR *dir = NULL;
	struct dirent *de;

	*n = 0;
	if (list_fd < 0 || !(dir = fdopendir(list_fd)))
		return sbx_fail_errno(err, "%s/tmp", s->dir);
	list_fd = -1; /* the DIR's now */
	rewinddir(dir);
	while (*n < IMG_DOOMED_MAX && (de = readdir(dir))) {
		_cleanup_close_ int fd = -1;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		size_t len = strlen(de->d_name);

		if (len >= sizeof(d->name)) {
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
		/* Its length was checked above: a copy, not a snprintf that
		 * gcc -O0 takes for a possible truncation (-Wformat-truncation). */
		memcpy(d[*n].name, de->d_name, len + 1);
		(*n)++;
	}
	return 0;
}

/* Under the exclusive store lock: sha256/<hex> open with an exclusive
 * flock, or IMG_REFUSED when a run holds it (its shared flock). Runs take
 * theirs under the shared store lock, so none can come while this is kept
 * and the store lock is. */
int img_take_tree(struct img_store *s, const char *hex, struct sbx_err *err)
{
	_cleanup_close_ int fd =
	    openat(s->sha_fd, hex, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return sbx_fail_errno(err, "%s/sha256/%s", s->dir, hex);
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return sbx_steal_fd(fd);
	if (errno != EWOULDBLOCK)
		return sbx_fail_errno(err, "%s/sha256/%s: flock", s->dir, hex);
	sbx_fail(err, "%s/sha256/%s: in use by a live run (sbxd holds it)", s->dir, hex);
	return IMG_REFUSED;
}

/* Under the exclusive store lock, with take_tree's fd held: sha256/<hex>
 * renamed into a new tmp/ entry, for doomed_remove. */
int img_doom_tree(struct img_store *s, const char *hex, struct img_doomed *d, struct sbx_err *err)
{
	_cleanup_close_ int lock_fd = -1, dir_fd = -1;
	char name[64];

	if (img_tmp_dir_new(s, name, &lock_fd, err) < 0)
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

static int cmp_digest(const void *a, const void *b)
{
	return strcmp(a, b);
}

int img_unnamed_trees(struct img_store *s, char **out, size_t *n, struct sbx_err *err)
{
	_cleanup_close_ int list_fd = fcntl(s->sha_fd, F_DUPFD_CLOEXEC, 3);
	_cleanup_closedir_ DIR *dir = NULL;
	_cleanup_free_ char *names = NULL; /* *n digests of IMG_DIGEST_LEN + 1 */
	size_t cap = 0;
	struct dirent *de;

	*out = NULL;
	*n = 0;
	if (list_fd < 0 || !(dir = fdopendir(list_fd)))
		return sbx_fail_errno(err, "%s/sha256", s->dir);
	list_fd = -1; /* the DIR's now */
	rewinddir(dir);
	while ((de = readdir(dir))) {
		char digest[IMG_DIGEST_LEN + 1];

		snprintf(digest, sizeof(digest), "sha256:%.64s", de->d_name);
		if (strlen(de->d_name) != 64 || !sbx_image_digest_valid(digest) ||
		    json_object_get(s->refs.named, digest))
			continue;
		if (*n == cap) {
			char *more =
			    realloc(names, (cap = cap ? 2 * cap : 8) * (IMG_DIGEST_LEN + 1));

			if (!more)
				return sbx_fail_errnum(err, ENOMEM, "%s/sha256", s->dir);
			names = more;
		}
		memcpy(names + (*n)++ * (IMG_DIGEST_LEN + 1), digest, sizeof(digest));
	}
	/* readdir's order is the file system's: list reads the same twice.
	 * (No names: no array, which qsort must not be given.) */
	if (*n)
		qsort(names, *n, IMG_DIGEST_LEN + 1, cmp_digest);
	*out = sbx_steal_ptr(names);
	return 0;
}

void img_sweep_unnamed(struct img_store *s, struct img_doomed *d, size_t max, size_t *n)
{
	_cleanup_free_ char *names = NULL;
	struct sbx_err ignored;
	size_t n_names = 0;
	int rc;

	*n = 0;
	pthread_mutex_lock(&s->refs_mu);
	rc = img_refs_load(s, &ignored);
	if (rc == 0)
		rc = img_unnamed_trees(s, &names, &n_names, &ignored);
	pthread_mutex_unlock(&s->refs_mu);
	/* A refs.json that cannot be read could name any tree: nothing goes,
	 * and the command itself says what is wrong with it. */
	for (size_t i = 0; rc == 0 && i < n_names && *n < max; i++) {
		const char *hex = names + i * (IMG_DIGEST_LEN + 1) + 7;
		_cleanup_close_ int held = img_take_tree(s, hex, &ignored);

		/* Held by a run: it goes with a command after the run's end. */
		if (held >= 0 && img_doom_tree(s, hex, &d[*n], &ignored) == 0)
			(*n)++;
	}
}

/* ---- rm ---- */

/* Under the exclusive store lock: removes ref from refs.json (and the
 * tree once no ref names it, *n_doomed 1). A tree a run holds refuses it,
 * nothing changed; with untag its tags go all the same (no new run can take
 * a tree no tag names) and kept gets its digest: the sweep of a later
 * command removes it once the last run holding it has ended. */
static int rm_locked(struct img_store *s, const char *ref, bool untag, struct img_doomed *d,
		     size_t *n_doomed, char kept[IMG_DIGEST_LEN + 1], struct sbx_err *err)
{
	json_auto_t *refs = NULL;
	struct sbx_image_ref r;
	char digest[IMG_DIGEST_LEN + 1];
	_cleanup_close_ int held = -1;
	const char *key;
	json_t *v, *tmp;
	size_t removed = 0;

	*n_doomed = 0;
	kept[0] = '\0';
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
	if (img_tree_present(s, digest + 7)) {
		held = img_take_tree(s, digest + 7, err);
		if (held == IMG_REFUSED && !untag) {
			sbx_fail(err,
				 "%s: %s is in use by a live run (sbxd holds it); nothing was "
				 "removed (sbxd image rm --untag %s removes its tags now, so that "
				 "no new run takes it, and the tree once no run holds it)",
				 ref, digest, ref);
			return IMG_REFUSED;
		}
		if (held == IMG_REFUSED)
			snprintf(kept, IMG_DIGEST_LEN + 1, "%s", digest);
		else if (held < 0)
			return -1;
	}
	json_object_foreach_safe(refs, tmp, key, v) if (!strcmp(json_string_value(v), digest))
	{
		json_object_del(refs, key);
		removed++;
	}
	if (removed && img_refs_write(s, refs, err) < 0)
		return -1;
	if (held >= 0) {
		if (img_doom_tree(s, digest + 7, d, err) < 0)
			return -1;
		*n_doomed = 1;
	}
	return 0;
}

static int rm_common(struct img_store *s, const char *ref, bool untag,
		     char kept[IMG_DIGEST_LEN + 1], struct sbx_err *err)
{
	/* Stale stages, this ref's tree, the sweep's trees. */
	struct img_doomed d[2 * IMG_DOOMED_MAX + 1];
	size_t n = 0, more = 0;
	int rc, lk;

	if ((lk = img_store_lock(s, LOCK_EX, err)) < 0)
		return -1;
	rc = img_collect_stale(s, d, &n, err);
	if (rc == 0)
		rc = rm_locked(s, ref, untag, &d[n], &more, kept, err);
	n += more;
	/* After the ref's own removal: rm sha256:<hex> of an unnamed tree
	 * removes it, and says so, rather than finding it swept. */
	img_sweep_unnamed(s, &d[n], IMG_DOOMED_MAX, &more);
	n += more;
	img_store_unlock(lk);
	img_doomed_remove(s, d, n);
	return rc;
}

int img_store_rm(struct img_store *s, const char *ref, struct sbx_err *err)
{
	char kept[IMG_DIGEST_LEN + 1];

	return rm_common(s, ref, false, kept, err);
}

int img_store_untag(struct img_store *s, const char *ref, char kept[IMG_DIGEST_LEN + 1],
		    struct sbx_err *err)
{
	return rm_common(s, ref, true, kept, err);
}
