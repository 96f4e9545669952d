/* SPDX-License-Identifier: Apache-2.0 */
/* ExportArtifacts: files of /out handed to a caller on this host as
 * descriptors, so that it copies them in its own kernel calls
 * (copy_file_range) instead of 1 MiB chunks over the RPC.
 *
 * The side channel is common/export_wire.h. Why sbxd connects to the
 * caller rather than the caller redeeming a ticket on a socket of sbxd:
 * the whole exchange then lives inside one authenticated, rate-limited
 * call of the run's owner on the long lane (its share of workers), so
 * there is no ticket to steal, replay or let expire, no listener of sbxd
 * for another local user to hold open, and nothing outlives the call. The
 * checks that a ticket's redemption made are the same here:
 * - the caller is on ipc:// and the kernel named its uid (who->local);
 *   on tls+tcp the call is refused, the caller may be on another host;
 * - the listener at the socket the caller named belongs to that uid
 *   (SO_PEERCRED of a connected socket is its listener's): another local
 *   user who binds the name first, or whose socket the caller names, gets
 *   nothing;
 * - the name is abstract: no path walk for sbxd through anyone's links
 *   or mounts, and connect never blocks (a full backlog is EAGAIN);
 * - each record is acknowledged within SBX_EXPORT_RECORD_MS, the whole
 *   call within SBX_EXPORT_CALL_MS: a caller that stops reading holds its
 *   own worker (its share of the long lane) that long, then the call
 *   fails; one descriptor at a time is in flight, and none once the call
 *   returns.
 *
 * Each file is opened now, by the run's /out reader, beneath /out without
 * following a link, read-only and non-blocking, and kept only if it is a
 * regular file no larger than out_mb (runs_artifacts.c's artifacts_open):
 * what the sandbox renames, links or swaps in meanwhile is what that open
 * finds, and a FIFO, device or link is refused by name.
 *
 * The digest the caller reports must be of the bytes it holds. The caller
 * copies each file before it acknowledges the record; sbxd answers with a
 * file's cached final digest only if /out was settled (no process of the
 * run alive) and no exec began from before the first open until after the
 * last acknowledgement: then nothing could write the file while it was
 * copied (the descriptor is read-only, and writes through a shared mapping
 * of an exec are excluded by the epoch, not by times, which such writes do
 * not change on tmpfs). Otherwise it answers "" and the caller hashes its
 * own copy. */
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
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "export_wire.h"
#include "run.h"
#include "runs_artifacts.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "service.h"
#include "util.h"

static int check_request(const struct sbx_identity *who, const Sbx__V1__ExportArtifactsRequest *req,
			 struct sbx_rpc_status *st)
{
	size_t name_len = strlen(req->socket_name);

	if (!who->local)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__FAILED_PRECONDITION,
		    "ExportArtifacts passes file descriptors and works only over "
		    "ipc:// on sbxd's own host; on this transport use FetchArtifact");
	if (req->n_paths == 0 || req->n_paths > SBX_EXPORT_MAX_PATHS)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "paths: %zu given, 1 to %d allowed", req->n_paths,
				    SBX_EXPORT_MAX_PATHS);
	if (name_len == 0 || name_len > SBX_EXPORT_NAME_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "socket_name: %zu bytes, 1 to %d allowed", name_len,
				    SBX_EXPORT_NAME_MAX);
	if (req->nonce.len < SBX_EXPORT_NONCE_MIN || req->nonce.len > SBX_EXPORT_NONCE_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "nonce: %zu bytes, %d to %d allowed", req->nonce.len,
				    SBX_EXPORT_NONCE_MIN, SBX_EXPORT_NONCE_MAX);
	return 0;
}

static int wait_for(int sock, short events, int64_t deadline_ms, const char *what,
		    struct sbx_rpc_status *st)
{
	for (;;) {
		int64_t left = deadline_ms - sbx_mono_ms();
		struct pollfd p = {.fd = sock, .events = events};
		int n;

		if (left <= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "export: the caller's socket did not %s in time (%d ms "
					    "per record, %d ms per call)",
					    what, SBX_EXPORT_RECORD_MS, SBX_EXPORT_CALL_MS);
		n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: poll");
		if (n > 0)
			return 0;
	}
}

/* Connected to the caller's abstract socket, its listener's uid checked. */
static int connect_caller(const struct sbx_identity *who, const char *name,
			  struct sbx_rpc_status *st)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	_cleanup_close_ int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (s < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "export: socket");
	memcpy(a.sun_path + 1, name, len); /* sun_path[0] == 0: abstract */
	if (connect(s, (struct sockaddr *)&a,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0)
		return sbx_rpc_fail_errno(
		    st, SBX__V1__CODE__FAILED_PRECONDITION,
		    "export: connecting to the caller's socket_name (abstract, "
		    "SOCK_SEQPACKET, listening)");
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: SO_PEERCRED");
	if (cred.uid != who->local_uid)
		return sbx_rpc_fail(st, SBX__V1__CODE__PERMISSION_DENIED,
				    "export: socket_name is listened on by uid %u, not by the "
				    "calling uid %u: nothing sent",
				    (unsigned)cred.uid, (unsigned)who->local_uid);
	return sbx_steal_fd(s);
}

static int send_one(int sock, const Sbx__V1__ExportArtifactsRequest *req, uint32_t index, int fd,
		    uint64_t size, int64_t deadline_ms, struct sbx_rpc_status *st)
{
	struct sbx_export_record rec = {.index = index, .size = size, .nonce_len = req->nonce.len};
	uint8_t buf[SBX_EXPORT_RECORD_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *c;
	uint8_t ack = 0;
	ssize_t n;

	memcpy(rec.nonce, req->nonce.data, req->nonce.len);
	iov.iov_base = buf;
	iov.iov_len = sbx_export_record_pack(&rec, buf);
	memset(&ctl, 0, sizeof(ctl));
	m.msg_control = ctl.b;
	m.msg_controllen = sizeof(ctl.b);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	while ((n = sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT)) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__ABORTED,
						  "export: sending record %u to the caller", index);
		if (wait_for(sock, POLLOUT, deadline_ms, "take a record", st) < 0)
			return -1;
	}
	/* The caller holds the descriptor before the next one goes. */
	while ((n = recv(sock, &ack, 1, MSG_DONTWAIT)) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return sbx_rpc_fail_errno(
			    st, SBX__V1__CODE__ABORTED,
			    "export: the caller's acknowledgement of record %u", index);
		if (wait_for(sock, POLLIN, deadline_ms, "acknowledge a record", st) < 0)
			return -1;
	}
	if (n != 1 || ack != SBX_EXPORT_ACK)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
				    "export: the caller closed its socket or answered record %u "
				    "with something other than an acknowledgement",
				    index);
	/* An acknowledgement counts only once the record is off the caller's
	 * queue (a unix socket's SIOCOUTQ is what the peer has not dequeued):
	 * one sent ahead would have sbxd queue the next records, and a call
	 * that ended with its record still queued would leave it there. Each
	 * descriptor in flight is charged to sbxd's uid (past its
	 * RLIMIT_NOFILE every SCM_RIGHTS of that uid fails, its helpers' and
	 * /out readers' too) for as long as the caller keeps the socket; so a
	 * caller that does not take its record holds its own worker until the
	 * record's deadline, and the call fails. */
	for (;;) {
		int queued = 0;
		int64_t left = deadline_ms - sbx_mono_ms();

		if (ioctl(sock, SIOCOUTQ, &queued) < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: SIOCOUTQ");
		if (queued == 0)
			break;
		if (left <= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "export: the caller acknowledged record %u but did not "
					    "take it in time",
					    index);
		/* No poll event says "dequeued": look again in a while. */
		(void)poll(NULL, 0, left < 20 ? (int)left : 20);
	}
	return 0;
}

/* Each record waits for its acknowledgement, which the caller sends once
 * it has copied the file: a record's deadline is its own, the call's is
 * the sum's bound. */
static int export_files(struct sbx_run *r, int out_fd, int sock,
			const Sbx__V1__ExportArtifactsRequest *req, char **sha256, uint64_t *bytes,
			struct sbx_rpc_status *st)
{
	int64_t call_deadline = sbx_mono_ms() + SBX_EXPORT_CALL_MS;
	bool settled, settled_after;
	uint64_t epoch, epoch_after;

	artifacts_out_state(r, &settled, &epoch);
	for (size_t i = 0; i < req->n_paths; i++) {
		int64_t deadline = sbx_mono_ms() + SBX_EXPORT_RECORD_MS;
		struct stat sb;
		char digest[65];
		_cleanup_close_ int fd = artifacts_open(r, out_fd, req->paths[i], &sb, st);

		if (fd < 0)
			return -1;
		if (settled && artifacts_final_sha256(r, &sb, digest) &&
		    !(sha256[i] = strdup(digest)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		if (send_one(sock, req, (uint32_t)i, fd, (uint64_t)sb.st_size,
			     deadline < call_deadline ? deadline : call_deadline, st) < 0)
			return -1;
		*bytes += (uint64_t)sb.st_size;
	}
	/* The caller copied every file before its acknowledgement: if no exec
	 * began since the first open, the cached digests are of its copies. */
	artifacts_out_state(r, &settled_after, &epoch_after);
	if (!settled_after || epoch_after != epoch)
		for (size_t i = 0; i < req->n_paths; i++) {
			free(sha256[i]);
			sha256[i] = NULL;
		}
	for (size_t i = 0; i < req->n_paths; i++)
		if (!sha256[i] && !(sha256[i] = strdup("")))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	return 0;
}

SBX_HANDLER(export_artifacts, Sbx__V1__ExportArtifactsRequest, Sbx__V1__ExportArtifactsResponse)
{
	Sbx__V1__ExportArtifactsResponse *o;
	struct sbx_run *r;
	uint64_t bytes = 0;
	int rc;

	/* Off unless the operator trusts local callers with descriptors of
	 * /out (a kept one keeps its file's memory after Teardown): callers
	 * take UNIMPLEMENTED as "fetch instead". */
	if (!runs->cfg.same_host_export)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__UNIMPLEMENTED,
		    "same-host export is off on this sbxd (config same_host_export); "
		    "fetch the artifacts instead");
	if (check_request(who, req, st) < 0)
		return -1;
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
	_cleanup_close_ int sock = out_fd < 0 ? -1 : connect_caller(who, req->socket_name, st);
	rc = sock < 0 ? -1 : export_files(r, out_fd, sock, req, o->sha256, &bytes, st);
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
