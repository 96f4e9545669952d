/* SPDX-License-Identifier: Apache-2.0 */
/* `sbx-helper run --result FILE`: what happened, as JSON, for scripts. */
#ifndef SBX_RESULT_H
#define SBX_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

struct sbx_result {
	const char *exit_reason; /* exited, signaled, timeout, oom, setup_failed */
	int exit_code;
	int signal;
	uint64_t wall_ms;
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes;
	uint64_t stdout_bytes;
	uint64_t stderr_bytes;
	const char *message; /* setup_failed: why; oom, signaled: what sbx adds */
	const char *cgroup;  /* v2, v1, none */
	bool seccomp;
	bool userns;
	bool rlimit_fallback;
	const char *policy_digest;
	uint64_t out_files;
	uint64_t out_bytes;
	uint64_t out_skipped;
};

/* Written to a temporary file then renamed: a reader never sees half. */
int sbx_result_write(const char *path, const struct sbx_result *r, struct sbx_err *err);

#endif
