/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's stdout and stderr (runs_output.c). */
#ifndef SBX_RUNS_OUTPUT_H
#define SBX_RUNS_OUTPUT_H

#include "run.h"

/* Before the exec is on its run's list: a stream keeping cap bytes (the
 * head and the tail). */
void stream_init(struct run_stream *s, uint64_t cap);
/* The bytes of the one gap between head and tail (ExecStatus.*_dropped). */
uint64_t stream_dropped(const struct run_stream *s);
/* The monitor's half: moves what the pipe holds into the spill file. */
void stream_pump(struct sbx_run *r, struct run_exec *e, int which);
/* mu held: no byte will come any more. */
void stream_close(struct sbx_run *r, struct run_exec *e, int which) REQUIRES(r->mu);

#endif
