/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's stdout and stderr (runs_output.c). */
#ifndef SBX_RUNS_OUTPUT_H
#define SBX_RUNS_OUTPUT_H

#include "run.h"

/* The monitor's half: moves what the pipe holds into the spill file. */
void stream_pump(struct sbx_run *r, struct run_exec *e, int which);
/* mu held: no byte will come any more. */
void stream_close(struct sbx_run *r, struct run_exec *e, int which) REQUIRES(r->mu);

#endif
