/* SPDX-License-Identifier: Apache-2.0 */
/* An exec's stdout and stderr: the monitor drains the pipes as fast as the
 * command writes (a command is never blocked by a slow reader) and keeps
 * output_kb KiB of each stream in a spill file of the run's directory: the
 * head (the first half) and the tail (the last half), with one gap between
 * them that is only counted. ReadOutput serves the kept bytes by their
 * position in what the command wrote, long-polling for more while the exec
 * runs; an offset in the gap is answered with `dropped`, the bytes skipped.
 *
 * The file: the head at offsets [0, head), then the tail as a ring of
 * `tail` bytes (position p at head + (p - head) % tail). The monitor alone
 * writes the file and the stream's counts (under the run's lock). Before it
 * overwrites a ring slot it raises `lo`, the first position the ring still
 * holds; ReadOutput reads without the lock and then discards what fell
 * below `lo` meanwhile (counted as dropped), so a reader that keeps up
 * with the command loses nothing, and one that does not is told how much
 * it missed. Head bytes never change once written. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "run_exec.h"
#include "runs_deny.h"
#include "runs_output.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "util.h"

#define READ_DEFAULT (64 * 1024)
#define PUMP_ROUNDS  16 /* 1 MiB per stream per wake-up, then others get a turn */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

void stream_init(struct run_stream *s, uint64_t cap)
{
	s->tail = cap / 2;
	s->head = cap - s->tail;
	s->lo = s->head;
}

uint64_t stream_dropped(const struct run_stream *s)
{
	uint64_t gap_end = min_u64(s->lo, s->end);

	return gap_end > s->head ? gap_end - s->head : 0;
}

/* The bytes kept: the head and what the ring holds. */
static uint64_t stream_kept(const struct run_stream *s)
{
	return min_u64(s->end, s->head) + (s->end > s->lo ? s->end - s->lo : 0);
}

/* Where position p lives in the spill file, and how many bytes from there
 * are contiguous (up to the ring's end). */
static uint64_t file_offset(const struct run_stream *s, uint64_t p, uint64_t *room)
{
	uint64_t slot;

	if (p < s->head) {
		*room = s->head - p;
		return p;
	}
	slot = (p - s->head) % s->tail;
	*room = s->tail - slot;
	return s->head + slot;
}

static void spill_name(const struct run_exec *e, int which, char *buf, size_t size)
{
	snprintf(buf, size, "exec-%llu.%s", (unsigned long long)e->num,
		 which == RUN_STDOUT ? "stdout" : "stderr");
}

/* Writes the bytes of positions [p, p + n) to their places; returns the
 * position it got to (p + n, or less with *errnum saying why). */
static uint64_t spill(struct sbx_run *r, struct run_exec *e, int which, uint64_t p, const char *buf,
		      size_t n, int *errnum)
{
	struct run_stream *s = &e->out[which];
	uint64_t to = p + n;

	if (s->file < 0) {
		char name[64];

		spill_name(e, which, name, sizeof(name));
		s->file = openat(r->spill_fd, name,
				 O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s->file < 0) {
			*errnum = errno;
			return p;
		}
	}
	while (p < to) {
		uint64_t room, off = file_offset(s, p, &room);
		ssize_t w = pwrite(s->file, buf, (size_t)min_u64(room, to - p), (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			*errnum = w < 0 ? errno : ENOSPC;
			break;
		}
		p += (uint64_t)w;
		buf += w;
	}
	return p;
}

/* Keeps the n bytes the command wrote at positions [s->end, s->end + n):
 * the head's part, and the last `tail` bytes into the ring (raising `lo`
 * first). The file grows only up to output_kb KiB, and only the growth is
 * charged to the run's caller. The first write that fails or is refused
 * cuts the stream for good: a later write, once the disk has room again,
 * would glue bytes from after the cut to what was kept, and ReadOutput
 * would serve a stream the command never wrote. Returns the new end. */
static uint64_t keep_bytes(struct sbx_run *r, struct run_exec *e, int which, const char *buf,
			   size_t n, char *cut, size_t cut_size)
{
	struct run_stream *s = &e->out[which];
	struct sbx_rpc_status st = {0};
	uint64_t from = s->end, to = from + n, cap = s->head + s->tail;
	uint64_t grow = min_u64(to, cap) - min_u64(from, cap), lo, got;
	int errnum = 0;

	if (grow && quota_charge(r, grow, 0, "output", &st) < 0) {
		snprintf(cut, cut_size, "%.250s", st.err.msg);
		return from;
	}
	if (from < s->head) {
		got = spill(r, e, which, from, buf, (size_t)min_u64(n, s->head - from), &errnum);
		if (errnum)
			goto failed;
		buf += got - from;
		from = got;
	}
	if (from < to) {
		lo = to - s->tail > s->lo ? to - s->tail : s->lo;
		if (lo > s->lo) {
			run_lock(r);
			s->lo = lo;
			run_unlock(r);
		}
		if (lo > from) { /* what the ring would overwrite at once */
			buf += lo - from;
			from = lo;
		}
		got = from < to ? spill(r, e, which, from, buf, (size_t)(to - from), &errnum) : to;
		if (errnum)
			goto failed;
	}
	return to;
failed:
	if (min_u64(to, cap) > min_u64(got, cap))
		quota_uncharge(r, min_u64(to, cap) - min_u64(got, cap));
	snprintf(cut, cut_size, "output: %s writing the spill file in state_dir", strerror(errnum));
	return got;
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

/* The monitor's append path, the one way bytes enter a kept stream (the
 * command's, and sbxd's notes): n bytes more of the stream (mu not held). */
static void stream_append(struct sbx_run *r, struct run_exec *e, int which, const char *buf,
			  size_t n)
{
	struct run_stream *s = &e->out[which];
	uint64_t end = 0;
	char cut[sizeof(s->cut)] = "";

	if (!n)
		return;
	/* s's counts and s->cut are written only by this thread: reading
	 * them here without the lock is safe. */
	if (!s->cut[0])
		end = keep_bytes(r, e, which, buf, n, cut, sizeof(cut));
	s->midline = buf[n - 1] != '\n';
	run_lock(r);
	if (!s->cut[0])
		s->end = end;
	s->total += (uint64_t)n;
	if (cut[0])
		memcpy(s->cut, cut, sizeof(cut));
	s->kept = stream_kept(s);
	s->truncated = s->cut[0] || stream_dropped(s) > 0;
	run_changed(r);
	run_unlock(r);
}

/* At most PUMP_ROUNDS reads, then other streams get a turn; the end (every
 * writer gone) is left for the caller to record. */
bool stream_pump(struct sbx_run *r, struct run_exec *e, int which)
{
	struct run_stream *s = &e->out[which];
	char buf[64 * 1024];

	if (s->pipe < 0)
		return false;
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		ssize_t n = read(s->pipe, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return false;
		if (n <= 0)
			return true;
		stream_append(r, e, which, buf, (size_t)n);
	}
	return false;
}

static void stream_end(struct sbx_run *r, struct run_exec *e, int which)
{
	run_lock(r);
	stream_close(r, e, which);
	run_unlock(r);
}

void stream_finish(struct sbx_run *r, struct run_exec *e, int which)
{
	/* The notice of a refusal made before the command's last byte, even
	 * one its watch had not yet when the round's poll began. */
	if (which == RUN_STDERR)
		deny_drain(r, e);
	if (!e->out[which].closed)
		stream_end(r, e, which);
}

void stream_note(struct sbx_run *r, struct run_exec *e, int which, const char *line)
{
	struct run_stream *s = &e->out[which];
	char buf[1024];
	bool ended;
	int n;

	/* What the command already wrote goes first, so the note follows it.
	 * When that reads the pipe's end, the note still goes in before the
	 * end is recorded: what it tells of came before the command's last
	 * byte (a refused connect returns once the watch has its record),
	 * and a reader told of the end must have had the note. */
	ended = stream_pump(r, e, which);
	if (s->closed)
		return;
	n = snprintf(buf, sizeof(buf), "%s%s\n", s->midline ? "\n" : "", line);
	if (n > 0)
		stream_append(r, e, which, buf,
			      (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
	if (ended)
		stream_end(r, e, which);
}

/* Reads the kept bytes of positions [p, p + n) (in the head, or all in
 * the ring) into buf. */
static int read_kept(struct sbx_run *r, struct run_exec *e, int which, uint64_t p, uint8_t *buf,
		     size_t n, struct sbx_rpc_status *st)
{
	const struct run_stream *s = &e->out[which];
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
		uint64_t room, off = file_offset(s, p + got, &room);
		ssize_t k = pread(fd, buf + got, (size_t)min_u64(room, n - got), (off_t)off);

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

/* What a ReadOutput at `offset` serves, from a snapshot of the stream:
 * the first position and the bytes from there (head bytes, or ring bytes,
 * never both). */
static void plan_read(const struct run_stream *s, uint64_t offset, uint32_t max, uint64_t *start,
		      size_t *n)
{
	uint64_t head_end = min_u64(s->end, s->head), ring_lo = min_u64(s->lo, s->end);

	*start = offset;
	*n = 0;
	if (offset < head_end) {
		*n = (size_t)min_u64(max, head_end - offset);
		return;
	}
	if (offset >= s->end)
		return;
	if (offset < ring_lo) /* in the gap: skip to the tail */
		*start = ring_lo;
	*n = (size_t)min_u64(max, s->end - *start);
}

SBX_HANDLER(read_output, Sbx__V1__ReadOutputRequest, Sbx__V1__ReadOutputResponse)
{
	uint32_t max = req->max_bytes ? req->max_bytes : READ_DEFAULT;
	int which = req->stream == SBX__V1__STREAM__STDOUT ? RUN_STDOUT : RUN_STDERR;
	struct sbx_run *r;
	struct run_exec *e;
	struct run_stream *s, snap;
	Sbx__V1__ReadOutputResponse *o;
	int64_t deadline;
	uint64_t start, lo;
	size_t n = 0;
	bool closed;
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
	while (req->offset >= s->end && !(s->closed && e->ended) && r->state != RUN_TORN &&
	       run_wait_until(r, deadline))
		;
	/* The counts only: pipe and file are the monitor's alone. */
	snap = (struct run_stream){.head = s->head,
				   .tail = s->tail,
				   .end = s->end,
				   .lo = s->lo,
				   .kept = s->kept,
				   .truncated = s->truncated};
	closed = s->closed && e->ended;
	cut = s->cut[0] ? strdup(s->cut) : NULL;
	run_unlock(r);

	plan_read(&snap, req->offset, max, &start, &n);
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
		if (read_kept(r, e, which, start, o->data.data, n, st) < 0) {
			sbx__v1__read_output_response__free_unpacked(o, NULL);
			run_unref(r);
			return -1;
		}
	}
	if (n && start >= snap.head) {
		/* Ring bytes the monitor overwrote while they were read are
		 * dropped for this reader too. */
		run_lock(r);
		lo = s->lo;
		run_unlock(r);
		if (lo > start) {
			size_t lost = (size_t)min_u64(lo - start, n);

			memmove(o->data.data, o->data.data + lost, n - lost);
			n -= lost;
			o->data.len = n;
			start += lost;
		}
	}
	o->dropped = start - req->offset;
	o->next_offset = start + n;
	o->eof = closed && o->next_offset >= snap.end;
	o->truncated = snap.truncated;
	o->kept_bytes = snap.kept;
	if (cut)
		o->cut = sbx_steal_ptr(cut);
	run_unref(r);
	*resp = o;
	return 0;
}
