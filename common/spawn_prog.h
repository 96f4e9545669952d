/* SPDX-License-Identifier: Apache-2.0 */
/* Starting a program that gets exactly what it is given: sbxd's helpers
 * (server/runs/runs_proc.c) and the helper's setuid id mappers
 * (common/host_ids.c). Not spawn.h: that is the C library's. */
#ifndef SBX_SPAWN_PROG_H
#define SBX_SPAWN_PROG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "err.h"

/* sbxd's helpers get four: control, /out reader, slot lock, slot userns. */
#define SBX_SPAWN_MAX_FDS 4

/* What the program gets; nothing else of ours reaches it. */
struct sbx_spawn_prog {
	const char *const *argv; /* argv[0] is its path */
	char *const *env;	 /* exactly this environment */
	int out_fd, err_fd;	 /* its stdout and stderr; -1: /dev/null */
	const int *fds;		 /* placed at 3, 4, ... in this order */
	size_t nfds;		 /* how many (at most SBX_SPAWN_MAX_FDS) */
	bool own_group;		 /* in a process group of its own */
};

/* Starts it with stdin from /dev/null, the descriptors above and no other
 * (close-on-exec or not), an empty signal mask and every signal's default
 * action. *pid gets the child, which the caller reaps. -1 with err naming
 * argv[0] when it could not be started (not found, not executable: known
 * here, not as an exit status 127). Any of the given fds may be one of
 * 0 to 2 + nfds already. */
int sbx_spawn_prog(const struct sbx_spawn_prog *p, pid_t *pid, struct sbx_err *err);

#endif
