/* SPDX-License-Identifier: Apache-2.0 */
/* Removing a tree that someone else filled (a run's directory, a staged
 * image) without following a link, even where its entries were made
 * unreadable or read-only: everything in it is ours (the euid's), so we
 * may give ourselves back the permission bits an open needs. And listing
 * a directory without sharing another reader's offset. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tree.h"
#include "util.h"

DIR *sbx_dir_list(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);

	if (fd >= 0 && !d) {
		int saved = errno;

		close(fd);
		errno = saved;
	}
	return d;
}

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

/* A directory on the way down: what it was (to know its ".." again), the
 * name it has in its parent, and its subdirectories still to empty, each
 * "<name>\0" in one buffer. */
struct level {
	dev_t dev;
	ino_t ino;
	char *name;
	char *subdirs;
	size_t len, cap, next;
};

static int level_add(struct level *l, const char *name)
{
	size_t need = strlen(name) + 1;

	if (l->len + need > l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		char *b;

		while (cap < l->len + need)
			cap *= 2;
		if (!(b = realloc(l->subdirs, cap)))
			return -1;
		l->subdirs = b;
		l->cap = cap;
	}
	memcpy(l->subdirs + l->len, name, need);
	l->len += need;
	return 0;
}

static void level_clear(struct level *l)
{
	free(l->name);
	free(l->subdirs);
	*l = (struct level){0};
}

/* Unlinks what in `dir` is not a directory and notes the directories in
 * l: the DIR is closed before any of them is entered. */
static int empty_files(int dir, struct level *l, const char *what, struct sbx_err *err)
{
	_cleanup_closedir_ DIR *d = sbx_dir_list(dir);
	struct dirent *de;
	int rc = 0;

	if (!d)
		return sbx_fail_errno(err, "%s", what);
	while ((errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dir, de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM)
			rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
		else if (level_add(l, de->d_name) < 0)
			return sbx_fail_errnum(err, ENOMEM, "%s", what);
	}
	if (errno != 0)
		return sbx_fail_errno(err, "%s", what);
	return rc;
}

/* Empties the directory `top` depth first, holding at most three
 * descriptors at any depth (the directory it is in, its listing, and the
 * next one down): it climbs back by "..", checked to be the very directory
 * it came down from, never by one descriptor kept per level. A tree that
 * someone else filled (a script's /out, a caller's inputs 32 deep, an
 * image's layers) could otherwise make one removal hold thousands of
 * sbxd's descriptors, where its budget keeps 16 a worker
 * (server/rpc/rpc_server.c, FD_RESERVE). Nothing moves in the tree while it
 * is removed (the sandbox is gone, the staging is sbxd's), and a ".." that
 * is not the directory it came from stops the removal, not follows it. */
static int remove_contents(int top, const char *what, struct sbx_err *err)
{
	struct level *path = NULL;
	size_t depth = 0, cap = 0;
	struct stat st;
	char *name_in_parent = NULL; /* of the directory cur is, once below top */
	int rc = 0;
	_cleanup_close_ int cur = openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (cur < 0 || fstat(cur, &st) < 0)
		return sbx_fail_errno(err, "%s", what);
	for (;;) {
		struct level *l;

		if (depth == cap) {
			size_t ncap = cap ? 2 * cap : 16;
			struct level *np = realloc(path, ncap * sizeof(*np));

			if (!np) {
				rc = sbx_fail_errnum(err, ENOMEM, "%s", what);
				break;
			}
			memset(np + cap, 0, (ncap - cap) * sizeof(*np));
			path = np;
			cap = ncap;
		}
		l = &path[depth++];
		l->name = name_in_parent;
		name_in_parent = NULL;
		l->dev = st.st_dev;
		l->ino = st.st_ino;
		if (empty_files(cur, l, what, err) < 0)
			rc = -1;
		/* Down into the next subdirectory of the deepest level that has
		 * one left; up (removing each emptied one) until there is one. */
		for (;;) {
			l = &path[depth - 1];
			if (l->next < l->len) {
				const char *name = l->subdirs + l->next;
				mode_t was;
				int sub;

				l->next += strlen(name) + 1;
				if (depth > 4096) {
					rc = sbx_fail(err, "%s: too deep to remove", what);
					continue;
				}
				sub = sbx_open_beneath_owned(cur, name, O_RDONLY | O_DIRECTORY,
							     0700, &was, err);
				if (sub < 0) {
					rc = -1;
					continue;
				}
				if (fchmod(sub, 0700) < 0) {
					/* Writable too, or its entries cannot be
					 * unlinked: not ours otherwise, and then
					 * the unlinkat says so. */
				}
				if (fstat(sub, &st) < 0 || !(name_in_parent = strdup(name))) {
					rc = sbx_fail_errno(err, "%s/%s", what, name);
					close(sub);
					continue;
				}
				close(cur);
				cur = sub;
				break; /* list it */
			}
			if (depth == 1)
				goto done;
			/* l is emptied as far as it goes: up, and remove it. */
			struct stat up;
			int parent =
			    openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

			if (parent < 0 || fstat(parent, &up) < 0 ||
			    up.st_dev != path[depth - 2].dev || up.st_ino != path[depth - 2].ino) {
				if (parent >= 0)
					close(parent);
				rc = sbx_fail(err, "%s: a directory moved while it was removed",
					      what);
				goto done;
			}
			close(cur);
			cur = parent;
			if (unlinkat(cur, l->name, AT_REMOVEDIR) < 0 && errno != ENOENT)
				rc = sbx_fail_errno(err, "remove %s/%s", what, l->name);
			level_clear(l);
			depth--;
		}
	}
done:
	free(name_in_parent);
	for (size_t i = 0; i < cap; i++)
		level_clear(&path[i]);
	free(path);
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
	if (remove_contents(fd, name, err) < 0)
		return -1;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return sbx_fail_errno(err, "remove %s", name);
	return 0;
}
