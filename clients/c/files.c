/* SPDX-License-Identifier: Apache-2.0 */
/* Files in and out of a run: sha256, chunked upload and verified download. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "client_internal.h"
#include "sleep.h"
#include "text.h"
#include "tree.h"
#include "util.h"

static void md_freep(EVP_MD_CTX **md)
{
	EVP_MD_CTX_free(*md);
}

static void nng_msg_freep(nng_msg **m)
{
	if (*m)
		nng_msg_free(*m);
}

static EVP_MD_CTX *sha256_new(void)
{
	/* openssl.cnf configures nothing a sha256 needs, and reading it costs
	 * milliseconds per process. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (md && !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(md);
		return NULL;
	}
	return md;
}

static int sha256_hex(EVP_MD_CTX *md, char hex[65])
{
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_DigestFinal_ex(md, out, &n) || n != 32)
		return -1;
	sbx_hex(out, 32, hex);
	return 0;
}

static ssize_t read_full(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static int pwrite_full(int fd, const uint8_t *buf, size_t len, uint64_t offset)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, (off_t)offset);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

static int write_full(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int sbx_file_sha256(const char *path, char hex[65], uint64_t *size, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	_cleanup_(md_freep) EVP_MD_CTX *md = NULL;
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat stb;
	uint64_t total = 0;
	ssize_t n;

	if (fd < 0 || fstat(fd, &stb) < 0)
		return sbx_fail_errno(err, "%s", path);
	if (!S_ISREG(stb.st_mode))
		return sbx_fail(err, "%s: not a regular file", path);
	if (!(md = sha256_new()) || !(buf = malloc(SBX_CHUNK_BYTES)))
		return sbx_fail(err, "%s: out of memory", path);
	while ((n = read_full(fd, buf, SBX_CHUNK_BYTES)) > 0) {
		if (!EVP_DigestUpdate(md, buf, (size_t)n))
			return sbx_fail(err, "%s: sha256 failed", path);
		total += (uint64_t)n;
	}
	if (n < 0)
		return sbx_fail_errno(err, "%s", path);
	if (sha256_hex(md, hex) < 0)
		return sbx_fail(err, "%s: sha256 failed", path);
	if (size)
		*size = total;
	return 0;
}

int sbx_put_file(sbx_client *c, const char *run_id, const char *local_path, const char *remote_path,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_rpc_status *st)
{
	_cleanup_close_ int fd = open(local_path, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat stb;
	uint64_t offset = 0;

	if (fd < 0 || fstat(fd, &stb) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", local_path);
	if (!S_ISREG(stb.st_mode))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s: not a regular file",
				    local_path);
	if (!(buf = malloc(SBX_CHUNK_BYTES)))
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	/* The size the manifest was made with: a file that shrinks meanwhile is
	 * an error here, one that grows is sent as it was (and sbxd's sha256
	 * check says whether that was still the same file). */
	uint64_t size = (uint64_t)stb.st_size;
	/* The first chunk declares the file (size, sha256, mode bits), so a
	 * file the run's manifest did not name can still be added between
	 * execs; for a declared one the server checks they repeat it. */
	char sha256[65];
	struct sbx_err err;
	if (sbx_file_sha256(local_path, sha256, NULL, &err) < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", err.msg);
	do {
		size_t want =
		    size - offset < SBX_CHUNK_BYTES ? (size_t)(size - offset) : SBX_CHUNK_BYTES;
		ssize_t n = read_full(fd, buf, want);
		if (n < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s",
						  local_path);
		if ((size_t)n != want)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: shrank while being uploaded", local_path);
		Sbx__V1__PutInputRequest req = SBX__V1__PUT_INPUT_REQUEST__INIT;
		req.run_id = (char *)run_id;
		req.path = (char *)remote_path;
		req.offset = offset;
		req.data.data = buf;
		req.data.len = want;
		req.last = offset + want == size;
		if (offset == 0) {
			req.size = size;
			req.sha256 = sha256;
			req.mode = (uint32_t)(stb.st_mode & 0777);
		}
		Sbx__V1__PutInputResponse *r = sbx_put_input(c, &req, st);
		if (!r)
			return sbx_rpc_prefix(st, "PutInput %s at %llu", remote_path,
					      (unsigned long long)offset);
		bool bad = r->received != offset + want || (req.last && !r->complete);
		uint64_t received = r->received;
		sbx__v1__put_input_response__free_unpacked(r, NULL);
		if (bad)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "PutInput %s: server has %llu bytes, expected %llu%s",
					    remote_path, (unsigned long long)received,
					    (unsigned long long)(offset + want),
					    req.last ? " and the file complete" : "");
		offset += want;
		if (progress)
			progress(remote_path, offset, size, progress_arg);
	} while (offset < size);
	return 0;
}

/* A file being written under a temporary name: removed on scope exit
 * unless renamed into place (then path is NULL). */
struct temp_file {
	char *path;
	int fd;
};

static void temp_file_freep(struct temp_file *t)
{
	sbx_closep(&t->fd);
	if (t->path)
		unlink(t->path);
	free(t->path);
}

/* A temporary file next to the destination, so that the final rename is
 * atomic; created with 0666 so that the umask decides as for any new file. */
static int open_temp(const char *dest, struct temp_file *t, struct sbx_rpc_status *st)
{
	_cleanup_free_ char *copy = strdup(dest);
	char id[33];

	if (!copy)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	const char *dir = dirname(copy);
	for (int tries = 0; tries < 16; tries++) {
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		id[12] = '\0';
		_cleanup_free_ char *path = NULL;
		if (asprintf(&path, "%s/.sbx-fetch-%s.tmp", dir, id) < 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		t->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
		if (t->fd >= 0) {
			t->path = sbx_steal_ptr(path);
			return 0;
		}
		if (errno != EEXIST)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", dir);
	}
	return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s: no free temporary name", dir);
}

/* A file that changed under a fetch was changed by an exec of the run (no
 * other process can write /out): not corruption, so ABORTED, and fetching
 * it again once the exec has ended gives the final file. */
/* ---- fetching: several chunks in flight ---- */

/* One FetchArtifactResponse, decoded where it lies in the reply. */
struct chunk {
	nng_msg *msg; /* data points into it */
	const uint8_t *data;
	size_t len;
	uint64_t size;
	bool eof, live, has_sha256;
	char sha256[65];
	int rc;
	bool ready;
	bool written; /* already in the file: at its offset (pipeline.out) or in
			 order (pipeline.seq_out) */
	bool seen;    /* the in-order writer is done with it (pipeline.seq_out) */
	int werr;     /* the in-order writer's write of it failed (errno): part of
			 it may be out, so it must not be written again */
	struct sbx_rpc_status st;
};

static void chunk_clear(struct chunk *k)
{
	if (k->msg)
		nng_msg_free(k->msg);
	k->msg = NULL;
	k->ready = false;
}

static int decode_chunk(const uint8_t *p, size_t n, struct chunk *k)
{
	const uint8_t *end = p + n;
	struct sbx_pb_field f;
	int rc;

	while ((rc = sbx_pb_next(&p, end, &f)) == 1) {
		int want = f.num == 1 || f.num == 4 ? 2 : 0;
		if (f.num > 5)
			continue; /* a field of a newer sbxd */
		if (f.wt != want)
			return -1;
		switch (f.num) {
		case 1:
			k->data = f.data;
			k->len = f.len;
			break;
		case 2:
			k->size = f.v;
			break;
		case 3:
			k->eof = f.v != 0;
			break;
		case 4:
			if (f.len > 64)
				return -1;
			memcpy(k->sha256, f.data, f.len);
			k->sha256[f.len] = '\0';
			k->has_sha256 = true;
			break;
		case 5:
			k->live = f.v != 0;
			break;
		}
	}
	return rc;
}

/* FetchArtifact of the chunk at offset into k; k->rc and k->st say how it went. */
static int fetch_chunk(sbx_client *c, const char *run_id, const char *path, uint64_t offset,
		       struct chunk *k)
{
	Sbx__V1__FetchArtifactRequest req = SBX__V1__FETCH_ARTIFACT_REQUEST__INIT;
	const uint8_t *body;
	size_t len;

	memset(k, 0, sizeof(*k));
	req.run_id = (char *)run_id;
	req.path = (char *)path;
	req.offset = offset;
	req.max_bytes = SBX_CHUNK_BYTES;
	if (sbx_client_call_msg(c, SBX_METHOD_PREFIX "FetchArtifact", &req.base, &k->msg, &body,
				&len, &k->st) < 0)
		return k->rc = -1;
	if (decode_chunk(body, len, k) < 0) {
		chunk_clear(k);
		sbx_rpc_fail(&k->st, SBX__V1__CODE__INTERNAL,
			     "%s sent a body that is not an sbx.v1.FetchArtifactResponse",
			     sbx_client_endpoint(c));
		return k->rc = -1;
	}
	return k->rc = 0;
}

/* Chunks after the first, asked by up to SBX_FETCH_WINDOW threads at once
 * (one REQ context each), taken in order: slot[i % window] holds chunk i,
 * and chunk i is asked only once chunk i - window was taken. Into a
 * caller's descriptor (a pipe, a file at its position) a writer thread
 * writes the chunks in order, so that the thread taking them hashes chunk
 * i while chunk i + 1 is written: the two cost as much as the slower one,
 * not as their sum. */
struct pipeline {
	sbx_client *c;
	const char *run_id, *path;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t n;	   /* chunks of the file */
	uint64_t size;	   /* as the first chunk said */
	int out;	   /* a temporary file of ours: each worker writes its chunk
			      there at its offset (pwrite), or -1 */
	int seq_out;	   /* else the caller's: the writer thread writes there in
			      order (write), or -1 */
	uint64_t next;	   /* the next to ask for */
	uint64_t consumed; /* taken by the writer */
	bool stop;
	struct chunk slot[SBX_FETCH_WINDOW];
	pthread_t threads[SBX_FETCH_WINDOW + 1]; /* the workers, then the writer */
	int nthreads;
	bool writer; /* the last of threads[] is the writer */
};

/* A chunk refused for the identity's share of sbxd's workers (the window
 * is within it unless sbxd runs with very few) is asked again. */
#define SHARE_RETRIES 50
#define SHARE_WAIT_MS 20

static void *pipeline_worker(void *arg)
{
	struct pipeline *p = arg;

	for (;;) {
		struct chunk k;
		uint64_t i;

		pthread_mutex_lock(&p->mu);
		while (!p->stop && p->next < p->n && p->next - p->consumed >= SBX_FETCH_WINDOW)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stop || p->next >= p->n) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		i = p->next++;
		pthread_mutex_unlock(&p->mu);
		for (int tries = 0;; tries++) {
			fetch_chunk(p->c, p->run_id, p->path, i * SBX_CHUNK_BYTES, &k);
			if (k.rc == 0 || k.st.code != SBX__V1__CODE__RESOURCE_EXHAUSTED ||
			    tries >= SHARE_RETRIES || p->stop)
				break;
			sbx_sleep_ms(SHARE_WAIT_MS);
		}
		/* Written here, beside the other workers, so that the thread
		 * taking the chunks in order only hashes; what it then refuses
		 * goes with the temporary file. */
		if (k.rc == 0 && p->out >= 0 && k.size == p->size && k.len <= SBX_CHUNK_BYTES &&
		    i * SBX_CHUNK_BYTES + k.len <= p->size) {
			if (pwrite_full(p->out, k.data, k.len, i * SBX_CHUNK_BYTES) < 0) {
				sbx_rpc_fail_errno(&k.st, SBX__V1__CODE__INTERNAL, "writing");
				chunk_clear(&k);
				k.rc = -1;
			} else {
				k.written = true;
			}
		}
		pthread_mutex_lock(&p->mu);
		if (p->stop) {
			chunk_clear(&k);
		} else {
			k.ready = true;
			p->slot[i % SBX_FETCH_WINDOW] = k;
			pthread_cond_broadcast(&p->cv);
		}
		pthread_mutex_unlock(&p->mu);
	}
}

/* Whether chunk i, as it arrived, is one whole piece of the file in order:
 * what take_chunk accepts. The writer writes no other; take_chunk then
 * says what was wrong. */
static bool chunk_fits(const struct pipeline *p, uint64_t i, const struct chunk *k)
{
	return k->rc == 0 && k->size == p->size && k->len <= SBX_CHUNK_BYTES &&
	       i * SBX_CHUNK_BYTES + k->len <= p->size && (k->eof || k->len == SBX_CHUNK_BYTES);
}

/* The in-order writer (seq_out): chunks 1.. as they arrive, each once the
 * one before is written. The first chunk that does not fit ends its
 * writing: it and the rest go to the taking thread unwritten, which writes
 * them itself (in order, after the writer's) or says what was wrong. One
 * it cannot write (werr) fails the fetch, as the taking thread's own write
 * would: part of it may be out, and writing it again would put bytes in
 * the output that were not hashed (review: a short write, then EAGAIN). The slot it reads is left
 * alone by the workers (chunk i + window is asked only once chunk i was taken) and by the taking
 * thread (which waits for `seen`). */
static void *pipeline_writer(void *arg)
{
	struct pipeline *p = arg;
	bool writing = true;

	for (uint64_t i = 1; i < p->n; i++) {
		struct chunk *s = &p->slot[i % SBX_FETCH_WINDOW];

		bool stop;

		pthread_mutex_lock(&p->mu);
		/* Until taken, the slot still holds chunk i - window, seen. */
		while (!p->stop && (!s->ready || s->seen))
			pthread_cond_wait(&p->cv, &p->mu);
		stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		if (stop)
			return NULL;
		int werr = 0;

		writing = writing && chunk_fits(p, i, s);
		if (writing && s->len && write_full(p->seq_out, s->data, s->len) < 0) {
			/* Part of it may be out already (a short write, then
			 * EAGAIN or a timeout): the taking thread must not write
			 * it again, but fail as its own write would have. */
			werr = errno ? errno : EIO;
			writing = false;
		}
		pthread_mutex_lock(&p->mu);
		s->written = writing;
		s->werr = werr;
		/* The taking thread takes nothing after a chunk that says eof
		 * (an early one is DATA_LOSS): neither is anything written. */
		if (s->eof)
			writing = false;
		s->seen = true;
		pthread_cond_broadcast(&p->cv);
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

static void pipeline_stop(struct pipeline *p)
{
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	p->nthreads = 0;
	for (size_t i = 0; i < SBX_FETCH_WINDOW; i++)
		chunk_clear(&p->slot[i]);
}

static void pipeline_freep(struct pipeline **pp)
{
	struct pipeline *p = *pp;

	if (!p)
		return;
	pipeline_stop(p);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static struct pipeline *pipeline_start(sbx_client *c, const char *run_id, const char *path,
				       uint64_t size, int out, int seq_out,
				       struct sbx_rpc_status *st)
{
	struct pipeline *p = calloc(1, sizeof(*p));
	uint64_t want;

	if (!p) {
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	*p = (struct pipeline){.c = c,
			       .run_id = run_id,
			       .path = path,
			       .size = size,
			       .out = out,
			       .seq_out = seq_out,
			       .next = 1,
			       .consumed = 1};
	p->n = size / SBX_CHUNK_BYTES + (size % SBX_CHUNK_BYTES != 0);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	want = p->n - 1 < SBX_FETCH_WINDOW ? p->n - 1 : SBX_FETCH_WINDOW;
	for (uint64_t i = 0; i < want; i++) {
		if (pthread_create(&p->threads[p->nthreads], NULL, pipeline_worker, p) != 0)
			break;
		p->nthreads++;
	}
	if (!p->nthreads) {
		pipeline_freep(&p);
		sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "no thread for the fetch");
		return NULL;
	}
	/* Without a writer thread the taking thread writes, as it can. */
	if (seq_out >= 0 &&
	    pthread_create(&p->threads[p->nthreads], NULL, pipeline_writer, p) == 0) {
		p->nthreads++;
		p->writer = true;
	}
	return p;
}

/* Chunk i, when it has arrived: the caller owns it. */
static void pipeline_take(struct pipeline *p, uint64_t i, struct chunk *k)
{
	struct chunk *s = &p->slot[i % SBX_FETCH_WINDOW];

	pthread_mutex_lock(&p->mu);
	while (!s->ready || (p->writer && !s->seen))
		pthread_cond_wait(&p->cv, &p->mu);
	*k = *s;
	s->msg = NULL;
	s->ready = false;
	s->seen = false;
	p->consumed = i + 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

struct fetch_state {
	const char *remote_path;
	const char *name; /* escaped */
	int fd;
	/* fd is our temporary file, which the workers write at their chunks'
	 * offsets: what this thread writes goes at its offset too (pwrite),
	 * never at the file position the workers' writes do not move. */
	bool positioned;
	EVP_MD_CTX *md;
	uint64_t offset, size;
	sbx_progress_fn progress;
	void *progress_arg;
};

/* Writes and hashes chunk k, the i-th (at f->offset): 1 when it was the
 * last, 0 when more follow, -1 with st filled. Every chunk but the last is
 * whole, so chunk i is at i * SBX_CHUNK_BYTES, where a worker wrote it:
 * what is hashed is what the file holds. */
static int take_chunk(struct fetch_state *f, uint64_t i, const struct chunk *k,
		      struct sbx_rpc_status *st)
{
	if (k->len > SBX_CHUNK_BYTES || (k->size == f->size && f->offset + k->len > f->size) ||
	    f->offset != i * SBX_CHUNK_BYTES || (!k->eof && k->len != SBX_CHUNK_BYTES))
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__DATA_LOSS, "%s: the server sent %zu bytes at %llu of %llu",
		    f->name, k->len, (unsigned long long)f->offset, (unsigned long long)f->size);
	if (k->size != f->size)
		return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
				    "%s: changed while being fetched (size %llu, then %llu "
				    "at %llu): " CHANGED_BY_AN_EXEC,
				    f->name, (unsigned long long)f->size,
				    (unsigned long long)k->size, (unsigned long long)f->offset);
	if (k->werr) {
		errno = k->werr;
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "writing %s", f->name);
	}
	if (k->len && !k->written &&
	    (f->positioned ? pwrite_full(f->fd, k->data, k->len, f->offset)
			   : write_full(f->fd, k->data, k->len)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "writing %s", f->name);
	if (!EVP_DigestUpdate(f->md, k->data, k->len))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 failed");
	f->offset += k->len;
	if (f->progress && k->len)
		f->progress(f->remote_path, f->offset, f->size, f->progress_arg);
	if (k->eof)
		return 1;
	if (!k->len || f->offset >= f->size)
		return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
				    "%s: the server sent %s at %llu of %llu", f->name,
				    k->len ? "no end" : "no bytes", (unsigned long long)f->offset,
				    (unsigned long long)f->size);
	return 0;
}

/* fd: where the bytes go in order; temp: it is a new temporary file of
 * ours, which the workers may write at each chunk's offset. */
static int fetch_into(sbx_client *c, const char *run_id, const char *remote_path, int fd, bool temp,
		      const char *expect_sha256, bool expect_live, sbx_progress_fn progress,
		      void *progress_arg, struct sbx_fetch_info *info, struct sbx_rpc_status *st)
{
	_cleanup_(md_freep) EVP_MD_CTX *md = sha256_new();
	_cleanup_(pipeline_freep) struct pipeline *p = NULL;
	struct chunk k;
	char got[65];
	/* The path may come from a sandbox's listing: escaped in messages,
	 * and short enough to leave room for the rest. */
	char name[256];
	int rc;

	sbx_escape(name, sizeof(name), remote_path);
	if (!md)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	struct fetch_state f = {.remote_path = remote_path,
				.name = name,
				.fd = fd,
				.positioned = temp,
				.md = md,
				.progress = progress,
				.progress_arg = progress_arg};
	/* The first chunk says the size; the rest are asked several at once. */
	for (uint64_t i = 0;; i++) {
		if (i == 0)
			fetch_chunk(c, run_id, remote_path, 0, &k);
		else
			pipeline_take(p, i, &k);
		if (k.rc < 0) {
			*st = k.st;
			return sbx_rpc_prefix(st, "FetchArtifact %s at %llu", name,
					      (unsigned long long)f.offset);
		}
		if (i == 0)
			f.size = k.size;
		rc = take_chunk(&f, i, &k, st);
		if (rc != 0)
			break;
		chunk_clear(&k);
		if (i == 0 && !(p = pipeline_start(c, run_id, remote_path, f.size, temp ? fd : -1,
						   temp ? -1 : fd, st)))
			return -1;
	}
	if (rc < 0) {
		chunk_clear(&k);
		return -1;
	}
	/* The last chunk, with the digest: its message freed on the way out. */
	_cleanup_(nng_msg_freep) nng_msg *last = k.msg;
	(void)last;
	if (f.offset != f.size)
		return sbx_rpc_fail(st, k.live ? SBX__V1__CODE__ABORTED : SBX__V1__CODE__DATA_LOSS,
				    "%s: got %llu bytes of %llu%s", name,
				    (unsigned long long)f.offset, (unsigned long long)f.size,
				    k.live ? ": " CHANGED_BY_AN_EXEC : "");
	if (sha256_hex(md, got) < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 failed");
	/* Our temporary file holds exactly the bytes hashed: no more. */
	struct stat tst = {0};
	if (temp && (fstat(fd, &tst) < 0 || (uint64_t)tst.st_size != f.size))
		return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
				    "%s: the file written has %lld bytes, not %llu", name,
				    (long long)tst.st_size, (unsigned long long)f.size);
	/* sbxd hashes the file afresh when it changed between chunks:
	 * then the bytes received are of no one version of it. */
	if (!k.has_sha256 || strcmp(k.sha256, got)) {
		if (k.live && k.has_sha256 && *k.sha256)
			return sbx_rpc_fail(
			    st, SBX__V1__CODE__ABORTED,
			    "%s: changed while being fetched (the bytes "
			    "received hash to %s, the file now to %s): " CHANGED_BY_AN_EXEC,
			    name, got, k.sha256);
		return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
				    "%s: sha256 of the bytes received is %s, the server "
				    "says %s",
				    name, got, k.has_sha256 && *k.sha256 ? k.sha256 : "nothing");
	}
	if (expect_sha256 && strcmp(expect_sha256, got)) {
		if (k.live || expect_live)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: changed since it was listed (sha256 %s, "
					    "listed as %s): " CHANGED_BY_AN_EXEC,
					    name, got, expect_sha256);
		return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
				    "%s: sha256 of the bytes received is %s, expected %s", name,
				    got, expect_sha256);
	}
	if (info) {
		info->size = f.size;
		memcpy(info->sha256, got, sizeof(got));
		info->live = k.live;
	}
	return 0;
}

int sbx_fetch_fd(sbx_client *c, const char *run_id, const char *remote_path, int fd,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st)
{
	return fetch_into(c, run_id, remote_path, fd, false, NULL, false, progress, progress_arg,
			  info, st);
}

int sbx_fetch_file(sbx_client *c, const char *run_id, const char *remote_path,
		   const char *local_path, const char *expect_sha256, sbx_progress_fn progress,
		   void *progress_arg, struct sbx_rpc_status *st)
{
	return sbx_fetch_file_ex(c, run_id, remote_path, local_path, expect_sha256, false, progress,
				 progress_arg, NULL, st);
}

int sbx_fetch_file_ex(sbx_client *c, const char *run_id, const char *remote_path,
		      const char *local_path, const char *expect_sha256, bool expect_live,
		      sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		      struct sbx_rpc_status *st)
{
	_cleanup_(temp_file_freep) struct temp_file tmp = {.fd = -1};

	if (open_temp(local_path, &tmp, st) < 0 ||
	    fetch_into(c, run_id, remote_path, tmp.fd, true, expect_sha256, expect_live, progress,
		       progress_arg, info, st) < 0)
		return -1;
	if (fsync(tmp.fd) < 0 || close(sbx_steal_fd(tmp.fd)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", tmp.path);
	if (rename(tmp.path, local_path) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", local_path);
	free(sbx_steal_ptr(tmp.path)); /* renamed: nothing to remove */
	return 0;
}

/* A temporary file in a directory fd: removed on scope exit unless
 * renamed into place (then name is empty). */
struct temp_at {
	int dir;
	int fd;
	char name[40];
};

static void temp_at_freep(struct temp_at *t)
{
	sbx_closep(&t->fd);
	if (t->name[0])
		(void)unlinkat(t->dir, t->name, 0); /* already gone is what we want */
}

int sbx_fetch_at(sbx_client *c, const char *run_id, const char *remote_path, int dirfd,
		 const char *rel, mode_t mode, const char *expect_sha256, bool expect_live,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st)
{
	char shown[256];
	const char *base;

	sbx_escape(shown, sizeof(shown), rel);
	_cleanup_close_ int dir = sbx_dest_subdir(dirfd, rel, &base, &st->err);
	/* Asked before the bytes are fetched, and again before the rename. */
	if (dir < 0 || sbx_dest_check_slot(dir, base, shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	/* After dir: removed while dir is still open. */
	_cleanup_(temp_at_freep) struct temp_at tmp = {.dir = dir, .fd = -1};
	for (int tries = 0; tmp.fd < 0; tries++) {
		char id[33];
		if (tries == 16)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "%s: no free temporary name", shown);
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		snprintf(tmp.name, sizeof(tmp.name), ".sbx-fetch-%.12s.tmp", id);
		/* 0600 until the bytes are verified and the mode set on the fd. */
		tmp.fd =
		    sbx_open_beneath(dir, tmp.name, O_WRONLY | O_CREAT | O_EXCL, 0600, &st->err);
		if (tmp.fd < 0)
			tmp.name[0] = '\0';
		if (tmp.fd < 0 && st->err.errnum != EEXIST)
			return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	}
	if (fetch_into(c, run_id, remote_path, tmp.fd, true, expect_sha256, expect_live, progress,
		       progress_arg, info, st) < 0)
		return -1;
	/* The mode on the fd, never on a name someone could have swapped; the
	 * permission bits only: a caller that passes on what a server listed
	 * must not get a set-id file of its own from a hostile server. */
	if (fchmod(tmp.fd, mode & 0777) < 0 || fsync(tmp.fd) < 0 || close(sbx_steal_fd(tmp.fd)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", shown);
	if (sbx_dest_check_slot(dir, base, shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	if (renameat(dir, tmp.name, dir, base) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", shown);
	tmp.name[0] = '\0'; /* renamed: nothing to remove */
	return 0;
}
