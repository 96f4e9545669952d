/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's record in its run: finding it, ending it, freeing it. The
 * bookkeeping of an exec's end that the monitor, the watchdog, Teardown
 * and the output streams share (run_exec.c). */
#ifndef SBX_RUN_EXEC_H
#define SBX_RUN_EXEC_H

#include "run.h"

/* A record for argv (at most RUN_EXEC_ARGV_RECORD bytes of it), or NULL. */
struct run_exec *exec_new(char *const *argv, size_t argc);
void exec_free(struct run_exec *e);
/* Records env ("NAME=value", n of them) as the exec's, at most
 * RUN_EXEC_ARGV_RECORD bytes of it, then a marker entry. -1: out of memory. */
int exec_record_env(struct run_exec *e, char *const *env, size_t n);
/* mu held: the exec named "exec-<n>" in r, or NULL. */
struct run_exec *run_find_exec(struct sbx_run *r, const char *exec_id) REQUIRES(r->mu);
/* mu held: the same, or NULL with NOT_FOUND naming the exec and the run. */
struct run_exec *run_find_exec_or_fail(struct sbx_run *r, const char *exec_id,
				       struct sbx_rpc_status *st) REQUIRES(r->mu);
/* mu held: the exec with the helper protocol's id num, or NULL. */
struct run_exec *run_exec_by_num(struct sbx_run *r, uint64_t num) REQUIRES(r->mu);
/* mu held: the exec ended (reason etc. already set); wakes waiters. */
void exec_mark_ended(struct sbx_run *r, struct run_exec *e) REQUIRES(r->mu);
/* mu held: every exec still running ends with `reason`. */
void run_end_execs(struct sbx_run *r, Sbx__V1__ExitReason reason, const char *message)
    REQUIRES(r->mu);
/* mu held: done once it ended and both streams closed. */
void exec_update_done(struct run_exec *e);
const char *exit_reason_name(Sbx__V1__ExitReason r);

#endif
