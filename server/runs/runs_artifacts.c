/* SPDX-License-Identifier: Apache-2.0 */
/* ListArtifacts and FetchArtifact: /out read through the directory fd that
 * pid 1 sent with Ready, never by a path, never through a link (every open
 * is openat2 beneath it with RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV ...),
 * regular files only, and opened O_NONBLOCK so a FIFO cannot hang a worker
 * (and a lease makes the open fail with EAGAIN: the file is "busy").
 * The fd keeps /out alive after the sandbox ended, until teardown.
 *
 * What a script leaves in /out costs a bounded amount (a "pass"): every
 * listing and digest pass hashes at most the bytes /out's tmpfs really
 * holds (a sparse file claims more; a file that grows while read is cut
 * off), for at most RUN_OUT_PASS_MS, hashes a file with many names (hard
 * links) once, holds at most RUN_LIST_MAX entries and what fits in
 * max_message_bytes, and stops when a Teardown bumps the run's out_gen.
 * Passes are admitted by identity (pass_admit; the bounds are in
 * runs_manager.h): at most RUNS_OUT_PASSES_PER_IDENTITY of one identity's
 * ListArtifacts, fetch digest passes and Teardown listings at once, and
 * RUNS_OUT_PASSES_MAX in all, so they never hold every short worker; an
 * identity with none in progress is admitted while any room is left. A
 * Teardown over its identity's share hashes nothing: its manifest keeps the
 * digests already known and counts the other files as not listed.
 *
 * When a digest is final: only when no process of the run can change
 * /out, i.e. no exec is running by the sandbox's own word (exec init is
 * pid 1 of the exec's pid namespace, so when the helper reports its end
 * every process it left is gone) or the sandbox is gone (sandbox_gone,
 * runs_monitor.h: a killed helper's only once its cgroups were emptied).
 * Writes through a shared mapping change neither mtime nor ctime on tmpfs,
 * so no stat can tell a file changed while an exec ran: a listing taken
 * then says `live`, and its digests are never cached. The cache holds
 * final digests only, keyed by inode, for one "epoch" (the execs started
 * so far); a new exec empties it.
 *
 * A fetch read in order from offset 0 hashes the chunks it serves (a
 * "cursor"), so the sha256 on its last chunk is free and is the digest of
 * exactly the bytes the caller got, provided the file did not change
 * between chunks (else the last chunk hashes the file afresh). A client
 * keeps several chunks in flight, so they may arrive out of order: a chunk
 * ahead of the cursor first hashes the gap from the file (at most
 * CURSOR_GAP_MAX bytes, else the cursor is given up), one behind it was
 * hashed that way already, and a chunk that finds the cursor in another
 * worker's hands leaves it to that one (the last chunk waits for it, at
 * most CURSOR_WAIT_MS). A file whose final digest is cached (a listing
 * hashed it since the last exec began) is served without hashing: the
 * last chunk carries the cached digest if /out stayed settled since the
 * fetch's first chunk (the cursor's epoch) and the file is unchanged. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "clock.h"
#include "inode_set.h"
#include "path.h"
#include "runs_artifacts.h"
#include "runs_manager.h"
#include "runs_registry.h"
#include "sha256.h"
#include "sleep.h"
#include "text.h"
#include "tree.h"
#include "util.h"

#define FETCH_DEFAULT	  RUN_CHUNK_MAX
#define FETCH_CURSORS	  8
#define FETCH_FDS	  2	     /* of them holding their file open (open_remember) */
#define CURSOR_GAP_MAX	  (8u << 20) /* hashed from the file for a chunk ahead */
#define CURSOR_WAIT_MS	  2000	     /* the last chunk waits for a busy cursor */
#define CACHE_MAX	  RUN_LIST_MAX
#define ARTIFACT_PATH_MAX 4095
#define ARTIFACT_WIRE	  100 /* bytes an Artifact costs on the wire besides its path */
#define STR_(x)		  #x
#define STR(x)		  STR_(x)
#define REPLY_SLACK	  (64 * 1024) /* the envelope and the rest of the answer */

struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	struct timespec ctime;
};

struct hash_entry {
	struct file_id id;
	char sha256[65];
};

/* Final digests of one epoch, by inode. */
struct run_hash_cache {
	uint64_t epoch;
	struct sbx_inode_set index; /* (dev, ino) -> entry */
	struct hash_entry *entries;
	size_t n;
};

struct run_fetch {
	struct run_fetch *next;
	char *path;
	struct file_id id;
	uint64_t epoch;
	bool live; /* a chunk was read while /out was not settled */
	/* The file changed under this fetch (another file at a later chunk):
	 * kept, never advanced again, so that its last chunk says live
	 * rather than pass off a fresh digest as the bytes sent. */
	bool changed;
	bool busy; /* [mu] a worker is hashing with it (it stays in r->fetches) */
	int fd;	   /* [mu] the file, opened while /out was settled in fd_epoch, or -1 */
	uint64_t fd_epoch;
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

/* mu held: no process of the run can change /out. */
static bool out_settled(const struct sbx_run *r) REQUIRES(r->mu)
{
	return r->sandbox_gone || (r->running == 0 && !r->out_unsettled);
}

/* ---- a pass: its bounds ---- */

struct out_pass {
	struct sbx_run *r;
	uint64_t bytes_left; /* it may still hash */
	int64_t deadline;    /* monotonic ms */
	unsigned gen;	     /* r->out_gen when it began */
	uint64_t epoch;
	bool live;	      /* /out was not settled at some point */
	const char *stop_why; /* the bound that stopped it, if one did */
	const char *no_hash;  /* set: only cached digests, for this reason */
};

/* mu held: r is p->r (named for the analysis). */
static void pass_note_state(struct sbx_run *r, struct out_pass *p) REQUIRES(r->mu)
{
	if (!out_settled(r) || r->out_epoch != p->epoch)
		p->live = true;
}

static void pass_begin(struct out_pass *p, struct sbx_run *r, int out_fd, int64_t ms)
{
	uint64_t cap = r->policy->limits->out_mb << 20;
	struct statfs fs;

	*p = (struct out_pass){.r = r, .bytes_left = cap, .deadline = sbx_mono_ms() + ms};
	/* What the tmpfs really holds (plus room for a live exec's next
	 * writes): a listing of sparse files reads no more than that. */
	if (fstatfs(out_fd, &fs) == 0) {
		uint64_t used = (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;

		if (used + (1u << 20) < cap)
			p->bytes_left = used + (1u << 20);
	}
	p->gen = atomic_load(&r->out_gen);
	run_lock(r);
	p->epoch = r->out_epoch;
	pass_note_state(r, p);
	run_unlock(r);
}

static bool pass_stopped(void *arg)
{
	struct out_pass *p = arg;

	if (atomic_load(&p->r->out_gen) != p->gen)
		p->stop_why = "the run is being torn down";
	else if (sbx_mono_ms() > p->deadline)
		p->stop_why = "its time bound ran out";
	return p->stop_why != NULL;
}

/* ---- the per-identity share ---- */

static int pass_admit(struct sbx_runs *runs, const char *identity, const char *what,
		      struct sbx_rpc_status *st)
{
	unsigned all = 0, mine = 0;
	int free_slot = -1, my_slot = -1;
	bool admit;

	pthread_mutex_lock(&runs->mu);
	for (int i = 0; i < RUNS_OUT_PASSES_MAX; i++) {
		all += runs->out_passes[i].n;
		if (runs->out_passes[i].n && !strcmp(runs->out_passes[i].identity, identity)) {
			my_slot = i;
			mine = runs->out_passes[i].n;
		} else if (!runs->out_passes[i].n && free_slot < 0) {
			free_slot = i;
		}
	}
	/* An identity with none in progress is never shut out by others
	 * holding their share (below the hard bound). */
	admit = mine == 0 ? all < RUNS_OUT_PASSES_MAX
			  : mine < RUNS_OUT_PASSES_PER_IDENTITY && all < RUNS_OUT_PASSES_SHARED;
	if (admit) {
		if (my_slot < 0) {
			my_slot = free_slot;
			snprintf(runs->out_passes[my_slot].identity,
				 sizeof(runs->out_passes[my_slot].identity), "%s", identity);
		}
		runs->out_passes[my_slot].n++;
		pthread_mutex_unlock(&runs->mu);
		return 0;
	}
	pthread_mutex_unlock(&runs->mu);
	if (mine >= RUNS_OUT_PASSES_PER_IDENTITY)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
				    "%s: this identity already has %u listings or digest passes of "
				    "/out in progress (at most %d at once); retry when one ends",
				    what, mine, RUNS_OUT_PASSES_PER_IDENTITY);
	if (mine)
		return sbx_rpc_fail(
		    st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
		    "%s: this identity already has %u listing or digest pass of /out "
		    "in progress, and a second one waits while %d or more are in "
		    "progress for all identities (%u are); retry when one ends",
		    what, mine, RUNS_OUT_PASSES_SHARED, all);
	return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED,
			    "%s: %u listings or digest passes of /out are in progress (at most %d "
			    "at once for all identities); retry when one ends",
			    what, all, RUNS_OUT_PASSES_MAX);
}

static void pass_leave(struct sbx_runs *runs, const char *identity)
{
	pthread_mutex_lock(&runs->mu);
	for (int i = 0; i < RUNS_OUT_PASSES_MAX; i++)
		if (runs->out_passes[i].n && !strcmp(runs->out_passes[i].identity, identity)) {
			runs->out_passes[i].n--;
			break;
		}
	pthread_mutex_unlock(&runs->mu);
}

/* ---- the cache of final digests ---- */

static void cache_free(struct run_hash_cache *c)
{
	if (!c)
		return;
	sbx_inode_set_free(&c->index);
	free(c->entries);
	free(c);
}

/* mu held. Only while /out is settled, and only digests of this epoch. */
static bool cache_get(struct sbx_run *r, const struct file_id *id, char sha256[65]) REQUIRES(r->mu)
{
	long i;

	if (!r->hashes || !out_settled(r) || r->hashes->epoch != r->out_epoch)
		return false;
	i = sbx_inode_get(&r->hashes->index, id->dev, id->ino);
	if (i < 0 || !same_file(&r->hashes->entries[i].id, id))
		return false;
	memcpy(sha256, r->hashes->entries[i].sha256, 65);
	return true;
}

/* mu held. Best effort: a digest that is not cached is computed again. A
 * digest read while an exec could change the file is never cached. */
static void cache_put(struct sbx_run *r, struct out_pass *p, const struct file_id *id,
		      const char sha256[65]) REQUIRES(r->mu)
{
	struct run_hash_cache *c = r->hashes;
	long i;

	pass_note_state(r, p);
	if (p->live)
		return;
	if (c && c->epoch != r->out_epoch) {
		cache_free(c);
		c = r->hashes = NULL;
	}
	if (!c) {
		if (!(c = calloc(1, sizeof(*c))) ||
		    !(c->entries = calloc(CACHE_MAX, sizeof(*c->entries)))) {
			free(c);
			return;
		}
		c->epoch = r->out_epoch;
		r->hashes = c;
	}
	i = sbx_inode_get(&c->index, id->dev, id->ino);
	if (i < 0) {
		if (c->n >= CACHE_MAX || !sbx_inode_put(&c->index, id->dev, id->ino, (long)c->n))
			return;
		i = (long)c->n++;
	}
	c->entries[i].id = *id;
	memcpy(c->entries[i].sha256, sha256, 65);
}

/* The digest of an open regular file, from the cache or by a pass over at
 * most its size at open (a file that grows while read fails: EFBIG). */
static int file_sha256(struct out_pass *p, const char *path, int fd, const struct stat *st,
		       char sha256[65], struct sbx_err *err)
{
	struct sbx_run *r = p->r;
	struct file_id id = file_id(st), after;
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
	hit = cache_get(r, &id, sha256);
	run_unlock(r);
	if (hit)
		return 0;
	if (p->no_hash && st->st_size > 0)
		return sbx_fail_errnum(err, EBUSY, "%s: %s", path, p->no_hash);
	if ((uint64_t)st->st_size > p->bytes_left) {
		p->stop_why = "the bytes it may hash (what /out holds) ran out";
		return sbx_fail_errnum(err, ENOSPC, "%s: %s", path, p->stop_why);
	}
	if (lseek(fd, 0, SEEK_SET) < 0)
		return sbx_fail_errno(err, "%s", path);
	if (sbx_sha256_fd_max(fd, (uint64_t)st->st_size, pass_stopped, p, sha256, NULL, err) < 0)
		return sbx_err_prefix(err, "%s", path);
	p->bytes_left -= (uint64_t)st->st_size;
	if (fstat(fd, &st2) < 0 || (after = file_id(&st2), !same_file(&id, &after)))
		return sbx_fail_errnum(err, EAGAIN, "%s: changed while read", path);
	run_lock(r);
	cache_put(r, p, &id, sha256);
	run_unlock(r);
	return 0;
}

/* ---- listing ---- */

struct list_ctx {
	struct out_pass pass;
	struct artifact_list *al;
	size_t cap;
	size_t max_bytes;	    /* of the listing on the wire */
	size_t bytes;		    /* so far */
	struct sbx_inode_set links; /* files with several names: (dev, ino) -> item */
	const char *full_why;	    /* the bound that made the listing full */
};

static void not_listed(struct list_ctx *c, const char *why)
{
	c->al->not_listed++;
	if (!c->al->why)
		c->al->why = why;
}

static int add_item(struct list_ctx *c, const char *relpath, const struct stat *st,
		    const char sha256[65])
{
	struct artifact_list *al = c->al;
	Sbx__V1__Artifact *a;

	if (al->n == c->cap) {
		size_t ncap = c->cap ? c->cap * 2 : 64;
		Sbx__V1__Artifact **v = realloc(al->items, ncap * sizeof(*v));

		if (!v)
			return -1;
		al->items = v;
		c->cap = ncap;
	}
	a = malloc(sizeof(*a));
	if (!a)
		return -1;
	sbx__v1__artifact__init(a);
	a->path = strdup(relpath);
	a->sha256 = strdup(sha256);
	a->size = (uint64_t)st->st_size;
	a->mode = st->st_mode & 0777;
	al->items[al->n++] = a;
	c->bytes += strlen(relpath) + ARTIFACT_WIRE;
	return a->path && a->sha256 ? 0 : -1;
}

static int add_artifact(const char *relpath, int fd, const struct stat *st, void *arg,
			struct sbx_err *err)
{
	struct list_ctx *c = arg;
	struct artifact_list *al = c->al;
	char sha256[65];
	long link = -1;

	if ((uint64_t)st->st_size > (c->pass.r->policy->limits->out_mb << 20)) {
		al->oversize++; /* sparse: never hashed, listed or served */
		return 0;
	}
	/* Bounded in entries and bytes, whatever the names: the rest is
	 * counted, and the walk goes on (to RUN_ARTIFACTS_MAX) only to count. */
	if (al->n >= RUN_LIST_MAX) {
		not_listed(c, "the listing holds at most " STR(RUN_LIST_MAX) " files");
		return 0;
	}
	if (c->bytes + strlen(relpath) + ARTIFACT_WIRE > c->max_bytes) {
		not_listed(c, "the listing's names would not fit in max_message_bytes");
		return 0;
	}
	if (c->pass.stop_why) {
		not_listed(c, c->pass.stop_why);
		return 0;
	}
	/* A file with many names is hashed once per listing. */
	if (st->st_nlink > 1)
		link = sbx_inode_get(&c->links, st->st_dev, st->st_ino);
	if (link >= 0 && al->items[link]->size == (uint64_t)st->st_size) {
		memcpy(sha256, al->items[link]->sha256, 65);
	} else if (file_sha256(&c->pass, relpath, fd, st, sha256, err) < 0) {
		if (err->errnum == ENOMEM)
			return -1;
		/* Changed, grew, or a bound ran out: left out, the rest goes on. */
		not_listed(c, c->pass.stop_why ? c->pass.stop_why
			      : c->pass.no_hash
				  ? c->pass.no_hash
				  : "a file changed while it was read (an exec is running)");
		return 0;
	} else if (st->st_nlink > 1) {
		sbx_inode_put(&c->links, st->st_dev, st->st_ino, (long)al->n);
	}
	if (add_item(c, relpath, st, sha256) < 0)
		return sbx_fail_errnum(err, ENOMEM, "artifacts");
	return 0;
}

static int cmp_artifact(const void *a, const void *b)
{
	return strcmp((*(Sbx__V1__Artifact *const *)a)->path,
		      (*(Sbx__V1__Artifact *const *)b)->path);
}

/* Opens beneath /out go through the run's reader (out_reader.h): the
 * sandbox's files are the run's uid's, not ours. A run without one (Ready
 * carried no /out) has no out_fd either. */
static int open_through_reader(void *reader, const char *rel, int flags, struct sbx_err *err)
{
	return sbx_out_reader_open(reader, rel, flags, err);
}

static struct sbx_tree_src out_src(struct sbx_run *r, int out_fd)
{
	bool reader = r->reader.sock >= 0;
	return (struct sbx_tree_src){.top = out_fd,
				     .open = reader ? open_through_reader : NULL,
				     .ctx = reader ? &r->reader : NULL};
}

static int list(struct sbx_run *r, int out_fd, size_t max_bytes, const char *no_hash,
		struct artifact_list *al, struct sbx_err *err)
{
	struct list_ctx c = {.al = al, .max_bytes = max_bytes};
	struct sbx_tree_src src = out_src(r, out_fd);
	struct sbx_tree_skips skipped;
	uint64_t n;
	int rc;

	memset(al, 0, sizeof(*al));
	pass_begin(&c.pass, r, out_fd, RUN_OUT_PASS_MS);
	c.pass.no_hash = no_hash;
	rc = sbx_tree_list(&src, RUN_ARTIFACTS_MAX, add_artifact, &c, &skipped, err);
	sbx_inode_set_free(&c.links);
	run_lock(r);
	pass_note_state(r, &c.pass);
	run_unlock(r);
	al->live = c.pass.live;
	al->busy = skipped.busy;
	al->bad_names = skipped.bad_names;
	n = skipped.other + skipped.busy + skipped.bad_names + al->oversize + al->not_listed;
	al->skipped = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
	if (rc == 1 && !al->why)
		al->why = "/out holds more than " STR(RUN_ARTIFACTS_MAX) " entries; the rest was "
									 "not looked at";
	al->truncated = rc == 1 || al->not_listed > 0;
	if (rc < 0) {
		artifacts_list_free(al);
		return sbx_err_prefix(err, "/out");
	}
	if (al->n)
		qsort(al->items, al->n, sizeof(*al->items), cmp_artifact);
	return 0;
}

int artifacts_list(struct sbx_run *r, int out_fd, size_t max_bytes, struct artifact_list *al,
		   struct sbx_err *err)
{
	return list(r, out_fd, max_bytes, NULL, al, err);
}

int artifacts_list_manifest(struct sbx_run *r, int out_fd, size_t max_bytes,
			    struct artifact_list *al, struct sbx_err *err)
{
	struct sbx_rpc_status refused = {0};
	int rc;

	/* A Teardown is never refused for it (the run is gone either way): it
	 * hashes nothing instead, and the note says why. */
	if (pass_admit(r->runs, r->identity, "Teardown", &refused) < 0)
		return list(r, out_fd, max_bytes,
			    "Teardown hashed none: this identity had its share of listings and "
			    "digest passes of /out in progress (list before tearing down, or "
			    "tear fewer runs down at once)",
			    al, err);
	rc = list(r, out_fd, max_bytes, NULL, al, err);
	pass_leave(r->runs, r->identity);
	return rc;
}

Sbx__V1__ArtifactListing *artifacts_listing_new(const struct artifact_list *al)
{
	Sbx__V1__ArtifactListing *l = malloc(sizeof(*l));
	char note[256];

	if (!l)
		return NULL;
	sbx__v1__artifact_listing__init(l);
	l->live = al->live;
	l->truncated = al->truncated;
	l->not_listed = al->not_listed > UINT32_MAX ? UINT32_MAX : (uint32_t)al->not_listed;
	l->busy = al->busy > UINT32_MAX ? UINT32_MAX : (uint32_t)al->busy;
	l->bad_names = al->bad_names > UINT32_MAX ? UINT32_MAX : (uint32_t)al->bad_names;
	note[0] = '\0';
	if (al->truncated)
		snprintf(note, sizeof(note), "%llu files not listed: %s",
			 (unsigned long long)al->not_listed, al->why ? al->why : "a bound");
	if (!(l->note = strdup(note))) {
		free(l);
		return NULL;
	}
	return l;
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
	if (f->fd >= 0)
		close(f->fd);
	free(f);
}

void artifacts_forget(struct sbx_run *r)
{
	struct run_fetch *f, *fn;

	cache_free(r->hashes);
	r->hashes = NULL;
	for (f = r->fetches; f; f = fn) {
		fn = f->next;
		fetch_free(f);
	}
	r->fetches = NULL;
}

void artifacts_drop_files(struct sbx_run *r) REQUIRES(r->mu)
{
	for (struct run_fetch *f = r->fetches; f; f = f->next) {
		sbx_closep(&f->fd);
		f->fd = -1;
	}
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
	return runs_not_found(r->runs, r->identity, r->id, st);
}

size_t artifacts_reply_bytes(const struct sbx_runs *runs)
{
	return runs->cfg.max_message_bytes > 2 * REPLY_SLACK
		   ? (size_t)runs->cfg.max_message_bytes - REPLY_SLACK
		   : (size_t)runs->cfg.max_message_bytes / 2;
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
	if (fd < 0 || pass_admit(runs, r->identity, "ListArtifacts", st) < 0) {
		run_unref(r);
		return -1;
	}
	rc = artifacts_list(r, fd, artifacts_reply_bytes(runs), &al, &st->err);
	pass_leave(runs, r->identity);
	run_unref(r);
	if (rc < 0)
		return sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	l = malloc(sizeof(*l));
	if (!l || (sbx__v1__list_artifacts_response__init(l),
		   !(l->listing = artifacts_listing_new(&al)))) {
		free(l);
		artifacts_list_free(&al);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	l->artifacts = al.items;
	l->n_artifacts = al.n;
	l->skipped = al.skipped;
	*resp = l;
	return 0;
}

/* ---- fetching ---- */

static int open_artifact(const struct sbx_tree_src *src, const char *path, struct stat *st,
			 struct sbx_rpc_status *st_)
{
	_cleanup_close_ int fd = sbx_tree_src_open(src, path, O_RDONLY | O_NONBLOCK, &st_->err);

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
		case ENAMETOOLONG:
			return sbx_rpc_fail(st_, SBX__V1__CODE__INVALID_ARGUMENT,
					    "path %.200s: a component is longer than %d bytes",
					    path, NAME_MAX);
		case EAGAIN:
			return sbx_rpc_fail(
			    st_, SBX__V1__CODE__FAILED_PRECONDITION,
			    "artifact %.200s is busy: the sandbox holds a lease on it", path);
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

/* Takes the cursor of a fetch of this file in progress (marked busy, left
 * in the list), or starts one at offset 0 (in `epoch`), which also starts
 * over one in progress; NULL when neither applies, or when another worker
 * holds it (`wait`: for at most CURSOR_WAIT_MS). *changed: the fetch in
 * progress was of another version of the file (its earlier chunks are not
 * of the file there now). */
static struct run_fetch *cursor_take(struct sbx_run *r, const char *path, const struct file_id *id,
				     uint64_t offset, uint64_t epoch, bool wait, bool *changed)
{
	struct run_fetch *f = NULL, *drop = NULL;
	int64_t until = sbx_mono_ms() + CURSOR_WAIT_MS;

	for (;;) {
		bool busy = false;

		run_lock(r);
		for (struct run_fetch **p = &r->fetches; *p; p = &(*p)->next) {
			if (strcmp((*p)->path, path))
				continue;
			if ((*p)->busy) {
				busy = true;
			} else if (offset == 0) {
				drop = *p; /* started over */
				*p = drop->next;
			} else if ((*p)->changed || !same_file(&(*p)->id, id)) {
				(*p)->changed = *changed = true; /* of another version */
				if ((*p)->fd >= 0)
					close((*p)->fd);
				(*p)->fd = -1;
			} else {
				f = *p;
				f->busy = true;
			}
			break;
		}
		run_unlock(r);
		fetch_free(drop);
		drop = NULL;
		if (!busy || !wait || sbx_mono_ms() > until)
			break;
		sbx_sleep_ms(1);
	}
	if (f || offset != 0)
		return f;
	f = calloc(1, sizeof(*f));
	if (f)
		f->fd = -1;
	if (!f || !(f->path = strdup(path)) || !(f->md = EVP_MD_CTX_new()) ||
	    !EVP_DigestInit_ex(f->md, EVP_sha256(), NULL)) {
		fetch_free(f);
		return NULL;
	}
	f->id = *id;
	f->epoch = epoch;
	f->busy = true;
	f->fd = -1;
	/* In the list from now on; the oldest idle ones beyond FETCH_CURSORS go. */
	run_lock(r);
	f->next = r->fetches;
	r->fetches = f;
	size_t n = 0;
	for (struct run_fetch **p = &r->fetches; *p;) {
		if (++n > FETCH_CURSORS && !(*p)->busy) {
			struct run_fetch *d = *p;
			*p = d->next;
			d->next = drop;
			drop = d;
		} else {
			p = &(*p)->next;
		}
	}
	run_unlock(r);
	while (drop) {
		struct run_fetch *next = drop->next;

		fetch_free(drop);
		drop = next;
	}
	return f;
}

/* Gives the cursor back for the next chunk. */
static void cursor_put(struct sbx_run *r, struct run_fetch *f)
{
	run_lock(r);
	f->busy = false;
	run_unlock(r);
}

/* Takes the cursor out of the list for good (its last chunk). */
static void cursor_end(struct sbx_run *r, struct run_fetch *f)
{
	if (!f)
		return;
	run_lock(r);
	for (struct run_fetch **p = &r->fetches; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	run_unlock(r);
	fetch_free(f);
}

/* The cursor moved over the chunk [offset, offset + got) in data: the gap
 * before it hashed from the file (bounded), what it already hashed skipped. */
static void cursor_advance(struct run_fetch *f, int fd, const uint8_t *data, uint64_t offset,
			   size_t got)
{
	uint8_t buf[64 * 1024];

	if (f->next_offset == UINT64_MAX)
		return; /* given up: a fresh pass at the end */
	if (offset > f->next_offset) {
		if (offset - f->next_offset > CURSOR_GAP_MAX) {
			f->next_offset = UINT64_MAX;
			return;
		}
		while (f->next_offset < offset) {
			size_t want = offset - f->next_offset < sizeof(buf)
					  ? (size_t)(offset - f->next_offset)
					  : sizeof(buf);
			ssize_t k = pread(fd, buf, want, (off_t)f->next_offset);

			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0 || !EVP_DigestUpdate(f->md, buf, (size_t)k)) {
				f->next_offset = UINT64_MAX;
				return;
			}
			f->next_offset += (uint64_t)k;
		}
	}
	if (offset + got <= f->next_offset)
		return;
	size_t skip = (size_t)(f->next_offset - offset);
	if (EVP_DigestUpdate(f->md, data + skip, got - skip))
		f->next_offset = offset + got;
	else
		f->next_offset = UINT64_MAX;
}

/* The sha256 for the last chunk: the cursor's if it saw every byte of an
 * unchanged file, else a fresh pass (one of the identity's share). *live:
 * an exec could have changed the file while it was read. */
static int final_sha256(struct sbx_run *r, const char *path, int fd, const struct stat *st,
			struct run_fetch *f, char sha256[65], bool *live, struct sbx_rpc_status *rs)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	struct file_id id = file_id(st);
	struct out_pass p;
	int rc;

	if (f && f->next_offset == (uint64_t)st->st_size && same_file(&f->id, &id) &&
	    EVP_DigestFinal_ex(f->md, md, &mdlen) && mdlen == 32) {
		sbx_sha256_hex(md, sha256);
		p = (struct out_pass){.r = r, .epoch = f->epoch, .live = f->live};
		run_lock(r);
		cache_put(r, &p, &id, sha256);
		run_unlock(r);
		*live = p.live;
		return 0;
	}
	if (pass_admit(r->runs, r->identity, "FetchArtifact (the sha256 on its last chunk)", rs) <
	    0)
		return -1;
	pass_begin(&p, r, fd, RUN_OUT_PASS_MS);
	rc = file_sha256(&p, path, fd, st, sha256, &rs->err);
	pass_leave(r->runs, r->identity);
	*live = p.live;
	if (rc < 0) {
		sbx_rpc_code(rs, rs->err.errnum == ENOMEM ? SBX__V1__CODE__INTERNAL
							  : SBX__V1__CODE__FAILED_PRECONDITION);
		return sbx_rpc_prefix(rs, "artifact %.200s: sha256", path);
	}
	return 0;
}

/* The file a fetch in progress opened, while nothing of the run can have
 * renamed or replaced it since (/out settled, no exec began): the next
 * chunks skip the reader's round trip. A dup, or -1. */
static int open_cached(struct sbx_run *r, const char *path)
{
	int fd = -1;

	run_lock(r);
	if (out_settled(r))
		for (struct run_fetch *f = r->fetches; f; f = f->next)
			if (f->fd >= 0 && f->fd_epoch == r->out_epoch && !strcmp(f->path, path)) {
				fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 3);
				break;
			}
	run_unlock(r);
	return fd;
}

/* f (held) keeps fd for the next chunks, if /out is still settled in epoch
 * and the run's cursors hold fewer than FETCH_FDS files: sbxd's descriptor
 * budget keeps 16 a run for the run itself, its execs' apart
 * (server/rpc/rpc_server.c, FD_RESERVE), and a
 * caller that starts fetches and abandons them must not hold more (review:
 * 8 per run stayed open until teardown). Files of an older epoch, which
 * no chunk will be served from again, are closed here. */
static void open_remember(struct sbx_run *r, struct run_fetch *f, int fd, uint64_t epoch)
{
	size_t held = 0;

	run_lock(r);
	for (struct run_fetch *o = r->fetches; o; o = o->next) {
		if (o->fd >= 0 && o->fd_epoch != r->out_epoch && !o->busy) {
			close(o->fd);
			o->fd = -1;
		}
		held += o->fd >= 0;
	}
	if (f->fd < 0 && held < FETCH_FDS && r->out_fd >= 0 && out_settled(r) &&
	    r->out_epoch == epoch && (f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3)) >= 0)
		f->fd_epoch = epoch;
	run_unlock(r);
}

static int fetch(struct sbx_run *r, int out_fd, const Sbx__V1__FetchArtifactRequest *req,
		 size_t max, Sbx__V1__FetchArtifactResponse *o, struct sbx_bulk *bulk,
		 struct sbx_rpc_status *st)
{
	uint8_t *data;
	_cleanup_close_ int fd = -1;
	struct run_fetch *f;
	struct file_id id;
	struct stat sb;
	size_t n, got;
	bool live = false, settled, cached, changed = false;
	uint64_t epoch;
	int rc;
	char sha256[65];

	struct sbx_tree_src src = out_src(r, out_fd);
	if ((fd = open_cached(r, req->path)) < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		sbx_closep(&fd);
		fd = open_artifact(&src, req->path, &sb, st);
	}
	if (fd < 0)
		return -1;
	/* As in a listing: more than /out can hold is a sparse file. */
	if ((uint64_t)sb.st_size > (r->policy->limits->out_mb << 20))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "artifact %.200s: %lld bytes, more than out_mb holds (a sparse "
				    "file): not served",
				    req->path, (long long)sb.st_size);
	if (req->offset > (uint64_t)sb.st_size)
		return sbx_rpc_fail(st, SBX__V1__CODE__OUT_OF_RANGE,
				    "offset %llu is past the end of %.200s (%lld bytes)",
				    (unsigned long long)req->offset, req->path,
				    (long long)sb.st_size);
	n = (uint64_t)sb.st_size - req->offset < max ? (size_t)((uint64_t)sb.st_size - req->offset)
						     : max;
	/* Read straight into the answer's message when the RPC layer has room
	 * for it (no copy of the chunk into the reply), else into the response. */
	data = bulk ? bulk->room(bulk, n) : NULL;
	if (!data)
		bulk = NULL;
	if (!data && !(data = o->data.data = malloc(n ? n : 1)))
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	/* Whether an exec could write while the chunk is read is known only
	 * before the read: one that writes through a shared mapping during it
	 * and exits before a check after it would leave /out settled, and the
	 * digest of the bytes read before the write would be cached as final. */
	id = file_id(&sb);
	run_lock(r);
	settled = out_settled(r);
	epoch = r->out_epoch;
	cached = cache_get(r, &id, sha256);
	run_unlock(r);
	if (read_chunk(fd, data, n, req->offset, &got) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "artifact %.200s",
					  req->path);
	if (bulk)
		bulk->len = got;
	else
		o->data.len = got;
	o->size = (uint64_t)sb.st_size;
	o->eof = req->offset + got >= (uint64_t)sb.st_size || got < n;

	id = file_id(&sb);
	f = cursor_take(r, req->path, &id, req->offset, epoch, o->eof, &changed);
	if (f && settled)
		open_remember(r, f, fd, epoch);
	if (cached && o->eof && f) {
		/* Served as the cached digest says, if nothing could change the
		 * file since the fetch's first chunk (no exec began: the cursor's
		 * epoch, and it is the same file). */
		struct file_id after;
		run_lock(r);
		bool still = out_settled(r) && r->out_epoch == epoch && f->epoch == epoch;
		run_unlock(r);
		if (still && fstat(fd, &sb) == 0 &&
		    (after = file_id(&sb), same_file(&id, &after))) {
			cursor_end(r, f);
			return (o->sha256 = strdup(sha256))
				   ? 0
				   : sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
		}
	}
	if (f && !cached) {
		/* And an exec started during the read (or since the cursor's
		 * first chunk) changes the epoch. */
		run_lock(r);
		f->live |= !settled || r->out_epoch != epoch || epoch != f->epoch;
		run_unlock(r);
		cursor_advance(f, fd, data, req->offset, got);
	}
	if (!o->eof) {
		if (f)
			cursor_put(r, f);
		return 0;
	}
	if (fstat(fd, &sb) < 0) {
		cursor_end(r, f);
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "artifact %.200s: fstat",
					  req->path);
	}
	rc = final_sha256(r, req->path, fd, &sb, f, sha256, &live, st);
	o->live = live || changed;
	cursor_end(r, f);
	if (rc < 0)
		return -1;
	o->sha256 = strdup(sha256);
	if (!o->sha256)
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	return 0;
}

SBX_BULK_HANDLER(fetch_artifact, Sbx__V1__FetchArtifactRequest, Sbx__V1__FetchArtifactResponse)
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
	rc = fetch(r, out_fd, req, max, o, bulk, st);
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

int artifacts_out_dup(struct sbx_run *r, struct sbx_rpc_status *st)
{
	return out_dup(r, st);
}

int artifacts_open(struct sbx_run *r, int out_fd, const char *path, struct stat *sb,
		   struct sbx_rpc_status *st)
{
	const char *why = sbx_path_problem(path, ARTIFACT_PATH_MAX, SBX_PATH_RELATIVE);
	struct sbx_tree_src src = out_src(r, out_fd);

	if (why)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "path %.200s: %s", path,
				    why);
	_cleanup_close_ int fd = open_artifact(&src, path, sb, st);
	if (fd < 0)
		return -1;
	/* As in a listing: more than /out can hold is a sparse file. */
	if ((uint64_t)sb->st_size > (r->policy->limits->out_mb << 20))
		return sbx_rpc_fail(st, SBX__V1__CODE__FAILED_PRECONDITION,
				    "artifact %.200s: %lld bytes, more than out_mb holds (a sparse "
				    "file): not served",
				    path, (long long)sb->st_size);
	return sbx_steal_fd(fd);
}

void artifacts_out_state(struct sbx_run *r, bool *settled, uint64_t *epoch)
{
	run_lock(r);
	*settled = out_settled(r);
	*epoch = r->out_epoch;
	run_unlock(r);
}

bool artifacts_final_sha256(struct sbx_run *r, const struct stat *sb, char sha256[65])
{
	struct file_id id = file_id(sb);
	bool hit;

	run_lock(r);
	hit = cache_get(r, &id, sha256);
	run_unlock(r);
	return hit;
}
