/* SPDX-License-Identifier: Apache-2.0 */
#include "cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cgroup.h"
#include "supervisor.h"
#include "util.h"

/* A run cgroup is stale when the helper whose pid it names is gone. A
 * recycled pid could make a stale one look alive; it is then left for the
 * next cleanup, which is the safe direction. */
static bool is_stale(const char *name)
{
	int pid;
	char hex[16];
	if (sscanf(name, "sbx-%d-%8[0-9a-f]", &pid, hex) != 2 || pid <= 0)
		return false;
	return kill(pid, 0) < 0 && errno == ESRCH;
}

int sbx_cleanup_main(const char *cgroup_root)
{
	struct sbx_cgroup root;
	struct sbx_err err;
	if (sbx_cgroup_open_root(cgroup_root, 0, &root, &err) < 0) {
		/* Each run then starts a systemd scope of its own, which systemd
		 * removes with everything in it once its processes are gone. */
		if (err.errnum == EPERM) {
			printf("cleanup: %s: runs get systemd scopes of their own, which systemd "
			       "removes; nothing to clean\n",
			       err.msg);
			return 0;
		}
		fprintf(stderr, "sbx-helper: cleanup: %s\n", err.msg);
		return 1;
	}
	int dfd = fcntl(root.fd[0], F_DUPFD_CLOEXEC, 3);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		sbx_cgroup_close(&root);
		fprintf(stderr, "sbx-helper: cleanup: cannot list %s\n", root.path);
		return 1;
	}
	int rc = 0;
	unsigned removed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || !is_stale(de->d_name))
			continue;
		if (sbx_sandbox_remove_cgroup(&root, de->d_name, &err) < 0) {
			fprintf(stderr, "sbx-helper: cleanup: %s\n", err.msg);
			rc = 1;
			continue;
		}
		printf("removed %s/%s\n", root.path, de->d_name);
		removed++;
	}
	closedir(d);
	printf("cleanup: %u stale run cgroup%s removed under %s\n", removed,
	       removed == 1 ? "" : "s", root.path);
	sbx_cgroup_close(&root);
	return rc;
}
