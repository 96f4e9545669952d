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

#include "tree.h"
#include "util.h"

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
		return sbx_fail(err, "an empty name");
	/* A name of slashes alone is the root, as "./" is (umoci's insert
	 * writes "/"); any other leading slash is an absolute name. */
	if (name[0] == '/' && name[strspn(name, "/")] != '\0')
		return sbx_fail(err, "an absolute name is refused");
	while (*p) {
		const char *end = strchrnul(p, '/');
		size_t len = (size_t)(end - p);

		if (len == 2 && p[0] == '.' && p[1] == '.')
			return sbx_fail(err, "a \"..\" component is refused");
		if (len > NAME_MAX)
			return sbx_fail(err, "a component over %d bytes", NAME_MAX);
		if (len && !(len == 1 && p[0] == '.')) {
			if (++*depth > SBX_TREE_MAX_DEPTH)
				return sbx_fail(err, "deeper than %d directories",
						SBX_TREE_MAX_DEPTH);
			if (n + (n ? 1 : 0) + len >= PATH_MAX)
				return sbx_fail(err, "a path over %d bytes", PATH_MAX - 1);
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

/* ---- parents ---- */

/* Explains a failed open of a parent directory the way the entry's error
 * should: which component is a link or not a directory. Each prefix is
 * opened O_PATH | O_NOFOLLOW beneath the root, which gives the link itself
 * where the last component is one. */
static int parent_refused(struct img_unpack *u, struct sbx_err *err, const char *name,
			  const char *parent)
{
	char shown[UNPACK_SHOWN_MAX], prefix[PATH_MAX];
	int errnum = err->errnum;
	struct sbx_err ignored;

	snprintf(prefix, sizeof(prefix), "%s", parent);
	for (char *slash = prefix;; slash++) {
		struct stat st;

		slash = strchrnul(slash, '/');
		bool more = *slash != '\0';
		*slash = '\0';
		_cleanup_close_ int fd = sbx_open_beneath(u->root_fd, prefix, O_PATH, 0, &ignored);
		unpack_shown(shown, prefix);
		if (fd >= 0 && fstat(fd, &st) == 0) {
			if (S_ISLNK(st.st_mode))
				return unpack_refuse(err, ELOOP, name,
						     "below a symlink (\"%s\"): refused", shown);
			if (!S_ISDIR(st.st_mode))
				return unpack_refuse(err, ENOTDIR, name,
						     "below \"%s\", which is not a directory",
						     shown);
		}
		if (!more)
			break;
		*slash = '/';
	}
	unpack_shown(shown, parent);
	return unpack_refuse(err, errnum, name, "open \"%s\": %s", shown, strerror(errnum));
}

/* (images_unpack_entry.h) One openat2 for the whole parent where it is
 * there, as it mostly is: a walk only to make what is missing. */
int unpack_open_parent(struct img_unpack *u, const char *name, const char *path, bool create,
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
		return parent_refused(u, err, name, parent);
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
				return unpack_refuse(err, EFBIG, name,
						     "past %llu entries (with the directories they "
						     "imply): the limit (--max-entries)",
						     (unsigned long long)u->lim->max_entries);
			if (mkdirat(cur, comp, 0700) < 0 && errno != EEXIST)
				return unpack_refuse(err, errno, name, "mkdir: %s",
						     strerror(errno));
			made = true;
			next = sbx_open_beneath(cur, comp, O_RDONLY | O_DIRECTORY, 0, err);
		}
		if (next < 0)
			return parent_refused(u, err, name, parent);
		close(cur);
		cur = next;
		if (made) {
			static const struct timespec none = {.tv_nsec = UTIME_OMIT};

			s->implicit++;
			if (unpack_record_dir(u, cur, name, 0755, &none, err) < 0)
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
int unpack_remove_existing(int dir, const char *last, const char *name, bool keep_dir, bool *is_dir,
			   struct sbx_err *err)
{
	struct stat st;

	*is_dir = false;
	if (fstatat(dir, last, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return 0;
		return unpack_refuse(err, errno, name, "stat: %s", strerror(errno));
	}
	if (S_ISDIR(st.st_mode)) {
		if (keep_dir) {
			*is_dir = true;
			return 0;
		}
		if (sbx_remove_tree_at(dir, last, err) < 0)
			return unpack_entry_failed(err, name);
		return 0;
	}
	if (unlinkat(dir, last, 0) < 0 && errno != ENOENT)
		return unpack_refuse(err, errno, name, "remove what was there: %s",
				     strerror(errno));
	return 0;
}

/* ---- content ---- */

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

	if (unpack_remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	/* 0600 while written; its own mode once it is whole. */
	_cleanup_close_ int fd =
	    sbx_open_beneath(dir, last, O_WRONLY | O_CREAT | O_EXCL, 0600, err);
	if (fd < 0)
		return unpack_entry_failed(err, e->name);
	struct unpack_out out = {.fd = fd, .size = e->size};
	if (e->size && e->content(e->arg, &out, err) < 0)
		return unpack_entry_failed(err, e->name);
	/* A sparse file's last hole, or a file that declared more than it
	 * held (the readers refuse those: a truncated archive fails in
	 * libarchive, a directory's file that shrank in its reader). */
	if (out.end < e->size && ftruncate(fd, (off_t)e->size) < 0)
		return unpack_refuse(err, errno, e->name, "truncate: %s", strerror(errno));
	if (fchmod(fd, mode) < 0)
		return unpack_refuse(err, errno, e->name, "chmod: %s", strerror(errno));
	if (times[1].tv_nsec != UTIME_OMIT && futimens(fd, times) < 0)
		return unpack_refuse(err, errno, e->name, "set its times: %s", strerror(errno));
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
	if (unpack_remove_existing(dir, last, e->name, true, &is_dir, err) < 0)
		return -1;
	if (!is_dir && mkdirat(dir, last, 0700) < 0)
		return unpack_refuse(err, errno, e->name, "mkdir: %s", strerror(errno));
	_cleanup_close_ int fd = sbx_open_beneath(dir, last, O_RDONLY | O_DIRECTORY, 0, err);
	if (fd < 0)
		return unpack_entry_failed(err, e->name);
	if (unpack_record_dir(u, fd, e->name, mode, &e->mtime, err) < 0)
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
		return unpack_refuse(err, EINVAL, e->name, "a symlink without a target");
	if (strlen(e->link) >= PATH_MAX)
		return unpack_refuse(err, ENAMETOOLONG, e->name, "a symlink target over %d bytes",
				     PATH_MAX - 1);
	if (unpack_remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	if (symlinkat(e->link, dir, last) < 0)
		return unpack_refuse(err, errno, e->name, "symlink: %s", strerror(errno));
	if (times[1].tv_nsec != UTIME_OMIT && utimensat(dir, last, times, AT_SYMLINK_NOFOLLOW) < 0)
		return unpack_refuse(err, errno, e->name, "set its times: %s", strerror(errno));
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
		return unpack_refuse(err, EINVAL, e->name, "a hard link without a target");
	unpack_shown(shown, e->link);
	if (normalize(e->link, target, &depth, err) < 0)
		return sbx_err_prefix(err, "hard link to \"%s\"", shown),
		       unpack_entry_failed(err, e->name);
	if (!target[0])
		return unpack_refuse(err, EINVAL, e->name, "a hard link to the root");
	if (!strcmp(target, path))
		return unpack_refuse(err, EINVAL, e->name, "a hard link to itself");
	rc = unpack_open_parent(u, e->name, target, false, &target_dir, &target_last, err);
	if (rc < 0)
		return -1; /* open_parent named the entry */
	if (rc > 0)
		return unpack_refuse(err, ENOENT, e->name,
				     "a hard link to \"%s\", which is not there", shown);
	_cleanup_close_ int target_fd = target_dir;
	if (fstatat(target_fd, target_last, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
		return unpack_refuse(err, ENOENT, e->name,
				     "a hard link to \"%s\", which is not there", shown);
	if (fstatat(target_fd, target_last, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return unpack_refuse(err, errno, e->name, "a hard link to \"%s\": %s", shown,
				     strerror(errno));
	if (!S_ISREG(st.st_mode))
		return unpack_refuse(err, EPERM, e->name, "a hard link to \"%s\", %s, is refused",
				     shown,
				     S_ISLNK(st.st_mode)   ? "a symlink"
				     : S_ISDIR(st.st_mode) ? "a directory"
							   : "a special file");
	if (unpack_remove_existing(dir, last, e->name, false, &is_dir, err) < 0)
		return -1;
	/* Flags 0: linkat never follows a link at the target (it is a
	 * regular file, checked above, and nothing else writes this tree). */
	if (linkat(target_fd, target_last, dir, last, 0) < 0)
		return unpack_refuse(err, errno, e->name, "link: %s", strerror(errno));
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
		return unpack_refuse(
		    err, EFBIG, e->name,
		    "past %llu entries (with the directories they imply): the limit "
		    "(--max-entries)",
		    (unsigned long long)u->lim->max_entries);
	if (e->size && unpack_check_declared(u, e->name, e->size, err) < 0)
		return -1;
	if (normalize(e->name, path, &depth, err) < 0)
		return unpack_entry_failed(err, e->name);
	if (!path[0]) {
		/* "./": the root itself, which is the store's, not the image's */
		if (e->kind != UE_DIR)
			return unpack_refuse(err, EINVAL, e->name, "names the root");
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
			return unpack_refuse(err, EINVAL, e->name,
					     "a whiteout name outside an image layer is refused");
		/* aufs' own bookkeeping (.wh..wh.plnk, .wh..wh.aufs) and
		 * everything in it: not part of the image */
		if (!strncmp(p, WH_META, strlen(WH_META)) && p != base)
			return 0;
		if (p != base)
			return unpack_refuse(err, EINVAL, e->name, "an entry below a whiteout");
		break; /* the last component */
	}
	if (whiteouts && !strncmp(base, WH_PREFIX, strlen(WH_PREFIX))) {
		if (!strcmp(base, WH_OPAQUE))
			rc = unpack_opaque(u, e, path, base, err);
		else if (!strncmp(base, WH_META, strlen(WH_META)))
			rc = 0; /* aufs' bookkeeping */
		else
			rc = unpack_whiteout(u, e, path, base, err);
		maybe_say(u);
		return rc;
	}
	if (e->kind == UE_SPECIAL) {
		u->stats.special++;
		return 0;
	}
	if (unpack_open_parent(u, e->name, path, true, &dir, &last, err) < 0)
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
		rc = unpack_refuse(err, EINVAL, e->name, "an unknown kind of entry");
	}
	if (rc == 0 && whiteouts)
		rc = unpack_layer_add(u, path, err);
	maybe_say(u);
	return rc;
}
