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

#endif
