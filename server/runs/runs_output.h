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
/* The monitor's half: moves what the pipe holds into the spill file; true
 * when it read the pipe's end, which stream_finish then records. */
bool stream_pump(struct sbx_run *r, struct run_exec *e, int which);
/* The monitor, mu not held, after the round's control messages (an exec's
 * ExecStarted hands over its resolver and watch): the end of a stream whose
 * pipe ended. For stderr the exec's resolver and watch are drained first,
 * so that the notice of an attempt made before the command's last byte
 * comes before the end. */
void stream_finish(struct sbx_run *r, struct run_exec *e, int which);
/* The monitor, mu not held: sbxd's own line (no newline in it) into the
 * exec's stream `which`, after what the command wrote so far and on a line
 * of its own (a newline first when the command's last line is open). It
 * counts as the stream's bytes, like the command's. Nothing once the
 * stream is closed. */
void stream_note(struct sbx_run *r, struct run_exec *e, int which, const char *line);
/* mu held: no byte will come any more. */
void stream_close(struct sbx_run *r, struct run_exec *e, int which) REQUIRES(r->mu);

#endif
