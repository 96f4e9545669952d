/* SPDX-License-Identifier: Apache-2.0 */
/* posix_spawn rather than fork: glibc's starts the child with
 * CLONE_VM | CLONE_VFORK, so no copy of the helper's page tables is made
 * and nothing of ours is touched copy-on-write while the child runs up to
 * its execve. Two mappers per sandbox, each forked from a helper with its
 * libraries mapped, cost about 1.5 ms of a 35 ms one-shot on a 2-vCPU VM
 * (docs/dev/benchmarks.md). An exec failure is reported by posix_spawn
 * itself, so the error names it. */
#include "spawn_stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h> /* the C library's: ours is spawn_stdio.h */

pid_t sbx_spawn_stdio(const char *prog, char *const argv[], int out_fd, struct sbx_err *err)
{
	char *const envp[] = {NULL};
	posix_spawn_file_actions_t fa;
	pid_t pid = -1;
	int rc = posix_spawn_file_actions_init(&fa);

	if (rc) {
		errno = rc;
		return sbx_fail_errno(err, "start %s", prog);
	}
	/* dup2 onto 1 and 2 clears close-on-exec there (also when out_fd is
	 * already 1 or 2); everything from 3 up is closed, out_fd included. */
	if (!(rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0)) &&
	    !(rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 1)) &&
	    !(rc = posix_spawn_file_actions_adddup2(&fa, out_fd, 2)) &&
	    !(rc = posix_spawn_file_actions_addclosefrom_np(&fa, 3)))
		rc = posix_spawn(&pid, prog, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		errno = rc;
		return sbx_fail_errno(err, "start %s", prog);
	}
	return pid;
}
