/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's directory helpers (server/runs/runs_util.h): parents
 * made beneath a directory, trees removed without following links, even
 * where something made them read-only. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "err.h"
#include "runs_util.h"
#include "tree.h"

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

	close(root);
	rmdir(top);
	return check_done();
}
