/* SPDX-License-Identifier: Apache-2.0 */
/* The pieces of a run as sbxctl drives it: create with inputs, exec with live
 * output, fetch every artifact. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "policy.h"
#include "text.h"
#include "util.h"

#define STDIN_MAX (1u << 20) /* ExecRequest.stdin */
/* Long polls of ReadOutput: short enough that a pump notices it should stop. */
#define POLL_MS 5000

char *cli_read_file(const char *what, const char *path, size_t max, size_t *len,
		    struct sbx_rpc_status *st)
{
	_cleanup_close_ int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : dup(0);
	_cleanup_free_ char *buf = malloc(max + 2);
	size_t n = 0;

	if (fd < 0) {
		sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s %s", what, path);
		return NULL;
	}
	if (!buf) {
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	for (;;) {
		ssize_t r = read(fd, buf + n, max + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s %s", what,
					   path);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				     "%s %s: larger than %zu bytes", what, path, max);
			return NULL;
		}
	}
	buf[n] = '\0';
	*len = n;
	return sbx_steal_ptr(buf);
}

static void free_labels(Sbx__V1__CreateRunRequest__LabelsEntry **l, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (l[i])
			protobuf_c_message_free_unpacked(&l[i]->base, NULL);
	}
	free(l);
}

static Sbx__V1__CreateRunRequest__LabelsEntry **make_labels(const struct cli *cli)
{
	Sbx__V1__CreateRunRequest__LabelsEntry **l = calloc(cli->n_labels + 1, sizeof(*l));

	for (unsigned i = 0; l && i < cli->n_labels; i++) {
		const char *eq = strchr(cli->labels[i], '=');
		if (!(l[i] = malloc(sizeof(*l[i])))) {
			free_labels(l, i);
			return NULL;
		}
		sbx__v1__create_run_request__labels_entry__init(l[i]);
		l[i]->key = strndup(cli->labels[i], (size_t)(eq - cli->labels[i]));
		l[i]->value = strdup(eq + 1);
		if (!l[i]->key || !l[i]->value) {
			free_labels(l, i + 1);
			return NULL;
		}
	}
	return l;
}

int create_with_inputs(sbx_client **c, const struct cli *cli, bool upload, char **run_id,
		       char image_digest[CLI_DIGEST_BUF], char host[SBX_HOST_MAX],
		       struct sbx_rpc_status *st)
{
	struct sbx_run_ref ref;
	sbx_fleet *f = NULL;

	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	struct manifest m = {0};
	size_t len;
	int rc = -1;

	*run_id = NULL;
	host[0] = '\0';
	if (cli->fleet && !(f = cli_fleet(cli)))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "the endpoints");
	_cleanup_free_ char *policy = cli_policy_document(cli, &len, st);
	if (!policy)
		return -1;
	/* Checked here too, where its problems can be shown one per line
	 * (sbxd's status message has them on one). */
	_cleanup_(sbx_policy_freep) SbxPolicy *checked = sbx_policy_parse(policy, len, &st->err);
	if (!checked)
		return sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
	if (cli->data && manifest_build(cli->data, &m, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INVALID_ARGUMENT);
	Sbx__V1__CreateRunRequest__LabelsEntry **labels = make_labels(cli);
	if (!labels) {
		manifest_free(&m);
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	}
	req.policy_json = policy;
	req.inputs = m.files;
	req.n_inputs = m.n;
	req.labels = labels;
	req.n_labels = cli->n_labels;
	req.idempotency_key = (char *)cli->idempotency_key;
	Sbx__V1__CreateRunResponse *r =
	    f ? sbx_fleet_create_run(f, &req, &ref, st) : sbx_create_run(*c, &req, st);
	if (!r) {
		if (!f)
			sbx_rpc_prefix(st, "CreateRun");
		goto out;
	}
	if (f) {
		snprintf(host, SBX_HOST_MAX, "%s", ref.host);
		/* The rest goes to the run's host: the fleet's client for it. */
		if (!(*c = sbx_fleet_client(f, ref.host, st))) {
			sbx__v1__create_run_response__free_unpacked(r, NULL);
			goto out;
		}
		sbx_client_set_interrupt(*c, &cli_interrupted);
	}
	*run_id = strdup(r->run_id);
	snprintf(image_digest, CLI_DIGEST_BUF, "%s", r->image_digest);
	sbx__v1__create_run_response__free_unpacked(r, NULL);
	if (!*run_id) {
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	rc = upload ? manifest_upload(*c, *run_id, &m, cli->no_import, cli->idempotency_key != NULL,
				      st)
		    : 0;
out:
	free_labels(labels, cli->n_labels);
	manifest_free(&m);
	return rc;
}

/* exec's -e NAME=VALUE (NAME alone: this shell's value, left out when
 * unset) as the request's env; n in *n. */
static Sbx__V1__EnvVar **exec_env(const struct cli *cli, size_t *n)
{
	Sbx__V1__EnvVar **env = calloc(cli->pf.n_env + 1, sizeof(*env));

	*n = 0;
	for (unsigned i = 0; env && i < cli->pf.n_env; i++) {
		const char *eq = strchr(cli->pf.env[i], '=');
		const char *value = eq ? eq + 1 : getenv(cli->pf.env[i]);
		if (!value)
			continue;
		if (!(env[*n] = malloc(sizeof(**env))))
			return env; /* the caller sees fewer than asked: out of memory */
		sbx__v1__env_var__init(env[*n]);
		env[*n]->name = eq ? strndup(cli->pf.env[i], (size_t)(eq - cli->pf.env[i]))
				   : strdup(cli->pf.env[i]);
		env[*n]->value = strdup(value);
		++*n;
	}
	return env;
}

static void free_env(Sbx__V1__EnvVar **env, size_t n)
{
	for (size_t i = 0; env && i < n; i++)
		protobuf_c_message_free_unpacked(&env[i]->base, NULL);
	free(env);
}

/* Which stdin is streamed: --stdin's file, or ours when it is not a
 * terminal (and open); -2: none (the exec's stdin is empty); -1 with st. */
static int stdin_source(const struct cli *cli, struct sbx_rpc_status *st)
{
	int fd;

	if (!cli->stdin_file) {
		if (isatty(STDIN_FILENO) || fcntl(STDIN_FILENO, F_GETFD) < 0)
			return -2;
		fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	} else {
		fd = strcmp(cli->stdin_file, "-") ? open(cli->stdin_file, O_RDONLY | O_CLOEXEC)
						  : fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	}
	if (fd < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "--stdin %s",
					  cli->stdin_file);
	return fd;
}

int start_exec(sbx_client *c, const struct cli *cli, const char *run_id, char **exec_id,
	       int *stdin_fd, struct sbx_rpc_status *st)
{
	Sbx__V1__ExecRequest req = SBX__V1__EXEC_REQUEST__INIT;
	_cleanup_free_ char *in = NULL;
	_cleanup_close_ int stream = -1;
	size_t in_len = 0, n_env = 0;
	Sbx__V1__EnvVar **env = NULL;

	*exec_id = NULL;
	if (stdin_fd) {
		*stdin_fd = -1;
		if ((stream = stdin_source(cli, st)) == -1)
			return -1;
	} else if (cli->stdin_file &&
		   !(in = cli_read_file("--stdin", cli->stdin_file, STDIN_MAX, &in_len, st))) {
		return -1;
	}
	if (cli->cmd == CMD_EXEC) {
		if (!(env = exec_env(cli, &n_env)))
			return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		req.env = env;
		req.n_env = n_env;
		req.timeout_seconds = cli->pf.script_seconds;
	}
	req.run_id = (char *)run_id;
	req.argv = cli->argv;
	req.n_argv = (size_t)cli->argc;
	req.cwd = (char *)(cli->cwd ? cli->cwd : "");
	req.stdin.data = (uint8_t *)in;
	req.stdin.len = in_len;
	req.stdin_stream = stream >= 0;
	if (stream == -2)
		stream = -1;
	Sbx__V1__ExecResponse *r = sbx_exec(c, &req, st);
	free_env(env, n_env);
	if (!r)
		return sbx_rpc_prefix(st, "Exec");
	*exec_id = strdup(r->exec_id);
	sbx__v1__exec_response__free_unpacked(r, NULL);
	if (!*exec_id)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	if (stdin_fd)
		*stdin_fd = sbx_steal_fd(stream);
	return 0;
}

/* ---- streamed stdin ---- */

/* Polls of our stdin, and waits while the exec's pipe is full: short
 * enough that the feeder notices the exec's end. */
#define FEED_POLL_MS 100

struct feeder {
	sbx_client *c;
	const char *run_id, *exec_id;
	int fd;
	atomic_bool stop;
};

/* Reads at most size bytes of fd into buf, waiting for them no longer than
 * FEED_POLL_MS at a time while f is not stopped: the bytes read (0 at end of
 * file), or -1 when stopped or on an error. */
static ssize_t feed_read(struct feeder *f, uint8_t *buf, size_t size)
{
	while (!atomic_load(&f->stop)) {
		struct pollfd pfd = {.fd = f->fd, .events = POLLIN};
		int n = poll(&pfd, 1, FEED_POLL_MS);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n <= 0)
			continue;
		ssize_t r = read(f->fd, buf, size);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return r;
	}
	return -1;
}

/* Sends our stdin chunk by chunk, each again from what sbxd took until it
 * took all of it (sbxd never waits for the command: a full pipe takes
 * nothing, and we try again a moment later). The exec's end closes its
 * stdin: then the rest is not wanted, and that is no error. */
static void *feeder_main(void *arg)
{
	struct feeder *f = arg;
	_cleanup_free_ uint8_t *buf = malloc(SBX_CHUNK_BYTES);
	uint64_t sent = 0; /* bytes sbxd took */
	size_t have = 0, from = 0;
	bool eof = false;

	while (buf && !atomic_load(&f->stop)) {
		if (from == have && !eof) {
			ssize_t n = feed_read(f, buf, SBX_CHUNK_BYTES);
			if (n < 0)
				break;
			have = (size_t)n;
			from = 0;
			eof = n == 0;
		}
		struct sbx_rpc_status st;
		Sbx__V1__WriteStdinResponse *r = sbx_write_stdin(f->c, f->run_id, f->exec_id, sent,
								 buf + from, have - from, eof, &st);
		if (!r) {
			if (st.code != SBX__V1__CODE__FAILED_PRECONDITION &&
			    st.code != SBX__V1__CODE__CANCELLED)
				cli_status_error(&st);
			break;
		}
		uint64_t took = r->accepted - sent;
		sbx__v1__write_stdin_response__free_unpacked(r, NULL);
		sent += took;
		from += (size_t)took;
		if (eof && from == have)
			break;
		if (took == 0 && from < have)
			poll(NULL, 0, FEED_POLL_MS / 5); /* full: the command reads slowly */
	}
	return NULL;
}

/* ---- live output ---- */

struct pump {
	sbx_client *c;
	const char *run_id, *exec_id;
	Sbx__V1__Stream stream;
	int fd;
	atomic_bool stop;
	bool truncated;
	char *cut; /* the last non-empty ReadOutputResponse.cut (malloc'd) */
	uint64_t kept_bytes;
	bool gap_noted;
	bool dropped_here; /* our reader went away: what came after was not shown */
	struct cli_out_tail tail;
	int rc;
	struct sbx_rpc_status st;
};

int cli_write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *pump_main(void *arg)
{
	struct pump *p = arg;
	uint64_t offset = 0;
	bool writable = true;

	while (!atomic_load(&p->stop)) {
		Sbx__V1__ReadOutputRequest req = SBX__V1__READ_OUTPUT_REQUEST__INIT;
		req.run_id = (char *)p->run_id;
		req.exec_id = (char *)p->exec_id;
		req.stream = p->stream;
		req.offset = offset;
		req.max_bytes = SBX_CHUNK_BYTES;
		req.timeout_ms = POLL_MS;
		Sbx__V1__ReadOutputResponse *r = sbx_read_output(p->c, &req, &p->st);
		if (!r) {
			p->rc = -1;
			break;
		}
		if (r->dropped) {
			cli_note_gap(p->stream == SBX__V1__STREAM__STDOUT ? "stdout" : "stderr",
				     r->dropped, &p->tail);
			p->gap_noted = true;
		}
		/* A reader that went away (| head) stops our writing, not the run. */
		if (writable && r->data.len &&
		    cli_write_all(p->fd, r->data.data, r->data.len) < 0) {
			writable = false;
			p->dropped_here = true;
		}
		cli_out_wrote(&p->tail, r->data.data, r->data.len);
		p->truncated |= r->truncated;
		if (r->cut && *r->cut) {
			free(p->cut);
			p->cut = strdup(r->cut); /* NULL: still truncated, said less well */
			p->kept_bytes = r->kept_bytes;
		}
		offset = r->next_offset > offset ? r->next_offset : offset + r->data.len;
		bool eof = r->eof;
		sbx__v1__read_output_response__free_unpacked(r, NULL);
		if (eof)
			break;
	}
	return NULL;
}

/* Short polls of Wait, so that a signal is passed on within this much. */
#define WAIT_POLL_MS 250

/* The first signal goes to the command's process group (exec init passes
 * it on: SBX_FORWARDED_SIGNALS); any after it kills the command. */
static void forward_signals(sbx_client *c, const char *run_id, const char *exec_id,
			    unsigned *forwarded)
{
	while (*forwarded < (unsigned)cli_signals) {
		int sig = *forwarded ? SIGKILL : cli_first_signal;
		struct sbx_rpc_status ignored; /* an exec that just ended needs no signal */
		if (*forwarded == 0)
			fprintf(stderr,
				"sbxctl: SIG%s: passed to the command (another one kills it)\n",
				sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
		else if (*forwarded == 1)
			fputs("sbxctl: killing the command\n", stderr);
		Sbx__V1__SignalResponse *r = sbx_signal(c, run_id, exec_id, sig, &ignored);
		if (r)
			sbx__v1__signal_response__free_unpacked(r, NULL);
		++*forwarded;
	}
}

/* sbx_wait_end, with the signals that arrive meanwhile passed on. */
static Sbx__V1__WaitResponse *wait_forwarding(sbx_client *c, const char *run_id,
					      const char *exec_id, struct sbx_rpc_status *st)
{
	unsigned forwarded = 0;

	for (;;) {
		forward_signals(c, run_id, exec_id, &forwarded);
		Sbx__V1__WaitResponse *w = sbx_wait(c, run_id, exec_id, WAIT_POLL_MS, st);
		if (w && !w->status) {
			sbx__v1__wait_response__free_unpacked(w, NULL);
			sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "Wait answered without a status");
			return NULL;
		}
		if (!w || w->status->reason != SBX__V1__EXIT_REASON__RUNNING)
			return w;
		sbx__v1__wait_response__free_unpacked(w, NULL);
	}
}

int live_exec(sbx_client *c, const char *run_id, const char *exec_id, int stdout_fd, int stdin_fd,
	      Sbx__V1__WaitResponse **wait, struct sbx_rpc_status *st)
{
	struct feeder feeder = {.c = c, .run_id = run_id, .exec_id = exec_id, .fd = stdin_fd};
	pthread_t feeder_thread;
	bool feeding = false;
	struct pump pumps[2] = {
	    {.c = c,
	     .run_id = run_id,
	     .exec_id = exec_id,
	     .stream = SBX__V1__STREAM__STDOUT,
	     .fd = stdout_fd,
	     .tail = {.fd = stdout_fd}},
	    {.c = c,
	     .run_id = run_id,
	     .exec_id = exec_id,
	     .stream = SBX__V1__STREAM__STDERR,
	     .fd = STDERR_FILENO,
	     .tail = {.fd = STDERR_FILENO}},
	};
	pthread_t threads[2];
	int started = 0;

	fflush(stdout);
	for (; started < 2; started++)
		if (pthread_create(&threads[started], NULL, pump_main, &pumps[started]) != 0)
			break;
	if (started == 2 && stdin_fd >= 0)
		feeding = pthread_create(&feeder_thread, NULL, feeder_main, &feeder) == 0;
	bool all_started = started == 2 && (stdin_fd < 0 || feeding);
	cli_forwarding = 1;
	*wait = all_started ? wait_forwarding(c, run_id, exec_id, st) : NULL;
	if (!all_started)
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "cannot start a thread");
	if (!*wait) /* the output of an exec we gave up on is not worth waiting for */
		for (int i = 0; i < started; i++)
			atomic_store(&pumps[i].stop, true);
	if (feeding) { /* the exec has ended, or we gave up on it */
		atomic_store(&feeder.stop, true);
		pthread_join(feeder_thread, NULL);
	}
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	cli_forwarding = 0;
	int rc = *wait ? 0 : sbx_rpc_prefix(st, "Wait");
	for (int i = 0; i < 2; i++) {
		const char *name = i ? "stderr" : "stdout";
		if (rc == 0 && pumps[i].rc < 0) {
			*st = pumps[i].st;
			rc = sbx_rpc_prefix(st, "ReadOutput %s", name);
		}
		/* The output ends early: say so, never just stop. */
		if (rc == 0)
			cli_note_cut(name, pumps[i].cut, pumps[i].kept_bytes, pumps[i].truncated,
				     !pumps[i].gap_noted && !pumps[i].dropped_here, &pumps[i].tail);
		free(pumps[i].cut);
	}
	return rc;
}

/* ---- artifacts ---- */

bool safe_relative_path(const char *p)
{
	if (!p || !*p || *p == '/' || strlen(p) > 4096)
		return false;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return false;
		s += n;
		if (*s == '/')
			s++;
		if (*s == '\0' && s[-1] == '/')
			return false;
	}
	return true;
}

int check_out_dir(const char *dir, struct sbx_err *err)
{
	_cleanup_close_ int fd = sbx_dest_open(dir, err);

	if (fd < 0)
		return sbx_err_prefix(err, "--out");
	/* access(W_OK) would miss a read-only mount or a full quota of inodes:
	 * a file made and removed is the real question. */
	for (unsigned n = 0;; n++) {
		char probe[64];
		snprintf(probe, sizeof(probe), ".sbx-probe-%d-%u", (int)getpid(), n);
		_cleanup_close_ int p =
		    openat(fd, probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (p < 0 && errno == EEXIST && n < 16)
			continue;
		if (p < 0)
			return sbx_fail_errno(err, "--out %s: cannot write there", dir);
		if (unlinkat(fd, probe, 0) < 0)
			return sbx_fail_errno(err, "--out %s: cannot remove a probe file", dir);
		break;
	}
	return sbx_steal_fd(fd);
}

/* Up to SBX_EXPORT_BATCH listed artifacts from first on, exported
 * (sbx_export_at): the listing's digests are what the copies must hash to. */
#define SBX_EXPORT_BATCH 256

static int export_batch(sbx_client *c, const char *run_id, int dirfd,
			const Sbx__V1__ListArtifactsResponse *r, size_t first, size_t n, bool live,
			mode_t mask, struct sbx_rpc_status *st)
{
	const char *paths[SBX_EXPORT_BATCH], *sums[SBX_EXPORT_BATCH];
	struct sbx_export_info info[SBX_EXPORT_BATCH];

	for (size_t i = 0; i < n; i++) {
		paths[i] = r->artifacts[first + i]->path;
		sums[i] = r->artifacts[first + i]->sha256;
	}
	return sbx_export_at(c, run_id, n, paths, NULL, dirfd, ~mask, sums, live, info, st);
}

int fetch_all(sbx_client *c, const char *run_id, int dirfd, const char *dir, bool export,
	      struct sbx_rpc_status *st)
{
	mode_t mask = umask(0);

	umask(mask);
	Sbx__V1__ListArtifactsResponse *r = sbx_list_artifacts(c, run_id, st);
	if (!r)
		return sbx_rpc_prefix(st, "ListArtifacts");
	int rc = 0;
	bool live = r->listing && r->listing->live;
	/* On sbxd's own host the files come over a unix socket of ours
	 * (ExportArtifacts); an sbxd older than that or one whose config
	 * turned it off says UNIMPLEMENTED and gets chunks. */
	export = export && !strncmp(sbx_client_endpoint(c), "ipc://", 6);
	/* Said first, so that a failure below is read knowing it. */
	cli_note_listing(r->listing, r->skipped, "artifacts");
	for (size_t i = 0; rc == 0 && i < r->n_artifacts; i++) {
		/* The server names the files; it does not get to name one outside dir. */
		if (!safe_relative_path(r->artifacts[i]->path)) {
			char name[256];
			sbx_escape(name, sizeof(name), r->artifacts[i]->path);
			rc = sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
					  "artifact path '%s' would leave %s: refused", name, dir);
		}
	}
	size_t from = 0; /* artifacts before it are in dir */
	for (; rc == 0 && export && from < r->n_artifacts; from += SBX_EXPORT_BATCH) {
		size_t n = r->n_artifacts - from < SBX_EXPORT_BATCH ? r->n_artifacts - from
								    : SBX_EXPORT_BATCH;
		rc = export_batch(c, run_id, dirfd, r, from, n, live, mask, st);
		/* Off (or an older sbxd), or our socket out of sbxd's reach
		 * (another local user can keep its backlog full): this batch
		 * and the rest in chunks. */
		if (rc < 0 && ((st->code == SBX__V1__CODE__UNIMPLEMENTED && from == 0) ||
			       cli_same_host_unreached(st))) {
			export = false;
			rc = 0;
			break;
		}
		if (rc < 0 && st->code == SBX__V1__CODE__FAILED_PRECONDITION)
			sbx_rpc_prefix(st, "%s", dir);
	}
	for (size_t i = from; rc == 0 && !export && i < r->n_artifacts; i++) {
		const Sbx__V1__Artifact *a = r->artifacts[i];
		mode_t mode = (a->mode & 0777 ? a->mode & 0777 : 0666) & ~mask;
		rc = sbx_fetch_at(c, run_id, a->path, dirfd, a->path, mode, a->sha256, live,
				  cli_progress, NULL, NULL, st);
		/* A refusal names what is in the way relative to dir: say dir. */
		if (rc < 0 && st->code == SBX__V1__CODE__FAILED_PRECONDITION)
			sbx_rpc_prefix(st, "%s", dir);
	}
	sbx__v1__list_artifacts_response__free_unpacked(r, NULL);
	return rc;
}
