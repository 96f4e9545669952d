/* SPDX-License-Identifier: Apache-2.0 */
#include "result.h"

#include <jansson.h>
#include <stdio.h>
#include <unistd.h>

#include "util.h"

int sbx_result_write(const char *path, const struct sbx_result *r, struct sbx_err *err)
{
	json_t *enforced =
	    json_pack("{s:s, s:b, s:b, s:b}", "cgroup", r->cgroup, "seccomp", r->seccomp, "userns",
		      r->userns, "rlimit_fallback", r->rlimit_fallback);
	json_t *out = json_pack("{s:I, s:I, s:I}", "files", (json_int_t)r->out_files, "bytes",
				(json_int_t)r->out_bytes, "skipped", (json_int_t)r->out_skipped);
	json_t *doc = json_pack(
	    "{s:s, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:s?, s:s?}", "exit_reason",
	    r->exit_reason, "exit_code", r->exit_code, "signal", r->signal, "wall_ms",
	    (json_int_t)r->wall_ms, "cpu_ms", (json_int_t)r->cpu_ms, "peak_memory_bytes",
	    (json_int_t)r->peak_memory_bytes, "stdout_bytes", (json_int_t)r->stdout_bytes,
	    "stderr_bytes", (json_int_t)r->stderr_bytes, "enforced", enforced, "out", out,
	    "message", r->message, "policy_digest", r->policy_digest);
	if (!doc)
		return sbx_fail(err, "--result %s: building JSON", path);
	_cleanup_free_ char *tmp = NULL;
	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
		json_decref(doc);
		return sbx_fail_errno(err, "--result %s", path);
	}
	int rc = json_dump_file(doc, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
	json_decref(doc);
	if (rc < 0) {
		unlink(tmp);
		return sbx_fail(err, "--result %s: cannot write", path);
	}
	if (rename(tmp, path) < 0) {
		unlink(tmp);
		return sbx_fail_errno(err, "--result %s", path);
	}
	return 0;
}
