/* A fixed set of worker threads behind a bounded queue.
 *
 * nng's callbacks must never block, so anything that may (a handler that
 * forks a helper, a Wait that long-polls) is handed to a pool. The queue is
 * bounded: when it is full, submit says so at once and the caller answers
 * RESOURCE_EXHAUSTED instead of letting work pile up without limit. */
#ifndef SBX_RPC_POOL_H
#define SBX_RPC_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Embedded in whatever the work is about: submitting allocates nothing. */
struct rpc_job {
	struct rpc_job *next;
	void (*run)(struct rpc_job *job);
};

struct rpc_pool {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct rpc_job *head, *tail;
	size_t queued, queue_max;
	bool stopping;
	pthread_t *threads;
	size_t n_threads;
	char name[16];
};

/* Starts n_threads workers; at most queue_max jobs wait for one. */
int rpc_pool_start(struct rpc_pool *p, const char *name, size_t n_threads, size_t queue_max,
		   struct sbx_err *err);
/* false: the queue is full or the pool is stopping; the job was not taken. */
bool rpc_pool_submit(struct rpc_pool *p, struct rpc_job *job);
/* Lets running jobs finish, joins the threads, and hands every job still
 * queued to drop (which may be NULL). Submissions fail from now on. The pool
 * stays valid for submit (which fails) until rpc_pool_destroy. */
void rpc_pool_stop(struct rpc_pool *p, void (*drop)(struct rpc_job *job));
void rpc_pool_destroy(struct rpc_pool *p);

#endif
