/* SPDX-License-Identifier: Apache-2.0 */
/* The audit log: one JSON object per line, each with time, event, run id,
 * identity and policy digest, so an operator can answer "who ran what". */
#ifndef SBX_AUDIT_H
#define SBX_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* NULL path: stderr. Thread-safe; lines are written whole (O_APPEND) or
 * not at all. The file is made 0600, or 0640 with group `group` (a name or
 * a number; NULL: none); an existing one more open than that, or not ours,
 * is renamed aside (said on stderr) and made anew. A link or a file that is
 * not regular is refused. */
int sbx_audit_open(const char *path, const char *group, struct sbx_err *err);
/* Lines lost (not written: the disk was full) since start. */
unsigned long sbx_audit_lost(void);
void sbx_audit_close(void);
/* Each identity's lines may take bytes_per_s on average (64 s of it at
 * once); lines past that are dropped and counted in an audit_lines_dropped
 * line. 0: no bound. Lines without an identity are never dropped. */
void sbx_audit_set_identity_rate(uint64_t bytes_per_s);
/* The rate set (0: none). */
uint64_t sbx_audit_identity_rate(void);

/* event: "run_created", "exec_started", "exec_ended", "artifact_fetched",
 * "teardown", "auth_failure", "run_expired", "startup_cleanup", ... `fields`
 * is NULL or a jansson object (json_t *) whose members are added; the call
 * takes its reference. */
void sbx_audit(const char *event, const char *run_id, const char *identity,
	       const char *policy_digest, void *fields);
/* The same line, never dropped by the identity's rate (it still names the
 * identity). For records that must all be kept, whose number something
 * else bounds: the egress proxy's decision and close lines, one each per
 * connection, bounded by the run's and the identity's accept budgets and
 * by the identity's budget of egress line bytes, which the proxy charges
 * with the length returned (the line's bytes, newline included; 0 when out
 * of memory). */
size_t sbx_audit_exempt(const char *event, const char *run_id, const char *identity,
			const char *policy_digest, void *fields);

#endif
