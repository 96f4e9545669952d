/* SPDX-License-Identifier: Apache-2.0 */
/* Small pieces the run manager's files share: names, and directories made
 * and removed without following links. */
#include "runs_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"
#include "tree.h"
#include "util.h"

bool is_sha256_hex(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == 64;
}

/* Makes a directory ours to empty even if something made it read-only. A
 * failure shows as the removal's own error, which names the entry. */
static void make_writable(int fd)
{
	if (fchmod(fd, 0700) < 0) {
		/* not ours: the unlinkat below says so */
	}
}

static int remove_contents(int dirfd, const char *what, int depth, struct sbx_err *err)
{
	_cleanup_close_ int dup_fd = -1;
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int rc = 0;

	if (depth > 4096)
		return sbx_fail(err, "%s: too deep to remove", what);
	dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0 || !(d = fdopendir(dup_fd)))
		return sbx_fail_errno(err, "%s", what);
	dup_fd = -1; /* the DIR's now */
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM)
			rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
		else {
			_cleanup_close_ int sub =
			    sbx_open_beneath(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 0, err);

			if (sub < 0)
				rc = -1;
			else if (make_writable(sub), remove_contents(sub, what, depth + 1, err) < 0)
				rc = -1;
			else if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
				rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
		}
	}
	return rc;
}

int remove_tree_at(int parent, const char *name, struct sbx_err *err)
{
	struct stat st;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "stat %s", name);
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			return sbx_fail_errno(err, "remove %s", name);
		return 0;
	}
	_cleanup_close_ int fd = sbx_open_beneath(parent, name, O_RDONLY | O_DIRECTORY, 0, err);
	if (fd < 0)
		return -1;
	make_writable(fd);
	if (remove_contents(fd, name, 0, err) < 0)
		return -1;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return sbx_fail_errno(err, "remove %s", name);
	return 0;
}

int mkdirs_beneath(int dirfd, const char *path, const char **base, struct sbx_err *err)
{
	char buf[RUN_PATH_MAX + 1];
	_cleanup_close_ int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	char *comp;

	if (cur < 0)
		return sbx_fail_errno(err, "dup");
	snprintf(buf, sizeof(buf), "%s", path);
	comp = buf;
	for (char *slash; (slash = strchr(comp, '/')); comp = slash + 1) {
		int next;

		*slash = '\0';
		if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST)
			return sbx_fail_errno(err, "mkdir %s", buf);
		next = sbx_open_beneath(cur, comp, O_RDONLY | O_DIRECTORY, 0, err);
		if (next < 0)
			return sbx_err_prefix(err, "%s", path);
		close(cur);
		cur = next;
		*slash = '/';
	}
	*base = path + (comp - buf);
	return sbx_steal_fd(cur);
}
