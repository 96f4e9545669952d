/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_export_at: artifacts copied on sbxd's own host over a unix socket of
 * ours (ExportArtifacts; the side channel is common/export_wire.h, its
 * listening side clients/c/side.c).
 *
 * A thread listens on an abstract SOCK_SEQPACKET socket of a random name
 * while the call runs; it hears only a peer of the uid that owns sbxd's
 * ipc socket (SO_PEERCRED: another local user who connects first is
 * closed unread) that repeats the call's random nonce, then takes the
 * records in order. Each file's bytes, exactly the size sbxd saw when it
 * opened it, are written into a new temporary file beneath the
 * destination (sbx_dest_subdir's rules: no link followed, O_EXCL). The
 * digest is sbxd's final one when its answer vouches that nothing of the
 * run could write the file while sbxd read it (runs_export.c), else our
 * copy's, read back from our own file: either way the digest of the bytes
 * we hold. Only then is it renamed into place. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "client_internal.h"
#include "clock.h"
#include "export_wire.h"
#include "side.h"
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
	struct side_listener side; /* its socket, nonce, wake pipe, deadline */
	size_t n;
	int dirfd;
	const char *const *rels;
	struct staged *files; /* n of them */
	size_t got;
	uint8_t *buf;		  /* SBX_EXPORT_CHUNK + 1 */
	struct sbx_rpc_status st; /* why it stopped before n records */
	bool ours;     /* st is ours to report (a copy, the destination, what breaks the wire) */
	bool accepted; /* sbxd's connection came */
};

static int stage(struct receiver *rv, struct staged *f, int s, uint64_t size);

static int receive_one(struct receiver *rv, int s)
{
	uint8_t buf[SBX_EXPORT_RECORD_LEN + 1];
	struct sbx_export_record rec;
	ssize_t k = side_recv(&rv->side, s, buf, sizeof(buf), &rv->st);

	if (k < 0)
		return -1;
	if (k == 0)
		return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
				    "export: sbxd closed the socket after %zu of %zu files",
				    rv->got, rv->n);
	if (!sbx_export_record_unpack(buf, (size_t)k, &rec) || rec.index != rv->got) {
		rv->ours = true; /* sbxd's answer could only say that we closed early */
		return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
				    "export: record %zu is not the one this call asked for",
				    rv->got);
	}
	rv->files[rv->got].mode = (mode_t)rec.mode;
	if (stage(rv, &rv->files[rv->got], s, rec.size) < 0)
		return -1;
	rv->got++;
	return 0;
}

/* The connection's hang-up, when this returns, is our acknowledgement
 * (export_wire.h): after the last byte is written, or on a failure, which
 * is then ours to report. A shutdown, not only the close: the close hangs
 * up only as the socket's last reference, and a process of the program's
 * forked (without exec) meanwhile holds a copy, so sbxd would wait for it
 * until same_host_call_ms and fail the call. */
static void *receive(void *arg)
{
	struct receiver *rv = arg;
	_cleanup_close_ int s = side_accept(&rv->side, &rv->st);

	if (s < 0)
		return NULL;
	rv->accepted = true;
	while (rv->got < rv->n)
		if (receive_one(rv, s) < 0)
			break;
	(void)shutdown(s, SHUT_RDWR);
	return NULL;
}

static void receiver_clear(struct receiver *rv)
{
	side_listener_clear(&rv->side);
	free(rv->buf);
	for (size_t i = 0; rv->files && i < rv->n; i++) {
		struct staged *f = &rv->files[i];
		sbx_closep(&f->fd);
		if (f->name[0])
			(void)unlinkat(f->dir, f->name, 0); /* already gone is what we want */
		sbx_closep(&f->dir);
	}
	free(rv->files);
}

/* The call, with the thread receiving (and copying) meanwhile. */
static int receive_all(sbx_client *c, const char *run_id, size_t n, const char *const *paths,
		       struct receiver *rv, Sbx__V1__ExportArtifactsResponse **resp,
		       struct sbx_rpc_status *st)
{
	Sbx__V1__ExportArtifactsRequest req = SBX__V1__EXPORT_ARTIFACTS_REQUEST__INIT;
	/* sbxd's own deadline (same_host_call_ms) is its config's: ours
	 * allows the default's. */
	struct sbx_call_opts o = {.timeout_ms = sbx_client_timeout_ms(c) + SBX_EXPORT_CALL_MS};
	ProtobufCMessage *r = NULL;
	char name[SBX_EXPORT_NAME_MAX + 1];
	pthread_t t;
	int rc, e;

	if (side_listen(&rv->side, c, "export", sbx_mono_ms() + o.timeout_ms, name, st) < 0)
		return -1;
	rv->n = n;
	rv->files = calloc(n, sizeof(*rv->files));
	rv->buf = malloc(SBX_EXPORT_CHUNK + 1);
	if (!rv->files || !rv->buf)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++)
		rv->files[i].dir = rv->files[i].fd = -1;
	req.run_id = (char *)run_id;
	req.n_paths = n;
	req.paths = (char **)paths;
	req.socket_name = name;
	req.nonce.data = rv->side.nonce;
	req.nonce.len = sizeof(rv->side.nonce);
	if ((e = pthread_create(&t, NULL, receive, rv)) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "export: thread: %s", strerror(e));
	rc = sbx_client_call_opts(c, SBX_METHOD_PREFIX "ExportArtifacts", &req.base,
				  &sbx__v1__export_artifacts_response__descriptor, &r, &o, st);
	/* sbxd is done with the socket either way; a thread still waiting
	 * (the call failed) stops now. */
	side_wake(&rv->side);
	pthread_join(t, NULL);
	/* Our own failure (a write, what is in the way, a message that
	 * breaks the wire) says more than the ABORTED sbxd answered when we
	 * closed early; sbxd's own failure (a FIFO in /out) more than the
	 * closed socket we saw. */
	if (rv->ours) {
		if (r)
			protobuf_c_message_free_unpacked(r, NULL);
		*st = rv->st;
		return side_unreached_only_if(st, false);
	}
	if (rc < 0)
		return side_unreached_only_if(st, !rv->accepted);
	*resp = (Sbx__V1__ExportArtifactsResponse *)r;
	/* sbxd's OK says that our socket took all it sent and hung up, not
	 * that we kept it (export_wire.h): what we hold is counted here. */
	if (rv->got != n)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				    "export: sbxd answered OK after %zu of %zu records (%s)",
				    rv->got, n, rv->st.err.msg[0] ? rv->st.err.msg : "no reason");
	return 0;
}

/* ---- the copies ---- */

/* Exactly size bytes from sbxd's messages into dst. */
static int recv_exact(struct receiver *rv, int s, int dst, uint64_t size, const char *shown)
{
	uint64_t got = 0;

	while (got < size) {
		ssize_t k = side_recv(&rv->side, s, rv->buf, SBX_EXPORT_CHUNK + 1, &rv->st);

		if (k < 0)
			return -1;
		if (k == 0)
			return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
					    "%s: sbxd stopped after %llu of %llu bytes", shown,
					    (unsigned long long)got, (unsigned long long)size);
		if ((uint64_t)k > size - got || k > SBX_EXPORT_CHUNK) {
			rv->ours = true; /* as in receive_one */
			return sbx_rpc_fail(&rv->st, SBX__V1__CODE__ABORTED,
					    "%s: sbxd sent more than the file's %llu bytes", shown,
					    (unsigned long long)size);
		}
		for (ssize_t w = 0; w < k;) {
			ssize_t n =
			    pwrite(dst, rv->buf + w, (size_t)(k - w), (off_t)(got + (uint64_t)w));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				rv->ours = true;
				return sbx_rpc_fail_errno(&rv->st, SBX__V1__CODE__INTERNAL,
							  "%s: writing", shown);
			}
			w += n;
		}
		got += (uint64_t)k;
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

/* A file's temporary copy beneath the destination, of the bytes that
 * follow on s. */
static int stage(struct receiver *rv, struct staged *f, int s, uint64_t size)
{
	const char *rel = rv->rels[rv->got];
	struct sbx_rpc_status *st = &rv->st;

	sbx_escape(f->shown, sizeof(f->shown), rel);
	f->size = size;
	rv->ours = true; /* until the bytes: what fails is ours */
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
	rv->ours = false;
	return recv_exact(rv, s, f->fd, size, f->shown);
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
	/* Said as a chunked fetch (files.c) says it: the same file, the same words. */
	if (expect_sha256 && strcmp(expect_sha256, info->sha256) != 0 && expect_live)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
				    "%s: changed since it was listed (sha256 %s, listed as %.64s): "
				    "not kept; " CHANGED_BY_AN_EXEC,
				    f->shown, info->sha256, expect_sha256);
	if (expect_sha256 && strcmp(expect_sha256, info->sha256) != 0)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__DATA_LOSS,
		    "%s: sha256 of the bytes received is %s, expected %.64s: not kept", f->shown,
		    info->sha256, expect_sha256);
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
	    .side = SIDE_LISTENER_INIT, .dirfd = dirfd, .rels = rels ? rels : paths};
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
