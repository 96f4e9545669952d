/* SPDX-License-Identifier: Apache-2.0 */
/* The policy's numbers as one table: each row is a JSON field, its range,
 * its default and a line of doc. policy.c validates with the rows and
 * sbx-policy-reference prints docs/reference/policy-ranges.md from them
 * (the docs.policy_reference test fails when the page drifts), so a range
 * is written once. The SBX_* macros of policy.h are the numbers, kept for
 * the code that needs one as a constant (sbxd's config ceilings, the CLI's
 * buffers); a number is used through a row wherever a field is checked. */
#ifndef SBX_POLICY_RANGES_H
#define SBX_POLICY_RANGES_H

#include <stddef.h>
#include <stdio.h>

enum sbx_policy_range_id {
	SBX_RANGE_CPU,
	SBX_RANGE_MEMORY_MB,
	SBX_RANGE_SCRIPT_SECONDS,
	SBX_RANGE_RUN_SECONDS,
	SBX_RANGE_PIDS,
	SBX_RANGE_OUT_MB,
	SBX_RANGE_TMP_MB,
	SBX_RANGE_OUTPUT_KB,
	SBX_RANGE_IDLE_SECONDS,
	SBX_RANGE_ENV,
	SBX_RANGE_EGRESS_ALLOW,
	SBX_RANGE_RULE_PORT,
	SBX_RANGE_RULE_CONNECTIONS_PER_MINUTE,
	SBX_RANGE_RULE_BYTES_PER_SECOND,
	SBX_RANGE_RULE_MAX_CONCURRENT,
	SBX_RANGE_EGRESS_ALERT_BYTES,
	SBX_RANGE_EGRESS_MAX_BYTES,
	SBX_RANGE_POLICY_BYTES,
	SBX_RANGE_N,
	/* The integer rows of "limits", in order, each a field of Sbx__V1__Limits. */
	SBX_RANGE_LIMITS_FIRST = SBX_RANGE_MEMORY_MB,
	SBX_RANGE_LIMITS_LAST = SBX_RANGE_IDLE_SECONDS,
};

struct sbx_policy_range {
	const char *field; /* its JSON path, "limits.memory_mb" */
	long long min, max, def;
	/* The unit the document writes over the one the row holds: cpu is
	 * written in CPUs and held in thousandths (1000). 1 otherwise. */
	int scale;
	/* A limits row's field in Sbx__V1__Limits, and its size (4 or 8). */
	size_t offset, size;
	const char *def_doc;  /* the default in words, where it is no number */
	const char *def_note; /* after the default's number: when it is another */
	const char *doc;      /* one line */
};

extern const struct sbx_policy_range sbx_policy_ranges[SBX_RANGE_N];

/* The row's last path component: "memory_mb" of "limits.memory_mb". */
const char *sbx_policy_range_key(const struct sbx_policy_range *r);
/* docs/reference/policy-ranges.md from the table. */
void sbx_policy_print_ranges(FILE *out);

#endif
