/* SPDX-License-Identifier: Apache-2.0 */
/* Response pieces that describe a run (runs_status.c): every member
 * malloc'd, as the RPC layer frees them with free_unpacked. */
#ifndef SBX_RUNS_STATUS_H
#define SBX_RUNS_STATUS_H

#include "run.h"

Sbx__V1__ExecStatus *exec_status_new(struct run_exec *e); /* mu held */
Sbx__V1__Policy *policy_copy(const SbxPolicy *p);
char *xstrdup(const char *s);
/* Leaves out exec records (*execs, *n, members of the message `whole`)
 * from the middle, the first and the last kept while they fit (then the
 * last goes, then the first), until `whole` takes at most `budget` bytes
 * packed; *not_listed says how many went. Returns what
 * `whole` takes then. Status and the manifest fit their execs by it: a run
 * keeps up to 10,000 execs of 8 KiB of argv and env each, which no
 * max_message_bytes holds. */
size_t exec_records_fit(const ProtobufCMessage *whole, Sbx__V1__ExecStatus ***execs, size_t *n,
			size_t budget, uint32_t *not_listed);
/* What a run's egress destinations may take of an answer (Status and the
 * manifest alike, so both fold the same rows): an eighth of what an answer
 * holds (artifacts_reply_bytes); Status' egress records as much again. The
 * sandbox chooses the hosts it asks for: without this share a few hundred
 * long names would push either answer past max_message_bytes. */
size_t egress_reply_bytes(const struct sbx_runs *runs);

#endif
