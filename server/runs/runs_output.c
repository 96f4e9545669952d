/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's stdout and stderr: the monitor drains the pipes as fast as the
 * command writes (a command is never blocked by a slow reader) and keeps
 * the first output_kb KiB of each stream in a spill file of the run's
 * directory; the rest is counted and marked truncated. ReadOutput serves
 * the kept bytes by offset, long-polling for more while the exec runs.
 *
 * The monitor alone writes a stream's spill file and its `kept` count (under
 * the run's lock); bytes below `kept` never change, so ReadOutput reads them
 * without the lock. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "run_exec.h"
#include "runs_output.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "util.h"

#define READ_DEFAULT (64 * 1024)
#define PUMP_ROUNDS  16 /* 1 MiB per stream per wake-up, then others get a turn */

static void spill_name(const struct run_exec *e, int which, char *buf, size_t size)
{
	snprintf(buf, size, "exec-%llu.%s", (unsigned long long)e->num,
		 which == RUN_STDOUT ? "stdout" : "stderr");
}

/* Returns how many of the n bytes reached the spill file; fewer than n
 * with *errnum saying why. */
static size_t spill(struct sbx_run *r, struct run_exec *e, int which, const char *buf, size_t n,
		    int *errnum)
{
	struct run_stream *s = &e->out[which];
	size_t off = 0;

	if (s->file < 0) {
		char name[64];

		spill_name(e, which, name, sizeof(name));
		s->file =
		    openat(r->spill_fd, name,
			   O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s->file < 0) {
			*errnum = errno;
			return 0;
		}
	}
	while (off < n) {
		ssize_t w = write(s->file, buf + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			*errnum = w < 0 ? errno : ENOSPC;
			break;
		}
		off += (size_t)w;
	}
	return off;
}

/* How much of n bytes to keep, into the spill file, charged to the run's
 * caller. The first write that fails or is refused cuts the stream for
 * good: a later write, once the disk has room again, would glue bytes from
 * after the gap to the prefix, and ReadOutput would serve a stream the
 * command never wrote. What was kept before the cut stays a true prefix. */
static size_t keep_bytes(struct sbx_run *r, struct run_exec *e, int which, const char *buf,
			 size_t n, char *cut, size_t cut_size)
{
	struct sbx_rpc_status st = {0};
	int errnum = 0;
	size_t kept;

	if (quota_charge(r, n, 0, "output", &st) < 0) {
		snprintf(cut, cut_size, "%.250s", st.err.msg);
		return 0;
	}
	kept = spill(r, e, which, buf, n, &errnum);
	if (kept < n) {
		quota_uncharge(r, n - kept);
		snprintf(cut, cut_size, "output: %s writing the spill file in state_dir",
			 strerror(errnum));
	}
	return kept;
}

void stream_close(struct sbx_run *r, struct run_exec *e, int which)
{
	struct run_stream *s = &e->out[which];

	if (s->pipe >= 0)
		close(s->pipe);
	if (s->file >= 0)
		close(s->file);
	s->pipe = s->file = -1;
	s->closed = true;
	exec_update_done(e);
	run_changed(r);
}

/* The monitor's append path: n bytes more of the stream (mu not held). */
static void stream_append(struct sbx_run *r, struct run_exec *e, int which, const char *buf,
			  size_t n)
{
	struct run_stream *s = &e->out[which];
	size_t keep = 0, kept = 0;
	char cut[sizeof(s->cut)] = "";

	if (!n)
		return;
	/* s->kept and s->cut are written only by this thread: reading
	 * them here without the lock is safe. */
	if (s->kept < r->output_cap && !s->cut[0])
		keep =
		    r->output_cap - s->kept < (uint64_t)n ? (size_t)(r->output_cap - s->kept) : n;
	if (keep)
		kept = keep_bytes(r, e, which, buf, keep, cut, sizeof(cut));
	s->midline = buf[n - 1] != '\n';
	run_lock(r);
	s->kept += kept;
	s->total += (uint64_t)n;
	if (kept < n)
		s->truncated = true;
	if (cut[0])
		memcpy(s->cut, cut, sizeof(cut));
	run_changed(r);
	run_unlock(r);
}

void stream_pump(struct sbx_run *r, struct run_exec *e, int which)
{
	struct run_stream *s = &e->out[which];
	char buf[64 * 1024];

	for (int round = 0; round < PUMP_ROUNDS; round++) {
		ssize_t n = read(s->pipe, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			run_lock(r);
			stream_close(r, e, which);
			run_unlock(r);
			return;
		}
		stream_append(r, e, which, buf, (size_t)n);
	}
}

void stream_note(struct sbx_run *r, struct run_exec *e, int which, const char *line)
{
	struct run_stream *s = &e->out[which];
	char buf[1024];
	int n;

	/* What the command already wrote goes first, so the note follows it. */
	if (s->pipe >= 0)
		stream_pump(r, e, which);
	if (s->closed)
		return;
	n = snprintf(buf, sizeof(buf), "%s%s\n", s->midline ? "\n" : "", line);
	if (n > 0)
		stream_append(r, e, which, buf,
			      (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static int read_kept(struct sbx_run *r, struct run_exec *e, int which, uint64_t offset,
		     uint8_t *buf, size_t n, struct sbx_rpc_status *st)
{
	char name[64];
	_cleanup_close_ int fd = -1;
	size_t got = 0;

	spill_name(e, which, name, sizeof(name));
	fd = openat(r->spill_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT) /* the run directory went with a teardown */
		return runs_not_found(r->runs, r->identity, r->id, st);
	if (fd < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "output of exec-%llu",
					  (unsigned long long)e->num);
	while (got < n) {
		ssize_t k = pread(fd, buf + got, n - got, (off_t)(offset + got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL,
						  "output of exec-%llu",
						  (unsigned long long)e->num);
		if (k == 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "output of exec-%llu: shorter than recorded",
					    (unsigned long long)e->num);
		got += (size_t)k;
	}
	return 0;
}

SBX_HANDLER(read_output, Sbx__V1__ReadOutputRequest, Sbx__V1__ReadOutputResponse)
{
	uint32_t max = req->max_bytes ? req->max_bytes : READ_DEFAULT;
	int which = req->stream == SBX__V1__STREAM__STDOUT ? RUN_STDOUT : RUN_STDERR;
	struct sbx_run *r;
	struct run_exec *e;
	struct run_stream *s;
	Sbx__V1__ReadOutputResponse *o;
	int64_t deadline;
	uint64_t kept;
	size_t n = 0;
	bool closed, truncated;
	_cleanup_free_ char *cut = NULL;

	if (req->stream != SBX__V1__STREAM__STDOUT && req->stream != SBX__V1__STREAM__STDERR)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "stream: must be STDOUT or STDERR");
	if (max > RUN_CHUNK_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "max_bytes: %u, at most %u", max, RUN_CHUNK_MAX);
	if (req->timeout_ms > RUN_LONGPOLL_MAX_MS)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "timeout_ms: %u, at most %d", req->timeout_ms,
				    RUN_LONGPOLL_MAX_MS);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	deadline = sbx_mono_ms() + req->timeout_ms;
	run_lock(r);
	if (!(e = run_find_exec_or_fail(r, req->exec_id, st))) {
		run_unlock(r);
		run_unref(r);
		return -1;
	}
	s = &e->out[which];
	/* eof means "the exec ended and this stream is complete": a command
	 * that closes its stdout early still has its end to come. */
	while (req->offset >= s->kept && !(s->closed && e->ended) && r->state != RUN_TORN &&
	       run_wait_until(r, deadline))
		;
	kept = s->kept;
	closed = s->closed && e->ended;
	truncated = s->truncated;
	cut = s->cut[0] ? strdup(s->cut) : NULL;
	run_unlock(r);

	if (req->offset < kept)
		n = kept - req->offset < max ? (size_t)(kept - req->offset) : max;
	o = malloc(sizeof(*o));
	if (!o) {
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	sbx__v1__read_output_response__init(o);
	if (n) {
		o->data.data = malloc(n);
		if (!o->data.data) {
			free(o);
			run_unref(r);
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		}
		o->data.len = n;
		if (read_kept(r, e, which, req->offset, o->data.data, n, st) < 0) {
			sbx__v1__read_output_response__free_unpacked(o, NULL);
			run_unref(r);
			return -1;
		}
	}
	o->next_offset = req->offset + n;
	o->eof = closed && req->offset + n >= kept;
	o->truncated = truncated;
	o->kept_bytes = kept;
	if (cut)
		o->cut = sbx_steal_ptr(cut);
	run_unref(r);
	*resp = o;
	return 0;
}
