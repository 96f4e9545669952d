/* SPDX-License-Identifier: Apache-2.0 */
/* Whiteouts and opaque directories of an OCI layer (images_unpack_entry.h):
 * what they remove is found the way every entry's parent is (beneath the
 * root, no symlinks), and what the current layer wrote itself stays. */
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

#include "tree.h"
#include "util.h"

/* ---- whiteouts ---- */

/* Removes `last` under dir -- the lower layers' part of it: what this layer
 * wrote (path in the layer set) stays, and a directory of this layer keeps
 * its own entries while losing the lower ones. */
static int remove_lower(struct img_unpack *u, int dir, const char *last, char *path, size_t len,
			int depth, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	struct stat st;

	if (!unpack_layer_has(s, path, len))
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
	_cleanup_closedir_ DIR *d = sbx_dir_list(sub);
	struct dirent *de;

	if (!d)
		return sbx_fail_errno(err, "open %.*s", (int)len, path);
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
int unpack_whiteout(struct img_unpack *u, const struct unpack_entry *e, const char *path,
		    const char *base, struct sbx_err *err)
{
	const char *target = base + strlen(WH_PREFIX);
	char victim[PATH_MAX];
	const char *last;
	int dir, rc;

	if (!target[0] || !strcmp(target, ".") || !strcmp(target, ".."))
		return unpack_refuse(err, EINVAL, e->name, "a whiteout of \"%s\" is refused",
				     target);
	/* The same length as the whiteout's own name, less ".wh.". */
	snprintf(victim, sizeof(victim), "%.*s%s", (int)(base - path), path, target);
	if (unpack_cleared(u->priv, victim)) {
		u->stats.whiteouts++;
		return 0; /* done once in this layer: nothing lower is left there */
	}
	rc = unpack_open_parent(u, e->name, victim, false, &dir, &last, err);
	if (rc != 0)
		return rc < 0 ? -1 : 0; /* its parent is not there: nothing to remove */
	_cleanup_close_ int dir_fd = dir;
	if (remove_lower(u, dir_fd, last, victim, strlen(victim), 0, err) < 0)
		return sbx_err_prefix(err, "whiteout"), unpack_entry_failed(err, e->name);
	if (unpack_mark_cleared(u, victim, err) < 0)
		return unpack_entry_failed(err, e->name);
	u->stats.whiteouts++;
	return 0;
}

/* ".wh..wh..opq" in D: everything in D the layers below left goes. D is
 * the marker's parent, opened (made if missing) like any entry's, so a D
 * that is a symlink is refused the same way. */
int unpack_opaque(struct img_unpack *u, const struct unpack_entry *e, const char *path,
		  const char *base, struct sbx_err *err)
{
	_cleanup_closedir_ DIR *d = NULL;
	char child[PATH_MAX];
	size_t len = base > path ? (size_t)(base - path) - 1 : 0; /* D's path */
	const char *last;
	struct dirent *de;
	int dir, rc = 0;

	if (unpack_open_parent(u, e->name, path, true, &dir, &last, err) < 0)
		return -1;
	_cleanup_close_ int dir_fd = dir;
	memcpy(child, path, len);
	child[len] = '\0';
	/* D is this layer's: the marker says so. */
	if (len && unpack_layer_add(u, child, err) < 0)
		return -1;
	if (unpack_cleared(u->priv, child)) {
		u->stats.opaque++;
		return 0; /* D holds only this layer's entries since its first marker */
	}
	if (!(d = sbx_dir_list(dir_fd)))
		return unpack_refuse(err, errno, e->name, "open its directory: %s",
				     strerror(errno));
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
		return sbx_err_prefix(err, "opaque directory"), unpack_entry_failed(err, e->name);
	child[len] = '\0';
	if (unpack_mark_cleared(u, child, err) < 0)
		return unpack_entry_failed(err, e->name);
	u->stats.opaque++;
	return 0;
}
