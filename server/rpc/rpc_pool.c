/* SPDX-License-Identifier: Apache-2.0 */
/* Worker pools (see rpc_pool.h). */
#include "rpc_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* lock held: the first queued job whose owner runs less than its share,
 * taken off the queue; NULL when there is none. */
static struct rpc_job *take_eligible(struct rpc_pool *p)
{
	struct rpc_job *prev = NULL;

	for (struct rpc_job *job = p->head; job; prev = job, job = job->next) {
		if (job->share->running >= p->run_share)
			continue;
		if (prev)
			prev->next = job->next;
		else
			p->head = job->next;
		if (p->tail == job)
			p->tail = prev;
		p->queued--;
		job->share->queued--;
		job->share->running++;
		job->next = NULL;
		return job;
	}
	return NULL;
}

static void *worker(void *arg)
{
	struct rpc_pool *p = arg;
	size_t slot;

	pthread_mutex_lock(&p->lock);
	slot = p->next_slot++;
	pthread_mutex_unlock(&p->lock);
	for (;;) {
		struct rpc_pool_share *share;
		struct rpc_job *job = NULL;

		pthread_mutex_lock(&p->lock);
		while (!p->stopping && !(job = take_eligible(p)))
			pthread_cond_wait(&p->more, &p->lock);
		if (p->stopping) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		/* Listed from the queue to the taken slot under one lock: a
		 * pending job is always in one of the two. */
		job->taken_by = p;
		job->taken_slot = slot;
		p->taken[slot] = job;
		pthread_mutex_unlock(&p->lock);
		/* Once it has run, job may already be another request's. */
		share = job->share;
		job->run(job);
		pthread_mutex_lock(&p->lock);
		share->running--;
		p->taken[slot] = NULL;
		pthread_mutex_unlock(&p->lock);
	}
}

void rpc_pool_unlist(struct rpc_job *job)
{
	struct rpc_pool *p = job->taken_by;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	if (job->taken_slot < p->n_slots && p->taken[job->taken_slot] == job)
		p->taken[job->taken_slot] = NULL;
	pthread_mutex_unlock(&p->lock);
}

/* lock held: owner's slot, or a free one for it; NULL cannot happen while
 * there are as many slots as jobs the pool can hold. */
static struct rpc_pool_share *share_of(struct rpc_pool *p, const char *owner)
{
	struct rpc_pool_share *free_slot = NULL;

	for (size_t i = 0; i < p->n_shares; i++) {
		struct rpc_pool_share *s = &p->shares[i];

		if (!s->running && !s->queued) {
			if (!free_slot)
				free_slot = s;
		} else if (strcmp(s->owner, owner) == 0) {
			return s;
		}
	}
	if (free_slot)
		snprintf(free_slot->owner, sizeof(free_slot->owner), "%s", owner);
	return free_slot;
}

void rpc_pool_load(struct rpc_pool *p, size_t *busy, size_t *queued)
{
	*busy = 0;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n_shares; i++)
		*busy += p->shares[i].running;
	*queued = p->queued;
	pthread_mutex_unlock(&p->lock);
}

bool rpc_pool_pending_match(struct rpc_pool *p, const char *owner,
			    bool (*match)(const struct rpc_job *job, const void *arg),
			    const void *arg)
{
	bool found = false;

	pthread_mutex_lock(&p->lock);
	for (const struct rpc_job *j = p->head; j && !found; j = j->next)
		found = strcmp(j->owner, owner) == 0 && match(j, arg);
	for (size_t i = 0; i < p->n_slots && !found; i++) {
		const struct rpc_job *j = p->taken[i];

		found = j && strcmp(j->owner, owner) == 0 && match(j, arg);
	}
	pthread_mutex_unlock(&p->lock);
	return found;
}

int rpc_pool_start(struct rpc_pool *p, const char *name, size_t n_threads, size_t queue_max,
		   struct sbx_err *err)
{
	int rc;

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->queue_max = queue_max;
	p->run_share = n_threads / 2 ? n_threads / 2 : 1;
	p->queue_share = queue_max / 2 ? queue_max / 2 : 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->more, NULL);
	p->n_shares = n_threads + queue_max;
	p->shares = calloc(p->n_shares, sizeof(*p->shares));
	p->threads = calloc(n_threads, sizeof(*p->threads));
	p->taken = calloc(n_threads, sizeof(*p->taken));
	if (!p->shares || !p->threads || !p->taken) {
		sbx_fail_errnum(err, ENOMEM, "%s pool", name);
		free(p->threads);
		p->threads = NULL;
		rpc_pool_destroy(p);
		return -1;
	}
	p->n_slots = n_threads;
	for (; p->n_threads < n_threads; p->n_threads++) {
		char tname[16];

		rc = pthread_create(&p->threads[p->n_threads], NULL, worker, p);
		if (rc) {
			sbx_fail_errnum(err, rc, "%s pool: starting worker %zu", name,
					p->n_threads);
			rpc_pool_stop(p, NULL);
			rpc_pool_destroy(p);
			return -1;
		}
		/* Names show in top -H and in gdb: which pool is stuck. */
		snprintf(tname, sizeof(tname), "sbxd-%.5s-%zu", name, p->n_threads);
		pthread_setname_np(p->threads[p->n_threads], tname);
	}
	return 0;
}

enum rpc_pool_verdict rpc_pool_submit(struct rpc_pool *p, struct rpc_job *job)
{
	enum rpc_pool_verdict v = RPC_POOL_TAKEN;
	struct rpc_pool_share *share = NULL;

	pthread_mutex_lock(&p->lock);
	if (p->stopping)
		v = RPC_POOL_STOPPING;
	else if (!(share = share_of(p, job->owner ? job->owner : "")) ||
		 share->running + share->queued >= p->run_share + p->queue_share)
		v = RPC_POOL_SHARE;
	else if (p->queued >= p->queue_max)
		v = RPC_POOL_FULL;
	if (v == RPC_POOL_TAKEN) {
		job->next = NULL;
		job->share = share;
		if (p->tail)
			p->tail->next = job;
		else
			p->head = job;
		p->tail = job;
		p->queued++;
		share->queued++;
		/* An idle worker takes it if its owner is below its share;
		 * otherwise the owner's own finishing job lets it through. */
		pthread_cond_signal(&p->more);
	}
	pthread_mutex_unlock(&p->lock);
	return v;
}

void rpc_pool_stop(struct rpc_pool *p, void (*drop)(struct rpc_job *job))
{
	struct rpc_job *job;

	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->lock);
	for (size_t i = 0; i < p->n_threads; i++)
		pthread_join(p->threads[i], NULL);
	p->n_threads = 0;
	free(p->threads);
	p->threads = NULL;

	pthread_mutex_lock(&p->lock);
	job = p->head;
	p->head = p->tail = NULL;
	p->queued = 0;
	for (size_t i = 0; i < p->n_shares; i++)
		p->shares[i].queued = 0;
	pthread_mutex_unlock(&p->lock);
	while (job) {
		struct rpc_job *next = job->next;

		if (drop)
			drop(job);
		job = next;
	}
}

void rpc_pool_destroy(struct rpc_pool *p)
{
	free(p->shares);
	p->shares = NULL;
	free(p->taken);
	p->taken = NULL;
	p->n_slots = 0;
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->lock);
}
