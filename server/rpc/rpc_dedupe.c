/* Request-id deduplication (see rpc_dedupe.h): a hash table for lookups and
 * a list in arrival order for expiry and eviction, under one mutex. Nothing
 * here blocks: a repeat of a running call is parked, not waited for, so no
 * thread (an nng callback least of all) sleeps on another caller's work. */
#include "rpc_dedupe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"

#define N_BUCKETS 8192 /* a power of two, twice the default entry cap */

struct rpc_dedupe_entry {
	struct rpc_dedupe_entry *hnext;	      /* bucket chain */
	struct rpc_dedupe_entry *prev, *next; /* arrival order, oldest first */
	uint64_t hash;
	char identity[128];
	char request_id[65];
	uint8_t fingerprint[32];
	bool done;
	int64_t expires_ms; /* sbx_mono_ms() */
	uint8_t *answer;
	size_t answer_len;
	struct rpc_dedupe_waiter *waiters;
};

struct rpc_dedupe {
	pthread_mutex_t lock;
	struct rpc_dedupe_limits lim;
	uint64_t seed;
	struct rpc_dedupe_entry *buckets[N_BUCKETS];
	struct rpc_dedupe_entry *oldest, *newest;
	size_t n_entries, bytes, parked;
};

/* FNV-1a, seeded per process so that nobody can pick request ids that all
 * land in one bucket without seeing the table; the table is small and
 * bounded anyway, so this only keeps chains short. */
static uint64_t hash_key(uint64_t seed, const char *identity, const char *request_id)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (const char *c = identity; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL; /* a separator; strcmp has the last word */
	for (const char *c = request_id; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
	return h;
}

struct rpc_dedupe *rpc_dedupe_new(const struct rpc_dedupe_limits *lim)
{
	struct rpc_dedupe *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->lim = *lim;
	if (getrandom(&d->seed, sizeof(d->seed), GRND_NONBLOCK) != sizeof(d->seed))
		d->seed = (uint64_t)sbx_mono_ns() ^ (uint64_t)(uintptr_t)d;
	pthread_mutex_init(&d->lock, NULL);
	return d;
}

static void unlink_entry(struct rpc_dedupe *d, struct rpc_dedupe_entry *e)
{
	struct rpc_dedupe_entry **pp = &d->buckets[e->hash & (N_BUCKETS - 1)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	if (e->prev)
		e->prev->next = e->next;
	else
		d->oldest = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		d->newest = e->prev;
	d->n_entries--;
	d->bytes -= e->answer_len;
}

static void drop_entry(struct rpc_dedupe *d, struct rpc_dedupe_entry *e)
{
	unlink_entry(d, e);
	free(e->answer);
	free(e);
}

/* Expired entries go, then finished ones oldest first until the new one
 * fits. Finished entries are relinked as the newest when they finish, so
 * among themselves they are in expiry order. Running ones stay: repeats may
 * be parked on them, and they are few (one per call in flight). */
static void make_room(struct rpc_dedupe *d, size_t extra_bytes)
{
	int64_t now = sbx_mono_ms();
	struct rpc_dedupe_entry *e = d->oldest;

	while (e) {
		struct rpc_dedupe_entry *next = e->next;
		bool over =
		    d->n_entries >= d->lim.max_entries || d->bytes + extra_bytes > d->lim.max_bytes;

		if (e->done) {
			if (!over && e->expires_ms > now)
				break; /* finished ones are in expiry order */
			drop_entry(d, e);
		}
		e = next;
	}
}

static struct rpc_dedupe_entry *find(struct rpc_dedupe *d, uint64_t h, const char *identity,
				     const char *request_id)
{
	for (struct rpc_dedupe_entry *e = d->buckets[h & (N_BUCKETS - 1)]; e; e = e->hnext)
		if (e->hash == h && strcmp(e->identity, identity) == 0 &&
		    strcmp(e->request_id, request_id) == 0)
			return e;
	return NULL;
}

static struct rpc_dedupe_entry *insert(struct rpc_dedupe *d, uint64_t h, const char *identity,
				       const char *request_id, const uint8_t fingerprint[32])
{
	struct rpc_dedupe_entry *e;

	if (strlen(identity) >= sizeof(e->identity) || strlen(request_id) >= sizeof(e->request_id))
		return NULL;
	/* One caller may hold a quarter of the table: past that it evicts its
	 * own oldest answers, never another caller's (whose retries would then
	 * run twice). */
	size_t mine = 0;
	struct rpc_dedupe_entry *oldest_mine = NULL;
	for (e = d->oldest; e; e = e->next)
		if (strcmp(e->identity, identity) == 0) {
			mine++;
			if (!oldest_mine && e->done)
				oldest_mine = e;
		}
	if (mine >= d->lim.max_entries / 4 + 1) {
		if (!oldest_mine)
			return NULL;
		drop_entry(d, oldest_mine);
	}
	make_room(d, 0);
	if (d->n_entries >= d->lim.max_entries)
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->hash = h;
	strcpy(e->identity, identity);
	strcpy(e->request_id, request_id);
	memcpy(e->fingerprint, fingerprint, sizeof(e->fingerprint));
	e->hnext = d->buckets[h & (N_BUCKETS - 1)];
	d->buckets[h & (N_BUCKETS - 1)] = e;
	e->prev = d->newest;
	if (d->newest)
		d->newest->next = e;
	else
		d->oldest = e;
	d->newest = e;
	d->n_entries++;
	return e;
}

enum rpc_dedupe_verdict rpc_dedupe_begin(struct rpc_dedupe *d, const char *identity,
					 const char *request_id, const uint8_t fingerprint[32],
					 struct rpc_dedupe_waiter *w,
					 struct rpc_dedupe_entry **first, uint8_t **replay,
					 size_t *replay_len)
{
	uint64_t h = hash_key(d->seed, identity, request_id);
	enum rpc_dedupe_verdict v;
	struct rpc_dedupe_entry *e;

	*first = NULL;
	*replay = NULL;
	*replay_len = 0;
	pthread_mutex_lock(&d->lock);
	e = find(d, h, identity, request_id);
	if (e && e->done && e->expires_ms <= sbx_mono_ms()) {
		drop_entry(d, e);
		e = NULL;
	}
	if (!e) {
		*first = insert(d, h, identity, request_id, fingerprint);
		v = *first ? DEDUPE_FIRST : DEDUPE_BUSY;
	} else if (memcmp(e->fingerprint, fingerprint, sizeof(e->fingerprint)) != 0) {
		v = DEDUPE_MISMATCH;
	} else if (e->done) {
		*replay = malloc(e->answer_len ? e->answer_len : 1);
		if (*replay) {
			memcpy(*replay, e->answer, e->answer_len);
			*replay_len = e->answer_len;
		}
		v = *replay ? DEDUPE_REPLAY : DEDUPE_BUSY;
	} else if (d->parked >= d->lim.max_parked) {
		v = DEDUPE_BUSY;
	} else {
		w->next = e->waiters;
		e->waiters = w;
		d->parked++;
		v = DEDUPE_PARKED;
	}
	pthread_mutex_unlock(&d->lock);
	return v;
}

void rpc_dedupe_finish(struct rpc_dedupe *d, struct rpc_dedupe_entry *e, const uint8_t *answer,
		       size_t len, bool keep,
		       void (*notify)(struct rpc_dedupe_waiter *w, const uint8_t *answer,
				      size_t len))
{
	struct rpc_dedupe_waiter *w, *next;

	pthread_mutex_lock(&d->lock);
	w = e->waiters;
	e->waiters = NULL;
	for (struct rpc_dedupe_waiter *c = w; c; c = c->next)
		d->parked--;
	if (keep && len <= d->lim.max_bytes) {
		unlink_entry(d, e);
		make_room(d, len);
		e->answer = malloc(len ? len : 1);
		keep = e->answer != NULL;
		if (keep) {
			memcpy(e->answer, answer, len);
			e->answer_len = len;
			e->done = true;
			e->expires_ms = sbx_mono_ms() + d->lim.ttl_ms;
			/* Relinked as the newest: it expires last. */
			e->hnext = d->buckets[e->hash & (N_BUCKETS - 1)];
			d->buckets[e->hash & (N_BUCKETS - 1)] = e;
			e->next = NULL;
			e->prev = d->newest;
			if (d->newest)
				d->newest->next = e;
			else
				d->oldest = e;
			d->newest = e;
			d->n_entries++;
			d->bytes += len;
		} else {
			free(e);
		}
	} else {
		drop_entry(d, e);
	}
	pthread_mutex_unlock(&d->lock);

	for (; w; w = next) {
		next = w->next; /* notify may reuse w for the next call */
		notify(w, answer, len);
	}
}

void rpc_dedupe_free(struct rpc_dedupe *d)
{
	if (!d)
		return;
	while (d->oldest)
		drop_entry(d, d->oldest);
	pthread_mutex_destroy(&d->lock);
	free(d);
}
