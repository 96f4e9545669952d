/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's streamed stdin (runs_stdin.c). */
#ifndef SBX_RUNS_STDIN_H
#define SBX_RUNS_STDIN_H

#include "run.h"

/* The most a streamed stdin's pipe holds: what WriteStdin can take while
 * the command does not read. */
#define RUN_STDIN_PIPE (1 << 20)
/* The enlarged stdin pipes of the host together (and at most half of
 * fs.pipe-user-pages-soft); past it a pipe keeps the kernel's default size. */
#define RUN_STDIN_HOST_BYTES (64u << 20)

/* A pipe for e's streamed stdin: fds[0] for the command, fds[1] (ours)
 * never blocks. */
int stdin_stream_pipe(struct run_exec *e, int fds[2], struct sbx_err *err);
/* mu held (or the exec not yet on its run's list): no byte more, and the
 * pipe's budget freed (the exec ended: nobody reads it any more). */
void stdin_close(struct run_exec *e);

#endif
