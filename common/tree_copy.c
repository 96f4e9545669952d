/* SPDX-License-Identifier: Apache-2.0 */
/* Copying a tree someone else controls (a sandbox's /out) to the host. */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inode_set.h"
#include "tree.h"
#include "util.h"

struct walk {
	struct sbx_tree_stats *stats;
	void (*on_skip)(const char *, const char *);
	uint64_t max_bytes;
	struct sbx_inode_set seen; /* files with more than one link, copied once */
};

static void skip(struct walk *w, const char *rel, const char *why)
{
	w->stats->skipped++;
	if (w->on_skip)
		w->on_skip(rel, why);
}

static const char *kind_name(mode_t m)
{
	if (S_ISLNK(m))
		return "symlink not copied";
	if (S_ISFIFO(m))
		return "fifo not copied";
	if (S_ISSOCK(m))
		return "socket not copied";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "device not copied";
	return "special file not copied";
}

/* A file with several names is copied under the first one only: linking
 * one file many times would otherwise multiply /out on the host's disk. */
static bool seen_before(struct walk *w, const struct stat *st)
{
	if (st->st_nlink < 2)
		return false;
	if (sbx_inode_get(&w->seen, st->st_dev, st->st_ino) >= 0)
		return true;
	/* Cannot track it: do not copy it twice. */
	return !sbx_inode_put(&w->seen, st->st_dev, st->st_ino, 0);
}

static int copy_bytes(int src, int dst, uint64_t limit, uint64_t *copied)
{
	*copied = 0;
	while (*copied < limit) {
		ssize_t n =
		    sendfile(dst, src, NULL,
			     (size_t)(limit - *copied < (1u << 30) ? limit - *copied : (1u << 30)));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		*copied += (uint64_t)n;
	}
	return 0;
}

static void copy_file(int src_dir, int dst_dir, const char *name, const char *rel, struct walk *w)
{
	struct sbx_err err;
	/* O_NONBLOCK: an entry swapped for a FIFO since it was listed cannot
	 * hang the copy; the fstat below then refuses it. */
	_cleanup_close_ int s = sbx_open_beneath(src_dir, name, O_RDONLY | O_NONBLOCK, 0, &err);
	struct stat st;
	if (s < 0 || fstat(s, &st) < 0) {
		skip(w, rel, s < 0 ? err.msg : "cannot stat");
		return;
	}
	if (!S_ISREG(st.st_mode)) {
		skip(w, rel, "changed while copying; not copied");
		return;
	}
	if (seen_before(w, &st)) {
		skip(w, rel, "hard link to a file already copied; not copied again");
		return;
	}
	if (w->max_bytes && w->stats->bytes + (uint64_t)st.st_size > w->max_bytes) {
		skip(w, rel,
		     "would take the copy past out_mb (sparse or linked files); not copied");
		return;
	}
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)getpid();
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".sbx-copy-%08x", rnd);
	_cleanup_close_ int d =
	    sbx_open_beneath(dst_dir, tmp, O_WRONLY | O_CREAT | O_EXCL, st.st_mode & 0755, &err);
	if (d < 0) {
		skip(w, rel, err.msg);
		return;
	}
	uint64_t copied;
	uint64_t limit = w->max_bytes ? w->max_bytes - w->stats->bytes : UINT64_MAX;
	if (copy_bytes(s, d, limit, &copied) < 0 || renameat(dst_dir, tmp, dst_dir, name) < 0) {
		char why[128];
		snprintf(why, sizeof(why), "copy failed: %s", strerror(errno));
		unlinkat(dst_dir, tmp, 0);
		skip(w, rel, why);
		return;
	}
	w->stats->files++;
	w->stats->bytes += copied;
}

static int copy_dir(int src_dir, int dst_dir, const char *prefix, int depth, struct walk *w,
		    struct sbx_err *err);

static void copy_entry(int src_dir, int dst_dir, const char *name, const char *rel, int depth,
		       struct walk *w)
{
	struct stat st;
	if (fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		skip(w, rel, "cannot stat; not copied");
		return;
	}
	if (S_ISREG(st.st_mode)) {
		copy_file(src_dir, dst_dir, name, rel, w);
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		skip(w, rel, kind_name(st.st_mode));
		return;
	}
	struct sbx_err err;
	if (mkdirat(dst_dir, name, 0755) < 0 && errno != EEXIST) {
		skip(w, rel, "cannot create the directory; not copied");
		return;
	}
	_cleanup_close_ int s = sbx_open_beneath(src_dir, name, O_RDONLY | O_DIRECTORY, 0, &err);
	/* An existing destination that is a link (planted there) is refused. */
	_cleanup_close_ int d =
	    s < 0 ? -1 : sbx_open_beneath(dst_dir, name, O_RDONLY | O_DIRECTORY, 0, &err);
	if (s < 0 || d < 0) {
		skip(w, rel, err.msg);
		return;
	}
	w->stats->dirs++;
	if (copy_dir(s, d, rel, depth + 1, w, &err) < 0)
		skip(w, rel, err.msg);
}

static int copy_dir(int src_dir, int dst_dir, const char *prefix, int depth, struct walk *w,
		    struct sbx_err *err)
{
	if (depth > SBX_TREE_MAX_DEPTH)
		return sbx_fail(err, "deeper than %d levels; not copied", SBX_TREE_MAX_DEPTH);
	int dup_fd = fcntl(src_dir, F_DUPFD_CLOEXEC, 3);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return sbx_fail_errno(err, "cannot read directory");
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char rel[4096];
		snprintf(rel, sizeof(rel), "%s/%s", prefix, de->d_name);
		copy_entry(src_dir, dst_dir, de->d_name, rel, depth, w);
	}
	closedir(d);
	return 0;
}

int sbx_tree_copy(int src_dirfd, int dst_dirfd, uint64_t max_bytes, struct sbx_tree_stats *stats,
		  void (*on_skip)(const char *, const char *), struct sbx_err *err)
{
	memset(stats, 0, sizeof(*stats));
	struct walk w = {.stats = stats, .on_skip = on_skip, .max_bytes = max_bytes};
	int rc = copy_dir(src_dirfd, dst_dirfd, "", 0, &w, err);
	sbx_inode_set_free(&w.seen);
	return rc;
}
