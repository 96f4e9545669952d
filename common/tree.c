/* SPDX-License-Identifier: Apache-2.0 */
#include "tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "text.h"
#include "util.h"

#define BENEATH_RESOLVE                                                                            \
	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

/* The same guarantees without openat2 (Linux < 5.6, or valgrind, which
 * does not know the call): walk the path one component at a time, never
 * following a link (O_NOFOLLOW on the last, O_DIRECTORY|O_NOFOLLOW on the
 * rest refuses a link to a directory), never going up ("." and ".." are
 * refused outright) and never leaving the file system of dirfd. */
int sbx_open_beneath_walk(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err)
{
	struct stat top;
	if (fstat(dirfd, &top) < 0)
		return sbx_fail_errno(err, "open %s", path);
	char copy[PATH_MAX];
	if (snprintf(copy, sizeof(copy), "%s", path) >= (int)sizeof(copy) || !copy[0] ||
	    copy[0] == '/')
		return sbx_fail_errnum(err, EXDEV, "open %s", path);
	int cur = dirfd;
	char *save, *comp = strtok_r(copy, "/", &save);
	while (comp) {
		char *next = strtok_r(NULL, "/", &save);
		if (!strcmp(comp, ".") || !strcmp(comp, "..")) {
			if (cur != dirfd)
				close(cur);
			return sbx_fail_errnum(err, EXDEV, "open %s", path);
		}
		int fd = next ? openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			      : openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		int saved = errno;
		if (cur != dirfd)
			close(cur);
		if (fd < 0)
			return sbx_fail_errnum(err, saved == ENOTDIR ? ELOOP : saved, "open %s",
					       path);
		struct stat st;
		if (fstat(fd, &st) < 0 || st.st_dev != top.st_dev) {
			close(fd);
			return sbx_fail_errnum(err, EXDEV, "open %s", path);
		}
		cur = fd;
		comp = next;
	}
	return cur;
}

int sbx_open_beneath(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
	    .mode = (flags & O_CREAT) ? mode : 0,
	    .resolve = BENEATH_RESOLVE,
	};
	int fd, tries = 0;

	/* openat2 answers EAGAIN when it cannot rule out a race with a rename
	 * (worth one more try), but also for every O_NONBLOCK open of a file
	 * someone holds a lease on (F_SETLEASE), for as long as the lease holder
	 * likes: a few tries, never a spin. */
	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN && ++tries < 3);
	if (fd < 0 && errno == ENOSYS)
		return sbx_open_beneath_walk(dirfd, path, flags, (flags & O_CREAT) ? mode : 0, err);
	if (fd < 0 && errno == EAGAIN)
		return sbx_fail_errnum(err, EAGAIN, "open %s: busy (a lease is held on it)", path);
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", path);
	return fd;
}

int sbx_open_no_symlinks(const char *path, int flags, struct sbx_err *err)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
	    .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd, tries = 0;

	do /* EAGAIN: a rename raced the lookup, worth a few more tries */
		fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN && ++tries < 3);
	/* Without openat2 only the last component is checked. */
	if (fd < 0 && errno == ENOSYS)
		fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOTDIR && (flags & O_DIRECTORY)) {
		/* O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR: say ELOOP
		 * when the last component is the link. */
		struct stat st;
		how.flags = O_PATH | O_CLOEXEC | O_NOFOLLOW;
		_cleanup_close_ int lnk =
		    (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
		errno = lnk >= 0 && fstat(lnk, &st) == 0 && S_ISLNK(st.st_mode) ? ELOOP : ENOTDIR;
	}
	if (fd < 0)
		return sbx_fail_errno(err, "%s", path);
	return fd;
}

/* ---- listing with sizes, modes and digests ---- */

struct list_walk {
	const struct sbx_tree_src *src;
	uint64_t max;
	uint64_t seen;
	struct sbx_tree_skips *skipped;
	bool stopped;
	sbx_tree_file_fn fn;
	void *arg;
	struct sbx_err *err;
};

/* Open failures a hostile tree can cause on purpose (a mode of 000, an
 * entry swapped for a link or removed since it was listed): the entry is
 * skipped, the listing goes on. */
static bool skippable(int errnum)
{
	return errnum == EACCES || errnum == EPERM || errnum == ELOOP || errnum == ENOENT ||
	       errnum == ENOTDIR || errnum == EXDEV || errnum == ENXIO;
}

static int list_dir(int dir, const char *prefix, int depth, struct list_walk *w);

int sbx_tree_src_open(const struct sbx_tree_src *src, const char *rel, int flags,
		      struct sbx_err *err)
{
	if (src->open)
		return src->open(src->ctx, rel, flags, err);
	return sbx_open_beneath(src->top, rel[0] ? rel : ".", flags, 0, err);
}

/* `rel` from the top, `type` what readdir said. Nothing here looks at the
 * entry by name from this process but the open: through a reader, a stat
 * by name would need the search right on its directory that only the
 * reader has. */
static int list_entry(const char *rel, unsigned char type, int depth, struct list_walk *w)
{
	struct stat st;
	int fd;

	if (type != DT_DIR && type != DT_REG && type != DT_UNKNOWN) {
		w->skipped->other++;
		return 0;
	}
	if (type == DT_DIR && depth >= SBX_TREE_MAX_DEPTH) {
		w->skipped->other++;
		return 0;
	}
	/* O_NONBLOCK: an entry swapped for a FIFO since readdir cannot hang
	 * the open; the fstat below notices. */
	fd = sbx_tree_src_open(
	    w->src, rel, type == DT_DIR ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK, w->err);
	if (fd < 0 && w->err->errnum == EAGAIN) {
		w->skipped->busy++;
		return 0;
	}
	if (fd < 0) {
		if (!skippable(w->err->errnum))
			return sbx_err_prefix(w->err, "%s", rel);
		w->skipped->other++;
		return 0;
	}
	if (fstat(fd, &st) < 0) {
		close(fd);
		return sbx_fail_errno(w->err, "stat %s", rel);
	}
	if (S_ISDIR(st.st_mode)) {
		if (depth >= SBX_TREE_MAX_DEPTH) {
			close(fd);
			w->skipped->other++;
			return 0;
		}
		return list_dir(fd, rel, depth + 1, w);
	}
	int rc = 0;
	if (S_ISREG(st.st_mode))
		rc = w->fn(rel, fd, &st, w->arg, w->err);
	else
		w->skipped->other++;
	close(fd);
	return rc;
}

/* Subdirectories of one directory, listed once it is closed: "<d_type><name>\0"
 * each. */
struct later {
	char *buf;
	size_t len, cap;
};

static int later_add(struct later *l, unsigned char type, const char *name)
{
	size_t need = strlen(name) + 2;

	if (l->len + need > l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 4096;
		char *b;

		while (cap < l->len + need)
			cap *= 2;
		if (!(b = realloc(l->buf, cap)))
			return -1;
		l->buf = b;
		l->cap = cap;
	}
	l->buf[l->len] = (char)type;
	memcpy(l->buf + l->len + 1, name, need - 1);
	l->len += need;
	return 0;
}

/* Lists `dir`, a fresh open of its own (never a dup: a dup shares the
 * directory offset with every other reader), which it takes. Its
 * subdirectories are walked after it is closed (entries are opened by
 * their path from the top): a walk holds one directory open at a time,
 * not one per level (64 deep were 66 of sbxd's descriptors, where its
 * budget keeps 16 a worker: server/rpc/rpc_server.c, FD_RESERVE). */
static int list_dir(int dir, const char *prefix, int depth, struct list_walk *w)
{
	DIR *d = fdopendir(dir);
	struct dirent *de;
	struct later later = {0};
	int rc = 0;

	if (!d) {
		close(dir);
		return sbx_fail_errno(w->err, "opendir %s", prefix[0] ? prefix : ".");
	}
	while (rc == 0 && !w->stopped && (de = readdir(d))) {
		char rel[PATH_MAX];
		int len;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (w->seen >= w->max) {
			w->stopped = true;
			break;
		}
		w->seen++;
		/* A name that is not UTF-8 cannot travel in a proto3 string:
		 * skipped (with all beneath it), counted, never served. */
		if (!sbx_utf8_valid(de->d_name)) {
			w->skipped->bad_names++;
			continue;
		}
		len =
		    snprintf(rel, sizeof(rel), "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
		if (len < 0 || (size_t)len >= sizeof(rel)) {
			w->skipped->other++;
			continue;
		}
		if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) {
			if (later_add(&later, de->d_type, de->d_name) < 0)
				rc = sbx_fail_errnum(w->err, ENOMEM, "%s", rel);
			continue;
		}
		rc = list_entry(rel, de->d_type, depth, w);
	}
	closedir(d);
	for (size_t at = 0; rc == 0 && at < later.len;) {
		const char *name = later.buf + at + 1;
		char rel[PATH_MAX];

		snprintf(rel, sizeof(rel), "%s%s%s", prefix, prefix[0] ? "/" : "", name);
		rc = list_entry(rel, (unsigned char)later.buf[at], depth, w);
		at += strlen(name) + 2;
	}
	free(later.buf);
	return rc;
}

int sbx_tree_list(const struct sbx_tree_src *src, uint64_t max_entries, sbx_tree_file_fn fn,
		  void *arg, struct sbx_tree_skips *skipped, struct sbx_err *err)
{
	struct list_walk w = {
	    .src = src,
	    .max = max_entries,
	    .skipped = skipped,
	    .fn = fn,
	    .arg = arg,
	    .err = err,
	};

	*skipped = (struct sbx_tree_skips){0};
	int top = sbx_tree_src_open(src, "", O_RDONLY | O_DIRECTORY, err);
	if (top < 0)
		return sbx_err_prefix(err, "open /out");
	if (list_dir(top, "", 0, &w) < 0)
		return -1;
	return w.stopped ? 1 : 0;
}
