/* SPDX-License-Identifier: Apache-2.0 */
/* The directories above a destination, held to OpenSSH's rule for the
 * paths it trusts (misc.c safe_path): each owned by root or the caller, and
 * writable by no one else unless sticky. Whoever can write one of them can
 * rename the caller's directory beneath it away and put a link in its
 * place, and the next fetch into the same path goes where the link points;
 * a sticky directory (/tmp) lets no one rename a name they do not own. The
 * walk goes up from the directory opened, by "..", so what is checked is
 * where the files will go, not the words of the path. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "util.h"

/* Deeper than any path a caller could have named (PATH_MAX / 2). */
#define ANCESTORS_MAX 2048

/* The directory fd is, named for a message: its path now, or how far above
 * the destination it is. */
static const char *name_of(int fd, int depth, char *buf, size_t size)
{
	char link[32];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, size - 1);
	if (n > 0 && buf[0] == '/') {
		buf[n] = '\0';
		return buf;
	}
	snprintf(buf, size, "the directory %d levels up", depth);
	return buf;
}

static int check_one(int fd, const struct stat *st, int depth, const char *dest,
		     struct sbx_err *err)
{
	char name[4096];
	uid_t me = geteuid();

	if (st->st_uid != 0 && st->st_uid != me)
		return sbx_fail(err,
				"%s: its ancestor %s is owned by uid %u, neither root nor you (uid "
				"%u): refused, since its owner could swap a link in on the way",
				dest, name_of(fd, depth, name, sizeof(name)), (unsigned)st->st_uid,
				(unsigned)me);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return sbx_fail(err,
				"%s: its ancestor %s is writable by %s (mode %04o) and not sticky: "
				"refused, since they could swap a link in on the way (chmod go-w "
				"or +t it)",
				dest, name_of(fd, depth, name, sizeof(name)),
				st->st_mode & S_IWOTH ? "others" : "its group",
				(unsigned)(st->st_mode & 07777));
	return 0;
}

int sbx_dest_check_ancestors(int dir, const char *dest, struct sbx_err *err)
{
	/* O_PATH: a parent the caller may only search (0711) is still
	 * walked through. */
	_cleanup_close_ int cur = openat(dir, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct stat st, up_st;

	if (cur < 0 || fstat(cur, &st) < 0)
		return sbx_fail_errno(err, "%s", dest);
	for (int depth = 1; depth <= ANCESTORS_MAX; depth++) {
		if (check_one(cur, &st, depth, dest, err) < 0)
			return -1;
		_cleanup_close_ int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0 || fstat(up, &up_st) < 0)
			return sbx_fail_errno(err, "%s: the directory %d levels up", dest, depth);
		/* The root (of the file system, or of a chroot) is its own parent. */
		if (up_st.st_dev == st.st_dev && up_st.st_ino == st.st_ino)
			return 0;
		close(cur);
		cur = sbx_steal_fd(up);
		st = up_st;
	}
	return sbx_fail(err, "%s: more than %d directories deep: refused", dest, ANCESTORS_MAX);
}
