/* SPDX-License-Identifier: Apache-2.0 */
/* A fixed set of worker threads behind a bounded queue.
 *
 * nng's callbacks must never block, so anything that may (a handler that
 * forks a helper, a Wait that long-polls) is handed to a pool. The queue is
 * bounded: when it is full, submit says so at once and the caller answers
 * RESOURCE_EXHAUSTED instead of letting work pile up without limit.
 *
 * Each job has an owner (the caller's identity), and an owner gets a share:
 * at most half the workers running its jobs and half the queue waiting, so
 * one caller's flood (16 Waits that long-poll for minutes) always leaves
 * workers to everyone else; a worker skips queued jobs whose owner already
 * runs its share. Long polls still hold a worker while they wait (parking
 * them on the run would need the run manager to complete them). */
#ifndef SBX_RPC_POOL_H
#define SBX_RPC_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

#define RPC_POOL_OWNER_MAX 128

/* What one owner has in a pool; a slot is free when both are 0. */
struct rpc_pool_share {
	char owner[RPC_POOL_OWNER_MAX];
	size_t running, queued;
};

/* Embedded in whatever the work is about: submitting allocates nothing. */
struct rpc_job {
	struct rpc_job *next;
	void (*run)(struct rpc_job *job);
	const char *owner;	      /* set before submit; lives while the job does */
	struct rpc_pool_share *share; /* the pool's, while queued */
	/* Set by the worker that takes it (rpc_pool_unlist's way back). */
	struct rpc_pool *taken_by;
	size_t taken_slot;
};

struct rpc_pool {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct rpc_job *head, *tail;
	size_t queued, queue_max;
	size_t run_share, queue_share; /* per owner: half of each, at least 1 */
	struct rpc_pool_share *shares; /* n_threads + queue_max slots: enough */
	size_t n_shares;
	bool stopping;
	pthread_t *threads;
	size_t n_threads;
	/* What each worker has taken and not yet unlisted (NULL: nothing):
	 * rpc_pool_pending_match looks there as well as in the queue. */
	struct rpc_job **taken;
	size_t n_slots, next_slot;
	char name[16];
};

enum rpc_pool_verdict {
	RPC_POOL_TAKEN,
	RPC_POOL_FULL,	   /* the queue is full */
	RPC_POOL_SHARE,	   /* the owner has its share in the pool already */
	RPC_POOL_STOPPING, /* the pool takes nothing any more */
};

/* Starts n_threads workers; at most queue_max jobs wait for one. On
 * failure nothing of the pool is left: it is neither stopped nor destroyed. */
int rpc_pool_start(struct rpc_pool *p, const char *name, size_t n_threads, size_t queue_max,
		   struct sbx_err *err);
/* How many workers run a job and how many jobs wait (the metrics). */
void rpc_pool_load(struct rpc_pool *p, size_t *busy, size_t *queued);
/* Whether a job of owner's that match says is the one is pending: waiting
 * in the queue, or taken by a worker and not yet unlisted. match runs
 * under the pool's lock on a job that is not given back meanwhile: it may
 * read what the job is about, and must not block. At most queue_max +
 * n_threads jobs are looked at. */
bool rpc_pool_pending_match(struct rpc_pool *p, const char *owner,
			    bool (*match)(const struct rpc_job *job, const void *arg),
			    const void *arg);
/* Called by a taken job before what it is about can change hands (its
 * answer sent, its memory given to another job): from then on
 * rpc_pool_pending_match no longer sees it. Its worker unlists it too once
 * run returns; a job unlisted already, or never taken, is left alone. */
void rpc_pool_unlist(struct rpc_job *job);
/* RPC_POOL_TAKEN: the job is the pool's until it has run; otherwise it was
 * not taken, and the verdict says why. */
enum rpc_pool_verdict rpc_pool_submit(struct rpc_pool *p, struct rpc_job *job);
/* Lets running jobs finish, joins the threads, and hands every job still
 * queued to drop (which may be NULL). Submissions fail from now on. The pool
 * stays valid for submit (which fails) until rpc_pool_destroy. */
void rpc_pool_stop(struct rpc_pool *p, void (*drop)(struct rpc_job *job));
void rpc_pool_destroy(struct rpc_pool *p);

#endif
