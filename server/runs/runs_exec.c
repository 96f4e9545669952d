/* SPDX-License-Identifier: Apache-2.0 */
/* Exec, Wait and Signal: starting a command in a run's sandbox, waiting
 * for its end, stopping it (the exec's record is run_exec.c's). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "helper_client.h"
#include "run_exec.h"
#include "runs_inputs.h"
#include "runs_manager.h"
#include "runs_output.h"
#include "runs_registry.h"
#include "runs_status.h"
#include "runs_stdin.h"
#include "util.h"

#define ARGV_MAX	4096
#define ARGV_BYTES_MAX	(256 * 1024)
#define STDIN_MAX	(1024 * 1024)
#define CWD_MAX		4096
#define ENV_MAX		256
#define ENV_BYTES_MAX	(64 * 1024)
#define WAIT_DEFAULT_MS 30000

static int validate(const Sbx__V1__ExecRequest *req, struct sbx_rpc_status *st)
{
	size_t total = 0;

	if (req->n_argv == 0 || req->n_argv > ARGV_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "argv: %zu entries, must be 1..%d", req->n_argv, ARGV_MAX);
	if (!req->argv[0][0])
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "argv[0]: must not be empty");
	for (size_t i = 0; i < req->n_argv; i++)
		total += strlen(req->argv[i]) + 1;
	if (total > ARGV_BYTES_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "argv: %zu bytes in total, at most %d", total, ARGV_BYTES_MAX);
	if (req->cwd && req->cwd[0] && (req->cwd[0] != '/' || strlen(req->cwd) > CWD_MAX))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "cwd: must be an absolute path of at most %d bytes", CWD_MAX);
	if (req->stdin.len > STDIN_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "stdin: %zu bytes, at most %d", req->stdin.len, STDIN_MAX);
	if (req->stdin_stream && req->stdin.len)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "stdin: must be empty with stdin_stream (the bytes come by "
				    "WriteStdin)");
	return 0;
}

static void strv_free(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static void strv_freep(char ***v)
{
	strv_free(*v);
}

/* The request's env as "NAME=value" entries for the sandbox, each one
 * checked as the policy's env is (policy.h); NULL with st naming the
 * entry that is wrong. */
static char **exec_env(const Sbx__V1__ExecRequest *req, struct sbx_rpc_status *st)
{
	size_t total = 0;
	char **env;

	if (req->n_env > ENV_MAX) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "env: %zu entries, at most %d",
			     req->n_env, ENV_MAX);
		return NULL;
	}
	if (!(env = calloc(req->n_env + 1, sizeof(*env)))) {
		sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < req->n_env; i++) {
		const Sbx__V1__EnvVar *v = req->env[i];
		const char *name = v->name ? v->name : "", *value = v->value ? v->value : "";

		total += strlen(name) + strlen(value) + 2;
		if (sbx_policy_env_check(name, strlen(name), value, strlen(value), &st->err) < 0) {
			sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
			sbx_rpc_prefix(st, "env[%zu]", i);
			goto fail;
		}
		for (size_t j = 0; j < i; j++)
			if (strcmp(req->env[j]->name, name) == 0) {
				sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					     "env[%zu]: %.256s is set twice", i, name);
				goto fail;
			}
		if (total > ENV_BYTES_MAX) {
			sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				     "env: more than %d bytes in all (at env[%zu], %.256s)",
				     ENV_BYTES_MAX, i, name);
			goto fail;
		}
		if (asprintf(&env[i], "%s=%s", name, value) < 0) {
			env[i] = NULL;
			sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
			goto fail;
		}
	}
	return env;
fail:
	strv_free(env);
	return NULL;
}

/* What the exec will have (run's policy, [once]): the wall clock, the
 * working directory; or -1 with st. */
static int exec_options(struct sbx_run *r, const Sbx__V1__ExecRequest *req, char *const *env,
			struct run_exec *e, struct sbx_rpc_status *st)
{
	const SbxPolicy *p = r->policy;
	const char *cwd = req->cwd && req->cwd[0]	? req->cwd
			  : sbx_policy_mount(p, "/out") ? "/out"
							: "/tmp";
	struct sbx_ctl_exec_opts o = {.env = env, .n_env = req->n_env};

	if (req->timeout_seconds > p->limits->script_seconds)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "timeout_seconds: %u, more than the policy's script_seconds "
				    "(%u)",
				    req->timeout_seconds, p->limits->script_seconds);
	if (!sbx_ctl_exec_fits(req->argv, req->n_argv, cwd, &o))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "argv and env: too large for one request to the sandbox; pass "
				    "large data by stdin or /data");
	e->timeout_seconds =
	    req->timeout_seconds ? req->timeout_seconds : p->limits->script_seconds;
	e->stdin_stream = req->stdin_stream;
	if (!(e->cwd = strdup(cwd)) || exec_record_env(e, env, req->n_env) < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	return 0;
}

/* stdin as a sealed memfd: the command reads exactly these bytes and cannot
 * change them for anyone. */
static int stdin_fd(const ProtobufCBinaryData *data, struct sbx_err *err)
{
	_cleanup_close_ int fd = -1;
	size_t off = 0;

	if (data->len == 0) {
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return fd < 0 ? sbx_fail_errno(err, "/dev/null") : sbx_steal_fd(fd);
	}
	fd = memfd_create("sbx-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return sbx_fail_errno(err, "memfd");
	while (off < data->len) {
		ssize_t n = write(fd, data->data + off, data->len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sbx_fail_errno(err, "stdin");
		off += (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return sbx_fail_errno(err, "stdin: seal");
	if (lseek(fd, 0, SEEK_SET) < 0)
		return sbx_fail_errno(err, "stdin: rewind");
	return sbx_steal_fd(fd);
}

/* A pipe whose read end (ours, the monitor's) never blocks; the command's
 * end blocks as pipes do, and the monitor drains it. */
static int output_pipe(int fds[2], struct sbx_err *err)
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "pipe");
	if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0)
		return sbx_fail_errno(err, "pipe: O_NONBLOCK");
	return 0;
}

_Static_assert(SBX_EXEC_FDS_PER_RUN_MAX == RUN_EXECS_RUNNING_MAX * SBX_EXEC_FDS,
	       "exec_fds_per_run's ceiling is the execs a run may run at once");

/* mu held: why this run cannot take an exec now, or 0. */
static int check_run(struct sbx_run *r, struct sbx_rpc_status *st) REQUIRES(r->mu)
{
	const char *missing;

	if (run_is_claimed(r))
		return runs_not_found(r->runs, r->identity, r->id, st);
	if (r->state == RUN_EXPIRED)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s has expired (%s ran out); its artifacts stay "
				    "readable until teardown",
				    r->id, r->idle_ended ? "idle_seconds" : "run_seconds");
	if (!run_sandbox_live(r))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s has failed: its sandbox is gone (Status has the "
				    "alerts)",
				    r->id);
	if (r->state == RUN_CREATED && (missing = inputs_missing(r)))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "input %.200s has not been uploaded completely; /data is "
				    "sealed at the first exec, so every input must be complete "
				    "first",
				    missing);
	if (r->running >= RUN_EXECS_RUNNING_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				    "run %s already has %d execs running, the maximum", r->id,
				    RUN_EXECS_RUNNING_MAX);
	if (r->exec_fds + SBX_EXEC_FDS > r->runs->cfg.exec_fds_share)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
		    "run %s: its execs hold its share of sbxd's descriptors "
		    "(exec_fds_per_run %u, %d an exec: %u execs at once); wait for "
		    "one to end, or raise exec_fds_per_run in sbxd's config (or, when "
		    "it is 0, sbxd's RLIMIT_NOFILE hard limit, ulimit -Hn)",
		    r->id, r->runs->cfg.exec_fds_share, SBX_EXEC_FDS,
		    r->runs->cfg.exec_fds_share / SBX_EXEC_FDS);
	if (r->n_execs >= RUN_EXECS_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				    "run %s has had %d execs, the maximum for one run; create "
				    "another run",
				    r->id, RUN_EXECS_MAX);
	if (r->ctl < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s: its sandbox is gone", r->id);
	return 0;
}

/* mu held: the exec is on the run's list, its deadline running. */
static void exec_started(struct sbx_run *r, struct run_exec *e, const Sbx__V1__ExecRequest *req,
			 int out, int err) REQUIRES(r->mu)
{
	char id[32];

	r->n_execs = e->num;
	r->running++;
	r->exec_fds += SBX_EXEC_FDS; /* given back by the monitor (runs_monitor.c) */
	e->fds_charged = true;
	r->out_epoch++; /* digests cached so far may go stale (runs_artifacts.c) */
	if (r->state == RUN_CREATED)
		run_state_move(r, RUN_ACTIVE); /* /data is sealed from now on */
	e->started_ms = sbx_unix_ms();
	e->deadline = sbx_mono_ms() + (int64_t)e->timeout_seconds * 1000 + RUN_GRACE_MS;
	e->out[RUN_STDOUT].pipe = out;
	e->out[RUN_STDERR].pipe = err;
	stream_init(&e->out[RUN_STDOUT], r->output_cap);
	stream_init(&e->out[RUN_STDERR], r->output_cap);
	*r->exec_tail = e;
	r->exec_tail = &e->next;
	snprintf(id, sizeof(id), "exec-%llu", (unsigned long long)e->num);
	run_queue_audit(r, "exec_started",
			json_pack("{s:s, s:s, s:i}", "exec_id", id, "argv0", req->argv[0], "argc",
				  (int)req->n_argv));
}

/* mu held: hands the exec to the sandbox's pid 1. */
static int send_exec(struct sbx_run *r, struct run_exec *e, const Sbx__V1__ExecRequest *req,
		     char *const *env, const int stdio[3], struct sbx_rpc_status *st)
    REQUIRES(r->mu)
{
	struct sbx_ctl_exec_opts o = {
	    .env = env, .n_env = req->n_env, .timeout_seconds = e->timeout_seconds};

	if (check_run(r, st) < 0)
		return -1;
	e->num = r->n_execs + 1;
	/* Non-blocking: a helper that stopped reading is an error, never a
	 * stalled worker. Sent under the lock so the ExecEnded cannot be
	 * processed before the exec is on the list. */
	if (sbx_ctl_send_exec(r->ctl, e->num, req->argv, req->n_argv, e->cwd, &o, stdio, &st->err) <
	    0) {
		sbx_rpc_code(st, st->err.errnum == EAGAIN ? SBX__V1__CODE__UNAVAILABLE
							  : SBX__V1__CODE__FAILED_PRECONDITION);
		return sbx_rpc_prefix(st, "run %s: the sandbox did not take the exec", r->id);
	}
	return 0;
}

/* The command's stdin: the request's bytes, or with stdin_stream a pipe
 * whose write end the exec keeps for WriteStdin. */
static int exec_stdin(const Sbx__V1__ExecRequest *req, struct run_exec *e, struct sbx_err *err)
{
	_cleanup_close_pair_ int p[2] = SBX_PAIR_INIT;

	if (!req->stdin_stream)
		return stdin_fd(&req->stdin, err);
	if (stdin_stream_pipe(e, p, err) < 0)
		return -1;
	e->stdin_fd = sbx_steal_fd(p[1]);
	return sbx_steal_fd(p[0]);
}

SBX_HANDLER(exec, Sbx__V1__ExecRequest, Sbx__V1__ExecResponse)
{
	struct sbx_run *r;
	struct run_exec *e;
	_cleanup_close_ int in = -1;
	_cleanup_close_pair_ int out[2] = SBX_PAIR_INIT;
	_cleanup_close_pair_ int err[2] = SBX_PAIR_INIT;
	_cleanup_(strv_freep) char **env = NULL;
	Sbx__V1__ExecResponse *x;
	int rc;

	if (validate(req, st) < 0 || !(env = exec_env(req, st)))
		return -1;
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	if (!(e = exec_new(req->argv, req->n_argv))) {
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (exec_options(r, req, env, e, st) < 0) {
		exec_free(e);
		run_unref(r);
		return -1;
	}
	if ((in = exec_stdin(req, e, &st->err)) < 0 || output_pipe(out, &st->err) < 0 ||
	    output_pipe(err, &st->err) < 0) {
		exec_free(e);
		run_unref(r);
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	}

	run_lock(r);
	rc = send_exec(r, e, req, env, (const int[3]){in, out[1], err[1]}, st);
	if (rc == 0)
		exec_started(r, e, req, sbx_steal_fd(out[0]), sbx_steal_fd(err[0]));
	run_unlock(r);
	/* The sandbox has its own copies of the command's ends now. */
	if (rc < 0) {
		exec_free(e);
		run_unref(r);
		return -1;
	}
	run_wake(r);
	x = malloc(sizeof(*x));
	if (x) {
		sbx__v1__exec_response__init(x);
		if (asprintf(&x->exec_id, "exec-%llu", (unsigned long long)e->num) < 0) {
			free(x);
			x = NULL;
		}
	}
	run_unref(r);
	if (!x)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	*resp = x;
	return 0;
}

SBX_HANDLER(wait, Sbx__V1__WaitRequest, Sbx__V1__WaitResponse)
{
	uint32_t timeout = req->timeout_ms ? req->timeout_ms : WAIT_DEFAULT_MS;
	struct sbx_run *r;
	struct run_exec *e;
	Sbx__V1__WaitResponse *w;
	int64_t deadline;

	if (req->timeout_ms > RUN_LONGPOLL_MAX_MS)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "timeout_ms: %u, at most %d", req->timeout_ms,
				    RUN_LONGPOLL_MAX_MS);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	deadline = sbx_mono_ms() + timeout;
	run_lock(r);
	if (!(e = run_find_exec_or_fail(r, req->exec_id, st))) {
		run_unlock(r);
		run_unref(r);
		return -1;
	}
	/* done, not just ended: the output counts in the answer are final. */
	while (!e->done && r->state != RUN_TORN && run_wait_until(r, deadline))
		;
	w = malloc(sizeof(*w));
	if (w) {
		sbx__v1__wait_response__init(w);
		w->status = exec_status_new(e);
		if (!w->status) {
			free(w);
			w = NULL;
		}
	}
	run_unlock(r);
	run_unref(r);
	if (!w)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	*resp = w;
	return 0;
}

SBX_HANDLER(signal, Sbx__V1__SignalRequest, Sbx__V1__SignalResponse)
{
	int sig = req->signal ? req->signal : SIGKILL;
	struct sbx_run *r;
	struct run_exec *e;
	Sbx__V1__SignalResponse *s;
	int rc = 0;

	if (sig < 1 || sig >= NSIG)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "signal %d: must be 1..%d",
				    sig, NSIG - 1);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	run_lock(r);
	if (!(e = run_find_exec_or_fail(r, req->exec_id, st)))
		rc = -1;
	else if (e->ended)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				  "exec %s has already ended (%s)", req->exec_id,
				  exit_reason_name(e->reason));
	else if (r->ctl < 0)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				  "run %s: its sandbox is gone", r->id);
	else if (sbx_ctl_send_signal(r->ctl, e->num, sig, &st->err) < 0) {
		sbx_rpc_code(st, SBX__V1__CODE__UNAVAILABLE);
		rc = sbx_rpc_prefix(st, "run %s: the sandbox did not take the signal", r->id);
	}
	run_unlock(r);
	run_unref(r);
	if (rc < 0)
		return -1;
	s = malloc(sizeof(*s));
	if (!s)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__signal_response__init(s);
	*resp = s;
	return 0;
}
