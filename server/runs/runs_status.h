/* SPDX-License-Identifier: Apache-2.0 */
/* Response pieces that describe a run (runs_status.c): every member
 * malloc'd, as the RPC layer frees them with free_unpacked. */
#ifndef SBX_RUNS_STATUS_H
#define SBX_RUNS_STATUS_H

#include "run.h"

Sbx__V1__ExecStatus *exec_status_new(struct run_exec *e); /* mu held */
Sbx__V1__Policy *policy_copy(const SbxPolicy *p);
char *xstrdup(const char *s);

#endif
