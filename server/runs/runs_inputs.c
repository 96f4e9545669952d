/* SPDX-License-Identifier: Apache-2.0 */
/* The input manifest and PutInput: files streamed into the run's /data in
 * order, each checked against the size and sha256 its caller declared: at
 * CreateRun (every one of those before the first exec), or on its first
 * PutInput chunk (an input added later, also between execs).
 *
 * A file is written under staging/, beside the data directory on the same
 * file system but outside the tree the sandbox sees, and renamed into
 * /data once its last chunk matched the declaration, with its mode: an
 * exec sees no file or the whole verified one, never a part. A path is
 * declared once and never replaced (RENAME_NOREPLACE), so no file an exec
 * already read changes under it; /data only grows.
 *
 * A chunk is written outside the run's lock with the input marked busy, so
 * a slow disk stalls only that upload; the sha256 is computed as the chunks
 * arrive, so the last chunk costs no second pass. Every open is beneath the
 * data directory without following links. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "clock.h"
#include "path.h"
#include "runs_artifacts.h"
#include "runs_inputs.h"
#include "runs_manager.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "runs_util.h"
#include "sha256.h"
#include "tree.h"
#include "util.h"

#define INPUTS_MAX 10000
/* A 1024-byte path could name ~510 directories, each an inode and a block
 * that no size in the manifest declares: the depth and the directories of
 * a run are bounded, and every one is charged (inputs_disk_bytes). */
#define INPUT_DEPTH_MAX 32
#define INPUT_DIRS_MAX	10000
#define BLOCK		4096ull

static int cmp_input(const void *a, const void *b)
{
	return strcmp(((const struct run_input *)a)->path, ((const struct run_input *)b)->path);
}

/* mu held (r->added); r->inputs alone while STARTING. */
static struct run_input *find_input(struct sbx_run *r, const char *path) REQUIRES(r->mu)
{
	struct run_input key = {.path = (char *)path};
	struct run_input *in;

	if (!path)
		return NULL;
	if (r->n_inputs && (in = bsearch(&key, r->inputs, r->n_inputs, sizeof(key), cmp_input)))
		return in;
	for (in = r->added; in; in = in->next)
		if (!strcmp(in->path, path))
			return in;
	return NULL;
}

static size_t components(const char *path)
{
	size_t n = 1;

	for (const char *p = path; (p = strchr(p, '/')); p++)
		n++;
	return n;
}

/* The distinct directories above the sorted paths: every path under a
 * directory sorts next to the others under it, so a directory is new iff
 * the path before does not start with it. */
static size_t count_dirs(const struct sbx_run *r)
{
	size_t n = 0;

	for (size_t i = 0; i < r->n_inputs; i++) {
		const char *cur = r->inputs[i].path;

		for (const char *p = cur; (p = strchr(p, '/')); p++)
			if (i == 0 || strncmp(r->inputs[i - 1].path, cur, (size_t)(p - cur) + 1))
				n++;
	}
	return n;
}

uint64_t inputs_disk_bytes(const struct sbx_run *r)
{
	uint64_t bytes = r->n_input_dirs * BLOCK;

	for (size_t i = 0; i < r->n_inputs; i++) {
		uint64_t size = r->inputs[i].size;

		bytes += size ? (size + BLOCK - 1) / BLOCK * BLOCK : BLOCK;
	}
	return bytes;
}

uint64_t inputs_inodes(const struct sbx_run *r)
{
	return r->n_inputs + r->n_input_dirs;
}

/* mu held: "a" and "a/b" cannot both be files. */
static const char *conflict(struct sbx_run *r, const char *path) REQUIRES(r->mu)
{
	char buf[RUN_PATH_MAX + 1];
	struct run_input *in;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf; (p = strchr(p, '/')); p++) {
		*p = '\0';
		in = find_input(r, buf);
		*p = '/';
		if (in)
			return in->path;
	}
	return NULL;
}

/* conflict() for the inputs CreateRun declares, without the lock: the run
 * is STARTING, so no other thread can reach it (run.h), and r->added, the
 * [mu] half of what find_input reads, is still empty. */
static const char *starting_conflict(struct sbx_run *r, const char *path) NO_THREAD_SAFETY_ANALYSIS
{
	return conflict(r, path);
}

int inputs_from_request(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
			struct sbx_rpc_status *st)
{
	size_t n = req->n_inputs;
	const char *why;

	if (n > INPUTS_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "inputs: %zu files, at most %d", n, INPUTS_MAX);
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const Sbx__V1__InputFile *f = req->inputs[i];

		if ((why = sbx_path_problem(f->path, RUN_PATH_MAX, SBX_PATH_RELATIVE)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs[%zu].path %.200s: %s", i, f->path, why);
		if (components(f->path) > INPUT_DEPTH_MAX)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs[%zu].path %.200s: %zu components, at most %d",
					    i, f->path, components(f->path), INPUT_DEPTH_MAX);
		if (!is_sha256_hex(f->sha256))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs[%zu].sha256: must be 64 lowercase hex digits",
					    i);
		if ((why = input_mode_problem(f->mode)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs[%zu].mode: 0%o: %s", i, f->mode, why);
		if (f->arrived_unix_ms)
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs[%zu].arrived_unix_ms: sbxd writes it in "
					    "manifests; leave it 0",
					    i);
	}
	r->inputs = calloc(n, sizeof(*r->inputs));
	if (!r->inputs)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct run_input *in = &r->inputs[i];

		if (!(in->path = strdup(req->inputs[i]->path)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		r->n_inputs = i + 1;
		in->size = req->inputs[i]->size;
		in->mode = req->inputs[i]->mode;
		memcpy(in->sha256, req->inputs[i]->sha256, 65);
	}
	qsort(r->inputs, n, sizeof(*r->inputs), cmp_input);
	for (size_t i = 0; i < n; i++)
		r->inputs[i].serial = i;
	for (size_t i = 0; i < n; i++) {
		const char *other;

		if (i > 0 && !strcmp(r->inputs[i - 1].path, r->inputs[i].path))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs: %.200s is listed twice", r->inputs[i].path);
		if ((other = starting_conflict(r, r->inputs[i].path)))
			return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					    "inputs: %.200s cannot be a file and the directory of "
					    "%.200s",
					    other, r->inputs[i].path);
	}
	r->n_input_dirs = count_dirs(r);
	if (r->n_input_dirs > INPUT_DIRS_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "inputs: the paths make %zu directories, at most %d",
				    r->n_input_dirs, INPUT_DIRS_MAX);
	return 0;
}

void inputs_free(struct sbx_run *r)
{
	for (size_t i = 0; i < r->n_inputs; i++) {
		free(r->inputs[i].path);
		EVP_MD_CTX_free(r->inputs[i].md);
	}
	free(r->inputs);
	r->inputs = NULL;
	r->n_inputs = 0;
	for (struct run_input *in = r->added, *next; in; in = next) {
		next = in->next;
		free(in->path);
		EVP_MD_CTX_free(in->md);
		free(in);
	}
	r->added = NULL;
	r->added_tail = &r->added;
	r->n_added = 0;
}

const char *input_mode_problem(uint32_t mode)
{
	if (mode & ~0777u)
		return "only permission bits (0..0777) are allowed; setuid, setgid and sticky "
		       "bits are refused";
	return NULL;
}

const char *inputs_missing(struct sbx_run *r)
{
	for (size_t i = 0; i < r->n_inputs; i++)
		if (!r->inputs[i].complete)
			return r->inputs[i].path;
	return NULL;
}

static void staging_name(const struct run_input *in, char buf[32])
{
	snprintf(buf, 32, "%llu", (unsigned long long)in->serial);
}

/* Removes a partly written or rejected upload, so a new one starts clean
 * and a failed one leaves no inode behind. */
static void discard(struct sbx_run *r, struct run_input *in)
{
	char name[32];

	staging_name(in, name);
	if (unlinkat(r->staging_fd, name, 0) < 0) {
		/* ENOENT: nothing was written yet; the next first chunk
		 * truncates it anyway. */
	}
}

static int open_input(struct sbx_run *r, struct run_input *in, bool first, struct sbx_err *err)
{
	char name[32];
	int fd;

	staging_name(in, name);
	fd = openat(r->staging_fd, name,
		    O_WRONLY | O_CLOEXEC | O_NOFOLLOW | (first ? O_CREAT | O_TRUNC : 0), 0600);
	return fd < 0 ? sbx_fail_errno(err, "%s", in->path) : fd;
}

/* The bits an upload of `mode` gets in /data. It is our uid's file, and the
 * sandbox user is another uid (a host uid of the run's own,
 * common/host_ids.h): others get the owner's read and execute bits, so that
 * a private upload (0600, 0700) is still the sandbox's to read and run, as
 * when the sandbox ran as our uid. No other user reaches it: the run's
 * directory is 0700. /data is read-only to the sandbox whatever the bits. */
static uint32_t input_data_mode(uint32_t mode)
{
	return mode | ((mode >> 6) & 05);
}

/* The verified upload into /data, whole, with its mode; never over a file
 * that is there (RENAME_NOREPLACE). */
static int publish(struct sbx_run *r, struct run_input *in, uint32_t mode, struct sbx_err *err)
{
	char name[32];
	const char *base;
	_cleanup_close_ int fd = -1;
	_cleanup_close_ int dir = -1;

	staging_name(in, name);
	fd = openat(r->staging_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fchmod(fd, input_data_mode(mode)) < 0)
		return sbx_fail_errno(err, "%s: mode", in->path);
	/* A failed upload of another input never removes a directory in
	 * /data any more: what is there stays. */
	dir = mkdirs_beneath(r->data_fd, in->path, &base, err);
	if (dir < 0)
		return -1;
	if (renameat2(r->staging_fd, name, dir, base, RENAME_NOREPLACE) < 0)
		return sbx_fail_errno(err, "%s: into /data", in->path);
	return 0;
}

static int write_chunk(struct sbx_run *r, struct run_input *in, uint64_t offset,
		       const ProtobufCBinaryData *data, struct sbx_err *err)
{
	_cleanup_close_ int fd = open_input(r, in, offset == 0, err);
	size_t off = 0;

	if (fd < 0)
		return -1;
	while (off < data->len) {
		ssize_t n = pwrite(fd, data->data + off, data->len - off, (off_t)(offset + off));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return sbx_fail_errno(err, "write %s", in->path);
		off += (size_t)n;
	}
	if (!EVP_DigestUpdate(in->md, data->data, data->len))
		return sbx_fail(err, "sha256 of %s failed", in->path);
	return 0;
}

/* mu held: may this chunk be written? */
static int check_chunk(struct sbx_run *r, struct run_input *in, const Sbx__V1__PutInputRequest *req,
		       struct sbx_rpc_status *st) REQUIRES(r->mu)
{
	if (in->complete)
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "input %.200s is already complete", in->path);
	if (in->busy)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
				    "input %.200s: another PutInput for it is in progress",
				    in->path);
	/* A chunk at 0 of a file not complete starts it over (an upload that
	 * was cut off, sent again by a repeat of its create): checked as a
	 * first chunk, and only once it passes is what came before dropped,
	 * from the file (opened O_TRUNC at 0) and from the hash. */
	uint64_t received = req->offset == 0 ? 0 : in->received;

	if (req->offset != received && received)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__INVALID_ARGUMENT,
		    "input %.200s: offset %llu, expected %llu or 0 (chunks arrive in "
		    "order; 0 starts the file over)",
		    in->path, (unsigned long long)req->offset, (unsigned long long)received);
	if (req->offset != received)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: offset %llu, expected 0 (chunks arrive in "
				    "order)",
				    in->path, (unsigned long long)req->offset);
	if (req->data.len > in->size - received)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: %llu bytes exceed the manifest's size %llu",
				    in->path, (unsigned long long)(received + req->data.len),
				    (unsigned long long)in->size);
	if (req->last && received + req->data.len != in->size)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: size mismatch: %llu bytes, the manifest says "
				    "%llu",
				    in->path, (unsigned long long)(received + req->data.len),
				    (unsigned long long)in->size);
	/* The first chunk says the mode (or leaves the declaration's); later
	 * ones leave it 0 or repeat it (sandbox.proto). */
	if (req->offset == 0 && req->mode && in->mode && req->mode != in->mode)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: mode 0%o, but it was declared 0%o", in->path,
				    req->mode, in->mode);
	if (req->offset && req->mode && req->mode != in->upload_mode)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s: mode 0%o, but its first chunk said 0%o (later "
				    "chunks leave it 0 or repeat it)",
				    in->path, req->mode, in->upload_mode);
	if (req->offset == 0) {
		in->received = 0;
		in->upload_mode = req->mode ? req->mode : in->mode;
		EVP_MD_CTX_free(in->md); /* NULL unless starting over */
		in->md = NULL;
	}
	if (!in->md) {
		in->md = EVP_MD_CTX_new();
		if (!in->md || !EVP_DigestInit_ex(in->md, EVP_sha256(), NULL))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256: out of memory");
	}
	return 0;
}

/* What a declaration charges: the file in whole blocks and every
 * directory it may make (CreateRun charges its inputs the same way). */
struct charge {
	uint64_t bytes, inodes;
};

static struct charge declare_charge(const Sbx__V1__PutInputRequest *req)
{
	uint64_t depth = components(req->path);

	return (struct charge){(req->size + BLOCK - 1) / BLOCK * BLOCK + depth * BLOCK, depth};
}

/* mu held: a Teardown's manifest holds the inputs whole, and must still
 * fit an answer with the new one (as CreateRun checked for its own). */
static int record_grows_too_much(struct sbx_run *r, const Sbx__V1__PutInputRequest *req,
				 size_t *record, struct sbx_rpc_status *st) REQUIRES(r->mu)
{
	Sbx__V1__InputFile f = SBX__V1__INPUT_FILE__INIT;
	size_t bound = artifacts_reply_bytes(r->runs) / 2;

	f.path = req->path;
	f.size = req->size;
	f.sha256 = req->sha256;
	*record = 3 + INPUT_RECORD_EXTRA + protobuf_c_message_get_packed_size(&f.base);
	if (r->record_bytes + *record <= bound)
		return 0;
	return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			    "input %.200s: the run's manifest would take more than %zu bytes "
			    "packed, half of an answer within max_message_bytes",
			    req->path, bound);
}

/* mu held: a path that is no input of the run, given with its size and
 * sha256 on a first chunk, joins the manifest: the same rules as
 * CreateRun's (path, depth, conflicts, the ceilings of limits_max). Its
 * disk is charged first, as CreateRun's is, but outside the run's lock
 * (quota_charge takes the registry lock): without `charged` a declaration
 * that passes every rule returns NULL with st untouched, for the caller to
 * charge declare_charge() and come back. */
static struct run_input *declare(struct sbx_run *r, const Sbx__V1__PutInputRequest *req,
				 bool charged, struct sbx_rpc_status *st) REQUIRES(r->mu)
{
	const struct runs_live live = runs_live(r->runs);
	const struct sbx_limits_max *max = &live.limits_max;
	size_t len = strlen(req->path), n = r->n_inputs + r->n_added;
	uint64_t bytes = r->added_bytes, depth = components(req->path);
	const char *why, *other;
	struct run_input *in;
	size_t record;

	if ((why = sbx_path_problem(req->path, RUN_PATH_MAX, SBX_PATH_RELATIVE)) ||
	    depth > INPUT_DEPTH_MAX) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "path %.200s: %s", req->path,
			     why ? why : "too many components");
		return NULL;
	}
	if (!is_sha256_hex(req->sha256)) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			     "input %.200s is not in the run's manifest: its first chunk declares "
			     "it with size and sha256 (64 lowercase hex digits)",
			     req->path);
		return NULL;
	}
	other = conflict(r, req->path);
	for (size_t i = 0; !other && i < r->n_inputs; i++)
		if (!strncmp(r->inputs[i].path, req->path, len) && r->inputs[i].path[len] == '/')
			other = r->inputs[i].path;
	for (in = r->added; in && !other; in = in->next)
		if (!strncmp(in->path, req->path, len) && in->path[len] == '/')
			other = in->path;
	if (other) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			     "input %.200s: it and %.200s cannot be a file and its directory",
			     req->path, other);
		return NULL;
	}
	if (n >= INPUTS_MAX || n >= max->inputs) {
		sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			     "input %.200s: the run has %zu inputs, this host's ceiling (config "
			     "limits_max.inputs)",
			     req->path, n);
		return NULL;
	}
	for (size_t i = 0; i < r->n_inputs; i++)
		bytes += r->inputs[i].size;
	if (req->size > max->input_bytes || bytes > max->input_bytes - req->size) {
		sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			     "input %.200s: more than this host's ceiling of %llu bytes per run "
			     "(config limits_max.input_bytes)",
			     req->path, (unsigned long long)max->input_bytes);
		return NULL;
	}
	if (record_grows_too_much(r, req, &record, st) < 0)
		return NULL;
	if (!charged)
		return NULL;
	in = calloc(1, sizeof(*in));
	if (!in || !(in->path = strdup(req->path))) {
		free(in);
		sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		return NULL;
	}
	in->size = req->size;
	memcpy(in->sha256, req->sha256, 65);
	in->serial = n;
	*r->added_tail = in;
	r->added_tail = &in->next;
	r->n_added++;
	r->added_bytes += req->size;
	r->record_bytes += record;
	return in;
}

/* mu held: a size or sha256 given for a declared input repeats it. */
static int check_declared(const struct run_input *in, const Sbx__V1__PutInputRequest *req,
			  struct sbx_rpc_status *st)
{
	if ((req->sha256 && req->sha256[0] && strcmp(req->sha256, in->sha256)) ||
	    (req->size && req->size != in->size))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "input %.200s is declared with size %llu and sha256 %s; a "
				    "path is declared once and never replaced",
				    in->path, (unsigned long long)in->size, in->sha256);
	return 0;
}

/* What a chunk that declares nothing says of a path the run does not have. */
static int not_declared(const char *path, struct sbx_rpc_status *st)
{
	return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
			    "input %.200s is not in the run's manifest: declare it at CreateRun "
			    "(inputs) or with size and sha256 on its first chunk",
			    path);
}

int inputs_require_declared(struct sbx_run *r, const char *path, struct sbx_rpc_status *st)
{
	bool declared;

	run_lock(r);
	declared = find_input(r, path) != NULL;
	run_unlock(r);
	return declared ? 0 : not_declared(path, st);
}

/* mu held: the state and the run's own checks. A new path to declare
 * returns NULL with *declaring set until `charged` (see declare); *added:
 * the call declared it. */
static struct run_input *check_run(struct sbx_run *r, const Sbx__V1__PutInputRequest *req,
				   bool charged, bool *declaring, bool *added,
				   struct sbx_rpc_status *st) REQUIRES(r->mu)
{
	struct run_input *in;
	const char *why;

	if (run_is_claimed(r)) {
		runs_not_found(r->runs, r->identity, r->id, st);
		return NULL;
	}
	if (r->caller_data) {
		sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			     "run %s takes /data from its input_dir; it takes no uploads", r->id);
		return NULL;
	}
	if (!run_sandbox_live(r)) {
		sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION, "run %s has ended (%s)", r->id,
			     run_public_state_name(run_state_public(r)));
		return NULL;
	}
	if (r->data_fd < 0) {
		sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
			     "run %s: the policy mounts no /data", r->id);
		return NULL;
	}
	if ((why = input_mode_problem(req->mode))) {
		sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "input %.200s: mode 0%o: %s",
			     req->path, req->mode, why);
		return NULL;
	}
	in = find_input(r, req->path);
	if (in && check_declared(in, req, st) < 0)
		return NULL;
	if (!in && req->offset == 0 && req->sha256 && req->sha256[0]) {
		sbx_rpc_ok(st);
		in = declare(r, req, charged, st);
		*declaring = !in && st->code == SBX__V1__CODE__OK;
		*added = in != NULL;
	} else if (!in)
		not_declared(req->path, st);
	if (in && check_chunk(r, in, req, st) < 0)
		return NULL;
	return in;
}

/* mu held: the input is this PutInput's to write, with the mode it gets. */
static struct run_input *take(struct run_input *in, uint32_t *mode)
{
	if (in) {
		in->busy = true;
		*mode = in->upload_mode ? in->upload_mode : 0644;
	}
	return in;
}

struct run_input *inputs_take(struct sbx_run *r, const Sbx__V1__PutInputRequest *req,
			      uint32_t *mode, struct sbx_rpc_status *st)
{
	struct run_input *in;
	bool declaring = false, added = false;

	run_lock(r);
	in = take(check_run(r, req, false, &declaring, &added, st), mode);
	run_unlock(r);
	if (declaring) {
		/* Charged outside the lock, then the checks again: the run may
		 * have ended, or another PutInput declared the path meanwhile. */
		struct charge c = declare_charge(req);

		if (quota_charge(r, c.bytes, c.inodes, "inputs", st) < 0)
			return NULL;
		run_lock(r);
		in = take(check_run(r, req, true, &declaring, &added, st), mode);
		run_unlock(r);
		if (!added)
			quota_uncharge(r, c.bytes);
	}
	return in;
}

size_t input_depth(const char *path)
{
	return components(path);
}

int inputs_staging_open(struct sbx_run *r, struct run_input *in, struct sbx_err *err)
{
	return open_input(r, in, true, err);
}

int inputs_publish(struct sbx_run *r, struct run_input *in, uint32_t mode, struct sbx_err *err)
{
	return publish(r, in, mode, err);
}

void inputs_release(struct sbx_run *r, struct run_input *in, bool ok, uint64_t len, bool last,
		    uint32_t mode) REQUIRES(r->mu)
{
	in->busy = false;
	run_changed(r); /* a teardown may be waiting for this write */
	if (ok) {
		in->received += len;
		in->complete = last;
		if (in->complete) {
			in->mode = mode;
			in->arrived_ms = sbx_unix_ms();
		}
	}
	if (!ok || in->complete) {
		EVP_MD_CTX_free(in->md);
		in->md = NULL;
	}
	if (!ok) {
		/* A failed or rejected chunk would leave the hash and the file
		 * out of step: the file starts over. */
		in->received = 0;
		in->upload_mode = 0;
		discard(r, in);
	}
}

SBX_HANDLER(put_input, Sbx__V1__PutInputRequest, Sbx__V1__PutInputResponse)
{
	struct sbx_run *r;
	struct run_input *in;
	Sbx__V1__PutInputResponse *p;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char hex[65] = "";
	uint32_t mode = 0;
	int rc = 0;

	if (req->data.len > RUN_CHUNK_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "data: %zu bytes, at most %u per chunk", req->data.len,
				    RUN_CHUNK_MAX);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	if (!(in = inputs_take(r, req, &mode, st))) {
		run_unref(r);
		return -1;
	}

	/* The chunk goes to staging/, which no exec sees. The quota was
	 * charged at the declaration; the free-space reserve is the disk's
	 * now. */
	if (quota_reserve_check(r->runs, req->data.len,
				req->offset ? 0 : (uint64_t)components(in->path), "inputs",
				st) < 0) {
		rc = -1;
	} else if (write_chunk(r, in, req->offset, &req->data, &st->err) < 0) {
		sbx_rpc_code(st, quota_disk_full(st->err.errnum) ? SBX__V1__CODE__RESOURCE_EXHAUSTED
								 : SBX__V1__CODE__INTERNAL);
		rc = sbx_rpc_prefix(st, "input %.200s", in->path);
	} else if (req->last && (!EVP_DigestFinal_ex(in->md, md, &mdlen) || mdlen != 32))
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 of %.200s failed", in->path);
	if (rc == 0 && req->last) {
		sbx_sha256_hex(md, hex);
		if (strcmp(hex, in->sha256) != 0)
			rc =
			    sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
					 "input %.200s: sha256 mismatch: the uploaded bytes hash "
					 "to %s, the manifest says %s; upload it again from offset "
					 "0",
					 in->path, hex, in->sha256);
	}
	if (rc == 0 && req->last && publish(r, in, mode, &st->err) < 0) {
		sbx_rpc_code(st, quota_disk_full(st->err.errnum) ? SBX__V1__CODE__RESOURCE_EXHAUSTED
								 : SBX__V1__CODE__INTERNAL);
		rc = sbx_rpc_prefix(st, "input %.200s", in->path);
	}

	run_lock(r);
	inputs_release(r, in, rc == 0, req->data.len, req->last, mode);
	p = rc == 0 ? malloc(sizeof(*p)) : NULL;
	if (p) {
		sbx__v1__put_input_response__init(p);
		p->received = in->received;
		p->complete = in->complete;
	}
	run_unlock(r);
	run_unref(r);
	if (rc < 0)
		return -1;
	if (!p)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	*resp = p;
	return 0;
}
