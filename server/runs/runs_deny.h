/* SPDX-License-Identifier: Apache-2.0 */
/* Egress deny, said loudly: an exec's deny resolver (runs_deny.c). All of
 * it runs on the run's monitor thread. */
#ifndef SBX_RUNS_DENY_H
#define SBX_RUNS_DENY_H

#include <stdbool.h>
#include <stdint.h>

#include "run.h"

/* mu held: fd and watch (from ExecStarted of an exec of a deny run)
 * become e's deny resolver and connect watch if they are ones (a UDP
 * socket bound to 127.0.0.1:53, a packet socket) and e has none yet;
 * false: the caller closes both. */
bool deny_take(struct sbx_run *r, struct run_exec *e, int fd, int watch) REQUIRES(r->mu);
/* mu held: whether to poll e's resolver now; when its budget is spent,
 * false, with *next (monotonic ms) lowered to when it refills. */
bool deny_watch(struct run_exec *e, int64_t now, int64_t *next);
/* mu not held: answers and records what waits on e's resolver, within its
 * budget; the first attempt writes the notice into the exec's stderr. */
void deny_pump(struct sbx_run *r, struct run_exec *e);
/* mu not held: records what waits on e's connect watch, within the same
 * budget; the first attempt writes the notice. */
void watch_pump(struct sbx_run *r, struct run_exec *e);
/* mu not held: what e's resolver and connect watch hold now (within the
 * budget), read before the exec's end is recorded: a refused connect is
 * in the watch before the command exits, so its ExecStatus, its audit line
 * and its stderr's notice have it however late the monitor came to it. */
void deny_drain(struct sbx_run *r, struct run_exec *e);
/* mu held: the exec is done; its resolver and connect watch leave it, in
 * fds[0] and fds[1] (-1 where none), for the caller to close once the lock
 * is let go: the last close of a packet socket waits for an RCU grace
 * period (synchronize_net, milliseconds on a loaded host), and an Exec of
 * the same run would wait on the lock all that while. */
void deny_release(struct run_exec *e, int fds[2]);
/* The audit fields of e's attempts (a json_t object), NULL if none. */
void *deny_audit(const struct run_exec *e);

#endif
