/* SPDX-License-Identifier: Apache-2.0 */
/* Idempotent creates (runs_idem.c): a CreateRun with an idempotency_key
 * the same identity already used answers with that key's run instead of
 * making another. The key lives on its run for the run's life (registry
 * lock) and, once the run is torn down, in the manager's idem_gone records
 * for RUNS_IDEM_GONE_MS (docs/reference/calls.md, Idempotent creates). */
#ifndef SBX_RUNS_IDEM_H
#define SBX_RUNS_IDEM_H

#include <stdbool.h>
#include <stdint.h>

#include "rpc_status.h"
#include "sbx/v1/sandbox.pb-c.h"

struct sbx_runs;
struct sbx_run;

/* CreateRuns at once waiting for one STARTING run of their key; a further
 * one is answered UNAVAILABLE at once (each holds a worker). */
#define RUNS_IDEM_WAITERS 4
/* How long a repeat waits for its key's run to leave STARTING: past the
 * helper's start-up timeout, so the first create has its answer by then. */
#define RUNS_IDEM_WAIT_MS 20000

/* key: 1..RUN_IDEM_KEY_MAX bytes of [A-Za-z0-9._:-]; INVALID_ARGUMENT
 * naming idempotency_key otherwise. */
int idem_key_check(const char *key, struct sbx_rpc_status *st);
/* The sha256 of the request without its idempotency_key: a repeat must
 * send the same request (the same bytes, as a retry does). */
int idem_request_digest(const Sbx__V1__CreateRunRequest *req, uint8_t digest[32],
			struct sbx_rpc_status *st);
/* What identity's key already stands for: 0 nothing (a new create), 1 a
 * run (*first, referenced; its CreateRunResponse is the answer), -1 st:
 * INVALID_ARGUMENT for a different request, FAILED_PRECONDITION for a run
 * torn down, UNAVAILABLE for one still starting after RUNS_IDEM_WAIT_MS
 * (or with RUNS_IDEM_WAITERS waiting already). Waits on the registry's
 * condvar, never under a run's lock. */
int idem_repeat(struct sbx_runs *runs, const char *identity, const char *key,
		const uint8_t digest[32], struct sbx_run **first, struct sbx_rpc_status *st);
/* Registry lock held: whether identity's key is taken (by a registered
 * run or a record of a torn-down one); run_register then defers to
 * idem_repeat. */
bool idem_taken_locked(struct sbx_runs *runs, const char *identity, const char *key);
/* Registry lock held, r leaving the registry: its key is remembered
 * unless its CreateRun failed (STARTING: no run was made, a retry may
 * make one). */
void idem_remember_locked(struct sbx_run *r);

#endif
