/* SPDX-License-Identifier: Apache-2.0 */
/* The run policy: strict JSON in, the canonical protobuf Policy out.
 *
 * Every error names the JSON path of what is wrong, e.g.
 * "limits.memory_mb: must be 16..1048576", "mounts[1].path: duplicate /out".
 * A policy that parses is complete: every default is filled in, so the
 * effective policy can be reported and digested as is. */
#ifndef SBX_POLICY_H
#define SBX_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "sbx/v1/policy.pb-c.h"

typedef Sbx__V1__Policy SbxPolicy;

/* Ranges and defaults: the numbers. Which field each bounds, and its doc,
 * is the range table's (policy_ranges.h), which the parser checks with and
 * docs/reference/policy-ranges.md is generated from. */
#define SBX_CPU_MILLIS_MIN	   10
#define SBX_CPU_MILLIS_MAX	   1024000
#define SBX_CPU_MILLIS_DEFAULT	   1000
#define SBX_MEMORY_MB_MIN	   16
#define SBX_MEMORY_MB_MAX	   1048576
#define SBX_MEMORY_MB_DEFAULT	   1024
#define SBX_SCRIPT_SECONDS_MAX	   86400
#define SBX_SCRIPT_SECONDS_DEFAULT 300
#define SBX_RUN_SECONDS_MAX	   604800
#define SBX_RUN_SECONDS_DEFAULT	   3600
#define SBX_PIDS_MIN		   8
#define SBX_PIDS_MAX		   65536
#define SBX_PIDS_DEFAULT	   256
#define SBX_OUT_MB_MAX		   1048576
#define SBX_OUT_MB_DEFAULT	   1024
#define SBX_TMP_MB_MAX		   1048576
#define SBX_TMP_MB_DEFAULT	   256
#define SBX_OUTPUT_KB_MAX	   1048576
#define SBX_OUTPUT_KB_DEFAULT	   1024
#define SBX_ENV_MAX		   256
#define SBX_EGRESS_RULES_MAX	   256
/* An allowlist entry's limits (per run and entry) and the run's byte
 * budgets through the proxy (egress.alert_bytes, egress.max_bytes; 0: none). */
#define SBX_EGRESS_CONNECTIONS_PER_MINUTE_DEFAULT 600
#define SBX_EGRESS_CONNECTIONS_PER_MINUTE_MAX	  600000
#define SBX_EGRESS_MAX_CONCURRENT_DEFAULT	  32
#define SBX_EGRESS_MAX_CONCURRENT_MAX		  4096
#define SBX_EGRESS_BYTES_PER_SECOND_MAX		  (INT64_C(1) << 40)
#define SBX_EGRESS_BYTES_MAX			  (INT64_C(1) << 62)
#define SBX_POLICY_BYTES_MAX			  (1 << 20)

/* Parses a JSON policy document. Returns NULL and fills err on any error. */
SbxPolicy *sbx_policy_parse(const char *json, size_t len, struct sbx_err *err);
/* A parse error lists every problem of the document (at most 20 and what
 * fits), one per line below a first "policy: N problems:" line. This makes
 * it one line ("policy: N problems: a; b"), for an RPC status message. */
void sbx_policy_problems_one_line(struct sbx_err *err);
/* Reads and parses a file; errors are prefixed with the file name. */
SbxPolicy *sbx_policy_load(const char *path, struct sbx_err *err);
void sbx_policy_free(SbxPolicy *p);
/* For _cleanup_(sbx_policy_freep) SbxPolicy *p = NULL; */
void sbx_policy_freep(SbxPolicy **p);

/* sha256 of the canonical serialization, as 64 lowercase hex digits + NUL. */
int sbx_policy_digest(const SbxPolicy *p, char hex[65], struct sbx_err *err);
/* The effective policy as JSON in the document's own format (keys sorted,
 * defaults filled in). Caller frees. NULL only when out of memory. */
char *sbx_policy_to_json(const SbxPolicy *p);

/* Whether an env entry is one the policy's env could hold: a non-empty
 * name without '=' or NUL, a value without NUL, both within their sizes
 * (len: the bytes the caller had, so that an embedded NUL shows). The
 * message names the entry ("env.NAME: ..."). */
int sbx_policy_env_check(const char *name, size_t name_len, const char *value, size_t value_len,
			 struct sbx_err *err);

/* Convenience lookups. */
const Sbx__V1__Mount *sbx_policy_mount(const SbxPolicy *p, const char *path);

#endif
