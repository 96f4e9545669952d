/* SPDX-License-Identifier: Apache-2.0 */
/* A local directory that artifacts are written into: opened once, refused
 * unless it is the caller's own and no one else can write it, and every
 * directory and file beneath it made or opened without following a link
 * (common/tree.h's sbx_open_beneath). Whoever can write a directory can
 * plant a link in it (keys -> ~/.ssh), and a client that follows it writes a
 * sandbox's bytes wherever the link points. The directories above it are
 * held to OpenSSH's rule (dest_ancestors.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "text.h"
#include "tree.h"
#include "util.h"

static const char *kind_of(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISREG(m))
		return "a regular file";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	return "a device";
}

/* Only the owner may add or swap names in a directory written through:
 * another owner, a group or everyone could plant a link there between two
 * of our steps. A sticky bit does not help: it stops others removing our
 * names, not adding their own in the places our files go. */
static int check_own_dir(int fd, const char *what, struct sbx_err *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return sbx_fail_errno(err, "%s", what);
	if (!S_ISDIR(st.st_mode))
		return sbx_fail(err, "%s: not a directory: refused", what);
	if (st.st_uid != geteuid())
		return sbx_fail(err,
				"%s: owned by uid %u, not by you (uid %u): refused, since its "
				"owner could plant links in it",
				what, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return sbx_fail(err,
				"%s: writable by %s (mode %04o): refused, since they could "
				"plant links in it (chmod go-w it)",
				what, st.st_mode & S_IWOTH ? "others" : "its group",
				(unsigned)(st.st_mode & 07777));
	return 0;
}

/* Why an open beneath dir of name failed, said as what is there. */
static int refuse_entry(int dir, const char *name, const char *what, const char *want,
			struct sbx_err *err)
{
	struct stat st;

	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (S_ISLNK(st.st_mode) || strcmp(kind_of(st.st_mode), want)))
		return sbx_fail(err, "%s: %s is in the way: refused (never followed or replaced)",
				what, kind_of(st.st_mode));
	return sbx_err_prefix(err, "%s", what);
}

int sbx_dest_open(const char *dir, struct sbx_err *err)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	if (!len)
		return sbx_fail(err, "an empty directory name");
	if (len >= sizeof(path))
		return sbx_fail_errnum(err, ENAMETOOLONG, "%.64s...", dir);
	memcpy(path, dir, len + 1);
	/* "out/" would follow a link named out: the slash asks for what it
	 * points to. */
	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
	char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	_cleanup_close_ int fd = -1;
	if (!strcmp(path, "/") || !strcmp(base, ".") || !strcmp(base, "..")) {
		/* No link can be the last component here. */
		fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return sbx_fail_errno(err, "%s", dir);
	} else {
		/* The parents are the caller's words, followed as any tool
		 * does; the directory itself is named beneath them only. */
		if (slash)
			*slash = '\0';
		const char *parent = !slash ? "." : slash == path ? "/" : path;
		_cleanup_close_ int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (pfd < 0)
			return sbx_fail_errno(err, "%s", dir);
		struct stat st;
		bool missing = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0;
		if (missing && errno != ENOENT)
			return sbx_fail_errno(err, "%s", dir);
		/* Nothing is made where others could swap it away. */
		if (missing && sbx_dest_check_ancestors(pfd, dir, err) < 0)
			return -1;
		/* 0700: what a sandbox left is the caller's until they share
		 * it (its inputs may have been private); never group- or
		 * world-writable, which the check below would refuse. */
		if (mkdirat(pfd, base, 0700) < 0 && errno != EEXIST)
			return sbx_fail_errno(err, "%s", dir);
		fd = sbx_open_beneath(pfd, base, O_RDONLY | O_DIRECTORY, 0, err);
		if (fd < 0)
			return refuse_entry(pfd, base, dir, "a directory", err);
		/* One that was there is named for what it is first (another
		 * user's, a shared one), then its parents. */
		if (check_own_dir(fd, dir, err) < 0 ||
		    (!missing && sbx_dest_check_ancestors(pfd, dir, err) < 0))
			return -1;
		return sbx_steal_fd(fd);
	}
	/* Its parents are walked from it, which check_own holds to more. */
	if (check_own_dir(fd, dir, err) < 0 || sbx_dest_check_ancestors(fd, dir, err) < 0)
		return -1;
	return sbx_steal_fd(fd);
}

int sbx_dest_subdir(int top, const char *rel, const char **base, struct sbx_err *err)
{
	char path[PATH_MAX];
	/* A sandbox chose the names: escaped in messages (common/text.h). */
	char shown[256];

	sbx_escape(shown, sizeof(shown), rel);
	if (snprintf(path, sizeof(path), "%s", rel) >= (int)sizeof(path))
		return sbx_fail_errnum(err, ENAMETOOLONG, "%s: too long", shown);
	_cleanup_close_ int cur = fcntl(top, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return sbx_fail_errno(err, "dup");
	char *s = path;
	for (char *slash; (slash = strchr(s, '/')); s = slash + 1) {
		*slash = '\0';
		sbx_escape(shown, sizeof(shown), path);
		if (!*s || !strcmp(s, ".") || !strcmp(s, ".."))
			return sbx_fail(err, "%s: would leave the directory: refused", shown);
		/* 0755 less the umask: never writable by others, which a later
		 * fetch into the same directory would refuse. */
		if (mkdirat(cur, s, 0755) < 0 && errno != EEXIST)
			return sbx_fail_errno(err, "%s", shown);
		int next = sbx_open_beneath(cur, s, O_RDONLY | O_DIRECTORY, 0, err);
		if (next < 0)
			return refuse_entry(cur, s, shown, "a directory", err);
		close(cur);
		cur = next;
		/* One made before us (or by someone else) is held to the
		 * destination's rule. */
		if (check_own_dir(cur, shown, err) < 0)
			return -1;
		*slash = '/';
	}
	if (!*s || !strcmp(s, ".") || !strcmp(s, "..")) {
		sbx_escape(shown, sizeof(shown), rel);
		return sbx_fail(err, "%s: not a file name: refused", shown);
	}
	*base = rel + (s - path);
	return sbx_steal_fd(cur);
}

int sbx_dest_check_slot(int dir, const char *name, const char *rel, struct sbx_err *err)
{
	struct stat st;

	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "%s", rel);
	/* A regular file is replaced by the rename, never written through
	 * (it may be a hard link to something else); anything else was put
	 * there by someone, and the caller should see it. */
	if (!S_ISREG(st.st_mode))
		return sbx_fail(err, "%s: %s is in the way: refused (never followed or replaced)",
				rel, kind_of(st.st_mode));
	return 0;
}
