/* SPDX-License-Identifier: Apache-2.0 */
/* Starting a program of the host that must get nothing of the helper's:
 * the setuid id mappers (newuidmap, newgidmap). */
#ifndef SBX_SPAWN_STDIO_H
#define SBX_SPAWN_STDIO_H

#include <sys/types.h>

#include "err.h"

/* Starts prog with argv, an empty environment, stdin from /dev/null,
 * stdout and stderr on out_fd, and no other descriptor of ours (whether
 * close-on-exec or not). Returns the child's pid, or -1 with err naming
 * prog when it could not be started (not found, not executable: known
 * here, not as an exit status 127). The caller reaps it. */
pid_t sbx_spawn_stdio(const char *prog, char *const argv[], int out_fd, struct sbx_err *err);

#endif
