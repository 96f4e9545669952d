/* Worker pools (see rpc_pool.h). */
#include "rpc_pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *worker(void *arg)
{
	struct rpc_pool *p = arg;

	for (;;) {
		struct rpc_job *job;

		pthread_mutex_lock(&p->lock);
		while (!p->head && !p->stopping)
			pthread_cond_wait(&p->more, &p->lock);
		if (p->stopping) {
			pthread_mutex_unlock(&p->lock);
			return NULL;
		}
		job = p->head;
		p->head = job->next;
		if (!p->head)
			p->tail = NULL;
		p->queued--;
		pthread_mutex_unlock(&p->lock);
		job->next = NULL;
		job->run(job);
	}
}

int rpc_pool_start(struct rpc_pool *p, const char *name, size_t n_threads, size_t queue_max,
		   struct sbx_err *err)
{
	int rc;

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->queue_max = queue_max;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->more, NULL);
	p->threads = calloc(n_threads, sizeof(*p->threads));
	if (!p->threads)
		return sbx_fail_errnum(err, ENOMEM, "%s pool", name);
	for (; p->n_threads < n_threads; p->n_threads++) {
		char tname[16];

		rc = pthread_create(&p->threads[p->n_threads], NULL, worker, p);
		if (rc) {
			sbx_fail_errnum(err, rc, "%s pool: starting worker %zu", name,
					p->n_threads);
			rpc_pool_stop(p, NULL);
			return -1;
		}
		/* Names show in top -H and in gdb: which pool is stuck. */
		snprintf(tname, sizeof(tname), "sbxd-%.5s-%zu", name, p->n_threads);
		pthread_setname_np(p->threads[p->n_threads], tname);
	}
	return 0;
}

bool rpc_pool_submit(struct rpc_pool *p, struct rpc_job *job)
{
	bool taken = false;

	pthread_mutex_lock(&p->lock);
	if (!p->stopping && p->queued < p->queue_max) {
		job->next = NULL;
		if (p->tail)
			p->tail->next = job;
		else
			p->head = job;
		p->tail = job;
		p->queued++;
		taken = true;
		pthread_cond_signal(&p->more);
	}
	pthread_mutex_unlock(&p->lock);
	return taken;
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
	pthread_cond_destroy(&p->more);
	pthread_mutex_destroy(&p->lock);
}
