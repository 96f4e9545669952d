/* SPDX-License-Identifier: Apache-2.0 */
#include "runs_closer.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

/* A closer's stack: close() and nothing else. */
#define CLOSER_STACK (64 * 1024)

struct runs_closer {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Waiting to be closed, a ring: [mu]. */
	int fds[RUNS_CLOSER_QUEUED];
	size_t head, n;
	bool stop; /* [mu] */
	pthread_t threads[RUNS_CLOSER_THREADS];
	size_t n_threads;
};

static void *closer_main(void *arg)
{
	struct runs_closer *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->n && !c->stop)
			pthread_cond_wait(&c->cv, &c->mu);
		if (!c->n)
			break; /* stopped, nothing left */
		int fd = c->fds[c->head];
		c->head = (c->head + 1) % RUNS_CLOSER_QUEUED;
		c->n--;
		pthread_mutex_unlock(&c->mu);
		close(fd);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

struct runs_closer *closer_start(struct sbx_err *err)
{
	struct runs_closer *c = calloc(1, sizeof(*c));
	pthread_attr_t attr;
	int rc;

	if (!c) {
		sbx_fail_errno(err, "closer");
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	if ((rc = pthread_attr_init(&attr)) != 0) {
		closer_stop(c);
		sbx_fail_errnum(err, rc, "closer threads");
		return NULL;
	}
	pthread_attr_setstacksize(&attr, CLOSER_STACK);
	for (size_t i = 0; i < RUNS_CLOSER_THREADS; i++) {
		if ((rc = pthread_create(&c->threads[i], &attr, closer_main, c)) != 0) {
			pthread_attr_destroy(&attr);
			closer_stop(c);
			sbx_fail_errnum(err, rc, "closer threads");
			return NULL;
		}
		/* Named, so that a trace shows whose waits these are. */
		pthread_setname_np(c->threads[i], "sbxd-closer");
		c->n_threads++;
	}
	pthread_attr_destroy(&attr);
	return c;
}

/* fd queued while fewer than `room` wait, else closed here. */
static void close_within(struct runs_closer *c, int fd, size_t room)
{
	if (fd < 0)
		return;
	if (c) {
		pthread_mutex_lock(&c->mu);
		if (!c->stop && c->n < room) {
			c->fds[(c->head + c->n) % RUNS_CLOSER_QUEUED] = fd;
			c->n++;
			pthread_cond_signal(&c->cv);
			pthread_mutex_unlock(&c->mu);
			return;
		}
		pthread_mutex_unlock(&c->mu);
	}
	close(fd);
}

void closer_close(struct runs_closer *c, int fd)
{
	close_within(c, fd, RUNS_CLOSER_QUEUED);
}

void closer_close_dir(struct runs_closer *c, int fd)
{
	close_within(c, fd, RUNS_CLOSER_DIRS_QUEUED);
}

void closer_stop(struct runs_closer *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	/* The threads close what is left before they end. */
	for (size_t i = 0; i < c->n_threads; i++)
		pthread_join(c->threads[i], NULL);
	for (; c->n; c->n--, c->head = (c->head + 1) % RUNS_CLOSER_QUEUED)
		close(c->fds[c->head]); /* no thread ever started */
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
