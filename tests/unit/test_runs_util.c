/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's directory helpers (server/runs/runs_util.h): parents
 * made beneath a directory, trees removed without following links, even
 * where something made them read-only. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "err.h"
#include "runs_util.h"
#include "tree.h"

/* name/d/d/.../d, depth levels, each with a file, every 7th with a second
 * subdirectory (a file in it, mode 0500 after), every 11th made 0500:
 * made by descriptors, as a script in /out could, past PATH_MAX. */
static int make_deep(int root, const char *name, int depth)
{
	int cur = -1, next;

	if (mkdirat(root, name, 0700) < 0 || (cur = openat(root, name, O_RDONLY | O_DIRECTORY)) < 0)
		return -1;
	for (int i = 0; i < depth; i++) {
		int f = openat(cur, "f", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

		if (f < 0 || close(f) < 0 || mkdirat(cur, "d", 0700) < 0)
			goto fail;
		if (i % 7 == 0 &&
		    (mkdirat(cur, "e", 0700) < 0 ||
		     close(openat(cur, "e/g", O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) < 0 ||
		     fchmodat(cur, "e", 0500, 0) < 0))
			goto fail;
		if ((next = openat(cur, "d", O_RDONLY | O_DIRECTORY)) < 0)
			goto fail;
		if (i % 11 == 0 && fchmod(cur, 0500) < 0) {
			close(next);
			goto fail;
		}
		close(cur);
		cur = next;
	}
	close(cur);
	return 0;
fail:
	close(cur);
	return -1;
}

static bool exists_at(int dirfd, const char *path)
{
	struct stat st;

	return fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

int main(void)
{
	char top[] = "/tmp/sbx-runs-util-XXXXXX";
	struct sbx_err err;
	const char *base = NULL;
	int root, dir;

	if (!mkdtemp(top) || (root = open(top, O_RDONLY | O_DIRECTORY)) < 0)
		return 2;

	check(is_sha256_hex("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
	      "64 lowercase hex digits are a sha256");
	check(!is_sha256_hex("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"),
	      "upper case is not");
	check(!is_sha256_hex("0123"), "nor 4 digits");

	dir = mkdirs_beneath(root, "a/b/file", &base, &err);
	check(dir >= 0 && base && !strcmp(base, "file"), "mkdirs_beneath gives the last name");
	check(exists_at(root, "a/b") && !exists_at(root, "a/b/file"),
	      "and makes the parents, not the file");
	if (dir >= 0) {
		close(openat(dir, base, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
		close(dir);
	}
	dir = mkdirs_beneath(root, "top-level", &base, &err);
	check(dir >= 0 && !strcmp(base, "top-level"), "a name without parents is fine");
	if (dir >= 0)
		close(dir);

	if (symlinkat("/etc", root, "a/link") < 0 || mkdirat(root, "a/ro", 0700) < 0 ||
	    close(openat(root, "a/ro/kept", O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) < 0 ||
	    fchmodat(root, "a/ro", 0500, 0) < 0)
		return 2;
	dir = mkdirs_beneath(root, "a/link/x", &base, &err);
	check(dir < 0, "mkdirs_beneath does not follow a link: %s", dir < 0 ? err.msg : "");
	if (dir >= 0)
		close(dir);

	check(sbx_remove_tree_at(root, "a", &err) == 0, "remove_tree_at removes a tree with a "
							"read-only directory in it");
	check(!exists_at(root, "a"), "and it is gone");
	check(access("/etc/passwd", F_OK) == 0, "the link's target is untouched");
	check(sbx_remove_tree_at(root, "a", &err) == 0, "removing what is not there is fine");

	/* 2100 levels (more than PATH_MAX allows by name) under a limit of
	 * 24 descriptors: the removal holds a few at any depth, where one
	 * per level was 4200 (FD_RESERVE keeps a worker 16). */
	struct rlimit was, low = {.rlim_cur = 24, .rlim_max = 0};
	if (make_deep(root, "deep", 2100) < 0 || getrlimit(RLIMIT_NOFILE, &was) < 0)
		return 2;
	low.rlim_max = was.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &low) < 0)
		return 2;
	sbx_err_clear(&err);
	check(sbx_remove_tree_at(root, "deep", &err) == 0,
	      "a tree 2100 deep is removed within 24 descriptors: %s", err.msg);
	setrlimit(RLIMIT_NOFILE, &was);
	check(!exists_at(root, "deep"), "and it is gone, read-only levels and all");

	close(root);
	rmdir(top);
	return check_done();
}
