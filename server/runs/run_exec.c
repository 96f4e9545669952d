/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's record: what Status keeps of it and how its end is booked. */
#include "run_exec.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "metrics.h"
#include "runs_deny.h"
#include "runs_stdin.h"

/* What one recorded entry costs beyond its bytes: its malloc chunk's
 * overhead and its pointer. Counted against RUN_EXEC_ARGV_RECORD, so that
 * thousands of empty entries (a few bytes each on the wire) cannot make a
 * record of 8 KiB hold 160 KiB of sbxd's memory, 10,000 times a run. */
#define RECORD_ENTRY_COST 32

/* How many of v[0..n) fit in RUN_EXEC_ARGV_RECORD, each with its cost. */
static size_t record_fits(char *const *v, size_t n)
{
	size_t budget = RUN_EXEC_ARGV_RECORD, i;

	for (i = 0; i < n; i++) {
		size_t cost = strlen(v[i]) + RECORD_ENTRY_COST;

		if (cost > budget)
			break;
		budget -= cost;
	}
	return i;
}

/* What Status keeps of argv: all of it up to RUN_EXEC_ARGV_RECORD bytes,
 * then a marker, so a run of many large execs cannot grow sbxd without
 * bound (the caller has the full argv). */
static int record_argv(struct run_exec *e, char *const *argv, size_t argc)
{
	size_t keep = record_fits(argv, argc), n;

	e->argv = calloc(keep + 2, sizeof(char *));
	if (!e->argv)
		return -1;
	for (n = 0; n < keep; n++) {
		if (!(e->argv[n] = strdup(argv[n])))
			return -1;
		e->argc = n + 1;
	}
	if (n < argc) {
		if (asprintf(&e->argv[n], "...(%zu more argv entries not recorded)", argc - n) < 0)
			return -1;
		e->argc = n + 1;
	}
	return 0;
}

int exec_record_env(struct run_exec *e, char *const *env, size_t n)
{
	size_t keep = record_fits(env, n), i;

	e->env = calloc(keep + 2, sizeof(char *));
	if (!e->env)
		return -1;
	for (i = 0; i < keep; i++) {
		if (!(e->env[i] = strdup(env[i])))
			return -1;
		e->n_env = i + 1;
	}
	if (i < n) {
		if (asprintf(&e->env[i], "...=(%zu more env entries not recorded)", n - i) < 0)
			return -1;
		e->n_env = i + 1;
	}
	return 0;
}

struct run_exec *exec_new(char *const *argv, size_t argc)
{
	struct run_exec *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->stdin_fd = -1;
	for (int w = 0; w < 2; w++)
		e->out[w].pipe = e->out[w].file = -1;
	e->deny_fd = -1;
	e->watch_fd = -1;
	e->reason = SBX__V1__EXIT_REASON__RUNNING;
	if (record_argv(e, argv, argc) < 0) {
		exec_free(e);
		return NULL;
	}
	return e;
}

void exec_free(struct run_exec *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->argc; i++)
		free(e->argv[i]);
	free(e->argv);
	for (size_t i = 0; i < e->n_env; i++)
		free(e->env[i]);
	free(e->env);
	free(e->cwd);
	free(e->message);
	stdin_close(e);
	if (e->deny_fd >= 0)
		close(e->deny_fd);
	if (e->watch_fd >= 0)
		close(e->watch_fd);
	for (size_t i = 0; i < e->n_denied_names; i++)
		free(e->denied_names[i]);
	for (int w = 0; w < 2; w++) {
		if (e->out[w].pipe >= 0)
			close(e->out[w].pipe);
		if (e->out[w].file >= 0)
			close(e->out[w].file);
	}
	free(e);
}

struct run_exec *run_find_exec(struct sbx_run *r, const char *exec_id)
{
	const char *p = exec_id;
	uint64_t n = 0;

	if (!p || strncmp(p, "exec-", 5) != 0 || p[5] < '1' || p[5] > '9')
		return NULL;
	for (p += 5; *p; p++) {
		if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
			return NULL;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	return run_exec_by_num(r, n);
}

struct run_exec *run_find_exec_or_fail(struct sbx_run *r, const char *exec_id,
				       struct sbx_rpc_status *st)
{
	struct run_exec *e = run_find_exec(r, exec_id);

	if (!e)
		sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "exec %.64s not found in run %s",
			     exec_id ? exec_id : "", r->id);
	return e;
}

struct run_exec *run_exec_by_num(struct sbx_run *r, uint64_t num)
{
	for (struct run_exec *e = r->execs; e; e = e->next)
		if (e->num == num)
			return e;
	return NULL;
}

void exec_update_done(struct run_exec *e)
{
	if (!e->done && e->ended && e->out[0].closed && e->out[1].closed)
		e->done = true;
}

void exec_mark_ended(struct sbx_run *r, struct run_exec *e)
{
	json_t *fields, *denied;
	char id[32];

	if (e->ended)
		return;
	e->ended = true;
	stdin_close(e); /* nobody reads it any more */
	e->ended_at = sbx_mono_ms();
	e->ended_ms = sbx_unix_ms();
	sbx_metrics_exec_ended(e->reason, (double)(e->ended_ms - e->started_ms) / 1000.0);
	r->running--;
	exec_update_done(e);
	run_changed(r);
	snprintf(id, sizeof(id), "exec-%llu", (unsigned long long)e->num);
	fields = json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:s?}", "exec_id", id, "reason",
			   exit_reason_name(e->reason), "exit_code", e->exit_code, "signal",
			   e->signal, "cpu_ms", (json_int_t)e->cpu_ms, "peak_memory_bytes",
			   (json_int_t)e->peak_memory_bytes, "message", e->message);
	/* Egress deny: what the program tried (runs_deny.c). */
	denied = deny_audit(e);
	if (fields && denied)
		json_object_update(fields, denied);
	json_decref(denied);
	run_queue_audit(r, "exec_ended", fields);
}

void run_end_execs(struct sbx_run *r, Sbx__V1__ExitReason reason, const char *message)
{
	for (struct run_exec *e = r->execs; e; e = e->next) {
		if (e->ended)
			continue;
		e->reason = reason;
		e->signal = SIGKILL;
		e->exit_code = 128 + SIGKILL;
		free(e->message);
		e->message = strdup(message);
		/* sbxd's word, not the sandbox's: /out is final only once the
		 * sandbox is gone (runs_artifacts.c). */
		r->out_unsettled = true;
		exec_mark_ended(r, e);
	}
}

const char *exit_reason_name(Sbx__V1__ExitReason r)
{
	switch (r) {
	case SBX__V1__EXIT_REASON__RUNNING:
		return "running";
	case SBX__V1__EXIT_REASON__EXITED:
		return "exited";
	case SBX__V1__EXIT_REASON__SIGNALED:
		return "signaled";
	case SBX__V1__EXIT_REASON__TIMEOUT:
		return "timeout";
	case SBX__V1__EXIT_REASON__OOM:
		return "oom";
	case SBX__V1__EXIT_REASON__RUN_EXPIRED:
		return "run_expired";
	case SBX__V1__EXIT_REASON__IDLE:
		return "idle";
	case SBX__V1__EXIT_REASON__TORN_DOWN:
		return "torn_down";
	case SBX__V1__EXIT_REASON__SETUP_FAILED:
		return "setup_failed";
	default:
		return "unspecified";
	}
}
