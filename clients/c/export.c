/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_export_at: artifacts copied on sbxd's own host from descriptors sbxd
 * passes (ExportArtifacts; the side channel is common/export_wire.h).
 *
 * A thread listens on an abstract SOCK_SEQPACKET socket of a random name
 * while the call runs; it accepts only a peer of the uid that owns sbxd's
 * ipc socket (SO_PEERCRED: another local user who connects first is
 * closed unread) and only records that repeat the call's random nonce, in
 * order, one descriptor each, and acknowledges each once it holds it.
 * Each file is copied, before its record is acknowledged, in the kernel
 * (copy_file_range, else sendfile) into a new temporary file beneath the
 * destination (sbx_dest_subdir's rules: no link followed, O_EXCL), exactly
 * the size sbxd saw when it opened it. The digest is sbxd's final one when
 * its answer vouches that nothing of the run could write the file until
 * our acknowledgement (runs_export.c), else our copy's, read back from our
 * own file: either way the digest of the bytes we hold. Only then is it
 * renamed into place. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "client_internal.h"
#include "clock.h"
#include "export_wire.h"
#include "text.h"
#include "tree.h"
#include "util.h"

/* One file, copied before its record is acknowledged. */
struct staged {
	int dir;	  /* its directory beneath the destination */
	const char *base; /* its name there (in rel) */
	int fd;		  /* the temporary copy */
	char name[40];	  /* the temporary name; "" when there is none to remove */
	uint64_t size;
	mode_t mode; /* in /out */
	char shown[256];
};

/* What the receiving thread shares with the caller's thread. */
struct receiver {
	int listener;
	int wake[2]; /* the call returned: stop waiting */
	uid_t sbxd_uid;
	uint8_t nonce[SBX_EXPORT_NONCE_MIN];
	size_t n;
	int dirfd;
	const char *const *rels;
	struct staged *files; /* n of them */
	size_t got;
	int64_t deadline_ms;
	struct sbx_rpc_status st; /* why it stopped before n records */
	bool ours;		  /* st is our own failure (a copy, the destination) */
};

/* 1: the call ended (wake), 0: fd is ready, -1: past the deadline. */
static int wait_ready(struct receiver *rv, int fd)
{
	for (;;) {
		int64_t left = rv->deadline_ms - sbx_mono_ms();
		struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
				      {.fd = rv->wake[0], .events = POLLIN}};
		int k;

		if (left <= 0)
			return -1;
		k = poll(p, 2, (int)left);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (p[1].revents)
			return 1;
		if (k > 0)
			return 0;
	}
}

/* A connection from sbxd's uid, or -1 (err says why) or -2 (woken). */
static int accept_sbxd(struct receiver *rv)
{
	for (;;) {
		int w = wait_ready(rv, rv->listener);
		struct ucred cred;
		socklen_t cl = sizeof(cred);

		if (w != 0) {
			sbx_fail(&rv->st.err, "export: sbxd did not connect to the export socket");
			return w > 0 ? -2 : -1;
		}
		_cleanup_close_ int s = accept4(rv->listener, NULL, NULL, SOCK_CLOEXEC);
		if (s < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			return sbx_fail_errno(&rv->st.err, "export: accept");
		}
		/* Anyone local may connect to an abstract name; only sbxd's uid
		 * is heard. */
		if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 &&
		    cred.uid == rv->sbxd_uid)
			return sbx_steal_fd(s);
	}
}

/* Every descriptor a message carried is closed but the first, returned. */
static int take_fds(struct msghdr *m)
{
	int first = -1;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (first < 0)
				first = fd;
			else
				close(fd);
		}
	}
	return first;
}

static int stage(struct receiver *rv, struct staged *f, int src, uint64_t size);

static int receive_one(struct receiver *rv, int s)
{
	uint8_t buf[SBX_EXPORT_RECORD_MAX + 1];
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = ctl.b,
			   .msg_controllen = sizeof(ctl.b)};
	struct sbx_export_record rec;
	uint8_t ack = SBX_EXPORT_ACK;
	ssize_t k;
	int w = wait_ready(rv, s);

	if (w != 0)
		return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
				    "export: record %zu of %zu did not arrive", rv->got, rv->n);
	k = recvmsg(s, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (k < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (k < 0)
		return sbx_rpc_fail_errno(&rv->st, SBX__V1__CODE__ABORTED,
					  "export: receiving record %zu", rv->got);
	_cleanup_close_ int fd = take_fds(&m);
	if (k == 0)
		return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
				    "export: sbxd closed the socket after %zu of %zu records",
				    rv->got, rv->n);
	if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || fd < 0 ||
	    !sbx_export_record_unpack(buf, (size_t)k, &rec) || rec.index != rv->got ||
	    rec.nonce_len != sizeof(rv->nonce) ||
	    CRYPTO_memcmp(rec.nonce, rv->nonce, rec.nonce_len))
		return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
				    "export: record %zu is not the one this call asked for",
				    rv->got);
	/* Copied before the acknowledgement: sbxd's digest, if it vouches for
	 * one, covers the time of the copy. */
	if (stage(rv, &rv->files[rv->got], fd, rec.size) < 0) {
		rv->ours = true;
		return -1;
	}
	rv->got++;
	if (send(s, &ack, 1, MSG_NOSIGNAL) != 1)
		return sbx_rpc_fail_errno(&rv->st, SBX__V1__CODE__ABORTED,
					  "export: acknowledging record %zu", rv->got - 1);
	return 0;
}

static void *receive(void *arg)
{
	struct receiver *rv = arg;
	_cleanup_close_ int s = accept_sbxd(rv);

	if (s < 0)
		return NULL;
	/* One connection per call: no one else is heard from now on. */
	sbx_closep(&rv->listener);
	rv->listener = -1;
	while (rv->got < rv->n)
		if (receive_one(rv, s) < 0)
			break;
	return NULL;
}

static void receiver_clear(struct receiver *rv)
{
	sbx_closep(&rv->listener);
	sbx_closep(&rv->wake[0]);
	sbx_closep(&rv->wake[1]);
	for (size_t i = 0; rv->files && i < rv->n; i++) {
		struct staged *f = &rv->files[i];
		sbx_closep(&f->fd);
		if (f->name[0])
			(void)unlinkat(f->dir, f->name, 0); /* already gone is what we want */
		sbx_closep(&f->dir);
	}
	free(rv->files);
}

/* The uid that owns sbxd's ipc socket: the peer whose records count. */
static int sbxd_uid(const sbx_client *c, uid_t *uid, struct sbx_rpc_status *st)
{
	const char *ep = sbx_client_endpoint(c);
	struct stat sb;

	if (strncmp(ep, "ipc://", 6) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "export: works only with an ipc:// endpoint on sbxd's host "
				    "(this one is %.200s); fetch the artifacts instead",
				    ep);
	if (stat(ep + 6, &sb) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__UNAVAILABLE, "export: %.200s", ep + 6);
	*uid = sb.st_uid;
	return 0;
}

static int listen_abstract(struct receiver *rv, char name[SBX_EXPORT_NAME_MAX + 1],
			   struct sbx_rpc_status *st)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char hex[2 * sizeof(rv->nonce) + 1];
	uint8_t id[16];
	size_t len;

	if (getrandom(rv->nonce, sizeof(rv->nonce), 0) != (ssize_t)sizeof(rv->nonce) ||
	    getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id))
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: getrandom");
	sbx_hex(id, sizeof(id), hex);
	len = (size_t)snprintf(name, SBX_EXPORT_NAME_MAX + 1, "sbx-export-%s", hex);
	memcpy(a.sun_path + 1, name, len);
	rv->listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (rv->listener < 0 ||
	    bind(rv->listener, (struct sockaddr *)&a,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0 ||
	    listen(rv->listener, 4) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: listening socket");
	if (pipe2(rv->wake, O_CLOEXEC) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "export: pipe");
	return 0;
}

/* The call, with the thread receiving (and copying) meanwhile. */
static int receive_all(sbx_client *c, const char *run_id, size_t n, const char *const *paths,
		       struct receiver *rv, Sbx__V1__ExportArtifactsResponse **resp,
		       struct sbx_rpc_status *st)
{
	Sbx__V1__ExportArtifactsRequest req = SBX__V1__EXPORT_ARTIFACTS_REQUEST__INIT;
	struct sbx_call_opts o = {.timeout_ms = sbx_client_timeout_ms(c) + SBX_EXPORT_CALL_MS};
	ProtobufCMessage *r = NULL;
	char name[SBX_EXPORT_NAME_MAX + 1];
	pthread_t t;
	int rc, e;

	if (sbxd_uid(c, &rv->sbxd_uid, st) < 0 || listen_abstract(rv, name, st) < 0)
		return -1;
	rv->n = n;
	rv->files = calloc(n, sizeof(*rv->files));
	if (!rv->files)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++)
		rv->files[i].dir = rv->files[i].fd = -1;
	rv->deadline_ms = sbx_mono_ms() + o.timeout_ms;
	req.run_id = (char *)run_id;
	req.n_paths = n;
	req.paths = (char **)paths;
	req.socket_name = name;
	req.nonce.data = rv->nonce;
	req.nonce.len = sizeof(rv->nonce);
	if ((e = pthread_create(&t, NULL, receive, rv)) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "export: thread: %s", strerror(e));
	rc = sbx_client_call_opts(c, SBX_METHOD_PREFIX "ExportArtifacts", &req.base,
				  &sbx__v1__export_artifacts_response__descriptor, &r, &o, st);
	/* sbxd is done with the socket either way; a thread still waiting
	 * (the call failed) stops now. */
	if (write(rv->wake[1], "x", 1) != 1)
		abort(); /* a pipe with nothing in it takes one byte */
	pthread_join(t, NULL);
	/* Our own failure (a copy, what is in the way) says more than the
	 * ABORTED sbxd answered when we stopped acknowledging; sbxd's own
	 * failure (a FIFO in /out) more than the closed socket we saw. */
	if (rv->ours) {
		if (r)
			protobuf_c_message_free_unpacked(r, NULL);
		*st = rv->st;
		return -1;
	}
	if (rc < 0)
		return -1;
	*resp = (Sbx__V1__ExportArtifactsResponse *)r;
	if (rv->got != n)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				    "export: sbxd answered OK after %zu of %zu records (%s)",
				    rv->got, n, rv->st.err.msg[0] ? rv->st.err.msg : "no reason");
	return 0;
}

/* ---- the copies ---- */

static int copy_exact(int src, int dst, uint64_t size, const char *shown, struct sbx_rpc_status *st)
{
	loff_t in = 0, out = 0;
	bool kernel = true;

	while ((uint64_t)in < size) {
		size_t want = size - (uint64_t)in > (1u << 30) ? (1u << 30) : size - (uint64_t)in;
		ssize_t k;

		if (kernel) {
			k = copy_file_range(src, &in, dst, &out, want, 0);
			if (k < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP ||
				      errno == ENOSYS)) {
				kernel = false; /* across file systems: sendfile */
				continue;
			}
		} else {
			off_t off = in;
			k = sendfile(dst, src, &off, want);
			if (k > 0)
				in = off;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s: copying",
						  shown);
		if (k == 0)
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__ABORTED,
			    "%s: shrank from %llu to %lld bytes while it was copied "
			    "(an exec is writing it): not kept",
			    shown, (unsigned long long)size, (long long)in);
	}
	return 0;
}

static void md_free(EVP_MD_CTX **md)
{
	EVP_MD_CTX_free(*md);
}

/* The sha256 of our own copy, read back from it (the page cache: the
 * bytes were just written), in 1 MiB reads rather than a mapping, whose
 * page faults cost more than the reads. */
static int copy_sha256(int fd, uint64_t size, char hex[65], const char *shown,
		       struct sbx_rpc_status *st)
{
	enum { CHUNK = 1 << 20 };
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	uint64_t off = 0;

	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	_cleanup_(md_free) EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	_cleanup_free_ uint8_t *buf = malloc(CHUNK);
	if (!ctx || !buf || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s: sha256: out of memory",
				    shown);
	while (off < size) {
		size_t want = size - off < CHUNK ? (size_t)(size - off) : CHUNK;
		ssize_t k = pread(fd, buf, want, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL,
						  "%s: reading the copy back", shown);
		if (!EVP_DigestUpdate(ctx, buf, (size_t)k))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s: sha256", shown);
		off += (uint64_t)k;
	}
	if (!EVP_DigestFinal_ex(ctx, md, &len) || len != 32)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s: sha256", shown);
	sbx_hex(md, 32, hex);
	return 0;
}

/* A file's temporary copy beneath the destination, made from src. */
static int stage(struct receiver *rv, struct staged *f, int src, uint64_t size)
{
	const char *rel = rv->rels[rv->got];
	struct sbx_rpc_status *st = &rv->st;
	struct stat sb;

	sbx_escape(f->shown, sizeof(f->shown), rel);
	if (fstat(src, &sb) < 0 || !S_ISREG(sb.st_mode))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				    "%s: sbxd passed something other than a regular file",
				    f->shown);
	f->size = size;
	f->mode = sb.st_mode;
	f->dir = sbx_dest_subdir(rv->dirfd, rel, &f->base, &st->err);
	if (f->dir < 0 || sbx_dest_check_slot(f->dir, f->base, f->shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	for (int tries = 0; f->fd < 0; tries++) {
		char id[33];
		if (tries == 16)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "%s: no free temporary name", f->shown);
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		snprintf(f->name, sizeof(f->name), ".sbx-export-%.12s.tmp", id);
		/* O_RDWR: the digest may be read back from this very file. */
		f->fd =
		    sbx_open_beneath(f->dir, f->name, O_RDWR | O_CREAT | O_EXCL, 0600, &st->err);
		if (f->fd < 0)
			f->name[0] = '\0';
		if (f->fd < 0 && st->err.errnum != EEXIST)
			return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	}
	return copy_exact(src, f->fd, size, f->shown, st);
}

/* Verified and renamed into place. */
static int place(struct staged *f, const char *final_sha256, mode_t mode_mask,
		 const char *expect_sha256, bool expect_live, struct sbx_export_info *info,
		 struct sbx_rpc_status *st)
{
	if (final_sha256 && strlen(final_sha256) == 64)
		memcpy(info->sha256, final_sha256, 65);
	else if (copy_sha256(f->fd, f->size, info->sha256, f->shown, st) < 0)
		return -1;
	info->size = f->size;
	if (expect_sha256 && strcmp(expect_sha256, info->sha256) != 0)
		return sbx_rpc_fail(
		    st, expect_live ? SBX__V1__CODE__ABORTED : SBX__V1__CODE__DATA_LOSS,
		    "%s: sha256 %s, not the listing's %.64s%s", f->shown, info->sha256,
		    expect_sha256,
		    expect_live ? " (an exec is running and changed it): not kept" : ": not kept");
	if (fchmod(f->fd, f->mode & mode_mask & 0777) < 0 || close(sbx_steal_fd(f->fd)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", f->shown);
	f->fd = -1;
	if (sbx_dest_check_slot(f->dir, f->base, f->shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	if (renameat(f->dir, f->name, f->dir, f->base) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", f->shown);
	f->name[0] = '\0'; /* renamed: nothing to remove */
	return 0;
}

int sbx_export_at(sbx_client *c, const char *run_id, size_t n, const char *const *paths,
		  const char *const *rels, int dirfd, mode_t mode_mask,
		  const char *const *expect_sha256, bool expect_live, struct sbx_export_info *info,
		  struct sbx_rpc_status *st)
{
	_cleanup_(receiver_clear) struct receiver rv = {
	    .listener = -1, .wake = {-1, -1}, .dirfd = dirfd, .rels = rels ? rels : paths};
	Sbx__V1__ExportArtifactsResponse *resp = NULL;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	if (n == 0)
		return 0;
	if (n > SBX_EXPORT_MAX_PATHS)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "export: %zu paths, at most %d per call", n,
				    SBX_EXPORT_MAX_PATHS);
	if (receive_all(c, run_id, n, paths, &rv, &resp, st) < 0)
		return -1;
	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = place(&rv.files[i], resp->n_sha256 == n ? resp->sha256[i] : NULL, mode_mask,
			   expect_sha256 ? expect_sha256[i] : NULL, expect_live, &info[i], st);
	sbx__v1__export_artifacts_response__free_unpacked(resp, NULL);
	return rc;
}
