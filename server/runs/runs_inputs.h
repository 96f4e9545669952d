/* SPDX-License-Identifier: Apache-2.0 */
/* The input manifest (runs_inputs.c; PutInput is there too). */
#ifndef SBX_RUNS_INPUTS_H
#define SBX_RUNS_INPUTS_H

#include "rpc_status.h"
#include "run.h"

/* What a manifest's InputFile may take beyond the request's: its mode and
 * arrived_unix_ms (tag and varint each). */
#define INPUT_RECORD_EXTRA 16

/* CreateRun: the manifest checked and copied into r. */
int inputs_from_request(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
			struct sbx_rpc_status *st);
void inputs_free(struct sbx_run *r);
/* What the manifest takes of state_dir once uploaded: every file rounded
 * up to whole blocks (an empty one still takes one), every directory one
 * block; and the inodes of both. */
uint64_t inputs_disk_bytes(const struct sbx_run *r);
uint64_t inputs_inodes(const struct sbx_run *r);
/* Why a mode cannot be an input's (bits beyond 0777), or NULL. */
const char *input_mode_problem(uint32_t mode);
/* mu held: NULL when every input declared at CreateRun is complete (the
 * first exec waits for those), else the first missing path. */
const char *inputs_missing(struct sbx_run *r) REQUIRES(r->mu);

/* PutInput's steps, shared with ImportInputs (runs_import.c). */
/* The checks of one chunk (req; ImportInputs: a whole file's first, offset
 * 0, no data), a new path declared and its disk charged: the input, taken
 * (busy) for this call with the mode it will get, or NULL with st. */
struct run_input *inputs_take(struct sbx_run *r, const Sbx__V1__PutInputRequest *req,
			      uint32_t *mode, struct sbx_rpc_status *st);
/* 0 when path is an input of the run (its manifest's, or declared by an
 * upload since: declarations are never taken back), else -1 with st in the
 * words PutInput refuses a chunk for such a path with. Takes the lock. */
int inputs_require_declared(struct sbx_run *r, const char *path, struct sbx_rpc_status *st);
/* The directories a path makes (the free-space reserve's inodes). */
size_t input_depth(const char *path);
/* A taken input's staging file, new and empty, for writing. */
int inputs_staging_open(struct sbx_run *r, struct run_input *in, struct sbx_err *err);
/* A taken input's verified staging file into /data with mode. */
int inputs_publish(struct sbx_run *r, struct run_input *in, uint32_t mode, struct sbx_err *err);
/* mu held: the input given back. ok: len more bytes received, complete if
 * last (with mode); else its staging file is removed and its upload starts
 * over. */
void inputs_release(struct sbx_run *r, struct run_input *in, bool ok, uint64_t len, bool last,
		    uint32_t mode) REQUIRES(r->mu);

#endif
