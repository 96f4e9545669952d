/* SPDX-License-Identifier: Apache-2.0 */
/* The one writer below a staged tree (images_unpack_entry.h). Hostile
 * input: every name comes from an archive or a directory someone else
 * made. What keeps the writes inside the tree:
 *   - a name is normalized into components; absolute names, "..", empty
 *     names, over-long components or paths, and trees deeper than
 *     SBX_TREE_MAX_DEPTH are refused before anything is touched;
 *   - the parent directory is opened with sbx_open_beneath (openat2:
 *     RESOLVE_BENEATH | NO_SYMLINKS | NO_MAGICLINKS | NO_XDEV), so an entry
 *     below a symlink -- one of this layer or of a lower one -- is refused;
 *     missing parents are made one component at a time the same way;
 *   - whatever is at the entry's own name is removed first (a directory
 *     with all in it), and the new entry is made with O_CREAT | O_EXCL |
 *     O_NOFOLLOW, mkdirat, symlinkat or linkat: nothing is ever written
 *     through a link, a hard link or a FIFO an earlier entry planted;
 *   - a hard link's target is resolved the same way and must be a regular
 *     file; linkat never follows;
 *   - devices, FIFOs and sockets are skipped (counted), setuid/setgid bits
 *     cleared (counted), owners never set (everything is the importer's);
 *   - directories stay 0700 while filled, their modes and times applied at
 *     img_unpack_finish (so a 0555 directory can still receive entries).
 * All state is bounded by the import's limits. */
#include "images_unpack_entry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "inode_set.h"
#include "text.h"
#include "tree.h"
#include "util.h"

#define WH_PREFIX ".wh."
#define WH_META	  ".wh..wh."
#define WH_OPAQUE ".wh..wh..opq"

struct dir_mode {
	mode_t mode;
	struct timespec mtime;
};

struct unpack_state {
	/* Deferred directory modes, by inode: a directory removed and made
	 * again gets its own record (an inode number reused by a later
	 * directory is overwritten by that directory's record). */
	struct sbx_inode_set dir_index;
	struct dir_mode *modes;
	size_t n_modes, cap_modes;
	/* The paths this layer wrote (and their parents), as 128 bits of
	 * the sha256 of the path: an opaque directory or a whiteout keeps
	 * them and removes what the layers below left. The set takes the
	 * two halves as its (dev, ino) pair. */
	struct sbx_inode_set layer;
	uint64_t implicit; /* parent directories made without an entry */
	uint64_t declared; /* data bytes every entry declared, all layers */
	uint64_t next_say;
};

void unpack_shown(char dst[UNPACK_SHOWN_MAX], const char *name)
{
	sbx_escape(dst, UNPACK_SHOWN_MAX, name);
}

/* Every refusal names the entry the same way. */
static int refuse(struct sbx_err *err, int errnum, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(struct sbx_err *err, int errnum, const char *name, const char *fmt, ...)
{
	char shown[UNPACK_SHOWN_MAX];
	va_list ap;

	va_start(ap, fmt);
	sbx_failv(err, errnum, fmt, ap);
	va_end(ap);
	unpack_shown(shown, name);
	return sbx_err_prefix(err, "entry \"%s\"", shown);
}

/* Names the entry in an error a callee already set. */
static int entry_failed(struct sbx_err *err, const char *name)
{
	char shown[UNPACK_SHOWN_MAX];

	unpack_shown(shown, name);
	return sbx_err_prefix(err, "entry \"%s\"", shown);
}

int unpack_state_new(struct img_unpack *u, struct sbx_err *err)
{
	struct unpack_state *s = calloc(1, sizeof(*s));

	if (!s)
		return sbx_fail_errnum(err, ENOMEM, "unpack");
	u->priv = s;
	return 0;
}

void unpack_state_free(struct img_unpack *u)
{
	struct unpack_state *s = u->priv;

	if (!s)
		return;
	sbx_inode_set_free(&s->dir_index);
	sbx_inode_set_free(&s->layer);
	free(s->modes);
	free(s);
	u->priv = NULL;
}

void unpack_layer_begin(struct img_unpack *u)
{
	struct unpack_state *s = u->priv;

	sbx_inode_set_free(&s->layer);
}

/* ---- names ---- */

/* Splits `name` into components joined by single slashes in out ("./a//b/"
 * is "a/b"; "" is the root itself). *depth gets the count of components.
 * The error says why, not which entry (the caller adds that). */
static int normalize(const char *name, char out[PATH_MAX], int *depth, struct sbx_err *err)
{
	size_t n = 0;
	const char *p = name;

	*depth = 0;
	if (!name[0])
		return sbx_fail_errnum(err, EINVAL, "an empty name");
	if (name[0] == '/')
		return sbx_fail_errnum(err, EINVAL, "an absolute name is refused");
	while (*p) {
		const char *end = strchrnul(p, '/');
		size_t len = (size_t)(end - p);

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return sbx_fail_errnum(err, EINVAL, "a \"..\" component is refused");
		if (len > NAME_MAX)
			return sbx_fail_errnum(err, ENAMETOOLONG, "a component over %d bytes",
					       NAME_MAX);
		if (len && !(len == 1 && p[0] == '.')) {
			if (++*depth > SBX_TREE_MAX_DEPTH)
				return sbx_fail_errnum(err, ELOOP, "deeper than %d directories",
						       SBX_TREE_MAX_DEPTH);
			if (n + (n ? 1 : 0) + len >= PATH_MAX)
				return sbx_fail_errnum(err, ENAMETOOLONG, "a path over %d bytes",
						       PATH_MAX - 1);
			if (n)
				out[n++] = '/';
			memcpy(out + n, p, len);
			n += len;
		}
		p = *end ? end + 1 : end;
	}
	out[n] = '\0';
	return 0;
}

/* ---- the layer's own paths ---- */

static bool path_key(const char *path, size_t len, dev_t *hi, ino_t *lo)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint64_t a, b;

	if (!EVP_Digest(path, len, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return false;
	memcpy(&a, md, 8);
	memcpy(&b, md + 8, 8);
	*hi = (dev_t)a;
	*lo = (ino_t)b;
	return true;
}

static bool layer_has(struct unpack_state *s, const char *path, size_t len)
{
	dev_t hi;
	ino_t lo;

	return path_key(path, len, &hi, &lo) && sbx_inode_get(&s->layer, hi, lo) >= 0;
}

/* Adds path and each of its parents, stopping at the first already there
 * (its parents are then too): the set never outgrows the tree's paths. */
static int layer_add(struct img_unpack *u, const char *path, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	size_t len = strlen(path);

	while (len) {
		dev_t hi;
		ino_t lo;

		if (!path_key(path, len, &hi, &lo))
			return sbx_fail(err, "sha256 failed");
		if (sbx_inode_get(&s->layer, hi, lo) >= 0)
			return 0;
		/* The tree holds at most max_entries entries and the directories
		 * they imply, each counted against the same limit. */
		if (s->layer.n > 2 * u->lim->max_entries + 1024)
			return sbx_fail(err, "a layer names more paths than the limits allow");
		if (!sbx_inode_put(&s->layer, hi, lo, 0))
			return sbx_fail_errnum(err, ENOMEM, "unpack");
		while (len && path[len - 1] != '/')
			len--;
		if (len)
			len--; /* the slash */
	}
	return 0;
}

/* ---- directory modes ---- */

static int record_dir(struct img_unpack *u, int fd, const char *name, mode_t mode,
		      const struct timespec *mtime, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	struct stat st;
	long i;

	if (fstat(fd, &st) < 0)
		return refuse(err, errno, name, "stat: %s", strerror(errno));
	i = sbx_inode_get(&s->dir_index, st.st_dev, st.st_ino);
	if (i < 0) {
		if (s->n_modes == s->cap_modes) {
			size_t cap = s->cap_modes ? 2 * s->cap_modes : 256;
			struct dir_mode *m = realloc(s->modes, cap * sizeof(*m));

			if (!m)
				return sbx_fail_errnum(err, ENOMEM, "unpack");
			s->modes = m;
			s->cap_modes = cap;
		}
		i = (long)s->n_modes++;
		if (!sbx_inode_put(&s->dir_index, st.st_dev, st.st_ino, i))
			return sbx_fail_errnum(err, ENOMEM, "unpack");
	}
	s->modes[i] = (struct dir_mode){.mode = mode, .mtime = *mtime};
	return 0;
}

/* Post-order, so a directory's own mode (0555, 0000) is set once nothing
 * more is made in it. Every directory below the root is ours and 0700. */
static int apply_modes_below(struct img_unpack *u, int dir, const char *path, int depth,
			     struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int list_fd;

	if (depth > SBX_TREE_MAX_DEPTH + 1)
		return sbx_fail(err, "%s: deeper than %d directories", path, SBX_TREE_MAX_DEPTH);
	list_fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (list_fd < 0 || !(d = fdopendir(list_fd))) {
		if (list_fd >= 0)
			close(list_fd);
		return sbx_fail_errno(err, "open %s", path[0] ? path : ".");
	}
	while ((errno = 0, de = readdir(d))) {
		char sub_path[PATH_MAX];
		struct stat st;
		long i;

		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return sbx_fail_errno(err, "stat %s/%s", path, de->d_name);
		if (!S_ISDIR(st.st_mode))
			continue;
		snprintf(sub_path, sizeof(sub_path), "%s%s%s", path, path[0] ? "/" : "",
			 de->d_name);
		_cleanup_close_ int sub =
		    sbx_open_beneath(dir, de->d_name, O_RDONLY | O_DIRECTORY, 0, err);
		if (sub < 0)
			return sbx_err_prefix(err, "%s", sub_path);
		if (apply_modes_below(u, sub, sub_path, depth + 1, err) < 0)
			return -1;
		i = sbx_inode_get(&s->dir_index, st.st_dev, st.st_ino);
		if (i < 0)
			continue; /* not ours to set (cannot happen: every one was made here) */
		struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, s->modes[i].mtime};
		if (fchmod(sub, s->modes[i].mode) < 0)
			return sbx_fail_errno(err, "chmod %s", sub_path);
		if (times[1].tv_nsec != UTIME_OMIT && futimens(sub, times) < 0)
			return sbx_fail_errno(err, "set the times of %s", sub_path);
	}
	if (errno)
		return sbx_fail_errno(err, "read %s", path[0] ? path : ".");
	return 0;
}

int unpack_apply_dir_modes(struct img_unpack *u, struct sbx_err *err)
{
	return apply_modes_below(u, u->root_fd, "", 0, err);
}

/* ---- parents ---- */

/* Explains a failed open of a parent directory the way the entry's error
 * should: a link or a non-directory in the way. */
static int parent_refused(struct sbx_err *err, const char *name, const char *parent)
{
	char shown[UNPACK_SHOWN_MAX];
	int errnum = err->errnum;

	unpack_shown(shown, parent);
	if (errnum == ELOOP)
		return refuse(err, errnum, name, "below a symlink (\"%s\"): refused", shown);
	if (errnum == ENOTDIR)
		return refuse(err, errnum, name, "below \"%s\", which is not a directory", shown);
	if (errnum == EXDEV)
		return refuse(err, errnum, name, "\"%s\" leaves the tree", shown);
	return refuse(err, errnum, name, "open \"%s\": %s", shown, strerror(errnum));
}

/* Opens the directory holding `path` (normalized, not ""); *last gets the
 * final component. create: missing parents are made (0700 now, 0755 at
 * finish unless an entry says otherwise), one component at a time, each
 * opened beneath the one before. Without create, a missing parent is 1
 * (nothing there). */
static int open_parent(struct img_unpack *u, const char *name, const char *path, bool create,
		       int *out, const char **last, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	const char *slash = strrchr(path, '/');
	char parent[PATH_MAX];

	*out = -1;
	if (!slash) {
		*last = path;
		*out = fcntl(u->root_fd, F_DUPFD_CLOEXEC, 3);
		return *out < 0 ? sbx_fail_errno(err, "dup") : 0;
	}
	*last = slash + 1;
	memcpy(parent, path, (size_t)(slash - path));
	parent[slash - path] = '\0';
	/* Usually there: one openat2 for the whole parent path. */
	*out = sbx_open_beneath(u->root_fd, parent, O_RDONLY | O_DIRECTORY, 0, err);
	if (*out >= 0)
		return 0;
	if (err->errnum != ENOENT)
		return parent_refused(err, name, parent);
	if (!create)
		return 1;

	_cleanup_close_ int cur = fcntl(u->root_fd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return sbx_fail_errno(err, "dup");
	for (char *comp = parent;;) {
		/* Cut at this component, so that parent[] reads as the path up
		 * to it in a message. */
		char *slash_next = strchr(comp, '/');
		bool made = false;

		if (slash_next)
			*slash_next = '\0';
		int next = sbx_open_beneath(cur, comp, O_RDONLY | O_DIRECTORY, 0, err);
		if (next < 0 && err->errnum == ENOENT) {
			if (u->stats.entries + s->implicit >= u->lim->max_entries)
				return refuse(err, EFBIG, name,
					      "past %llu entries (with the directories they "
					      "imply): the limit (--max-entries)",
					      (unsigned long long)u->lim->max_entries);
			if (mkdirat(cur, comp, 0700) < 0 && errno != EEXIST)
				return refuse(err, errno, name, "mkdir: %s", strerror(errno));
			made = true;
			next = sbx_open_beneath(cur, comp, O_RDONLY | O_DIRECTORY, 0, err);
		}
		if (next < 0)
			return parent_refused(err, name, parent);
		close(cur);
		cur = next;
		if (made) {
			static const struct timespec none = {.tv_nsec = UTIME_OMIT};

			s->implicit++;
			if (record_dir(u, cur, name, 0755, &none, err) < 0)
				return -1;
		}
		if (!slash_next)
			break;
		*slash_next = '/';
		comp = slash_next + 1;
	}
	*out = sbx_steal_fd(cur);
	return 0;
}

/* Whatever is at `last` goes (a directory with everything in it), so the
 * entry that replaces it is made new and never written through. */
static int remove_existing(int dir, const char *last, const char *name, bool keep_dir, bool *is_dir,
			   struct sbx_err *err)
{
	struct stat st;

	*is_dir = false;
	if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return 0;
		return refuse(err, errno, name, "stat: %s", strerror(errno));
	}
	if (S_ISDIR(st.st_mode)) {
		if (keep_dir) {
			*is_dir = true;
			return 0;
		}
		if (sbx_remove_tree_at(dir, last, err) < 0)
			return entry_failed(err, name);
		return 0;
	}
	if (unlinkat(dir, last, 0) < 0 && errno != ENOENT)
		return refuse(err, errno, name, "remove what was there: %s", strerror(errno));
	return 0;
}

/* ---- whiteouts ---- */

/* Removes `last` under dir -- the lower layers' part of it: what this layer
 * wrote (path in the layer set) stays, and a directory of this layer keeps
 * its own entries while losing the lower ones. */
static int remove_lower(struct img_unpack *u, int dir, const char *last, char *path, size_t len,
			int depth, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	struct stat st;

	if (!layer_has(s, path, len))
		return sbx_remove_tree_at(dir, last, err);
	if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "stat %.*s", (int)len, path);
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (depth > SBX_TREE_MAX_DEPTH + 1)
		return sbx_fail(err, "%.*s: too deep", (int)len, path);

	_cleanup_close_ int sub = sbx_open_beneath(dir, last, O_RDONLY | O_DIRECTORY, 0, err);
	if (sub < 0)
		return -1;
	int list_fd = openat(sub, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = list_fd < 0 ? NULL : fdopendir(list_fd);
	struct dirent *de;

	if (!d) {
		if (list_fd >= 0)
			close(list_fd);
		return sbx_fail_errno(err, "open %.*s", (int)len, path);
	}
	while ((errno = 0, de = readdir(d))) {
		size_t n = strlen(de->d_name);

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (len + 1 + n >= PATH_MAX) {
			/* no entry of ours is that long: a lower one */
			if (sbx_remove_tree_at(sub, de->d_name, err) < 0)
				return -1;
			continue;
		}
		path[len] = '/';
		memcpy(path + len + 1, de->d_name, n + 1);
		int rc = remove_lower(u, sub, de->d_name, path, len + 1 + n, depth + 1, err);
		path[len] = '\0';
		if (rc < 0)
			return -1;
	}
	if (errno)
		return sbx_fail_errno(err, "read %.*s", (int)len, path);
	return 0;
}

/* ".wh.<x>" (path is its normalized name, base points at its last
 * component): <x> of the layers below goes. */
static int apply_whiteout(struct img_unpack *u, const struct unpack_entry *e, const char *path,
			  const char *base, struct sbx_err *err)
{
	const char *target = base + strlen(WH_PREFIX);
	char victim[PATH_MAX];
	const char *last;
	int dir, rc;

	if (!target[0] || !strcmp(target, ".") || !strcmp(target, ".."))
		return refuse(err, EINVAL, e->name, "a whiteout of \"%s\" is refused", target);
	/* The same length as the whiteout's own name, less ".wh.". */
	snprintf(victim, sizeof(victim), "%.*s%s", (int)(base - path), path, target);
	rc = open_parent(u, e->name, victim, false, &dir, &last, err);
	if (rc != 0)
		return rc < 0 ? -1 : 0; /* its parent is not there: nothing to remove */
	_cleanup_close_ int dir_fd = dir;
	if (remove_lower(u, dir_fd, last, victim, strlen(victim), 0, err) < 0)
		return sbx_err_prefix(err, "whiteout"), entry_failed(err, e->name);
	u->stats.whiteouts++;
	return 0;
}

/* ".wh..wh..opq" in D: everything in D the layers below left goes. D is
 * the marker's parent, opened (made if missing) like any entry's, so a D
 * that is a symlink is refused the same way. */
static int apply_opaque(struct img_unpack *u, const struct unpack_entry *e, const char *path,
			const char *base, struct sbx_err *err)
{
	_cleanup_closedir_ DIR *d = NULL;
	char child[PATH_MAX];
	size_t len = base > path ? (size_t)(base - path) - 1 : 0; /* D's path */
	const char *last;
	struct dirent *de;
	int dir, list_fd, rc = 0;

	if (open_parent(u, e->name, path, true, &dir, &last, err) < 0)
		return -1;
	_cleanup_close_ int dir_fd = dir;
	memcpy(child, path, len);
	child[len] = '\0';
	/* D is this layer's: the marker says so. */
	if (len && layer_add(u, child, err) < 0)
		return -1;
	list_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (list_fd < 0 || !(d = fdopendir(list_fd))) {
		if (list_fd >= 0)
			close(list_fd);
		return refuse(err, errno, e->name, "open its directory: %s", strerror(errno));
	}
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		size_t n = strlen(de->d_name);

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (len + 1 + n >= PATH_MAX) {
			rc = sbx_remove_tree_at(dir_fd, de->d_name, err); /* not one of ours */
			continue;
		}
		/* child: D's path, "/" unless D is the root, the name */
		size_t at = len ? len + 1 : 0;
		if (len)
			child[len] = '/';
		memcpy(child + at, de->d_name, n + 1);
		rc = remove_lower(u, dir_fd, de->d_name, child, at + n, 1, err);
		child[len] = '\0';
	}
	if (rc == 0 && errno)
		rc = sbx_fail_errno(err, "read its directory");
	if (rc < 0)
		return sbx_err_prefix(err, "opaque directory"), entry_failed(err, e->name);
	u->stats.opaque++;
	return 0;
}

/* ---- content ---- */

int unpack_check_declared(struct img_unpack *u, const char *name, uint64_t size,
			  struct sbx_err *err)
{
	struct unpack_state *s = u->priv;

	if (size > u->lim->max_file_bytes)
		return refuse(err, EFBIG, name,
			      "declares %llu bytes, past the limit of %llu for one file "
			      "(--max-file-bytes)",
			      (unsigned long long)size, (unsigned long long)u->lim->max_file_bytes);
	if (size > u->lim->max_bytes || s->declared > u->lim->max_bytes - size)
		return refuse(err, EFBIG, name,
			      "past the limit of %llu bytes for the whole import (--max-bytes)",
			      (unsigned long long)u->lim->max_bytes);
	s->declared += size;
	return 0;
}

int unpack_write(struct unpack_out *out, uint64_t offset, const void *buf, size_t len,
		 struct sbx_err *err)
{
	const char *p = buf;

	if (offset > out->size || len > out->size - offset)
		return sbx_fail_errnum(err, EFBIG, "it holds more than the %llu bytes it declared",
				       (unsigned long long)out->size);
	while (len) {
		ssize_t n = pwrite(out->fd, p, len, (off_t)offset);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "write");
		if (n == 0)
			return sbx_fail_errnum(err, EIO, "write: nothing written");
		p += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	if (offset > out->end)
		out->end = offset;
	return 0;
}

static mode_t clear_setid(struct img_unpack *u, mode_t mode)
{
	if (mode & (S_ISUID | S_ISGID)) {
		u->stats.setid_cleared++;
		mode &= ~(mode_t)(S_ISUID | S_ISGID);
	}
	return mode & 07777;
}

static int write_file(struct img_unpack *u, const struct unpack_entry *e, int dir, const char *last,
		      struct sbx_err *err)
{
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, e->mtime};
	mode_t mode = clear_setid(u, e->mode);
	bool is_dir;

	if (remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	/* 0600 while written; its own mode once it is whole. */
	_cleanup_close_ int fd =
	    sbx_open_beneath(dir, last, O_WRONLY | O_CREAT | O_EXCL, 0600, err);
	if (fd < 0)
		return entry_failed(err, e->name);
	struct unpack_out out = {.fd = fd, .size = e->size};
	if (e->size && e->content(e->arg, &out, err) < 0)
		return entry_failed(err, e->name);
	/* A sparse file's last hole, or a file that declared more than it
	 * held (the readers refuse those: a truncated archive fails in
	 * libarchive, a directory's file that shrank in its reader). */
	if (out.end < e->size && ftruncate(fd, (off_t)e->size) < 0)
		return refuse(err, errno, e->name, "truncate: %s", strerror(errno));
	if (fchmod(fd, mode) < 0)
		return refuse(err, errno, e->name, "chmod: %s", strerror(errno));
	if (times[1].tv_nsec != UTIME_OMIT && futimens(fd, times) < 0)
		return refuse(err, errno, e->name, "set its times: %s", strerror(errno));
	u->stats.files++;
	u->stats.bytes += e->size;
	return 0;
}

static int write_dir(struct img_unpack *u, const struct unpack_entry *e, int dir, const char *last,
		     struct sbx_err *err)
{
	mode_t mode = clear_setid(u, e->mode);
	bool is_dir;

	/* A directory over a directory merges (the layers' rule); over
	 * anything else it replaces it. */
	if (remove_existing(dir, last, e->name, true, &is_dir, err) < 0)
		return -1;
	if (!is_dir && mkdirat(dir, last, 0700) < 0)
		return refuse(err, errno, e->name, "mkdir: %s", strerror(errno));
	_cleanup_close_ int fd = sbx_open_beneath(dir, last, O_RDONLY | O_DIRECTORY, 0, err);
	if (fd < 0)
		return entry_failed(err, e->name);
	if (record_dir(u, fd, e->name, mode, &e->mtime, err) < 0)
		return -1;
	u->stats.dirs++;
	return 0;
}

static int write_symlink(struct img_unpack *u, const struct unpack_entry *e, int dir,
			 const char *last, struct sbx_err *err)
{
	struct timespec times[2] = {{.tv_nsec = UTIME_OMIT}, e->mtime};
	bool is_dir;

	/* The target is only ever stored, never followed (every open here
	 * refuses links), so any text is fine but an empty or over-long one. */
	if (!e->link || !e->link[0])
		return refuse(err, EINVAL, e->name, "a symlink without a target");
	if (strlen(e->link) >= PATH_MAX)
		return refuse(err, ENAMETOOLONG, e->name, "a symlink target over %d bytes",
			      PATH_MAX - 1);
	if (remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	if (symlinkat(e->link, dir, last) < 0)
		return refuse(err, errno, e->name, "symlink: %s", strerror(errno));
	if (times[1].tv_nsec != UTIME_OMIT && utimensat(dir, last, times, AT_SYMLINK_NOFOLLOW) < 0)
		return refuse(err, errno, e->name, "set its times: %s", strerror(errno));
	u->stats.symlinks++;
	return 0;
}

static int write_hardlink(struct img_unpack *u, const struct unpack_entry *e, const char *path,
			  int dir, const char *last, struct sbx_err *err)
{
	char target[PATH_MAX];
	const char *target_last;
	struct stat st;
	int depth, target_dir, rc;
	bool is_dir;

	char shown[UNPACK_SHOWN_MAX];

	if (!e->link)
		return refuse(err, EINVAL, e->name, "a hard link without a target");
	unpack_shown(shown, e->link);
	if (normalize(e->link, target, &depth, err) < 0)
		return sbx_err_prefix(err, "hard link to \"%s\"", shown),
		       entry_failed(err, e->name);
	if (!target[0])
		return refuse(err, EINVAL, e->name, "a hard link to the root");
	if (!strcmp(target, path))
		return refuse(err, EINVAL, e->name, "a hard link to itself");
	rc = open_parent(u, e->name, target, false, &target_dir, &target_last, err);
	if (rc < 0)
		return -1; /* open_parent named the entry */
	if (rc > 0)
		return refuse(err, ENOENT, e->name, "a hard link to \"%s\", which is not there",
			      shown);
	_cleanup_close_ int target_fd = target_dir;
	if (fstatat(target_fd, target_last, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return refuse(err, errno, e->name, "a hard link to \"%s\": %s", shown,
			      strerror(errno));
	if (!S_ISREG(st.st_mode))
		return refuse(err, EPERM, e->name, "a hard link to \"%s\", %s, is refused", shown,
			      S_ISLNK(st.st_mode)   ? "a symlink"
			      : S_ISDIR(st.st_mode) ? "a directory"
						    : "a special file");
	if (remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	/* Flags 0: linkat never follows a link at the target (it is a
	 * regular file, checked above, and nothing else writes this tree). */
	if (linkat(target_fd, target_last, dir, last, 0) < 0)
		return refuse(err, errno, e->name, "link: %s", strerror(errno));
	u->stats.hardlinks++;
	return 0;
}

/* ---- the entry ---- */

static void maybe_say(struct img_unpack *u)
{
	struct unpack_state *s = u->priv;
	uint64_t mark = u->stats.entries / 100000 + u->stats.bytes / (256ull << 20);

	if (mark > s->next_say) {
		s->next_say = mark;
		img_say(u->pr, "  %llu entries, %.1f MiB written",
			(unsigned long long)u->stats.entries,
			(double)u->stats.bytes / (1024.0 * 1024.0));
	}
}

int unpack_apply(struct img_unpack *u, const struct unpack_entry *e, bool whiteouts,
		 struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	char path[PATH_MAX];
	const char *base, *last;
	int depth, dir, rc;

	u->stats.entries++;
	if (u->stats.entries + s->implicit > u->lim->max_entries)
		return refuse(err, EFBIG, e->name,
			      "past %llu entries (with the directories they imply): the limit "
			      "(--max-entries)",
			      (unsigned long long)u->lim->max_entries);
	if (e->size && unpack_check_declared(u, e->name, e->size, err) < 0)
		return -1;
	if (normalize(e->name, path, &depth, err) < 0)
		return entry_failed(err, e->name);
	if (!path[0]) {
		/* "./": the root itself, which is the store's, not the image's */
		if (e->kind != UE_DIR)
			return refuse(err, EINVAL, e->name, "names the root");
		return 0;
	}
	base = strrchr(path, '/');
	base = base ? base + 1 : path;

	/* ".wh." names: whiteouts in a layer, refused anywhere else. */
	for (const char *p = path, *end;; p = end + 1) {
		end = strchrnul(p, '/');
		if (strncmp(p, WH_PREFIX, strlen(WH_PREFIX)) != 0) {
			if (!*end)
				break;
			continue;
		}
		if (!whiteouts)
			return refuse(err, EINVAL, e->name,
				      "a whiteout name outside an image layer is refused");
		/* aufs' own bookkeeping (.wh..wh.plnk, .wh..wh.aufs) and
		 * everything in it: not part of the image */
		if (!strncmp(p, WH_META, strlen(WH_META)) && p != base)
			return 0;
		if (p != base)
			return refuse(err, EINVAL, e->name, "an entry below a whiteout");
		break; /* the last component */
	}
	if (whiteouts && !strncmp(base, WH_PREFIX, strlen(WH_PREFIX))) {
		if (!strcmp(base, WH_OPAQUE))
			rc = apply_opaque(u, e, path, base, err);
		else if (!strncmp(base, WH_META, strlen(WH_META)))
			rc = 0; /* aufs' bookkeeping */
		else
			rc = apply_whiteout(u, e, path, base, err);
		maybe_say(u);
		return rc;
	}
	if (e->kind == UE_SPECIAL) {
		u->stats.special++;
		return 0;
	}
	if (open_parent(u, e->name, path, true, &dir, &last, err) < 0)
		return -1;
	_cleanup_close_ int dir_fd = dir;
	switch (e->kind) {
	case UE_FILE:
		rc = write_file(u, e, dir_fd, last, err);
		break;
	case UE_DIR:
		rc = write_dir(u, e, dir_fd, last, err);
		break;
	case UE_SYMLINK:
		rc = write_symlink(u, e, dir_fd, last, err);
		break;
	case UE_HARDLINK:
		rc = write_hardlink(u, e, path, dir_fd, last, err);
		break;
	default:
		rc = refuse(err, EINVAL, e->name, "an unknown kind of entry");
	}
	if (rc == 0 && whiteouts)
		rc = layer_add(u, path, err);
	maybe_say(u);
	return rc;
}
