/* SPDX-License-Identifier: Apache-2.0 */
/* WriteStdin: a streamed stdin (ExecRequest.stdin_stream), chunk by chunk.
 *
 * The only buffer is the exec's stdin pipe: RUN_STDIN_PIPE bytes while all
 * the enlarged pipes of the host together stay within RUN_STDIN_HOST_BYTES
 * and half of the kernel's per-user soft limit on pipe pages (the other
 * half stays for sbxd's other pipes), else the pipe's default
 * size (64 KiB), so streamed stdins cost the host a bounded amount of
 * memory whoever asks for them; sbxd itself keeps no byte of stdin past the
 * call. A call
 * writes what the pipe has room for without waiting and answers with the
 * bytes taken so far: a sandbox that does not read its stdin fills the
 * pipe, and the calls after take nothing (the client sends the rest
 * again later), so no sbxd thread ever waits on a sandbox. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "run_exec.h"
#include "runs_registry.h"
#include "runs_stdin.h"
#include "util.h"

/* What a pipe not enlarged is granted: the kernel's default size. */
#define STDIN_PIPE_DEFAULT (64 * 1024)

/* Bytes of the enlarged stdin pipes open on the host. */
static _Atomic uint64_t enlarged;

/* The enlarged pipes' budget: RUN_STDIN_HOST_BYTES, and at most half of
 * the kernel's per-user soft limit on pipe pages (fs.pipe-user-pages-soft,
 * 0: none), which counts every pipe sbxd makes: past that limit each new
 * pipe gets 2 pages, so a caller holding the whole of it would shrink the
 * output pipes of everyone else's execs. */
static uint64_t host_budget(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/sys/fs/pipe-user-pages-soft", "re");
	unsigned long long pages = 0;
	long page = sysconf(_SC_PAGESIZE);

	if (!f || fscanf(f, "%llu", &pages) != 1 || page <= 0)
		return 0; /* unknown: no enlarged pipe */
	if (!pages || pages / 2 > RUN_STDIN_HOST_BYTES / (uint64_t)page)
		return RUN_STDIN_HOST_BYTES;
	return pages / 2 * (uint64_t)page;
}

int stdin_stream_pipe(struct run_exec *e, int fds[2], struct sbx_err *err)
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return sbx_fail_errno(err, "stdin pipe");
	if (fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0)
		return sbx_fail_errno(err, "stdin pipe: O_NONBLOCK");
	/* Best effort: past the host's budget, or the kernel's per-user
	 * limits (pipe-user-pages-soft), the pipe keeps its default size and
	 * WriteStdin takes less per call. */
	if (atomic_fetch_add(&enlarged, RUN_STDIN_PIPE) + RUN_STDIN_PIPE <= host_budget() &&
	    fcntl(fds[1], F_SETPIPE_SZ, RUN_STDIN_PIPE) >= 0)
		e->stdin_enlarged = true;
	else
		atomic_fetch_sub(&enlarged, RUN_STDIN_PIPE);
	return 0;
}

/* sbxd's end closed; an enlarged pipe still counts in the budget. */
static void stdin_shut(struct run_exec *e)
{
	if (e->stdin_fd >= 0)
		close(e->stdin_fd);
	e->stdin_fd = -1;
}

void stdin_close(struct run_exec *e)
{
	stdin_shut(e);
	if (e->stdin_enlarged) /* the command's end may live on a moment */
		atomic_fetch_sub(&enlarged, RUN_STDIN_PIPE);
	e->stdin_enlarged = false;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

/* The command closed its end: no byte more. */
static int stdin_gone(struct run_exec *e, const char *exec_id, struct sbx_rpc_status *st)
{
	stdin_close(e);
	return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			    "exec %s: the command closed its stdin after %llu bytes", exec_id,
			    (unsigned long long)e->stdin_accepted);
}

/* mu held: writes what fits of data into the exec's stdin; the bytes
 * taken, or -1 with st. */
static int stdin_take(struct sbx_run *r, struct run_exec *e, const char *exec_id,
		      const ProtobufCBinaryData *data, size_t *took, struct sbx_rpc_status *st)
    REQUIRES(r->mu)
{
	size_t granted = e->stdin_enlarged ? RUN_STDIN_PIPE : STDIN_PIPE_DEFAULT, room;
	int queued = 0;

	*took = 0;
	/* The pipe's pages are the writer's, sbxd's: the command may enlarge
	 * its end (F_SETPIPE_SZ) but sbxd queues no more than it granted. */
	if (ioctl(e->stdin_fd, FIONREAD, &queued) < 0 || queued < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "exec %s: stdin", exec_id);
	room = min_size(data->len, granted - min_size((size_t)queued, granted));
	if (!room && data->len) {
		/* Full as granted: nothing written, but a command that closed
		 * its end is told as a write's EPIPE would. */
		struct pollfd p = {.fd = e->stdin_fd, .events = POLLOUT};

		if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR))
			return stdin_gone(e, exec_id, st);
	}
	while (*took < room) {
		ssize_t n = write(e->stdin_fd, data->data + *took, room - *took);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break; /* full: the client sends the rest again */
		if (n < 0 && errno == EPIPE)
			return stdin_gone(e, exec_id, st);
		if (n <= 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "exec %s: stdin",
						  exec_id);
		*took += (size_t)n;
	}
	return 0;
}

/* mu held: whether exec e takes a chunk at req->offset now. */
static int stdin_check(const struct run_exec *e, const Sbx__V1__WriteStdinRequest *req,
		       struct sbx_rpc_status *st)
{
	if (!e->stdin_stream)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "exec %s: its stdin is not streamed (ExecRequest.stdin_stream "
				    "was not set)",
				    req->exec_id);
	if (e->stdin_eof)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "exec %s: its stdin has already ended (eof after %llu bytes)",
				    req->exec_id, (unsigned long long)e->stdin_accepted);
	if (e->stdin_fd < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "exec %s: %s; its stdin is closed", req->exec_id,
				    e->ended ? "it has ended" : "the command closed its stdin");
	if (req->offset != e->stdin_accepted)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "offset: %llu, but exec %s has taken %llu bytes of stdin; "
				    "send from there",
				    (unsigned long long)req->offset, req->exec_id,
				    (unsigned long long)e->stdin_accepted);
	return 0;
}

SBX_HANDLER(write_stdin, Sbx__V1__WriteStdinRequest, Sbx__V1__WriteStdinResponse)
{
	struct sbx_run *r;
	struct run_exec *e;
	Sbx__V1__WriteStdinResponse *w;
	size_t took = 0;
	uint64_t accepted = 0;
	int rc = 0;

	if (req->data.len > RUN_CHUNK_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "data: %zu bytes, at most %u", req->data.len, RUN_CHUNK_MAX);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	run_lock(r);
	if (!(e = run_find_exec_or_fail(r, req->exec_id, st)) || stdin_check(e, req, st) < 0 ||
	    stdin_take(r, e, req->exec_id, &req->data, &took, st) < 0) {
		rc = -1;
	} else {
		e->stdin_accepted += took;
		if (req->eof && took == req->data.len) {
			/* The pipe lives on with the command's end, its pages
			 * sbxd's: its budget is freed when the exec ends. */
			e->stdin_eof = true;
			stdin_shut(e);
		}
		accepted = e->stdin_accepted;
	}
	run_unlock(r);
	run_unref(r);
	if (rc < 0)
		return -1;
	w = malloc(sizeof(*w));
	if (!w)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__write_stdin_response__init(w);
	w->accepted = accepted;
	*resp = w;
	return 0;
}
