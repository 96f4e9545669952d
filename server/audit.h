/* The audit log: one JSON object per line, each with time, event, run id,
 * identity and policy digest, so an operator can answer "who ran what". */
#ifndef SBX_AUDIT_H
#define SBX_AUDIT_H

#include "err.h"

/* NULL path: stderr. Thread-safe; lines are written whole (O_APPEND) or
 * not at all. The file is made (or made again) 0600, or 0640 with group
 * `group` (a name or a number; NULL: none). */
int sbx_audit_open(const char *path, const char *group, struct sbx_err *err);
/* Lines lost (not written: the disk was full) since start. */
unsigned long sbx_audit_lost(void);
void sbx_audit_close(void);

/* event: "run_created", "exec_started", "exec_ended", "artifact_fetched",
 * "teardown", "auth_failure", "run_expired", "startup_cleanup", ... `fields`
 * is NULL or a jansson object (json_t *) whose members are added; the call
 * takes its reference. */
void sbx_audit(const char *event, const char *run_id, const char *identity,
	       const char *policy_digest, void *fields);

#endif
