/* SPDX-License-Identifier: Apache-2.0 */
/* The warm pool (runs_pool.c; docs/operator/pool.md): sandboxes built
 * ahead from the config's policies (`pool`), so that a CreateRun whose
 * effective policy has the same digest (its *shape*: image, limits,
 * mounts, network, allowlist: everything the sandbox is built from) gets
 * one at once. What is per run (the identity, labels, inputs uploaded into
 * /data after the create, the egress proxy's place, env per exec) is
 * applied at the claim, as a cold CreateRun applies it after Ready; a run
 * whose /data is the caller's own directory is always cold.
 *
 * A member is never shared and never reused: claimed, it is the run's and
 * is torn down with it; a claim that fails destroys it. Members hold run
 * slots and capacity as runs do (runs->pool_members, pool_cpu_millis,
 * pool_memory_mb, under the registry lock), are built one at a time by
 * the pool's own thread through a token bucket (never in a caller's
 * thread), rebuilt past their age, and destroyed and counted when they
 * fail to become ready or die waiting.
 *
 * Locks: the pool's own (a leaf but for the registry lock, which it may
 * take inside: never the other way round). */
#ifndef SBX_RUNS_POOL_H
#define SBX_RUNS_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "err.h"
#include "rpc_status.h"
#include "run.h"
#include "sbx/v1/sandbox.pb-c.h"

struct sbx_runs;

/* The shapes of cfg (nothing runs yet). */
int pool_init(struct sbx_runs *runs, const struct sbx_config *cfg, struct sbx_err *err);
/* Starts the builder (once the egress proxy is known: an allowlist's
 * shape needs it); nothing is spent while every size is 0. */
void pool_start(struct sbx_runs *runs);
/* New shapes from a reloaded config: members of a shape whose policy or
 * name went are destroyed. True when something changed. */
bool pool_reload(struct sbx_runs *runs, const struct sbx_config *cfg);
/* No more builds; every member destroyed (idempotent). */
void pool_stop(struct sbx_runs *runs);
void pool_free(struct sbx_runs *runs);

/* r (validated, its policy digest set, not registered): a ready member
 * of r's shape, with r's per-run parts moved into it (launch WARM; r is
 * released), or r itself (cold). */
struct sbx_run *pool_claim(struct sbx_runs *runs, struct sbx_run *r);
/* A claimed member whose CreateRun failed before it was registered:
 * destroyed by the pool's thread. */
void pool_discard(struct sbx_run *m);
/* The claimed member is the run's now: its pid 1 restarts its run clock. */
int pool_start_run(struct sbx_run *r, struct sbx_rpc_status *st);
/* Registry lock held: r's slot and capacity leave the pool's count (a
 * claim, or a member destroyed). */
void pool_unreserve_locked(struct sbx_run *r);
/* Health's rows, one per shape; the counts and the error for operators only. */
int pool_health(struct sbx_runs *runs, bool operator_, Sbx__V1__HealthResponse *h);

#endif
