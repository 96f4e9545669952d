/* SPDX-License-Identifier: Apache-2.0 */
/* Response pieces that describe a run (runs_status.c): every member
 * malloc'd, as the RPC layer frees them with free_unpacked. */
#ifndef SBX_RUNS_STATUS_H
#define SBX_RUNS_STATUS_H

#include "run.h"

Sbx__V1__ExecStatus *exec_status_new(struct run_exec *e); /* mu held */
Sbx__V1__Policy *policy_copy(const SbxPolicy *p);
char *xstrdup(const char *s);
/* What a run's egress destinations may take of an answer (Status and the
 * manifest alike, so both fold the same rows): an eighth of what an answer
 * holds (artifacts_reply_bytes); Status' egress records as much again. The
 * sandbox chooses the hosts it asks for: without this share a few hundred
 * long names would push either answer past max_message_bytes. */
size_t egress_reply_bytes(const struct sbx_runs *runs);

#endif
