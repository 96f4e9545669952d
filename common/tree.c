#include "tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

#define BENEATH_RESOLVE                                                                            \
	(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

int sbx_open_beneath(int dirfd, const char *path, int flags, mode_t mode, struct sbx_err *err)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
		.mode = (flags & O_CREAT) ? mode : 0,
		.resolve = BENEATH_RESOLVE,
	};
	int fd;
	do
		fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && errno == EAGAIN);
	if (fd < 0)
		return sbx_fail_errno(err, "open %s", path);
	return fd;
}

static int copy_file(int src, int dst, uint64_t *bytes, const char *rel, struct sbx_err *err)
{
	for (;;) {
		ssize_t n = sendfile(dst, src, NULL, 1 << 30);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "copy %s", rel);
		if (n == 0)
			return 0;
		*bytes += (uint64_t)n;
	}
}

struct walk {
	struct sbx_tree_stats *stats;
	void (*on_skip)(const char *, const char *);
	struct sbx_err *err;
};

static const char *kind_name(mode_t m)
{
	if (S_ISLNK(m))
		return "symlink";
	if (S_ISFIFO(m))
		return "fifo";
	if (S_ISSOCK(m))
		return "socket";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "device";
	return "special file";
}

static int copy_dir(int src_dir, int dst_dir, const char *prefix, int depth, struct walk *w);

static int copy_entry(int src_dir, int dst_dir, const char *name, const char *rel, int depth,
		      struct walk *w)
{
	struct stat st;
	if (fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return sbx_fail_errno(w->err, "stat %s", rel);
	if (S_ISDIR(st.st_mode)) {
		if (mkdirat(dst_dir, name, 0755) < 0 && errno != EEXIST)
			return sbx_fail_errno(w->err, "mkdir %s", rel);
		_cleanup_close_ int s = sbx_open_beneath(src_dir, name, O_RDONLY | O_DIRECTORY, 0,
							 w->err);
		if (s < 0)
			return -1;
		_cleanup_close_ int d = sbx_open_beneath(dst_dir, name, O_RDONLY | O_DIRECTORY, 0,
							 w->err);
		if (d < 0)
			return -1;
		w->stats->dirs++;
		return copy_dir(s, d, rel, depth + 1, w);
	}
	if (!S_ISREG(st.st_mode)) {
		w->stats->skipped++;
		if (w->on_skip)
			w->on_skip(rel, kind_name(st.st_mode));
		return 0;
	}
	/* O_NONBLOCK: if the entry was swapped for a FIFO since fstatat, the
	 * open cannot hang; the fstat below then refuses it. */
	_cleanup_close_ int s = sbx_open_beneath(src_dir, name, O_RDONLY | O_NONBLOCK, 0, w->err);
	if (s < 0)
		return -1;
	struct stat sst;
	if (fstat(s, &sst) < 0 || !S_ISREG(sst.st_mode)) {
		w->stats->skipped++;
		if (w->on_skip)
			w->on_skip(rel, "changed while copying");
		return 0;
	}
	_cleanup_close_ int d = sbx_open_beneath(dst_dir, name, O_WRONLY | O_CREAT | O_TRUNC,
						 sst.st_mode & 0755, w->err);
	if (d < 0)
		return -1;
	w->stats->files++;
	return copy_file(s, d, &w->stats->bytes, rel, w->err);
}

static int copy_dir(int src_dir, int dst_dir, const char *prefix, int depth, struct walk *w)
{
	if (depth > SBX_TREE_MAX_DEPTH)
		return sbx_fail(w->err, "%s: deeper than %d levels", prefix, SBX_TREE_MAX_DEPTH);
	int dup_fd = fcntl(src_dir, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return sbx_fail_errno(w->err, "dup");
	DIR *d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return sbx_fail_errno(w->err, "opendir %s", prefix);
	}
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char rel[4096];
		snprintf(rel, sizeof(rel), "%s/%s", prefix, de->d_name);
		rc = copy_entry(src_dir, dst_dir, de->d_name, rel, depth, w);
	}
	closedir(d);
	return rc;
}

int sbx_tree_copy(int src_dirfd, int dst_dirfd, struct sbx_tree_stats *stats,
		  void (*on_skip)(const char *, const char *), struct sbx_err *err)
{
	memset(stats, 0, sizeof(*stats));
	struct walk w = {.stats = stats, .on_skip = on_skip, .err = err};
	return copy_dir(src_dirfd, dst_dirfd, "", 0, &w);
}
