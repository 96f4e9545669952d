/* ListArtifacts and FetchArtifact: /out read through the directory fd that
 * pid 1 sent with Ready, never by a path, never through a link (every open
 * is openat2 beneath it with RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV ...),
 * regular files only, and opened O_NONBLOCK so a FIFO cannot hang a worker.
 * The fd keeps /out alive after the sandbox ended, until teardown.
 *
 * Digests cost a pass over the file, so two things avoid repeating it:
 * - a fetch read in order from offset 0 hashes the chunks it serves (a
 *   "cursor"), so the sha256 on its last chunk is free and is the digest of
 *   exactly the bytes the caller got, provided the file did not change
 *   between chunks (else the last chunk hashes the file afresh);
 * - a per-run cache of digests keyed by path, inode, size, mtime and ctime.
 *   The sandbox can set mtime but not ctime, and a digest is cached only if
 *   the file's ctime was already well in the past when hashing started, so
 *   any later write shows as a different ctime even with coarse timestamps. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "clock.h"
#include "path.h"
#include "runs_artifacts.h"
#include "runs_registry.h"
#include "tree.h"
#include "util.h"

#define FETCH_DEFAULT	  RUN_CHUNK_MAX
#define FETCH_CURSORS	  8
#define CACHE_BUCKETS	  1024
#define CACHE_SETTLE_NS	  100000000LL /* ctime this far before the hash began */
#define ARTIFACT_PATH_MAX 4095

struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
};

struct hash_entry {
	struct hash_entry *next;
	struct file_id id;
	char sha256[65];
	char path[];
};

struct run_hash_cache {
	struct hash_entry *bucket[CACHE_BUCKETS];
	size_t n;
};

struct run_fetch {
	struct run_fetch *next;
	char *path;
	struct file_id id;
	int64_t started_ns; /* CLOCK_REALTIME when the first chunk was read */
	uint64_t next_offset;
	EVP_MD_CTX *md;
};

static struct file_id file_id(const struct stat *st)
{
	return (struct file_id){st->st_dev, st->st_ino, st->st_size, st->st_mtim, st->st_ctim};
}

static bool same_file(const struct file_id *a, const struct file_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* Wall time, as ctime is: to the millisecond, rounded down, which only
 * makes cache_put more careful. */
static int64_t realtime_ns(void)
{
	return sbx_unix_ms() * 1000000;
}

static unsigned bucket_of(const char *path)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *path; path++)
		h = (h ^ (uint8_t)*path) * 16777619u;
	return h % CACHE_BUCKETS;
}

/* mu held. */
static bool cache_get(struct sbx_run *r, const char *path, const struct file_id *id,
		      char sha256[65])
{
	if (!r->hashes)
		return false;
	for (struct hash_entry *h = r->hashes->bucket[bucket_of(path)]; h; h = h->next)
		if (!strcmp(h->path, path) && same_file(&h->id, id)) {
			memcpy(sha256, h->sha256, 65);
			return true;
		}
	return false;
}

/* mu held. Best effort: a digest that is not cached is computed again. */
static void cache_put(struct sbx_run *r, const char *path, const struct file_id *id,
		      const char sha256[65], int64_t started_ns)
{
	int64_t ctime_ns = (int64_t)id->ctime.tv_sec * 1000000000 + id->ctime.tv_nsec;
	struct hash_entry **p, *h;

	if (ctime_ns > started_ns - CACHE_SETTLE_NS)
		return; /* changed too recently to tell a later write from it */
	if (!r->hashes && !(r->hashes = calloc(1, sizeof(*r->hashes))))
		return;
	p = &r->hashes->bucket[bucket_of(path)];
	for (h = *p; h; h = h->next)
		if (!strcmp(h->path, path))
			break;
	if (!h) {
		if (r->hashes->n >= RUN_ARTIFACTS_MAX)
			return;
		h = malloc(sizeof(*h) + strlen(path) + 1);
		if (!h)
			return;
		strcpy(h->path, path);
		h->next = *p;
		*p = h;
		r->hashes->n++;
	}
	h->id = *id;
	memcpy(h->sha256, sha256, 65);
}

/* The digest of an open regular file, from the cache or by a pass over it. */
static int file_sha256(struct sbx_run *r, const char *path, int fd, const struct stat *st,
		       char sha256[65], struct sbx_err *err)
{
	struct file_id id = file_id(st), after;
	int64_t started = realtime_ns();
	struct stat st2;
	bool hit;

	/* /out is a tmpfs of out_mb: a file that claims more is sparse, and
	 * hashing (or serving) it could take forever (truncate -s 4E). */
	if ((uint64_t)st->st_size > (r->policy->limits->out_mb << 20))
		return sbx_fail_errnum(err, EFBIG,
				       "%s: %lld bytes, more than out_mb holds (a sparse file): "
				       "not served",
				       path, (long long)st->st_size);
	run_lock(r);
	hit = cache_get(r, path, &id, sha256);
	run_unlock(r);
	if (hit)
		return 0;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return sbx_fail_errno(err, "%s", path);
	if (sbx_sha256_fd(fd, sha256, NULL, err) < 0)
		return sbx_err_prefix(err, "%s", path);
	if (fstat(fd, &st2) == 0 && (after = file_id(&st2), same_file(&id, &after))) {
		run_lock(r);
		cache_put(r, path, &id, sha256, started);
		run_unlock(r);
	}
	return 0;
}

/* ---- listing ---- */

struct list_ctx {
	struct sbx_run *r;
	struct artifact_list *al;
	size_t cap;
};

static int add_artifact(const char *relpath, int fd, const struct stat *st, void *arg,
			struct sbx_err *err)
{
	struct list_ctx *c = arg;
	struct artifact_list *al = c->al;
	Sbx__V1__Artifact *a;
	char sha256[65];

	if ((uint64_t)st->st_size > (c->r->policy->limits->out_mb << 20)) {
		al->oversize++; /* sparse: never hashed, listed or served */
		return 0;
	}
	if (file_sha256(c->r, relpath, fd, st, sha256, err) < 0)
		return -1;
	if (al->n == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		Sbx__V1__Artifact **v = realloc(al->items, ncap * sizeof(*v));

		if (!v)
			return sbx_fail_errnum(err, ENOMEM, "artifacts");
		al->items = v;
		c->cap = ncap;
	}
	a = malloc(sizeof(*a));
	if (!a)
		return sbx_fail_errnum(err, ENOMEM, "artifacts");
	sbx__v1__artifact__init(a);
	a->path = strdup(relpath);
	a->sha256 = strdup(sha256);
	a->size = (uint64_t)st->st_size;
	a->mode = st->st_mode & 0777;
	al->items[al->n++] = a;
	if (!a->path || !a->sha256)
		return sbx_fail_errnum(err, ENOMEM, "artifacts");
	return 0;
}

static int cmp_artifact(const void *a, const void *b)
{
	return strcmp((*(Sbx__V1__Artifact *const *)a)->path,
		      (*(Sbx__V1__Artifact *const *)b)->path);
}

int artifacts_list(struct sbx_run *r, int out_fd, struct artifact_list *al, struct sbx_err *err)
{
	struct list_ctx c = {.r = r, .al = al};
	uint64_t skipped = 0;
	int rc;

	memset(al, 0, sizeof(*al));
	rc = sbx_tree_list(out_fd, RUN_ARTIFACTS_MAX, add_artifact, &c, &skipped, err);
	skipped += al->oversize;
	al->skipped = skipped > UINT32_MAX ? UINT32_MAX : (uint32_t)skipped;
	al->partial = rc == 1;
	if (rc < 0) {
		artifacts_list_free(al);
		return sbx_err_prefix(err, "/out");
	}
	if (al->n)
		qsort(al->items, al->n, sizeof(*al->items), cmp_artifact);
	return 0;
}

void artifacts_list_free(struct artifact_list *al)
{
	for (size_t i = 0; i < al->n; i++)
		sbx__v1__artifact__free_unpacked(al->items[i], NULL);
	free(al->items);
	memset(al, 0, sizeof(*al));
}

static void fetch_free(struct run_fetch *f)
{
	if (!f)
		return;
	free(f->path);
	EVP_MD_CTX_free(f->md);
	free(f);
}

void artifacts_forget(struct sbx_run *r)
{
	struct run_fetch *f, *fn;

	if (r->hashes) {
		for (size_t i = 0; i < CACHE_BUCKETS; i++) {
			struct hash_entry *h, *hn;

			for (h = r->hashes->bucket[i]; h; h = hn) {
				hn = h->next;
				free(h);
			}
		}
		free(r->hashes);
		r->hashes = NULL;
	}
	for (f = r->fetches; f; f = fn) {
		fn = f->next;
		fetch_free(f);
	}
	r->fetches = NULL;
}

/* A dup of /out's fd, so a Teardown closing the run's copy cannot pull it
 * away from under a listing or a fetch. */
static int out_dup(struct sbx_run *r, struct sbx_rpc_status *st)
{
	int fd = -1, dup_errno = 0;

	run_lock(r);
	if (r->out_fd >= 0 && !run_is_claimed(r) && (fd = fcntl(r->out_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		dup_errno = errno;
	run_unlock(r);
	if (fd >= 0)
		return fd;
	if (dup_errno) {
		/* The run is there: out of descriptors is not "not found". */
		sbx_fail_errnum(&st->err, dup_errno, "run %s: /out", r->id);
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	}
	if (!sbx_policy_mount(r->policy, "/out"))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "run %s has no /out (the policy mounts none)", r->id);
	return sbx_rpc_fail(st, SBX__V1__CODE__NOT_FOUND, "run %s not found", r->id);
}

SBX_HANDLER(list_artifacts, Sbx__V1__ListArtifactsRequest, Sbx__V1__ListArtifactsResponse)
{
	struct sbx_run *r;
	struct artifact_list al;
	Sbx__V1__ListArtifactsResponse *l;
	int rc;

	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	_cleanup_close_ int fd = out_dup(r, st);
	if (fd < 0) {
		run_unref(r);
		return -1;
	}
	rc = artifacts_list(r, fd, &al, &st->err);
	run_unref(r);
	if (rc < 0)
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	if (al.partial) {
		artifacts_list_free(&al);
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "/out holds more than %d entries; fetch files by path",
				    RUN_ARTIFACTS_MAX);
	}
	l = malloc(sizeof(*l));
	if (!l) {
		artifacts_list_free(&al);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	sbx__v1__list_artifacts_response__init(l);
	l->artifacts = al.items;
	l->n_artifacts = al.n;
	l->skipped = al.skipped;
	*resp = l;
	return 0;
}

/* ---- fetching ---- */

static int open_artifact(int out_fd, const char *path, struct stat *st, struct sbx_rpc_status *st_)
{
	_cleanup_close_ int fd =
	    sbx_open_beneath(out_fd, path, O_RDONLY | O_NONBLOCK, 0, &st_->err);

	if (fd < 0) {
		switch (st_->err.errnum) {
		case ENOENT:
		case ENOTDIR:
			return sbx_rpc_fail(st_, SBX__V1__CODE__NOT_FOUND,
					    "artifact %.200s not found in /out", path);
		case ELOOP:
			return sbx_rpc_fail(st_, SBX__V1__CODE__FAILED_PRECONDITION,
					    "artifact %.200s: a symbolic link is on its path; "
					    "artifacts are never read through links",
					    path);
		case EXDEV:
			return sbx_rpc_fail(st_, SBX__V1__CODE__FAILED_PRECONDITION,
					    "artifact %.200s: its path leaves /out", path);
		case EACCES:
		case EPERM:
			return sbx_rpc_fail(st_, SBX__V1__CODE__FAILED_PRECONDITION,
					    "artifact %.200s is not readable (its mode denies it)",
					    path);
		case ENXIO:
		case EISDIR:
			return sbx_rpc_fail(st_, SBX__V1__CODE__FAILED_PRECONDITION,
					    "artifact %.200s is not a regular file", path);
		default:
			sbx_rpc_code_unless_short(st_, SBX__V1__CODE__INTERNAL);
			return sbx_rpc_prefix(st_, "artifact %.200s", path);
		}
	}
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode))
		return sbx_rpc_fail(st_, SBX__V1__CODE__FAILED_PRECONDITION,
				    "artifact %.200s is not a regular file", path);
	return sbx_steal_fd(fd);
}

static int read_chunk(int fd, uint8_t *buf, size_t n, uint64_t offset, size_t *got)
{
	*got = 0;
	while (*got < n) {
		ssize_t k = pread(fd, buf + *got, n - *got, (off_t)(offset + *got));

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		if (k == 0)
			break; /* the file shrank since fstat */
		*got += (size_t)k;
	}
	return 0;
}

/* Takes the cursor of a fetch of this file in progress at `offset`, or
 * starts one at offset 0; NULL when neither applies. */
static struct run_fetch *cursor_take(struct sbx_run *r, const char *path, const struct file_id *id,
				     uint64_t offset)
{
	struct run_fetch *f = NULL;

	run_lock(r);
	for (struct run_fetch **p = &r->fetches; *p; p = &(*p)->next)
		if (!strcmp((*p)->path, path)) {
			f = *p;
			*p = f->next;
			break;
		}
	run_unlock(r);
	if (f && (f->next_offset != offset || !same_file(&f->id, id))) {
		fetch_free(f);
		f = NULL;
	}
	if (f || offset != 0)
		return f;
	f = calloc(1, sizeof(*f));
	if (!f || !(f->path = strdup(path)) || !(f->md = EVP_MD_CTX_new()) ||
	    !EVP_DigestInit_ex(f->md, EVP_sha256(), NULL)) {
		fetch_free(f);
		return NULL;
	}
	f->id = *id;
	f->started_ns = realtime_ns();
	return f;
}

/* Keeps the cursor for the next chunk; the oldest beyond FETCH_CURSORS go. */
static void cursor_put(struct sbx_run *r, struct run_fetch *f)
{
	struct run_fetch *drop = NULL;
	size_t n = 1;

	run_lock(r);
	f->next = r->fetches;
	r->fetches = f;
	for (struct run_fetch *p = f; p->next; p = p->next)
		if (++n > FETCH_CURSORS) {
			drop = p->next;
			p->next = NULL;
			break;
		}
	run_unlock(r);
	while (drop) {
		struct run_fetch *next = drop->next;

		fetch_free(drop);
		drop = next;
	}
}

/* The sha256 for the last chunk: the cursor's if it saw every byte of an
 * unchanged file, else a fresh pass. */
static int final_sha256(struct sbx_run *r, const char *path, int fd, const struct stat *st,
			struct run_fetch *f, char sha256[65], struct sbx_err *err)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct file_id id = file_id(st);

	if (f && f->next_offset == (uint64_t)st->st_size && same_file(&f->id, &id) &&
	    EVP_DigestFinal_ex(f->md, md, &mdlen) && mdlen == 32) {
		sbx_sha256_hex(md, sha256);
		run_lock(r);
		cache_put(r, path, &id, sha256, f->started_ns);
		run_unlock(r);
		return 0;
	}
	return file_sha256(r, path, fd, st, sha256, err);
}

static int fetch(struct sbx_run *r, int out_fd, const Sbx__V1__FetchArtifactRequest *req,
		 size_t max, Sbx__V1__FetchArtifactResponse *o, struct sbx_rpc_status *st)
{
	_cleanup_close_ int fd = -1;
	struct run_fetch *f;
	struct file_id id;
	struct stat sb;
	size_t n, got;
	int rc;
	char sha256[65];

	fd = open_artifact(out_fd, req->path, &sb, st);
	if (fd < 0)
		return -1;
	if (req->offset > (uint64_t)sb.st_size)
		return sbx_rpc_fail(st, SBX__V1__CODE__OUT_OF_RANGE,
				    "offset %llu is past the end of %.200s (%lld bytes)",
				    (unsigned long long)req->offset, req->path,
				    (long long)sb.st_size);
	n = (uint64_t)sb.st_size - req->offset < max ? (size_t)((uint64_t)sb.st_size - req->offset)
						     : max;
	o->data.data = malloc(n ? n : 1);
	if (!o->data.data)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	if (read_chunk(fd, o->data.data, n, req->offset, &got) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "artifact %.200s",
					  req->path);
	o->data.len = got;
	o->size = (uint64_t)sb.st_size;
	o->eof = req->offset + got >= (uint64_t)sb.st_size || got < n;

	id = file_id(&sb);
	f = cursor_take(r, req->path, &id, req->offset);
	if (f) {
		if (EVP_DigestUpdate(f->md, o->data.data, got))
			f->next_offset += got;
		else
			f->next_offset = UINT64_MAX; /* poisoned: a fresh pass at the end */
	}
	if (!o->eof) {
		if (f)
			cursor_put(r, f);
		return 0;
	}
	rc = fstat(fd, &sb) < 0 ? sbx_fail_errno(&st->err, "fstat")
				: final_sha256(r, req->path, fd, &sb, f, sha256, &st->err);
	if (rc < 0) {
		fetch_free(f);
		sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		return sbx_rpc_prefix(st, "artifact %.200s: sha256", req->path);
	}
	fetch_free(f);
	o->sha256 = strdup(sha256);
	if (!o->sha256)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	return 0;
}

SBX_HANDLER(fetch_artifact, Sbx__V1__FetchArtifactRequest, Sbx__V1__FetchArtifactResponse)
{
	size_t max = req->max_bytes ? req->max_bytes : FETCH_DEFAULT;
	const char *why = sbx_path_problem(req->path, ARTIFACT_PATH_MAX, SBX_PATH_RELATIVE);
	Sbx__V1__FetchArtifactResponse *o;
	struct sbx_run *r;
	int rc;

	if (why)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "path %.200s: %s",
				    req->path, why);
	if (max > RUN_CHUNK_MAX)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT,
				    "max_bytes: %zu, at most %u", max, RUN_CHUNK_MAX);
	if (!(r = run_lookup(runs, who, req->run_id, st)))
		return -1;
	_cleanup_close_ int out_fd = out_dup(r, st);
	if (out_fd < 0) {
		run_unref(r);
		return -1;
	}
	o = malloc(sizeof(*o));
	if (!o) {
		run_unref(r);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	sbx__v1__fetch_artifact_response__init(o);
	rc = fetch(r, out_fd, req, max, o, st);
	/* The first chunk and the last one: a fetch that starts past 0 is
	 * still on record when it completes. */
	if (rc == 0 && (req->offset == 0 || o->eof))
		run_audit(r, "artifact_fetched",
			  json_pack("{s:s, s:I, s:I, s:b}", "path", req->path, "size",
				    (json_int_t)o->size, "offset", (json_int_t)req->offset, "eof",
				    o->eof));
	run_unref(r);
	if (rc < 0) {
		sbx__v1__fetch_artifact_response__free_unpacked(o, NULL);
		return -1;
	}
	*resp = o;
	return 0;
}
