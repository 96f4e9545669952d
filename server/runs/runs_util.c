/* SPDX-License-Identifier: Apache-2.0 */
/* Small pieces the run manager's files share: names, and directories made
 * without following links (common/tree_remove.c removes them). */
#include "runs_util.h"

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
