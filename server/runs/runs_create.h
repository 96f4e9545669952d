/* SPDX-License-Identifier: Apache-2.0 */
/* The steps of CreateRun (runs_create.c) that the warm pool (runs_pool.c)
 * builds its members with: the same parser, checks and helper start as a
 * cold CreateRun, so a member is the very sandbox a cold run of its policy
 * gets. */
#ifndef SBX_RUNS_CREATE_H
#define SBX_RUNS_CREATE_H

#include <stdint.h>

#include "rpc_status.h"
#include "run.h"
#include "runs_manager.h"

/* r's policy from a policy document, as a CreateRun's: parsed, its lease
 * defaulted, held to limits_max, its image resolved and held, its digest. */
int create_prepare(struct sbx_run *r, const char *json, const struct runs_live *live,
		   struct sbx_rpc_status *st);
/* r's run directory and its sandbox, up to the helper's Ready: the warm
 * pool's member, whose first exec's init is made before it (--prepare-first). */
int create_build(struct sbx_run *r, uint64_t run_files, struct sbx_rpc_status *st);
/* Ends r's sandbox (the helper, its egress place), removes its directory
 * and lets go of its image: what create_build (or a CreateRun) made. */
void create_destroy_sandbox(struct sbx_run *r);

#endif
