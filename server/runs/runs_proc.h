/* SPDX-License-Identifier: Apache-2.0 */
/* Starting and ending sbx-helper processes (runs_proc.c). */
#ifndef SBX_RUNS_PROC_H
#define SBX_RUNS_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* posix_spawn with stdin /dev/null, stdout/stderr on the given fds, the
 * nfds of fds at 3, 4, ..., nothing else inherited, in its own process
 * group, with exactly the environment env. */
int proc_spawn(const char *const *argv, char *const *env, const int *fds, size_t nfds, int outfd,
	       int errfd, pid_t *pid, struct sbx_err *err);
/* Waits up to timeout_ms for pid to exit and reaps it: 1 reaped, 0 not yet. */
int proc_reap(pid_t pid, int pidfd, int timeout_ms, int *status);
/* Runs `helper ARGS...` to its end (bounded), returning what it wrote on
 * stdout and stderr together (caller frees). */
int proc_run_helper(const char *helper, char *const *env, const char *const *args, int timeout_ms,
		    char **out, int *status, struct sbx_err *err);
/* SIGKILL to a helper's process group (it and its sandbox's pid 1); only
 * before the helper is reaped, so the group id cannot have been reused. */
void proc_kill_group(pid_t pid);

#endif
