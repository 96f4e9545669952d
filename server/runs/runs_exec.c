/* Exec, Wait and Signal: starting a command in a run's sandbox, waiting
 * for its end, stopping it; and the bookkeeping of an exec's end that the
 * monitor, the watchdog and Teardown share. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <jansson.h>

#include "runs_ctl.h"
#include "runs_internal.h"
#include "util.h"

#define ARGV_MAX	4096
#define ARGV_BYTES_MAX	(256 * 1024)
#define STDIN_MAX	(1024 * 1024)
#define CWD_MAX		4096
#define WAIT_DEFAULT_MS 30000

void exec_free(struct run_exec *e)
{
	for (size_t i = 0; i < e->argc; i++)
		free(e->argv[i]);
	free(e->argv);
	free(e->message);
	for (int w = 0; w < 2; w++) {
		if (e->out[w].pipe >= 0)
			close(e->out[w].pipe);
		if (e->out[w].file >= 0)
			close(e->out[w].file);
	}
	free(e);
}

void exec_update_done(struct run_exec *e)
{
	if (!e->done && e->ended && e->out[0].closed && e->out[1].closed)
		e->done = true;
}

void exec_mark_ended(struct sbx_run *r, struct run_exec *e)
{
	char id[32];

	if (e->ended)
		return;
	e->ended = true;
	e->ended_at = mono_ms();
	e->ended_ms = unix_ms();
	r->running--;
	exec_update_done(e);
	pthread_cond_broadcast(&r->cv);
	snprintf(id, sizeof(id), "exec-%llu", (unsigned long long)e->num);
	run_queue_audit(r, "exec_ended",
			json_pack("{s:s, s:s, s:i, s:i, s:I, s:I, s:s?}", "exec_id", id, "reason",
				  exit_reason_name(e->reason), "exit_code", e->exit_code, "signal",
				  e->signal, "cpu_ms", (json_int_t)e->cpu_ms, "peak_memory_bytes",
				  (json_int_t)e->peak_memory_bytes, "message", e->message));
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
		exec_mark_ended(r, e);
	}
}

/* What Status keeps of argv: all of it up to RUN_EXEC_ARGV_RECORD bytes,
 * then a marker, so a run of many large execs cannot grow sbxd without
 * bound (the caller has the full argv). */
static int record_argv(struct run_exec *e, char *const *argv, size_t argc)
{
	size_t budget = RUN_EXEC_ARGV_RECORD, n;

	e->argv = calloc(argc + 1, sizeof(char *));
	if (!e->argv)
		return -1;
	for (n = 0; n < argc; n++) {
		size_t len = strlen(argv[n]);

		if (len > budget)
			break;
		if (!(e->argv[n] = strdup(argv[n])))
			return -1;
		e->argc = n + 1;
		budget -= len;
	}
	if (n < argc) {
		if (asprintf(&e->argv[n], "...(%zu more argv entries not recorded)", argc - n) < 0)
			return -1;
		e->argc = n + 1;
	}
	return 0;
}

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
				      "argv: %zu bytes in total, at most %d", total,
				      ARGV_BYTES_MAX);
	if (req->cwd && req->cwd[0] && (req->cwd[0] != '/' || strlen(req->cwd) > CWD_MAX))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				      "cwd: must be an absolute path of at most %d bytes", CWD_MAX);
	if (req->stdin.len > STDIN_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				      "stdin: %zu bytes, at most %d", req->stdin.len, STDIN_MAX);
	if (!ctl_exec_fits(req->argv, req->n_argv, req->cwd))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				      "argv: too large for one request to the sandbox; pass "
				      "large data by stdin or /data");
	return 0;
}

/* stdin as a sealed memfd: the command reads exactly these bytes and cannot
 * change them for anyone. */
static int stdin_fd(const ProtobufCBinaryData *data, struct sbx_err *err)
{
	int fd;
	size_t off = 0;

	if (data->len == 0) {
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return fd < 0 ? sbx_fail_errno(err, "/dev/null") : fd;
	}
	fd = memfd_create("sbx-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return sbx_fail_errno(err, "memfd");
	while (off < data->len) {
		ssize_t n = write(fd, data->data + off, data->len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			sbx_fail_errno(err, "stdin");
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	lseek(fd, 0, SEEK_SET);
	return fd;
}

struct exec_fds {
	int in;
	int out[2]; /* stdout pipe: read, write */
	int err[2];
};

static void close_exec_fds(struct exec_fds *f)
{
	int *all[] = {&f->in, &f->out[0], &f->out[1], &f->err[0], &f->err[1]};

	for (size_t i = 0; i < SBX_ARRAY_SIZE(all); i++)
		if (*all[i] >= 0) {
			close(*all[i]);
			*all[i] = -1;
		}
}

static int open_exec_fds(const Sbx__V1__ExecRequest *req, struct exec_fds *f, struct sbx_err *err)
{
	*f = (struct exec_fds){.in = -1, .out = {-1, -1}, .err = {-1, -1}};
	if ((f->in = stdin_fd(&req->stdin, err)) < 0)
		return -1;
	if (pipe2(f->out, O_CLOEXEC) < 0 || pipe2(f->err, O_CLOEXEC) < 0) {
		sbx_fail_errno(err, "pipe");
		close_exec_fds(f);
		return -1;
	}
	/* Our ends never block the monitor; the command's ends block as
	 * pipes do, and the monitor drains them. */
	fcntl(f->out[0], F_SETFL, O_NONBLOCK);
	fcntl(f->err[0], F_SETFL, O_NONBLOCK);
	return 0;
}

/* mu held: why this run cannot take an exec now, or 0. */
static int check_run(struct sbx_run *r, struct sbx_rpc_status *st)
{
	const char *missing;

	if (r->stop)
		return sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "run %s not found", r->id);
	if (r->state == SBX__V1__RUN_STATE__EXPIRED)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				      "run %s has expired (run_seconds ran out); its artifacts "
				      "stay readable until teardown",
				      r->id);
	if (r->state != SBX__V1__RUN_STATE__CREATED && r->state != SBX__V1__RUN_STATE__ACTIVE)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				      "run %s has failed: its sandbox is gone (Status has the "
				      "alerts)",
				      r->id);
	if (r->state == SBX__V1__RUN_STATE__CREATED && (missing = inputs_missing(r)))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				      "input %.200s has not been uploaded completely; /data is "
				      "sealed at the first exec, so every input must be complete "
				      "first",
				      missing);
	if (r->running >= RUN_EXECS_RUNNING_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				      "run %s already has %d execs running, the maximum", r->id,
				      RUN_EXECS_RUNNING_MAX);
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

static struct run_exec *exec_new(const Sbx__V1__ExecRequest *req)
{
	struct run_exec *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	for (int w = 0; w < 2; w++)
		e->out[w].pipe = e->out[w].file = -1;
	e->reason = SBX__V1__EXIT_REASON__RUNNING;
	if (record_argv(e, req->argv, req->n_argv) < 0) {
		exec_free(e);
		return NULL;
	}
	return e;
}

SBX_HANDLER(exec, Sbx__V1__ExecRequest, Sbx__V1__ExecResponse)
{
	struct sbx_run *r;
	struct run_exec *e;
	struct exec_fds f;
	struct sbx_err err;
	Sbx__V1__ExecResponse *x;
	int stdio[3];
	int rc;

	if (validate(req, st) < 0)
		return -1;
	if (!(r = run_lookup(who, req->run_id, st)))
		return -1;
	if (!(e = exec_new(req))) {
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (open_exec_fds(req, &f, &err) < 0) {
		exec_free(e);
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s", err.msg);
	}
	stdio[0] = f.in;
	stdio[1] = f.out[1];
	stdio[2] = f.err[1];

	pthread_mutex_lock(&r->mu);
	rc = check_run(r, st);
	if (rc == 0) {
		e->num = r->n_execs + 1;
		/* Non-blocking: a helper that stopped reading is an error, never
		 * a stalled worker. Sent under the lock so the ExecEnded cannot
		 * be processed before the exec is on the list. */
		if (ctl_send_exec(r->ctl, e->num, req->argv, req->n_argv, req->cwd, stdio, &err) <
		    0)
			rc = sbx_rpc_fail(
			    st,
			    err.errnum == EAGAIN ? SBX__V1__CODE__UNAVAILABLE
						 : SBX__V1__CODE__FAILED_PRECONDITION,
			    "run %s: the sandbox did not take the exec: %s", r->id, err.msg);
	}
	if (rc == 0) {
		r->n_execs = e->num;
		r->running++;
		r->state = SBX__V1__RUN_STATE__ACTIVE; /* /data is sealed from now on */
		e->started_ms = unix_ms();
		e->deadline =
		    mono_ms() + (int64_t)r->policy->limits->script_seconds * 1000 + RUN_GRACE_MS;
		e->out[RUN_STDOUT].pipe = sbx_steal_fd(f.out[0]);
		e->out[RUN_STDERR].pipe = sbx_steal_fd(f.err[0]);
		*r->exec_tail = e;
		r->exec_tail = &e->next;
		char id[32];

		snprintf(id, sizeof(id), "exec-%llu", (unsigned long long)e->num);
		run_queue_audit(r, "exec_started",
				json_pack("{s:s, s:s, s:i}", "exec_id", id, "argv0", req->argv[0],
					  "argc", (int)req->n_argv));
	}
	run_unlock(r);
	close_exec_fds(&f); /* the sandbox has its own copies now */
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
	if (!(r = run_lookup(who, req->run_id, st)))
		return -1;
	deadline = mono_ms() + timeout;
	pthread_mutex_lock(&r->mu);
	e = run_find_exec(r, req->exec_id);
	if (!e) {
		pthread_mutex_unlock(&r->mu);
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND,
				      "exec %.64s not found in run %s", req->exec_id, req->run_id);
	}
	/* done, not just ended: the output counts in the answer are final. */
	while (!e->done && r->state != SBX__V1__RUN_STATE__TORN && run_wait_until(r, deadline))
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
	pthread_mutex_unlock(&r->mu);
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
	struct sbx_err err;
	Sbx__V1__SignalResponse *s;
	int rc = 0;

	if (sig < 1 || sig >= NSIG)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				      "signal %d: must be 1..%d", sig, NSIG - 1);
	if (!(r = run_lookup(who, req->run_id, st)))
		return -1;
	pthread_mutex_lock(&r->mu);
	e = run_find_exec(r, req->exec_id);
	if (!e)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "exec %.64s not found in run %s",
				    req->exec_id, req->run_id);
	else if (e->ended)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "exec %s has already ended (%s)", req->exec_id,
				    exit_reason_name(e->reason));
	else if (r->ctl < 0)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s: its sandbox is gone", r->id);
	else if (ctl_send_signal(r->ctl, e->num, sig, &err) < 0)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__UNAVAILABLE,
				    "run %s: the sandbox did not take the signal: %s", r->id,
				    err.msg);
	pthread_mutex_unlock(&r->mu);
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
