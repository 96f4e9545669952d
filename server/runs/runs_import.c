/* SPDX-License-Identifier: Apache-2.0 */
/* ImportInputs: input files received from a caller on this host over a
 * unix socket it listens on, instead of 1 MiB PutInput chunks over the RPC.
 *
 * The side channel is the export's (runs_side.c: why sbxd connects to the
 * caller; common/import_wire.h: what goes on it). Why a call of its own
 * rather than a mode of PutInput: PutInput is one chunk on the short lane;
 * this call waits on the caller's socket for
 * as long as the files take (bounded), so it belongs on the long lane with
 * ExportArtifacts, whose request shape (socket_name, nonce) it repeats.
 *
 * Nothing a chunked PutInput refuses is taken here: each file is declared
 * by PutInput's own code (runs_inputs.c's inputs_take: the run's state,
 * the path rules, the manifest's size and sha256, the run's input ceilings
 * and disk quota) as a first chunk declaring the whole file, before any
 * byte is read, and stays marked busy (no other upload of it) until the
 * call ends. As a first chunk it restarts a file a chunked upload left part
 * way (the caller's own), and a failure here then drops that part too. The bytes are written to
 * staging/ as PutInput's are and hashed as they arrive; every file must match its size and sha256
 * and the caller must end its sending before any file is published: a failure until then leaves
 * /data as it was (a path declared by this call stays declared, as a failed first PutInput chunk
 * leaves it) and removes every staging file. Then the files are published one rename at a time,
 * each whole: paths in different directories cannot appear together, so an exec running meanwhile
 * may see some before the rest, and a publish that fails midway (a full disk) leaves those before
 * it published.
 *
 * What a caller can make sbxd do: one worker of its own share of the long
 * lane waits, at most same_host_record_ms per file and same_host_call_ms
 * per call; sbxd reads at most SBX_IMPORT_CHUNK bytes at a time into one
 * of SBX_SHA256_PIPE_SLOTS buffers (1 MiB, and one hashing thread, for a
 * call of more than that; freed when the call ends), into files whose
 * sizes the quota already took; no descriptor
 * reaches sbxd (its socket refuses them, before it connects; without
 * SO_PASSRIGHTS the call is UNIMPLEMENTED and changes nothing). A
 * Teardown meanwhile stops the call within a tenth of a second. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "clock.h"
#include "import_wire.h"
#include "run.h"
#include "runs_inputs.h"
#include "runs_manager.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "runs_side.h"
#include "runs_util.h"
#include "service.h"
#include "sha256.h"
#include "sha256_pipe.h"
#include "tree.h"
#include "util.h"

/* How often a call waiting on the caller looks whether a Teardown claimed
 * the run (which waits for the call's busy inputs). */
#define CLAIM_POLL_MS 100

/* One file of the call, taken (busy) from its declaration to the end. */
struct import_file {
	struct run_input *in;
	uint32_t mode; /* what it gets in /data (PutInput's rule) */
};

static int check_request(const struct sbx_identity *who, const Sbx__V1__ImportInputsRequest *req,
			 struct sbx_rpc_status *st)
{
	if (!who->local)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__FAILED_PRECONDITION,
		    "ImportInputs takes bytes from a socket of the caller and works only over "
		    "ipc:// on sbxd's own host; on this transport use PutInput");
	if (req->n_files == 0 || req->n_files > SBX_IMPORT_MAX_FILES)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "files: %zu given, 1 to %d allowed", req->n_files,
				    SBX_IMPORT_MAX_FILES);
	if (side_check_address(req->socket_name, req->nonce.len, st) < 0)
		return -1;
	for (size_t i = 0; i < req->n_files; i++) {
		const Sbx__V1__InputFile *f = req->files[i];

		/* As on a first PutInput chunk: "" for a path the run has
		 * declared (its manifest's, or an upload's before) means that
		 * declaration's digest, which the bytes are checked against; a
		 * new path must say it (inputs_take refuses "" naming why).
		 * A caller uploading a declared input need not hash it first:
		 * sbxd does, as the bytes arrive. */
		if (f->sha256[0] && !is_sha256_hex(f->sha256))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "files[%zu].sha256: must be 64 lowercase hex digits, "
					    "or empty for a declared input",
					    i);
		if (f->arrived_unix_ms)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "files[%zu].arrived_unix_ms: sbxd writes it in "
					    "manifests; leave it 0",
					    i);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(req->files[j]->path, f->path))
				return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
						    "files: %.200s is listed twice", f->path);
	}
	return 0;
}

/* Every file declared and taken as its first PutInput chunk would be;
 * *taken counts those to give back. A file given sha256 "" must name an
 * input the run has, checked for all of them first: taking a file changes
 * things (a new path is declared and charged, an incomplete upload starts
 * over), so a call refused for its third file must not have taken the
 * first two. A caller that does not know whether a path is declared tries
 * "" and hashes only when told it is new (clients/c/import.c). */
static int take_all(struct sbx_run *r, const Sbx__V1__ImportInputsRequest *req,
		    struct import_file *files, size_t *taken, struct sbx_rpc_status *st)
{
	for (size_t i = 0; i < req->n_files; i++)
		if (!req->files[i]->sha256[0] &&
		    inputs_require_declared(r, req->files[i]->path, st) < 0)
			return -1;
	for (size_t i = 0; i < req->n_files; i++) {
		const Sbx__V1__InputFile *f = req->files[i];
		Sbx__V1__PutInputRequest chunk = SBX__V1__PUT_INPUT_REQUEST__INIT;

		chunk.run_id = req->run_id;
		chunk.path = f->path;
		chunk.mode = f->mode;
		chunk.size = f->size;
		chunk.sha256 = f->sha256;
		if (!(files[i].in = inputs_take(r, &chunk, &files[i].mode, st)))
			return -1;
		*taken = i + 1;
		/* PutInput takes size 0 as "not given" for a declared path; here
		 * it is the number of bytes the caller will send. */
		if (files[i].in->size != f->size)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "input %.200s is declared with size %llu; files[%zu] "
					    "says %llu",
					    f->path, (unsigned long long)files[i].in->size, i,
					    (unsigned long long)f->size);
	}
	return 0;
}

static bool claimed(struct sbx_run *r)
{
	bool c;

	run_lock(r);
	c = run_is_claimed(r);
	run_unlock(r);
	return c;
}

/* One message of the caller's into buf (SBX_IMPORT_CHUNK bytes): its
 * whole length (MSG_TRUNC: a longer one is said, not split), 0 at the
 * caller's end, or -1 with st. No control buffer: nothing but bytes is
 * read, and the socket refuses descriptors before any could be queued.
 * The deadline and a Teardown's claim are looked at before every message,
 * not only when none is queued: a caller that keeps sbxd's queue full
 * (sendmmsg of 1-byte messages outruns a recv, pwrite and hash of each)
 * would otherwise keep its worker past both. */
static ssize_t recv_message(struct sbx_run *r, int sock, uint8_t *buf, int64_t deadline,
			    const struct side_deadlines *dl, const char *what,
			    struct sbx_rpc_status *st)
{
	for (;;) {
		int64_t left = deadline - sbx_mono_ms();
		struct pollfd p = {.fd = sock, .events = POLLIN};
		ssize_t k;

		if (claimed(r))
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "run %s is being torn down: nothing imported", r->id);
		if (left <= 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__DEADLINE_EXCEEDED,
					    "same-host: the caller's socket did not %s in time "
					    "(%u ms per record, %u ms per call)",
					    what, dl->record_ms, dl->call_ms);
		k = recv(sock, buf, SBX_IMPORT_CHUNK, MSG_DONTWAIT | MSG_TRUNC);
		if (k >= 0)
			return k;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__ABORTED,
						  "same-host: receiving from the caller");
		if (poll(&p, 1, (int)(left < CLAIM_POLL_MS ? left : CLAIM_POLL_MS)) < 0 &&
		    errno != EINTR)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "same-host: poll");
	}
}

static int write_all(int fd, const uint8_t *buf, size_t len, uint64_t off, const char *path,
		     struct sbx_rpc_status *st)
{
	for (size_t w = 0; w < len;) {
		ssize_t n = pwrite(fd, buf + w, len - w, (off_t)(off + w));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "input %.200s: write",
					   path);
			return sbx_rpc_code(st, quota_disk_full(st->err.errnum)
						    ? SBX__V1__CODE__RESOURCE_EXHAUSTED
						    : SBX__V1__CODE__INTERNAL);
		}
		w += (size_t)n;
	}
	return 0;
}

/* One file's bytes, exactly its declared size, into its staging file,
 * hashed beside the writes (the pipe's thread), then checked against its
 * sha256. */
static int receive_file(struct sbx_run *r, int sock, const struct import_file *f,
			struct sbx_sha256_pipe *hash, const struct side_deadlines *dl,
			struct sbx_rpc_status *st)
{
	struct run_input *in = f->in;
	int64_t deadline = sbx_mono_ms() + dl->record_ms;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint64_t got = 0;
	char hex[65];

	if (deadline > dl->call_end)
		deadline = dl->call_end;
	if (quota_reserve_check(r->runs, in->size, (uint64_t)input_depth(in->path), "inputs", st) <
	    0)
		return -1;
	_cleanup_close_ int fd = inputs_staging_open(r, in, &st->err);
	if (fd < 0) {
		sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		return sbx_rpc_prefix(st, "input %.200s", in->path);
	}
	while (got < in->size) {
		uint8_t *buf = sbx_sha256_pipe_slot(hash);
		ssize_t k = recv_message(r, sock, buf, deadline, dl, "send a file's bytes", st);

		if (k < 0)
			return -1;
		if (k == 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "input %.200s: size mismatch: the caller ended after "
					    "%llu bytes, the manifest says %llu",
					    in->path, (unsigned long long)got,
					    (unsigned long long)in->size);
		if (k > SBX_IMPORT_CHUNK)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "input %.200s: a message of %zd bytes, at most %d per "
					    "message",
					    in->path, k, SBX_IMPORT_CHUNK);
		if ((uint64_t)k > in->size - got)
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__INVALID_ARGUMENT,
			    "input %.200s: the caller sent more than the manifest's "
			    "size %llu (a message of %zd bytes after %llu)",
			    in->path, (unsigned long long)in->size, k, (unsigned long long)got);
		if (write_all(fd, buf, (size_t)k, got, in->path, st) < 0)
			return -1;
		if (sbx_sha256_pipe_push(hash, in->md, (size_t)k, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		got += (uint64_t)k;
	}
	if (sbx_sha256_pipe_drain(hash, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	if (!EVP_DigestFinal_ex(in->md, md, &mdlen) || mdlen != 32)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 of %.200s failed",
				    in->path);
	sbx_sha256_hex(md, hex);
	if (strcmp(hex, in->sha256) != 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: sha256 mismatch: the bytes received hash to %s, "
				    "the manifest says %s",
				    in->path, hex, in->sha256);
	return 0;
}

/* After the last file, the caller's end and nothing else. */
static int await_end(struct sbx_run *r, int sock, uint8_t *buf, const struct side_deadlines *dl,
		     struct sbx_rpc_status *st)
{
	ssize_t k = recv_message(r, sock, buf, dl->call_end, dl,
				 "end after the last file (close or shutdown)", st);

	if (k < 0)
		return -1;
	if (k > 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "the caller sent more than the files' declared sizes (a "
				    "message of %zd bytes after the last file)",
				    k);
	return 0;
}

/* Every file received and checked, the caller's end seen, then every file
 * published; *published counts those in /data. The hash has a thread of
 * its own once the call brings more bytes than its buffers hold (a thread
 * for a few KiB costs more than it saves) and one can be made (else it
 * hashes inline: slower, not a failure); either way the buffers are
 * SBX_SHA256_PIPE_SLOTS messages at most, freed (and the thread joined)
 * before the caller's thread touches the inputs' digests again. */
static int import_files(struct sbx_run *r, int sock, const Sbx__V1__ImportInputsRequest *req,
			const struct import_file *files, const struct side_deadlines *dl,
			size_t *published, struct sbx_rpc_status *st)
{
	uint64_t total = 0;

	for (size_t i = 0; i < req->n_files; i++)
		total += files[i].in->size;
	_cleanup_(sbx_sha256_pipe_freep) struct sbx_sha256_pipe *hash = sbx_sha256_pipe_new(
	    SBX_IMPORT_CHUNK, total > (uint64_t)SBX_SHA256_PIPE_SLOTS * SBX_IMPORT_CHUNK,
	    "sbxd-hash", &st->err);

	if (!hash)
		return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
	for (size_t i = 0; i < req->n_files; i++)
		if (receive_file(r, sock, &files[i], hash, dl, st) < 0)
			return -1;
	if (await_end(r, sock, sbx_sha256_pipe_slot(hash), dl, st) < 0)
		return -1;
	for (size_t i = 0; i < req->n_files; i++) {
		if (inputs_publish(r, files[i].in, files[i].mode, &st->err) < 0) {
			sbx_rpc_code(st, quota_disk_full(st->err.errnum)
					     ? SBX__V1__CODE__RESOURCE_EXHAUSTED
					     : SBX__V1__CODE__INTERNAL);
			return sbx_rpc_prefix(st, "input %.200s", files[i].in->path);
		}
		*published = i + 1;
	}
	return 0;
}

static Sbx__V1__ImportInputsResponse *answer(const struct import_file *files, size_t n,
					     struct sbx_rpc_status *st)
{
	Sbx__V1__ImportInputsResponse *o = malloc(sizeof(*o));

	if (!o) {
		sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		return NULL;
	}
	sbx__v1__import_inputs_response__init(o);
	o->sha256 = calloc(n, sizeof(*o->sha256));
	for (size_t i = 0; o->sha256 && i < n; i++)
		if ((o->sha256[o->n_sha256] = strdup(files[i].in->sha256)))
			o->n_sha256++;
	if (o->n_sha256 != n) {
		sbx__v1__import_inputs_response__free_unpacked(o, NULL);
		sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		return NULL;
	}
	o->files_received = (uint32_t)n;
	return o;
}

SBX_HANDLER(import_inputs, Sbx__V1__ImportInputsRequest, Sbx__V1__ImportInputsResponse)
{
	struct side_deadlines dl = {.record_ms = runs->cfg.same_host_record_ms,
				    .call_ms = runs->cfg.same_host_call_ms};
	size_t taken = 0, published = 0;
	uint64_t bytes = 0;
	struct sbx_run *r;
	int rc;

	/* Callers take UNIMPLEMENTED as "upload in chunks instead". */
	if (!runs->cfg.same_host_import)
		return sbx_rpc_fail(st, SBX__V1__CODE__UNIMPLEMENTED,
				    "same-host upload is off on this sbxd (config "
				    "same_host_import); upload with PutInput instead");
	if (check_request(who, req, st) < 0)
		return -1;
	dl.call_end = sbx_mono_ms() + dl.call_ms;
	/* Before anything is declared: a kernel that cannot refuse
	 * descriptors changes nothing. */
	_cleanup_close_ int sock = side_receiving_socket(st);
	if (sock < 0)
		return -1;
	_cleanup_free_ struct import_file *files = calloc(req->n_files, sizeof(*files));
	if (!files)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	rc = take_all(r, req, files, &taken, st);
	if (rc == 0)
		rc = side_connect_on(sock, who, req->socket_name, req->nonce.data, req->nonce.len,
				     &dl, st);
	if (rc == 0)
		rc = import_files(r, sock, req, files, &dl, &published, st);
	if (rc == 0)
		*resp = answer(files, req->n_files, st);
	if (rc == 0 && !*resp)
		rc = -1; /* out of memory, after the files went in: they stay */
	run_lock(r);
	for (size_t i = 0; i < taken; i++) {
		if (i < published)
			bytes += files[i].in->size;
		inputs_release(r, files[i].in, i < published, files[i].in->size, true,
			       files[i].mode);
	}
	run_unlock(r);
	if (published)
		run_audit(r, "inputs_imported",
			  json_pack("{s:I, s:I, s:I}", "files", (json_int_t)published, "bytes",
				    (json_int_t)bytes, "uid", (json_int_t)who->local_uid));
	run_unref(r);
	return rc;
}
