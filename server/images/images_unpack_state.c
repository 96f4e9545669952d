/* SPDX-License-Identifier: Apache-2.0 */
/* The writer's state (images_unpack_entry.h): the messages that name an
 * entry, the paths the current layer wrote, the deferred directory modes,
 * and the bytes every entry declared. All of it is bounded by the
 * import's limits. */
#include "images_unpack_entry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "text.h"
#include "tree.h"
#include "util.h"

void unpack_shown(char dst[UNPACK_SHOWN_MAX], const char *name)
{
	char all[SBX_ESCAPE_SIZE(PATH_MAX)];

	sbx_escape(all, sizeof(all), name);
	sbx_escape(dst, UNPACK_SHOWN_MAX - 3, name);
	if (strlen(dst) < strlen(all))
		strcat(dst, "..."); /* cut: say so */
}

int unpack_refuse(struct sbx_err *err, int errnum, const char *name, const char *fmt, ...)
{
	char shown[UNPACK_SHOWN_MAX];
	va_list ap;

	/* The message says why in words (and adds strerror itself where a
	 * call failed); errnum stays for the caller. */
	va_start(ap, fmt);
	sbx_failv(err, 0, fmt, ap);
	va_end(ap);
	err->errnum = errnum;
	unpack_shown(shown, name);
	return sbx_err_prefix(err, "entry \"%s\"", shown);
}

int unpack_entry_failed(struct sbx_err *err, const char *name)
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
	sbx_inode_set_free(&s->cleared);
	free(s->modes);
	free(s);
	u->priv = NULL;
}

void unpack_layer_begin(struct img_unpack *u)
{
	struct unpack_state *s = u->priv;

	sbx_inode_set_free(&s->layer);
	sbx_inode_set_free(&s->cleared);
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

bool unpack_layer_has(struct unpack_state *s, const char *path, size_t len)
{
	dev_t hi;
	ino_t lo;

	return path_key(path, len, &hi, &lo) && sbx_inode_get(&s->layer, hi, lo) >= 0;
}

/* Adds path and each of its parents, stopping at the first already there
 * (its parents are then too): the set never outgrows the tree's paths. */
int unpack_layer_add(struct img_unpack *u, const char *path, struct sbx_err *err)
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

bool unpack_cleared(struct unpack_state *s, const char *path)
{
	dev_t hi;
	ino_t lo;

	return path_key(path, strlen(path), &hi, &lo) && sbx_inode_get(&s->cleared, hi, lo) >= 0;
}

int unpack_mark_cleared(struct img_unpack *u, const char *path, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	dev_t hi;
	ino_t lo;

	if (!path_key(path, strlen(path), &hi, &lo))
		return sbx_fail(err, "sha256 failed");
	/* One key per whiteout or opaque entry at most: bounded by the
	 * entries limit like the layer's own paths. */
	if (!sbx_inode_put(&s->cleared, hi, lo, 0))
		return sbx_fail_errnum(err, ENOMEM, "unpack");
	return 0;
}

/* ---- directory modes ---- */

int unpack_record_dir(struct img_unpack *u, int fd, const char *name, mode_t mode,
		      const struct timespec *mtime, struct sbx_err *err)
{
	struct unpack_state *s = u->priv;
	struct stat st;
	long i;

	if (fstat(fd, &st) < 0)
		return unpack_refuse(err, errno, name, "stat: %s", strerror(errno));
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

	if (depth > SBX_TREE_MAX_DEPTH + 1)
		return sbx_fail(err, "%s: deeper than %d directories", path, SBX_TREE_MAX_DEPTH);
	if (!(d = sbx_dir_list(dir)))
		return sbx_fail_errno(err, "open %s", path[0] ? path : ".");
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

/* ---- content ---- */

int unpack_check_declared(struct img_unpack *u, const char *name, uint64_t size,
			  struct sbx_err *err)
{
	struct unpack_state *s = u->priv;

	if (size > u->lim->max_file_bytes)
		return unpack_refuse(err, EFBIG, name,
				     "declares %llu bytes, past the limit of %llu for one file "
				     "(--max-file-bytes)",
				     (unsigned long long)size,
				     (unsigned long long)u->lim->max_file_bytes);
	if (size > u->lim->max_bytes || s->declared > u->lim->max_bytes - size)
		return unpack_refuse(
		    err, EFBIG, name,
		    "past the limit of %llu bytes for the whole import (--max-bytes)",
		    (unsigned long long)u->lim->max_bytes);
	s->declared += size;
	return 0;
}
