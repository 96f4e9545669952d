/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_import_files: inputs uploaded on sbxd's own host over a unix socket
 * of ours (ImportInputs; the wire is common/import_wire.h, the listening
 * side clients/c/side.c).
 *
 * Each file is opened and declared first (size, sha256, permission bits:
 * what sbx_put_file's first chunk says). A file whose digest the caller
 * did not give is first declared with none: for an input the run already
 * declared (CreateRun's manifest: `sbxctl put`'s use) sbxd checks the
 * bytes against that declaration's digest as they arrive, and nobody
 * hashes the file twice. Only when sbxd answers that a path is new (not
 * in the run's manifest) are those files hashed here, from the
 * descriptors that will be sent, and the call made again.
 *
 * A thread listens on an abstract SOCK_SEQPACKET socket of a random name
 * while the call runs; it hears only a peer of the uid that owns sbxd's
 * ipc socket that repeats the call's nonce, then sends each file's bytes,
 * exactly the declared size, in messages of at most SBX_IMPORT_CHUNK
 * bytes, and closes. sbxd checks each file's sha256 and puts them in
 * /data only once all matched: a file that changed since it was hashed
 * (or since its manifest declared it) fails the call, as it would a
 * chunked upload. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client_internal.h"
#include "clock.h"
#include "import_wire.h"
#include "sha256.h"
#include "side.h"
#include "util.h"

/* The send buffer asked for: a whole message and the next, so that
 * sbxd's reads and ours overlap (capped at net.core.wmem_max). */
#define IMPORT_SNDBUF (1 << 20)

/* One local file: opened, declared (its sha256 "" until hashed, when the
 * caller gave none). */
struct outgoing {
	int fd;
	Sbx__V1__InputFile decl;
	char sha256[65];
};

/* What the sending thread shares with the caller's thread. */
struct sender {
	struct side_listener side;
	size_t n;
	struct outgoing *files;
	const char *const *locals;
	uint8_t *buf;		  /* SBX_IMPORT_CHUNK */
	struct sbx_rpc_status st; /* why it stopped */
	bool ours;		  /* st is our own failure (reading a local file) */
	bool connected;		  /* sbxd connected: the call got past its checks */
};

static int send_file(struct sender *sd, int s, size_t i)
{
	struct outgoing *f = &sd->files[i];
	uint64_t off = 0;

	while (off < f->decl.size) {
		size_t want = f->decl.size - off < SBX_IMPORT_CHUNK ? (size_t)(f->decl.size - off)
								    : SBX_IMPORT_CHUNK;
		ssize_t k = pread(f->fd, sd->buf, want, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			sd->ours = true;
			return k < 0
				   ? sbx_rpc_fail_errno(&sd->st, SBX__V1__CODE__INVALID_ARGUMENT,
							"%s", sd->locals[i])
				   : sbx_rpc_fail(&sd->st, SBX__V1__CODE__ABORTED,
						  "%s: shrank while being uploaded", sd->locals[i]);
		}
		if (side_send_msg(&sd->side, s, sd->buf, (size_t)k, &sd->st) < 0)
			return -1;
		off += (uint64_t)k;
	}
	return 0;
}

static void *send_all(void *arg)
{
	struct sender *sd = arg;
	int sndbuf = IMPORT_SNDBUF;
	_cleanup_close_ int s = side_accept(&sd->side, &sd->st);

	if (s < 0)
		return NULL;
	sd->connected = true;
	/* Best effort: a smaller buffer only means more waits; a 256 KiB
	 * message needs more than the default (EMSGSIZE says so below). */
	(void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	for (size_t i = 0; i < sd->n; i++)
		if (send_file(sd, s, i) < 0)
			return NULL;
	/* The end: sbxd answers once it saw it (our close below). */
	return NULL;
}

/* Opened and checked; declared with the caller's sha256, or "" (the
 * run's own declaration of the path, if it has one). */
static int prepare(struct outgoing *f, const char *local, const char *remote, const char *sha256,
		   struct sbx_rpc_status *st)
{
	struct stat sb;

	f->fd = open(local, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0 || fstat(f->fd, &sb) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", local);
	if (!S_ISREG(sb.st_mode))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s: not a regular file",
				    local);
	snprintf(f->sha256, sizeof(f->sha256), "%s", sha256 ? sha256 : "");
	sbx__v1__input_file__init(&f->decl);
	f->decl.path = (char *)remote;
	f->decl.size = (uint64_t)sb.st_size;
	f->decl.sha256 = f->sha256;
	f->decl.mode = (uint32_t)(sb.st_mode & 0777);
	return 0;
}

/* The declared size of f hashed from the descriptor whose bytes are sent:
 * a file that grew or shrank since it was opened is refused here. */
static int hash_declared(struct outgoing *f, const char *local, struct sbx_rpc_status *st)
{
	struct sbx_err err;
	uint64_t got = 0;

	if (lseek(f->fd, 0, SEEK_SET) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", local);
	if (sbx_sha256_fd_max(f->fd, f->decl.size, NULL, NULL, f->sha256, &got, &err) < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED, "%s: %s%s", local, err.msg,
				    err.errnum == EFBIG ? " (it grew while being uploaded)" : "");
	if (got != f->decl.size)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED, "%s: shrank while being uploaded",
				    local);
	return 0;
}

/* sbxd's refusal of a sha256 "" before it connected: for a path the run
 * has not declared (runs_inputs.c's words, as PutInput says them, about
 * one of our files declared without a digest), or by an sbxd from before
 * "" (it wants 64 hex digits in every file). Only a call sbxd never
 * connected for, and only those words at the message's start: a refusal
 * after the bytes (a mismatch, whose message names the path, which may
 * hold any words) is the answer. */
static bool refused_as_new(const struct sender *sd, const char *const *remote_paths,
			   const struct sbx_rpc_status *st)
{
	const char *msg = st->err.msg;
	char want[300];

	if (sd->connected || st->code != SBX__V1__CODE__INVALID_ARGUMENT)
		return false;
	if (!strncmp(msg, "files[", 6) && strstr(msg, "].sha256: must be 64 lowercase hex digits"))
		return true;
	for (size_t i = 0; i < sd->n; i++) {
		int k =
		    snprintf(want, sizeof(want),
			     "input %.200s is not in the run's manifest: declare it at CreateRun",
			     remote_paths[i]);
		if (!sd->files[i].sha256[0] && k > 0 && (size_t)k < sizeof(want) &&
		    !strncmp(msg, want, (size_t)k))
			return true;
	}
	return false;
}

static void sender_clear(struct sender *sd)
{
	side_listener_clear(&sd->side);
	free(sd->buf);
	for (size_t i = 0; sd->files && i < sd->n; i++)
		sbx_closep(&sd->files[i].fd);
	free(sd->files);
}

/* One ImportInputs of sd's files (declared as they are) over a new
 * listener: 0, or -1 with st. */
static int import_call(sbx_client *c, const char *run_id, struct sender *sd,
		       Sbx__V1__InputFile **decls, const char *const *remote_paths,
		       struct sbx_rpc_status *st)
{
	Sbx__V1__ImportInputsRequest req = SBX__V1__IMPORT_INPUTS_REQUEST__INIT;
	/* sbxd's own deadline (same_host_call_ms) is its config's: ours
	 * allows the default's. */
	struct sbx_call_opts o = {.timeout_ms = sbx_client_timeout_ms(c) + SBX_EXPORT_CALL_MS};
	ProtobufCMessage *r = NULL;
	char name[SBX_EXPORT_NAME_MAX + 1];
	pthread_t t;
	int rc, e;

	side_listener_clear(&sd->side);
	sd->side = (struct side_listener)SIDE_LISTENER_INIT;
	memset(&sd->st, 0, sizeof(sd->st));
	sd->ours = sd->connected = false;
	if (side_listen(&sd->side, c, "import", sbx_mono_ms() + o.timeout_ms, name, st) < 0)
		return -1;
	req.run_id = (char *)run_id;
	req.n_files = sd->n;
	req.files = decls;
	req.socket_name = name;
	req.nonce.data = sd->side.nonce;
	req.nonce.len = sizeof(sd->side.nonce);
	if ((e = pthread_create(&t, NULL, send_all, sd)) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "import: thread: %s", strerror(e));
	rc = sbx_client_call_opts(c, SBX_METHOD_PREFIX "ImportInputs", &req.base,
				  &sbx__v1__import_inputs_response__descriptor, &r, &o, st);
	/* sbxd is done with the socket either way; a thread still sending
	 * (the call failed) stops now. */
	side_wake(&sd->side);
	pthread_join(t, NULL);
	/* A local file we could not read says more than what sbxd answered
	 * when our bytes stopped; otherwise sbxd's reason is the one. */
	if (sd->ours) {
		if (r)
			protobuf_c_message_free_unpacked(r, NULL);
		*st = sd->st;
		return side_unreached_only_if(st, false);
	}
	if (rc < 0)
		return side_unreached_only_if(st, !sd->connected);
	Sbx__V1__ImportInputsResponse *resp = (Sbx__V1__ImportInputsResponse *)r;
	rc = 0;
	if (resp->files_received != sd->n || resp->n_sha256 != sd->n)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				  "import: sbxd answered OK with %u of %zu files",
				  resp->files_received, sd->n);
	/* A file declared "" was checked against the run's own declaration,
	 * which sbxd answers with. */
	for (size_t i = 0; rc == 0 && i < sd->n; i++)
		if (sd->files[i].sha256[0] && strcmp(resp->sha256[i], sd->files[i].sha256) != 0)
			rc = sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
					  "import: %s: sbxd received sha256 %.64s, sent %s",
					  remote_paths[i], resp->sha256[i], sd->files[i].sha256);
	sbx__v1__import_inputs_response__free_unpacked(resp, NULL);
	return rc;
}

int sbx_import_files(sbx_client *c, const char *run_id, size_t n, const char *const *local_paths,
		     const char *const *remote_paths, const char *const *sha256,
		     struct sbx_rpc_status *st)
{
	_cleanup_(sender_clear) struct sender sd = {.side = SIDE_LISTENER_INIT,
						    .locals = local_paths};
	_cleanup_free_ Sbx__V1__InputFile **decls = NULL;
	bool undigested = false;

	memset(st, 0, sizeof(*st));
	if (n == 0)
		return 0;
	if (n > SBX_IMPORT_MAX_FILES)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "import: %zu files, at most %d per call", n,
				    SBX_IMPORT_MAX_FILES);
	sd.files = calloc(n, sizeof(*sd.files));
	decls = calloc(n, sizeof(*decls));
	sd.buf = malloc(SBX_IMPORT_CHUNK);
	if (!sd.files || !decls || !sd.buf)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	sd.n = n;
	for (size_t i = 0; i < n; i++)
		sd.files[i].fd = -1;
	for (size_t i = 0; i < n; i++) {
		if (prepare(&sd.files[i], local_paths[i], remote_paths[i],
			    sha256 ? sha256[i] : NULL, st) < 0)
			return -1;
		decls[i] = &sd.files[i].decl;
		undigested = undigested || !sd.files[i].sha256[0];
	}
	if (import_call(c, run_id, &sd, decls, remote_paths, st) == 0)
		return 0;
	/* Refused before sbxd connected, and for a "": sbxd checks every ""
	 * before it takes any file, so nothing was declared or sent. */
	if (!undigested || !refused_as_new(&sd, remote_paths, st))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!sd.files[i].sha256[0] && hash_declared(&sd.files[i], local_paths[i], st) < 0)
			return -1;
	return import_call(c, run_id, &sd, decls, remote_paths, st);
}
