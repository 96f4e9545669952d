/* SPDX-License-Identifier: Apache-2.0 */
/* Removing a tree that someone else filled (a run's directory, a staged
 * image) without following a link, even where its entries were made
 * unreadable or read-only: everything in it is ours (the euid's), so we
 * may give ourselves back the permission bits an open needs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree.h"
#include "util.h"

int sbx_open_beneath_owned(int dirfd, const char *name, int flags, mode_t need, mode_t *was,
			   struct sbx_err *err)
{
	struct stat st, now;
	char proc[64];

	*was = (mode_t)-1;
	int fd = sbx_open_beneath(dirfd, name, flags, 0, err);
	if (fd >= 0) {
		/* Opened, but a directory of 0400 cannot be looked into. */
		if (fstat(fd, &st) < 0) {
			close(fd);
			return sbx_fail_errno(err, "stat %s", name);
		}
		if ((st.st_mode & need) == need || st.st_uid != geteuid())
			return fd;
		if (fchmod(fd, (st.st_mode & 07777) | need) < 0) {
			close(fd);
			return sbx_fail_errno(err, "chmod %s", name);
		}
		*was = st.st_mode & 07777;
		return fd;
	}
	if (err->errnum != EACCES)
		return fd;
	/* O_PATH needs no permission on the entry itself, and fchmod does
	 * not take an O_PATH fd: the chmod goes through its /proc link,
	 * which names this very inode and never a path someone could swap. */
	_cleanup_close_ int path_fd =
	    sbx_open_beneath(dirfd, name, O_PATH | (flags & O_DIRECTORY), 0, err);
	if (path_fd < 0)
		return -1;
	if (fstat(path_fd, &st) < 0)
		return sbx_fail_errno(err, "stat %s", name);
	if (st.st_uid != geteuid() || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
		return sbx_fail_errnum(err, EACCES, "open %s", name);
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", path_fd);
	if (chmod(proc, (st.st_mode & 07777) | need) < 0)
		return sbx_fail_errno(err, "chmod %s", name);
	fd = sbx_open_beneath(dirfd, name, flags, 0, err);
	if (fd < 0 || fstat(fd, &now) < 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
		int saved = fd < 0 ? err->errnum : ESTALE;

		if (fd >= 0)
			close(fd);
		if (chmod(proc, st.st_mode & 07777) < 0) {
			/* the open's own error below is the one that matters */
		}
		return sbx_fail_errnum(err, saved, "open %s", name);
	}
	*was = st.st_mode & 07777;
	return fd;
}

static int remove_contents(int dirfd, const char *what, int depth, struct sbx_err *err)
{
	_cleanup_close_ int dup_fd = -1;
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int rc = 0;

	if (depth > 4096)
		return sbx_fail(err, "%s: too deep to remove", what);
	/* A new open of ".", not a dup: a dup would share the offset of a
	 * directory fd the caller may read again. */
	dup_fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd)))
		return sbx_fail_errno(err, "%s", what);
	dup_fd = -1; /* the DIR's now */
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM) {
			rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
			continue;
		}
		mode_t was;
		_cleanup_close_ int sub = sbx_open_beneath_owned(
		    dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 0700, &was, err);

		if (sub < 0) {
			rc = -1;
			continue;
		}
		if (fchmod(sub, 0700) < 0) {
			/* Writable too, or its entries cannot be unlinked: not
			 * ours otherwise, and then the unlinkat says so. */
		}
		if (remove_contents(sub, what, depth + 1, err) < 0)
			rc = -1;
		else if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
	}
	return rc;
}

int sbx_remove_tree_at(int parent, const char *name, struct sbx_err *err)
{
	struct stat st;
	mode_t was;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "stat %s", name);
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			return sbx_fail_errno(err, "remove %s", name);
		return 0;
	}
	_cleanup_close_ int fd =
	    sbx_open_beneath_owned(parent, name, O_RDONLY | O_DIRECTORY, 0700, &was, err);
	if (fd < 0)
		return -1;
	if (fchmod(fd, 0700) < 0) {
		/* not ours: the removal's own error names the entry */
	}
	if (remove_contents(fd, name, 0, err) < 0)
		return -1;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return sbx_fail_errno(err, "remove %s", name);
	return 0;
}
