/* SPDX-License-Identifier: Apache-2.0 */
/* ExportArtifacts: files of /out copied to a caller on this host over a
 * unix socket it listens on, instead of 1 MiB chunks over the RPC.
 *
 * The side channel is common/export_wire.h, its connection runs_side.c
 * (why sbxd connects to the caller, why bytes rather than descriptors).
 * The checks: the caller is on ipc:// and the kernel named its uid
 * (who->local); on tls+tcp the call is refused, the caller may be on
 * another host; the listener it names belongs to that uid. Each file's
 * bytes must be taken within same_host_record_ms of its open, the whole
 * call (the caller's close, its acknowledgement, included) within
 * same_host_call_ms:
 * a caller that stops reading holds its own worker (its share of the long
 * lane) that long, then the call fails.
 *
 * Each file is opened now, by the run's /out reader, beneath /out without
 * following a link, read-only and non-blocking, and kept only if it is a
 * regular file no larger than out_mb (runs_artifacts.c's artifacts_open):
 * what the sandbox renames, links or swaps in meanwhile is what that open
 * finds, and a FIFO, device or link is refused by name. Exactly the size
 * seen at the open is sent; a file that shrinks meanwhile fails the call.
 *
 * The digest the caller reports must be of the bytes it holds. sbxd
 * answers with a file's cached final digest only if /out was settled (no
 * process of the run alive) and no exec began from before the first open
 * until after the last byte was read: then nothing could write the file
 * while sbxd read it (the descriptor is read-only, and writes through a
 * shared mapping of an exec are excluded by the epoch, not by times, which
 * such writes do not change on tmpfs). Otherwise it answers "" and the
 * caller hashes its own copy. */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "export_wire.h"
#include "run.h"
#include "runs_artifacts.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "runs_side.h"
#include "service.h"
#include "util.h"

static int check_request(const struct sbx_identity *who, const Sbx__V1__ExportArtifactsRequest *req,
			 struct sbx_rpc_status *st)
{
	if (!who->local)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__FAILED_PRECONDITION,
		    "ExportArtifacts sends to a socket of the caller and works only over "
		    "ipc:// on sbxd's own host; on this transport use FetchArtifact");
	if (req->n_paths == 0 || req->n_paths > SBX_EXPORT_MAX_PATHS)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "paths: %zu given, 1 to %d allowed", req->n_paths,
				    SBX_EXPORT_MAX_PATHS);
	if (side_check_address(req->socket_name, req->nonce.len, st) < 0)
		return -1;
	return 0;
}

/* One file's bytes, exactly size of them, read at sbxd's own offsets (what
 * the sandbox does to the file's offset is nothing to this). */
static int send_bytes(int sock, int fd, uint64_t size, const char *path, uint8_t *buf,
		      int64_t deadline, const struct side_deadlines *dl, struct sbx_rpc_status *st)
{
	uint64_t off = 0;

	while (off < size) {
		size_t want =
		    size - off < SBX_EXPORT_CHUNK ? (size_t)(size - off) : SBX_EXPORT_CHUNK;
		ssize_t k = pread(fd, buf, want, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: reading %s",
						  path);
		if (k == 0)
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__ABORTED,
			    "export: %s shrank from %llu to %llu bytes while it was "
			    "sent (an exec is writing it)",
			    path, (unsigned long long)size, (unsigned long long)off);
		if (side_send(sock, buf, (size_t)k, deadline, dl, "a file's bytes", st) < 0)
			return -1;
		off += (uint64_t)k;
	}
	return 0;
}

/* The caller's answer: its close, once it took and wrote every file
 * (export_wire.h). The kernel raises POLLHUP on sbxd's socket when the
 * caller's end is released, or shut down; a release with sbxd's messages
 * still queued on it frees them and sets SO_ERROR ECONNRESET, so OK means
 * the caller took every byte and hung up. A caller that shuts its end down
 * without closing it raises POLLHUP with them still queued: then nothing
 * counts until SIOCOUTQ (what of sbxd's the peer has not dequeued) is 0,
 * and one that never takes them holds its own worker to the deadline, like
 * one that stops reading: what it keeps queued after the call (at most
 * sbxd's send buffer) costs it that much of its share of the long lane
 * each time. */
static int await_close(int sock, const struct side_deadlines *dl, struct sbx_rpc_status *st)
{
	int err = 0;
	socklen_t el = sizeof(err);

	if (side_wait(sock, 0, dl->call_end, dl, "hang up after the last file", st) < 0)
		return -1;
	for (;;) {
		int queued = 0;

		if (ioctl(sock, SIOCOUTQ, &queued) < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: SIOCOUTQ");
		if (queued == 0)
			break;
		if (sbx_mono_ms() >= dl->call_end)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "export: the caller hung up but did not take all that "
					    "sbxd sent in time (%u ms per call)",
					    dl->call_ms);
		/* No poll event says "dequeued": look again in a while. */
		(void)poll(NULL, 0, 10);
	}
	/* Read once the queue is empty: a release sets it before it frees
	 * what it left unread. */
	if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: SO_ERROR");
	if (err == ECONNRESET)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
				    "export: the caller closed its socket before it took all that "
				    "sbxd sent");
	if (err)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED, "export: the caller's socket: %s",
				    strerror(err));
	return 0;
}

/* Each record's deadline is its own, the call's is the sum's bound. */
static int export_files(struct sbx_run *r, int out_fd, int sock,
			const Sbx__V1__ExportArtifactsRequest *req, const struct side_deadlines *dl,
			char **sha256, uint64_t *bytes, struct sbx_rpc_status *st)
{
	bool settled, settled_after;
	uint64_t epoch, epoch_after;
	_cleanup_free_ uint8_t *buf = malloc(SBX_EXPORT_CHUNK);

	if (!buf)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	artifacts_out_state(r, &settled, &epoch);
	for (size_t i = 0; i < req->n_paths; i++) {
		int64_t deadline = sbx_mono_ms() + dl->record_ms;
		struct sbx_export_record rec = {.index = (uint32_t)i};
		uint8_t head[SBX_EXPORT_RECORD_LEN];
		struct stat sb;
		char digest[65];
		_cleanup_close_ int fd = artifacts_open(r, out_fd, req->paths[i], &sb, st);

		if (fd < 0)
			return -1;
		if (deadline > dl->call_end)
			deadline = dl->call_end;
		if (settled && artifacts_final_sha256(r, &sb, digest) &&
		    !(sha256[i] = strdup(digest)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		rec.size = (uint64_t)sb.st_size;
		rec.mode = (uint32_t)(sb.st_mode & 07777);
		sbx_export_record_pack(&rec, head);
		if (side_send(sock, head, sizeof(head), deadline, dl, "a record", st) < 0 ||
		    send_bytes(sock, fd, rec.size, req->paths[i], buf, deadline, dl, st) < 0)
			return -1;
		*bytes += rec.size;
	}
	/* sbxd read every byte before this: if no exec began since the first
	 * open, the cached digests are of what it sent. */
	artifacts_out_state(r, &settled_after, &epoch_after);
	if (!settled_after || epoch_after != epoch)
		for (size_t i = 0; i < req->n_paths; i++) {
			free(sha256[i]);
			sha256[i] = NULL;
		}
	for (size_t i = 0; i < req->n_paths; i++)
		if (!sha256[i] && !(sha256[i] = strdup("")))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	return await_close(sock, dl, st);
}

SBX_HANDLER(export_artifacts, Sbx__V1__ExportArtifactsRequest, Sbx__V1__ExportArtifactsResponse)
{
	struct side_deadlines dl = {.record_ms = runs->cfg.same_host_record_ms,
				    .call_ms = runs->cfg.same_host_call_ms};
	Sbx__V1__ExportArtifactsResponse *o;
	struct sbx_run *r;
	uint64_t bytes = 0;
	int rc;

	/* On unless the operator turned it off: callers take UNIMPLEMENTED as
	 * "fetch instead". */
	if (!runs->cfg.same_host_export)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__UNIMPLEMENTED,
		    "same-host export is off on this sbxd (config same_host_export); "
		    "fetch the artifacts instead");
	if (check_request(who, req, st) < 0)
		return -1;
	dl.call_end = sbx_mono_ms() + dl.call_ms;
	o = malloc(sizeof(*o));
	if (!o)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sbx__v1__export_artifacts_response__init(o);
	o->sha256 = calloc(req->n_paths, sizeof(*o->sha256));
	o->n_sha256 = req->n_paths;
	if (!o->sha256) {
		sbx__v1__export_artifacts_response__free_unpacked(o, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	if (!(r = run_lookup(runs, who, req->run_id, st))) {
		sbx__v1__export_artifacts_response__free_unpacked(o, NULL);
		return -1;
	}
	_cleanup_close_ int out_fd = artifacts_out_dup(r, st);
	_cleanup_close_ int sock = out_fd < 0 ? -1
					      : side_connect(who, req->socket_name, req->nonce.data,
							     req->nonce.len, &dl, st);
	rc = sock < 0 ? -1 : export_files(r, out_fd, sock, req, &dl, o->sha256, &bytes, st);
	if (rc == 0)
		run_audit(r, "artifacts_exported",
			  json_pack("{s:I, s:I, s:I}", "files", (json_int_t)req->n_paths, "bytes",
				    (json_int_t)bytes, "uid", (json_int_t)who->local_uid));
	run_unref(r);
	if (rc < 0) {
		/* free_unpacked skips the NULL entries a failure left. */
		sbx__v1__export_artifacts_response__free_unpacked(o, NULL);
		return -1;
	}
	o->files_sent = (uint32_t)req->n_paths;
	*resp = o;
	return 0;
}
