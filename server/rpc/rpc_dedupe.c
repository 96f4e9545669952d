/* SPDX-License-Identifier: Apache-2.0 */
/* Request-id deduplication (see rpc_dedupe.h): a hash table for lookups and
 * a list in arrival order for expiry and eviction, under one mutex, and per
 * caller (owner) its entries' count, bytes and parked repeats and its own
 * list in arrival order, so that a caller's share is kept without a walk of
 * every caller's entries (which made each request cost the whole table,
 * under the lock every caller takes). Nothing here blocks: a repeat of a
 * running call is parked, not waited for, so no thread (an nng callback
 * least of all) sleeps on another caller's work. */
#include "rpc_dedupe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"

#define N_BUCKETS	8192 /* a power of two, twice the default entry cap */
#define N_OWNER_BUCKETS 1024 /* a power of two */

/* One caller's part of the table: there while it has an entry. */
struct dedupe_owner {
	struct dedupe_owner *hnext; /* owner bucket chain */
	uint64_t hash;
	char identity[128];
	size_t entries, bytes, parked;
	struct rpc_dedupe_entry *oldest, *newest; /* its entries, arrival order */
};

struct rpc_dedupe_entry {
	struct rpc_dedupe_entry *hnext;		/* bucket chain */
	struct rpc_dedupe_entry *prev, *next;	/* arrival order, oldest first */
	struct dedupe_owner *owner;		/* while linked */
	struct rpc_dedupe_entry *oprev, *onext; /* its owner's, arrival order */
	uint64_t hash;
	char identity[128];
	char request_id[65];
	uint8_t fingerprint[32];
	bool done;
	int64_t expires_ms; /* sbx_mono_ms() */
	uint8_t *answer;
	size_t answer_len;
	struct rpc_dedupe_waiter *waiters;
	size_t n_waiters;
};

struct rpc_dedupe {
	pthread_mutex_t lock;
	struct rpc_dedupe_limits lim;
	uint64_t seed;
	struct rpc_dedupe_entry *buckets[N_BUCKETS];
	struct dedupe_owner *owners[N_OWNER_BUCKETS];
	struct rpc_dedupe_entry *oldest, *newest;
	size_t n_entries, bytes, parked;
};

/* FNV-1a, seeded per process so that nobody can pick request ids that all
 * land in one bucket without seeing the table; the table is small and
 * bounded anyway, so this only keeps chains short. */
static uint64_t hash_str(uint64_t h, const char *s)
{
	for (const char *c = s; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ULL;
	return h;
}

static uint64_t hash_key(uint64_t seed, const char *identity, const char *request_id)
{
	uint64_t h = hash_str(0xcbf29ce484222325ULL ^ seed, identity);

	h = (h ^ 0xff) * 0x100000001b3ULL; /* a separator; strcmp has the last word */
	return hash_str(h, request_id);
}

static struct dedupe_owner *owner_of(struct rpc_dedupe *d, const char *identity, uint64_t *hash)
{
	uint64_t h = hash_str(0xcbf29ce484222325ULL ^ d->seed, identity);

	if (hash)
		*hash = h;
	for (struct dedupe_owner *o = d->owners[h & (N_OWNER_BUCKETS - 1)]; o; o = o->hnext)
		if (o->hash == h && strcmp(o->identity, identity) == 0)
			return o;
	return NULL;
}

/* identity's owner, made if it has none; NULL without memory. */
static struct dedupe_owner *owner_get(struct rpc_dedupe *d, const char *identity)
{
	uint64_t h;
	struct dedupe_owner *o = owner_of(d, identity, &h);

	if (o || !(o = calloc(1, sizeof(*o))))
		return o;
	o->hash = h;
	snprintf(o->identity, sizeof(o->identity), "%s", identity);
	o->hnext = d->owners[h & (N_OWNER_BUCKETS - 1)];
	d->owners[h & (N_OWNER_BUCKETS - 1)] = o;
	return o;
}

static void owner_put(struct rpc_dedupe *d, struct dedupe_owner *o)
{
	struct dedupe_owner **pp = &d->owners[o->hash & (N_OWNER_BUCKETS - 1)];

	if (o->entries)
		return;
	while (*pp != o)
		pp = &(*pp)->hnext;
	*pp = o->hnext;
	free(o);
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

/* Into its bucket, and into the lists (the table's, its owner's) as the
 * newest; false without memory for its owner (e is then not linked). */
static bool link_entry(struct rpc_dedupe *d, struct rpc_dedupe_entry *e)
{
	struct dedupe_owner *o = owner_get(d, e->identity);

	if (!o)
		return false;
	e->owner = o;
	e->onext = NULL;
	e->oprev = o->newest;
	if (o->newest)
		o->newest->onext = e;
	else
		o->oldest = e;
	o->newest = e;
	o->entries++;
	o->bytes += e->answer_len;
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
	d->bytes += e->answer_len;
	return true;
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
	struct dedupe_owner *o = e->owner;
	if (e->oprev)
		e->oprev->onext = e->onext;
	else
		o->oldest = e->onext;
	if (e->onext)
		e->onext->oprev = e->oprev;
	else
		o->newest = e->oprev;
	o->entries--;
	o->bytes -= e->answer_len;
	e->owner = NULL;
	owner_put(d, o);
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

/* One caller may hold a quarter of the table, in entries and in bytes of
 * answers: past that it evicts its own oldest answers, never another
 * caller's (whose retries would then run twice). Makes room for extra_entries
 * more entries and extra_bytes more bytes of identity's; false when even its
 * running entries leave no room. */
static bool make_own_room(struct rpc_dedupe *d, const char *identity, size_t extra_entries,
			  size_t extra_bytes)
{
	size_t max_entries = d->lim.max_entries / 4 + 1, max_bytes = d->lim.max_bytes / 4;
	struct dedupe_owner *o = owner_of(d, identity, NULL);
	struct rpc_dedupe_entry *e, *next;

	if (!o)
		return extra_entries <= max_entries && extra_bytes <= max_bytes;
	/* o goes with its last entry: its counts are read while it has one. */
	for (e = o->oldest;
	     e && (o->entries + extra_entries > max_entries || o->bytes + extra_bytes > max_bytes);
	     e = next) {
		next = e->onext;
		if (!e->done)
			continue;
		if (o->entries == 1) {
			drop_entry(d, e); /* and o with it: nothing of the caller's is left */
			return extra_entries <= max_entries && extra_bytes <= max_bytes;
		}
		drop_entry(d, e);
	}
	return o->entries + extra_entries <= max_entries && o->bytes + extra_bytes <= max_bytes;
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
	if (!make_own_room(d, identity, 1, 0))
		return NULL;
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
	if (!link_entry(d, e)) {
		free(e);
		return NULL;
	}
	return e;
}

/* begin and repeat: may_start says whether a missing first's entry is
 * made (FIRST) or not (ABSENT). */
static enum rpc_dedupe_verdict look_up(struct rpc_dedupe *d, const char *identity,
				       const char *request_id, const uint8_t fingerprint[32],
				       struct rpc_dedupe_waiter *w, bool may_start,
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
	if (!e && !may_start) {
		v = DEDUPE_ABSENT;
	} else if (!e) {
		*first = insert(d, h, identity, request_id, fingerprint);
		v = *first ? DEDUPE_FIRST : DEDUPE_FULL;
	} else if (memcmp(e->fingerprint, fingerprint, sizeof(e->fingerprint)) != 0) {
		v = DEDUPE_MISMATCH;
	} else if (e->done) {
		*replay = malloc(e->answer_len ? e->answer_len : 1);
		if (*replay) {
			memcpy(*replay, e->answer, e->answer_len);
			*replay_len = e->answer_len;
		}
		v = *replay ? DEDUPE_REPLAY : DEDUPE_NOMEM;
	} else if (d->parked >= d->lim.max_parked ||
		   e->owner->parked >= d->lim.max_parked_per_identity) {
		/* e's owner is identity's: find() matched both. */
		v = DEDUPE_BUSY;
	} else {
		w->next = e->waiters;
		e->waiters = w;
		e->n_waiters++;
		e->owner->parked++;
		d->parked++;
		v = DEDUPE_PARKED;
	}
	pthread_mutex_unlock(&d->lock);
	return v;
}

enum rpc_dedupe_verdict rpc_dedupe_begin(struct rpc_dedupe *d, const char *identity,
					 const char *request_id, const uint8_t fingerprint[32],
					 struct rpc_dedupe_waiter *w,
					 struct rpc_dedupe_entry **first, uint8_t **replay,
					 size_t *replay_len)
{
	return look_up(d, identity, request_id, fingerprint, w, true, first, replay, replay_len);
}

enum rpc_dedupe_verdict rpc_dedupe_repeat(struct rpc_dedupe *d, const char *identity,
					  const char *request_id, const uint8_t fingerprint[32],
					  struct rpc_dedupe_waiter *w, uint8_t **replay,
					  size_t *replay_len)
{
	struct rpc_dedupe_entry *none;

	return look_up(d, identity, request_id, fingerprint, w, false, &none, replay, replay_len);
}

bool rpc_dedupe_seen(struct rpc_dedupe *d, const char *identity, const char *request_id)
{
	uint64_t h = hash_key(d->seed, identity, request_id);
	struct rpc_dedupe_entry *e;
	bool seen;

	pthread_mutex_lock(&d->lock);
	e = find(d, h, identity, request_id);
	seen = e && (!e->done || e->expires_ms > sbx_mono_ms());
	pthread_mutex_unlock(&d->lock);
	return seen;
}

/* Keeps e's answer for its repeats, relinked as the newest entry (it
 * expires last); false when the answer does not fit its caller's share or
 * memory. e is unlinked. */
static bool remember(struct rpc_dedupe *d, struct rpc_dedupe_entry *e, const uint8_t *answer,
		     size_t len)
{
	if (!make_own_room(d, e->identity, 1, len))
		return false;
	make_room(d, len);
	if (!(e->answer = malloc(len ? len : 1)))
		return false;
	memcpy(e->answer, answer, len);
	e->answer_len = len;
	e->done = true;
	e->expires_ms = sbx_mono_ms() + d->lim.ttl_ms;
	return link_entry(d, e);
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
	d->parked -= e->n_waiters;
	e->owner->parked -= e->n_waiters;
	e->n_waiters = 0;
	/* Unlinked first, so that making room never counts (or drops) e. */
	unlink_entry(d, e);
	if (!keep || !remember(d, e, answer, len)) {
		free(e->answer);
		free(e);
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
